"""The checkers of lesson 07: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import datetime

import numpy as np
import pytest
import torch

from attnlib import data
from attnlib.exercises import check
from attnlib.exercises.lesson07 import (
    AMBIGUOUS_DATES,
    edit_distance_reference,
    greedy_reference,
    perfect_decode,
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


def edit_distance(a, b):
    """Levenshtein distance, with the whole table (the reference keeps one row)."""
    table = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            table[i][j] = min(
                table[i - 1][j] + 1,
                table[i][j - 1] + 1,
                table[i - 1][j - 1] + (a[i - 1] != b[j - 1]),
            )
    return table[-1][-1]


#: What the lesson's model without the mask gave (teacher-forced loss, exact match).
NO_MASK_SCORES = (0.03, 0.0)


def read_both_ways(written, decode):
    us, es = decode(["en_US|" + written, "es|" + written])
    return us, es


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


def distance_by_position(a, b):
    return sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))


def distance_empty_is_zero(a, b):
    return edit_distance(a, b) if a and b else 0


def distance_with_transpositions(a, b):
    """Damerau's variant: a swap of two neighbours is one edit."""
    if sorted(a) == sorted(b) and len(a) == 2 and a != b:
        return 1
    return edit_distance(a, b)


def distance_as_float(a, b):
    return float(edit_distance(a, b))


def read_both_ways_untagged(written, decode):
    us, es = decode([written, written])
    return us, es


def read_both_ways_swapped(written, decode):
    us, es = decode(["en_US|" + written, "es|" + written])
    return es, us


def read_both_ways_as_list(written, decode):
    return decode(["en_US|" + written, "es|" + written])


CORRECT = {
    "07.1": shift_right,
    "07.2": greedy_decode,
    "07.3": edit_distance,
    "07.4": NO_MASK_SCORES,
    "07.5": read_both_ways,
}

WRONG = [
    ("07.1", shift_left, "shifted left"),
    ("07.1", shift_keeps_last, "the last label drops out"),
    ("07.2", greedy_keeps_bos, "drop the <bos>"),
    ("07.2", greedy_keeps_eos, "does not include it"),
    ("07.2", greedy_last_token_only, "whole prefix"),
    ("07.2", greedy_no_limit, "max_len"),
    ("07.3", distance_by_position, "position by position"),
    ("07.3", distance_empty_is_zero, "from the empty string"),
    ("07.3", distance_with_transpositions, "two substitutions"),
    ("07.3", distance_as_float, "an integer"),
    ("07.4", (0.03, 0.97), "DateTranslator(causal=False)"),
    ("07.4", (0.9, 0.0), "teacher_forced_loss"),
    ("07.4", (0.0, 2.5), "right order"),
    ("07.4", 0.03, "the pair"),
    ("07.5", read_both_ways_untagged, "with their tags"),
    ("07.5", read_both_ways_swapped, "swapped"),
    ("07.5", read_both_ways_as_list, "two strings"),
]


def test_references_agree_with_the_module():
    model = lambda prefix: np.eye(6)[min(len(prefix) + 2, 5)]  # noqa: E731
    assert greedy_decode(model, 1, 5, 10) == greedy_reference(model, 1, 5, 10) == [3, 4]
    for a, b in [("kitten", "sitting"), ("", "ab"), ("1 May 1969", "11 May 1996")]:
        assert edit_distance(a, b) == edit_distance_reference(a, b)


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [("kitten", "sitting", 3), ("", "abc", 3), ("abc", "", 3), ("ab", "ba", 2), ("a", "a", 0)],
)
def test_edit_distance_reference_on_known_cases(a, b, distance):
    assert edit_distance_reference(a, b) == edit_distance_reference(b, a) == distance


def test_the_dates_are_ambiguous_and_written_as_en_us_writes_them():
    from babel.dates import format_date

    for date in AMBIGUOUS_DATES:
        assert date.day <= 12 and date.month != date.day
        assert written_us(date) == format_date(date, "short", locale="en_US")
        assert read_as(written_us(date), "md") == data.date_written_out(date)
        swapped = datetime.date(date.year, date.day, date.month)
        assert read_as(written_us(date), "dm") == data.date_written_out(swapped)


def test_the_perfect_reader_follows_the_tag_and_the_two_digit_year_rule():
    assert perfect_decode(["en_US|4/3/21", "es|4/3/21"]) == ["3 April 2021", "4 March 2021"]
    assert perfect_decode(["en_US|1/2/69", "en_US|1/2/68"]) == ["2 January 1969", "2 January 2068"]
    assert perfect_decode(["es|5/20/21", "fr|4/3/21"]) == ["?", "?"]  # no month 20; no rule


def test_no_mask_scores_pass_only_when_loss_is_low_and_exact_match_collapses():
    assert check("07.4", (0.2, 0.1))
    assert not check("07.4", (0.2, 0.5))
    assert not check("07.4", (0.5, 0.1))
