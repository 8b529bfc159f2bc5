"""The checkers of lesson 14: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import numpy as np

from attnlib.exercises.lesson14 import (
    CAN_LEARN,
    MODELS,
    accuracy_by_position_reference,
    expected_window_accuracy_reference,
)

# ---------------------------------------------------------------- reference solutions


def expected_window_accuracy(length, w, reader_accuracy):
    in_reach = min(w, length - 1)
    return (in_reach * reader_accuracy + (length - 1 - in_reach) * 0.1) / (length - 1)


CAN_LEARN_ANSWER = {
    "A": {"bi-GRU", "attention with positions"},
    "B": {"window FC", "bi-GRU", "attention with positions", "truncated attention"},
    "C": {"bi-GRU", "attention with positions", "attention without positions"},
    "D": set(MODELS),
}


def accuracy_by_position(predictions, labels):
    return (np.asarray(predictions) == np.asarray(labels)).mean(axis=0)


def reach_experiment(length):
    """Stands in for the trained models: attention reads the key, the window FC guesses."""
    return expected_window_accuracy(length, length, 0.97), expected_window_accuracy(length, 2, 0.97)


# ---------------------------------------------------------------- plausible mistakes


def window_counts_key(length, w, reader_accuracy):
    return (min(w, length) * reader_accuracy + (length - min(w, length)) * 0.1) / length


def window_uncapped(length, w, reader_accuracy):
    return (w * reader_accuracy + (length - 1 - w) * 0.1) / (length - 1)


def window_no_guess(length, w, reader_accuracy):
    return min(w, length - 1) * reader_accuracy / (length - 1)


def by_sequence(predictions, labels):
    return (np.asarray(predictions) == np.asarray(labels)).mean(axis=1)


def reach_swapped(length):
    return tuple(reversed(reach_experiment(length)))


CORRECT = {
    "14.1": expected_window_accuracy,
    "14.2": CAN_LEARN_ANSWER,
    "14.3": accuracy_by_position,
    "14.4": reach_experiment,
}

WRONG = [
    ("14.1", window_counts_key, "is not scored"),
    ("14.1", window_uncapped, "cap the number in reach"),
    ("14.1", window_no_guess, "one time in ten"),
    ("14.2", {**CAN_LEARN_ANSWER, "A": {"attention with positions"}}, "the bi-GRU can learn it"),
    (
        "14.2",
        {
            **CAN_LEARN_ANSWER,
            "A": {"bi-GRU", "attention with positions", "attention without positions"},
        },
        "attention without positions cannot",
    ),
    ("14.2", {**CAN_LEARN_ANSWER, "B": {"bi-GRU", "attention with positions"}}, "window FC can"),
    ("14.2", {"A": set()}, "a dict with the keys"),
    ("14.3", by_sequence, "axis 0"),
    ("14.4", reach_swapped, "attention with positions"),
]


def test_references_agree_with_the_module():
    assert CAN_LEARN == CAN_LEARN_ANSWER
    assert expected_window_accuracy(32, 2, 0.97) == expected_window_accuracy_reference(32, 2, 0.97)
    x = np.array([[1, 2], [1, 3]])
    assert np.array_equal(
        accuracy_by_position(x, x * 0 + 1), accuracy_by_position_reference(x, x * 0 + 1)
    )
