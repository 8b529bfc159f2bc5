"""Checkers for the exercises of lesson 14 (the capstone on handwritten digits)."""

from __future__ import annotations

import numpy as np

from . import exercise, expect

# --------------------------------------------------------------------------- 14.1


def expected_window_accuracy_reference(length: int, w: int, reader_accuracy: float) -> float:
    """Accuracy over positions 1 … length−1 of a model that reads the key when it lies within
    ``w`` positions (right with probability ``reader_accuracy``) and guesses one of ten digits
    otherwise (right one time in ten)."""
    in_reach = min(w, length - 1)
    return (in_reach * reader_accuracy + (length - 1 - in_reach) * 0.1) / (length - 1)


@exercise("14.1", "what a window can reach")
def _check_expected_window_accuracy(expected_window_accuracy) -> None:
    cases = [
        (32, 2, 0.97),
        (32, 0, 0.97),
        (10, 3, 1.0),
        (64, 2, 0.9),
        (8, 12, 0.95),
        (32, 31, 0.97),
    ]
    for length, w, reader in cases:
        call = f"expected_window_accuracy({length}, {w}, {reader})"
        got = float(expected_window_accuracy(length, w, reader))
        want = expected_window_accuracy_reference(length, w, reader)
        if np.isclose(got, want):
            continue
        expect(
            not np.isclose(
                got, (min(w, length) * reader + (length - min(w, length)) * 0.1) / length
            ),
            f"{call} = {got:.4f}: position 0 is the key itself and is not scored; average over "
            f"the {length - 1} positions 1 … {length - 1}.",
        )
        expect(
            not np.isclose(got, (w * reader + (length - 1 - w) * 0.1) / (length - 1)),
            f"{call} = {got:.4f}: a window wider than the sequence reaches no more than the "
            f"{length - 1} scored positions; cap the number in reach.",
        )
        expect(
            not np.isclose(got, min(w, length - 1) * reader / (length - 1)),
            f"{call} = {got:.4f}: out of reach the model still guesses, and a guess among ten "
            "digits is right one time in ten.",
        )
        expect(False, f"{call} = {got:.4f}; expected {want:.4f}.")


# --------------------------------------------------------------------------- 14.2

#: The models of exercise 14.2 (those whose answer is clear-cut at length 32, window 2).
MODELS = (
    "per-token FC",
    "window FC",
    "bi-GRU",
    "attention with positions",
    "attention without positions",
    "truncated attention",
)

#: The task variants of exercise 14.2, and the models that can learn each one.
CAN_LEARN = {
    "A": {"bi-GRU", "attention with positions"},
    "B": {"window FC", "bi-GRU", "attention with positions", "truncated attention"},
    "C": {"bi-GRU", "attention with positions", "attention without positions"},
    "D": set(MODELS),
}

_WHY = {
    "A": "the key is at position 0, up to 31 positions away, and only its *position* marks it",
    "B": "the previous digit is one position away, inside a window of 2",
    "C": "whether a 7 occurs anywhere needs the whole sequence, but not the order",
    "D": "a position's own image decides it",
}


@exercise("14.2", "which model can learn it?")
def _check_can_learn(answer) -> None:
    expect(
        isinstance(answer, dict) and set(answer) == set(CAN_LEARN),
        f"can_learn must be a dict with the keys {sorted(CAN_LEARN)}; got {answer!r}.",
    )
    if any(answer[variant] is None for variant in CAN_LEARN):
        raise NotImplementedError  # not every variant is answered yet
    for variant, want in CAN_LEARN.items():
        got = set(answer[variant])
        unknown = got - set(MODELS)
        expect(
            not unknown, f"Variant {variant}: unknown model names {sorted(unknown)}; use {MODELS}."
        )
        for model in MODELS:
            if (model in got) != (model in want):
                verb = "cannot" if model in got else "can"
                expect(False, f"Variant {variant}: the {model} {verb} learn it ({_WHY[variant]}).")


# --------------------------------------------------------------------------- 14.3


def accuracy_by_position_reference(predictions, labels) -> np.ndarray:
    """(L,): the share of sequences whose prediction at each position is right."""
    return (np.asarray(predictions) == np.asarray(labels)).mean(axis=0)


@exercise("14.3", "accuracy by position")
def _check_accuracy_by_position(accuracy_by_position) -> None:
    rng = np.random.default_rng(1303)
    for n, length in [(4, 5), (50, 32), (3, 3), (7, 1)]:
        labels = rng.integers(0, 10, (n, length))
        predictions = np.where(rng.random((n, length)) < 0.6, labels, (labels + 1) % 10)
        call = f"accuracy_by_position(predictions {predictions.shape}, labels {labels.shape})"
        got = np.asarray(accuracy_by_position(predictions, labels), dtype=float)
        want = accuracy_by_position_reference(predictions, labels)
        expect(
            got.shape == want.shape,
            f"{call} has shape {got.shape}; one accuracy per position is {want.shape}: average "
            "over the sequences (axis 0).",
        )
        expect(np.allclose(got, want), f"{call} = {got}; expected {want}.")


# --------------------------------------------------------------------------- 14.4


@exercise("14.4", "the sequence length")
def _check_reach_experiment(reach_experiment) -> None:
    got = reach_experiment(16)
    expect(
        isinstance(got, tuple) and len(got) == 2,
        f"reach_experiment(16) returned {got!r}; return the pair (attention's accuracy, the "
        "window FC's accuracy).",
    )
    attention, window = (float(v) for v in got)
    expect(
        attention > 0.8,
        f"reach_experiment(16) = ({attention:.2f}, {window:.2f}): attention with positions "
        "should find the key in sequences of 16. Did you train it on sequences of that length "
        "(and test on them)?",
    )
    expect(
        window < 0.3,
        f"reach_experiment(16) = ({attention:.2f}, {window:.2f}): the window FC reaches the key "
        "only near the start; is the second number the window FC's test accuracy?",
    )
