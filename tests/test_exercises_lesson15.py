"""The checkers of lesson 15: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import numpy as np

from attnlib.exercises import check
from attnlib.exercises.lesson15 import (
    CAN_LEARN,
    MODELS,
    SHORTER_LENGTH,
    accuracy_by_position_reference,
    expected_window_accuracy_reference,
)

# ---------------------------------------------------------------- reference solutions


def expected_window_accuracy(length, w, reader_accuracy):
    card = np.arange(length)
    seen = (np.minimum(card, w) + np.minimum(length - 1 - card, w)).mean()
    return (seen * reader_accuracy + (length - 1 - seen) * 0.1) / (length - 1)


CAN_LEARN_ANSWER = {
    "A": {"bi-GRU", "attention with positions"},
    "B": {"window FC", "bi-GRU", "attention with positions", "truncated attention"},
    "C": {"bi-GRU", "attention with positions", "attention without positions"},
    "D": set(MODELS),
}


def accuracy_by_position(predictions, labels):
    return (np.asarray(predictions) == np.asarray(labels)).mean(axis=0)


def gru_reach_accuracy(length):
    """Stands in for the trained bi-GRU: the first card a few positions away is found."""
    return 0.97 if length <= SHORTER_LENGTH else 0.2


# ---------------------------------------------------------------- plausible mistakes


def window_without_ends(length, w, reader_accuracy):
    seen = min(2 * w, length - 1)
    return (seen * reader_accuracy + (length - 1 - seen) * 0.1) / (length - 1)


def window_over_all_positions(length, w, reader_accuracy):
    card = np.arange(length)
    seen = (np.minimum(card, w) + np.minimum(length - 1 - card, w)).mean()
    return (seen * reader_accuracy + (length - seen) * 0.1) / length


def window_no_guess(length, w, reader_accuracy):
    card = np.arange(length)
    seen = (np.minimum(card, w) + np.minimum(length - 1 - card, w)).mean()
    return seen * reader_accuracy / (length - 1)


def by_sequence(predictions, labels):
    return (np.asarray(predictions) == np.asarray(labels)).mean(axis=1)


def gru_trained_at_32(length):
    """The length not used: trained and tested at the lesson's 32 whatever it is asked."""
    return 0.12


def gru_returns_a_list(length):
    return [0.97]


CORRECT = {
    "15.1": expected_window_accuracy,
    "15.2": CAN_LEARN_ANSWER,
    "15.3": accuracy_by_position,
    "15.4": gru_reach_accuracy,
}

WRONG = [
    ("15.1", window_without_ends, "fewer than 4 neighbours"),
    ("15.1", window_over_all_positions, "not scored at its own position"),
    ("15.1", window_no_guess, "one time in ten"),
    ("15.2", {**CAN_LEARN_ANSWER, "A": {"attention with positions"}}, "the bi-GRU can learn it"),
    (
        "15.2",
        {
            **CAN_LEARN_ANSWER,
            "A": {"bi-GRU", "attention with positions", "attention without positions"},
        },
        "attention without positions cannot",
    ),
    ("15.2", {**CAN_LEARN_ANSWER, "B": {"bi-GRU", "attention with positions"}}, "window FC can"),
    ("15.2", {**CAN_LEARN_ANSWER, "C": {"bi-GRU", "nobody"}}, "unknown model names"),
    ("15.2", {"A": set()}, "a dict with the keys"),
    ("15.3", by_sequence, "axis 0"),
    ("15.4", gru_trained_at_32, "should find it within the lesson's budget"),
    ("15.4", gru_returns_a_list, "one number between 0 and 1"),
]


def test_references_agree_with_the_module():
    assert CAN_LEARN == CAN_LEARN_ANSWER
    for case in [(32, 2, 0.97), (512, 2, 0.97), (5, 7, 1.0)]:
        assert np.isclose(
            expected_window_accuracy(*case), expected_window_accuracy_reference(*case)
        )
    x = np.array([[1, 2], [1, 3]])
    assert np.array_equal(
        accuracy_by_position(x, x * 0 + 1), accuracy_by_position_reference(x, x * 0 + 1)
    )


def test_window_expectation_in_closed_form():
    """Away from the ends a card has 2w neighbours in reach; at the ends fewer, as counted."""
    # L = 32, w = 2: the cards at 0, 1, 30, 31 have 2, 3, 3, 2 neighbours, the 28 others 4
    seen = (2 + 3 + 28 * 4 + 3 + 2) / 32
    assert np.isclose(
        expected_window_accuracy_reference(32, 2, 1.0), (seen + (31 - seen) * 0.1) / 31
    )
    # a window that covers the whole sequence sees the card from everywhere
    assert np.isclose(expected_window_accuracy_reference(8, 7, 0.9), 0.9)


def test_a_bi_gru_that_misses_the_card_gets_the_hint_about_the_length():
    result = check("15.4", lambda length: 0.5)
    assert result.status == "wrong" and f"at most {SHORTER_LENGTH - 1} positions" in result.message
