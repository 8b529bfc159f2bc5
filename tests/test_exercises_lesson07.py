"""The checkers of lesson 07: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import numpy as np
import torch

from attnlib.exercises.lesson07 import (
    AMBIGUOUS_DATES,
    greedy_reference,
    match_scores_reference,
    read_as,
    written_us,
)

# ---------------------------------------------------------------- reference solutions


def shift_right(labels, bos_id):
    return torch.cat([torch.full_like(labels[:, :1], bos_id), labels[:, :-1]], dim=1)


def greedy_decode(next_logits, bos_id, eos_id, max_len):
    prefix = [bos_id]
    for _ in range(max_len):
        token = int(np.argmax(next_logits(prefix)))
        if token == eos_id:
            break
        prefix.append(token)
    return prefix[1:]


def match_scores(predictions, targets):
    exact = sum(p == t for p, t in zip(predictions, targets)) / len(targets)
    right = sum(a == b for p, t in zip(predictions, targets) for a, b in zip(p, t))
    return exact, right / sum(map(len, targets))


def read_both_ways(written):
    """A perfect model: reads the date by each locale's rule."""
    return read_as(written, "md"), read_as(written, "dm")


# ---------------------------------------------------------------- plausible mistakes


def shift_left(labels, bos_id):
    return torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], bos_id)], dim=1)


def shift_keeps_last(labels, bos_id):
    return torch.cat([torch.full_like(labels[:, :1], bos_id), labels], dim=1)


def greedy_keeps_bos(next_logits, bos_id, eos_id, max_len):
    return [bos_id, *greedy_decode(next_logits, bos_id, eos_id, max_len)]


def greedy_keeps_eos(next_logits, bos_id, eos_id, max_len):
    out = greedy_decode(next_logits, bos_id, eos_id, max_len)
    return out + [eos_id] if len(out) < max_len else out


def greedy_last_token_only(next_logits, bos_id, eos_id, max_len):
    out, last = [], bos_id
    for _ in range(max_len):
        last = int(np.argmax(next_logits([last])))
        if last == eos_id:
            break
        out.append(last)
    return out


def greedy_no_limit(next_logits, bos_id, eos_id, max_len):
    return greedy_decode(next_logits, bos_id, eos_id, max_len + 3)


def scores_per_prediction_length(predictions, targets):
    exact = sum(p == t for p, t in zip(predictions, targets)) / len(targets)
    right = sum(a == b for p, t in zip(predictions, targets) for a, b in zip(p, t))
    return exact, right / max(sum(map(len, predictions)), 1)


def scores_swapped(predictions, targets):
    return tuple(reversed(match_scores(predictions, targets)))


def reads_us_always(written):
    return read_as(written, "md"), read_as(written, "md")


def reads_swapped(written):
    return read_as(written, "dm"), read_as(written, "md")


CORRECT = {
    "07.1": shift_right,
    "07.2": greedy_decode,
    "07.3": match_scores,
    "07.4": read_both_ways,
}

WRONG = [
    ("07.1", shift_left, "shifted left"),
    ("07.1", shift_keeps_last, "the last label drops out"),
    ("07.2", greedy_keeps_bos, "drop the <bos>"),
    ("07.2", greedy_keeps_eos, "does not include it"),
    ("07.2", greedy_last_token_only, "whole prefix"),
    ("07.2", greedy_no_limit, "max_len"),
    ("07.3", scores_per_prediction_length, "total length of the *targets*"),
    ("07.3", scores_swapped, "exact match"),
    ("07.4", reads_us_always, "agree"),
    ("07.4", reads_swapped, "Is the first string the en_US reading?"),
]


def test_references_agree_with_the_module():
    model = lambda prefix: np.eye(6)[min(len(prefix) + 2, 5)]  # noqa: E731
    assert greedy_decode(model, 1, 5, 10) == greedy_reference(model, 1, 5, 10) == [3, 4]
    assert match_scores(["ab"], ["ac"]) == match_scores_reference(["ab"], ["ac"]) == (0.0, 0.5)


def test_the_dates_are_ambiguous_and_written_as_en_us_writes_them():
    from babel.dates import format_date

    for date in AMBIGUOUS_DATES:
        assert date.day <= 12 and date.month != date.day
        assert written_us(date) == format_date(date, "short", locale="en_US")
        assert read_as(written_us(date), "md") == date.isoformat()
