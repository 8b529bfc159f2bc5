"""The checkers of lesson 07: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import datetime
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib import data
from attnlib.exercises import check
from attnlib.exercises.lesson07 import (
    AMBIGUOUS_DATES,
    BOS,
    EOS,
    PAD,
    SPECIALS,
    date_tensors,
    date_vocabularies,
    edit_distance_reference,
    future_leak,
    greedy_reference,
    measure_without_mask,
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


#: The size of the lesson's target vocabulary (checked against the checker's below).
TARGET_TOKENS = 41


class Copier(torch.nn.Module):
    """What the decoder learns without the mask, written by hand: position i puts a logit of
    ``sure`` on the token at input position i + 1 (the label it must predict), and on <eos>
    at the last position. Under teacher forcing every label is right, with a loss of
    log(1 + 40 exp(-sure)) whatever the data; greedy decoding reads only <bos>, so it writes
    <eos> at once: the empty string, no date right."""

    def __init__(self, sure=7.0, causal=False):
        super().__init__()
        self.sure, self.causal = sure, causal

    def forward(self, sources, lengths, prefix):
        if self.causal:  # the lesson's model, whose position i reads only positions 0 ... i
            read = prefix
        else:
            read = torch.cat([prefix[:, 1:], torch.full_like(prefix[:, :1], EOS)], dim=1)
        return self.sure * F.one_hot(read, TARGET_TOKENS).float()


def copier_loss(sure):
    """The teacher-forced loss of Copier(sure): every label gets the same probability."""
    return math.log(1 + (TARGET_TOKENS - 1) * math.exp(-sure))


#: The lesson's model without the mask, as a learner hands it in: the model and its scores.
NO_MASK = (Copier(), (copier_loss(7.0), 0.0))


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
    "07.4": NO_MASK,
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
    ("07.4", (0.03, 0.0), "the model you trained"),
    ("07.4", 0.03, "set it to the pair (no_mask_model, no_mask_scores)"),
    ("07.4", (Copier(), 0.03), "teacher-forced loss on the validation set"),
    ("07.4", (Copier(), (0.0, 2.5)), "right order"),
    ("07.4", (Copier(causal=True), (0.03, 0.0)), "DateTranslator(causal=False)"),
    ("07.4", (Copier(sure=0.5), (0.03, 0.0)), "has not learned yet"),
    ("07.4", (Copier(), (0.0, 0.0)), "teacher_forced_loss(no_mask_model"),
    ("07.4", (Copier(), (0.2, 0.0)), "teacher_forced_loss(no_mask_model"),
    ("07.4", (Copier(), (copier_loss(7.0), 0.5)), "exact_match(decode_all(no_mask_model"),
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


def test_the_checker_rebuilds_the_lessons_vocabularies_and_batches():
    source_vocab, target_vocab = date_vocabularies()
    assert len(target_vocab) == TARGET_TOKENS and target_vocab[:4] == SPECIALS
    assert "".join(target_vocab[4:]) == " 0123456789ADFJMNOSabceghilmnoprstuvy"
    sources, lengths, targets = date_tensors([("en_US|3/4/26", "4 March 2026"), ("x|1", "1")])
    assert lengths.tolist() == [12, 3] and sources[1, 3:].eq(PAD).all()
    assert targets[1].tolist() == [BOS, target_vocab.index("1"), EOS] + [PAD] * 11


def test_the_copier_is_what_the_checker_measures():
    examples = data.date_examples(50, seed=3)
    loss, exact = measure_without_mask(Copier(), examples)
    assert loss == pytest.approx(copier_loss(7.0), rel=1e-4) and exact == 0.0
    assert (
        future_leak(Copier(), examples[0]) > 1
        and future_leak(Copier(causal=True), examples[0]) == 0
    )


def test_invented_numbers_fail_and_measured_ones_pass():
    """The reviewer's wrong answer: (0.0, 0.0) with a real model is not what it measures."""
    assert not check("07.4", (Copier(), (0.0, 0.0)))
    assert check("07.4", (Copier(), (copier_loss(7.0) * 1.3, 0.02)))  # another sample's numbers
    assert check("07.4", (Copier(), None)).status == "wrong"
    assert check("07.4", (None, None)).status == "not attempted"
