"""The checkers of lesson 16: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as torch_modules
from torch.optim import optimizer as torch_optimizers

from attnlib import data
from attnlib.exercises import check
from attnlib.exercises.lesson16 import (
    BUDGET_STEPS,
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


def reach_cards(num_sequences, length, rng, reader_error=0.0):
    """Reach-task tokens as the lesson builds them: the one-hot key digit, then the one-hot
    value digit (20 numbers per card), as read by a reader that misreads a digit (as another
    one) with probability ``reader_error``; and the true labels."""
    cards, labels = data.card_sequences("reach", num_sequences, length, rng)
    misread = rng.random(cards.shape) < reader_error
    read = np.where(misread, (cards + rng.integers(1, 10, cards.shape)) % 10, cards)
    tokens = F.one_hot(torch.from_numpy(read), 10).flatten(-2).float()
    return tokens, torch.from_numpy(labels)


class SmallGRUReader(nn.Module):
    """A GRU over the cards (both ways unless told otherwise) and a head: ten scores per card."""

    def __init__(self, bidirectional=True):
        super().__init__()
        torch.manual_seed(0)
        self.gru = nn.GRU(20, 16, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(16 * (1 + bidirectional) + 20, 10)

    def forward(self, tokens):
        return self.head(torch.cat([self.gru(tokens)[0], tokens], dim=-1))


@contextmanager
def one_thread():
    """PyTorch on one thread inside the block: a small GRU trains many times faster so."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def gru_reach_accuracy(
    length,
    steps=BUDGET_STEPS,
    train_length=None,
    test_length=None,
    learning_rate=1e-2,
    bidirectional=True,
    count_the_card=False,
    reader_error=0.0,
):
    """Stands in for the lesson's solution (a small GRU on cards read perfectly, or with the
    given error, so that the test is quick); its keywords make the plausible mistakes."""
    with one_thread():
        return _train_and_test(
            length,
            steps,
            train_length,
            test_length,
            learning_rate,
            bidirectional,
            count_the_card,
            reader_error,
        )


def _train_and_test(
    length,
    steps,
    train_length,
    test_length,
    learning_rate,
    bidirectional,
    count_the_card,
    reader_error,
):
    model = SmallGRUReader(bidirectional)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        tokens, labels = reach_cards(16, train_length or length, rng, reader_error)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    tokens, labels = reach_cards(256, test_length or length, rng, reader_error)
    with torch.no_grad():
        right = model(tokens).argmax(-1) == labels
    scored = torch.ones_like(right) if count_the_card else labels != data.UNSCORED
    return right[scored].float().mean().item()


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


def gru_constant(length):
    """A number typed in, not measured."""
    return 0.9


def gru_trained_at_32(length):
    """The length not used for training: trained at the lesson's 32 whatever it is asked."""
    return gru_reach_accuracy(length, train_length=32)


def gru_tested_at_32(length):
    return gru_reach_accuracy(length, test_length=32)


def gru_fewer_steps(length):
    return gru_reach_accuracy(length, steps=100)


def gru_one_way(length):
    return gru_reach_accuracy(length, bidirectional=False)


def gru_counts_the_card(length):
    """The first card's own position counted as a (wrong) answer."""
    return gru_reach_accuracy(length, count_the_card=True)


def gru_that_does_not_learn(length):
    """All by the book, but a learning rate too small to learn anything in 300 steps."""
    return gru_reach_accuracy(length, learning_rate=1e-6)


def gru_returns_a_list(length):
    return [0.97]


CORRECT = {
    "16.1": expected_window_accuracy,
    "16.2": CAN_LEARN_ANSWER,
    "16.3": accuracy_by_position,
    "16.4": gru_reach_accuracy,
}

WRONG = [
    ("16.1", window_without_ends, "fewer than 4 neighbours"),
    ("16.1", window_over_all_positions, "not scored at its own position"),
    ("16.1", window_no_guess, "one time in ten"),
    ("16.2", {**CAN_LEARN_ANSWER, "A": {"attention with positions"}}, "the bi-GRU can learn it"),
    (
        "16.2",
        {
            **CAN_LEARN_ANSWER,
            "A": {"bi-GRU", "attention with positions", "attention without positions"},
        },
        "attention without positions cannot",
    ),
    ("16.2", {**CAN_LEARN_ANSWER, "B": {"bi-GRU", "attention with positions"}}, "window FC can"),
    ("16.2", {**CAN_LEARN_ANSWER, "C": {"bi-GRU", "nobody"}}, "unknown model names"),
    ("16.2", {"A": set()}, "a dict with the keys"),
    ("16.3", by_sequence, "axis 0"),
    ("16.4", gru_constant, "without training anything"),
    ("16.4", gru_returns_a_list, "one number between 0 and 1"),
]

#: Mistakes of 16.4 that train a GRU each (a second or more): tested among the slow tests.
TRAINED_WRONG = [
    (gru_trained_at_32, "on sequences of [32] cards"),
    (gru_tested_at_32, "did not test the model on sequences of 8 cards"),
    (gru_fewer_steps, "took 100 optimiser steps"),
    (gru_one_way, "trained no bidirectional GRU"),
    (gru_counts_the_card, "the first card's own position is not scored"),
    (gru_that_does_not_learn, f"at most {SHORTER_LENGTH - 1} positions away"),
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


@pytest.mark.slow
@pytest.mark.parametrize(("answer", "hint"), TRAINED_WRONG)
def test_a_trained_mistake_gets_its_hint(answer, hint):
    """The checker watches the training and re-measures: each mistake gets its own hint."""
    result = check("16.4", answer)
    assert result.status == "wrong" and hint in result.message, result


@pytest.mark.slow
def test_a_right_answer_passes_with_a_reader_that_errs_as_the_assert_allows():
    """The re-measure follows the reader's reading, the accuracy the true digit: a right
    answer passes with a reader 93 % right, the least the lesson asserts."""
    result = check("16.4", lambda length: gru_reach_accuracy(length, reader_error=0.07))
    assert result.status == "correct", result


def test_the_checker_leaves_no_hook_behind():
    check("16.4", gru_constant)
    assert not torch_modules._global_forward_hooks
    assert not torch_optimizers._global_optimizer_post_hooks
