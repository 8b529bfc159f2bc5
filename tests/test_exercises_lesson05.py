"""The checkers of lesson 05: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from attnlib import numpy as attn
from attnlib import torch as tattn
from attnlib.exercises.lesson05 import copy_accuracy, interleaved_shift_matrix, moved_rows

# ---------------------------------------------------------------- reference solutions


def sinusoidal_row(pos, d_model, base=10000.0):
    row = np.zeros(d_model)
    for i in range(d_model // 2):
        angle = pos / base ** (2 * i / d_model)
        row[2 * i], row[2 * i + 1] = math.sin(angle), math.cos(angle)
    return row


def shift_matrix_split(k, d_model, base=10000.0):
    omega = base ** (-np.arange(0, d_model, 2) / d_model)
    c, s = np.diag(np.cos(k * omega)), np.diag(np.sin(k * omega))
    return np.block([[c, s], [-s, c]])


class CopyModel(nn.Module):
    """Stands in for the lesson's learned model (the notebook's solution trains the real one):
    rows 0 … trained_rows - 1 of its 128-row table differ from their initial values, and it
    copies the previous token exactly at positions 1 … trained_rows - 1, and outputs flat scores
    (so its guess is symbol 0, right 1 time in 16) elsewhere."""

    def __init__(self, trained_rows, symbols=16, d_model=64):
        super().__init__()
        self.table = tattn.LearnedPositionalEmbedding(128, d_model, seed=0)
        self.trained_rows, self.symbols = trained_rows, symbols
        with torch.no_grad():
            self.table.weight[:trained_rows] += 1.0

    def forward(self, tokens):
        logits = torch.zeros(*tokens.shape, self.symbols)
        copied = nn.functional.one_hot(tokens[:, :-1], self.symbols).float()
        logits[:, 1 : self.trained_rows] = copied[:, : self.trained_rows - 1]
        return logits, None


def short_training(length):
    return CopyModel(length), list(range(length, 128))


# ---------------------------------------------------------------- plausible mistakes


def row_swapped(pos, d_model, base=10000.0):
    row = sinusoidal_row(pos, d_model, base)
    return np.stack([row[1::2], row[0::2]], axis=1).ravel()


def row_split(pos, d_model, base=10000.0):
    row = sinusoidal_row(pos, d_model, base)
    return np.concatenate([row[0::2], row[1::2]])


def row_exponent_i(pos, d_model, base=10000.0):
    row = np.zeros(d_model)
    for i in range(d_model // 2):
        angle = pos / base ** (i / d_model)  # forgot the 2 in 2i/d
        row[2 * i], row[2 * i + 1] = math.sin(angle), math.cos(angle)
    return row


def row_per_column(pos, d_model, base=10000.0):
    return np.array(
        [
            (math.sin if j % 2 == 0 else math.cos)(pos / base ** (j / d_model))
            for j in range(d_model)
        ]
    )


def row_ignores_base(pos, d_model, base=10000.0):
    return sinusoidal_row(pos, d_model)


def row_from_one(pos, d_model, base=10000.0):
    return sinusoidal_row(pos + 1, d_model, base)


def shift_interleaved(k, d_model, base=10000.0):
    return interleaved_shift_matrix(k, d_model, base)


def shift_transposed(k, d_model, base=10000.0):
    return shift_matrix_split(k, d_model, base).T


def shift_identity(k, d_model, base=10000.0):
    return np.eye(d_model)


def short_untrained_off_by_one(length):
    return CopyModel(length), list(range(length + 1, 128))


def short_lists_moved_rows(length):
    return CopyModel(length), list(range(length))


def short_full_length(length):
    return CopyModel(128), []  # trained on 128 tokens: length not passed on


def short_untrained_model(length):
    return CopyModel(0), list(range(128))


def extrapolation(base, seed=0):
    """Stands in for the lesson's training (the notebook's solution trains the real models):
    the sinusoidal model copies inside the training length and is partly right beyond it."""
    return 1.0, 0.6 + base / 1e6


CORRECT = {
    "05.1": sinusoidal_row,
    "05.2": shift_matrix_split,
    "05.3": extrapolation,
    "05.4": short_training,
}

WRONG = [
    ("05.1", row_swapped, "swapped"),
    ("05.1", row_split, "interleaves"),
    ("05.1", row_exponent_i, "*pairs*"),
    ("05.1", row_per_column, "share one frequency"),
    ("05.1", row_ignores_base, "ignores base"),
    ("05.1", row_from_one, "positions count from 0"),
    ("05.1", lambda pos, d, base=1e4: np.zeros(d + 1), "vector of d_model"),
    ("05.2", shift_interleaved, "interleaved layout"),
    ("05.2", shift_transposed, "−k"),
    ("05.2", shift_identity, "angle-sum"),
    ("05.2", lambda k, d, base=1e4: np.eye(d + 1), "shape"),
    ("05.3", lambda base, seed=0: (0.99, 0.6), "pass the base on"),
    ("05.3", lambda base, seed=0: (0.5, base / 1e5), "copies almost every token"),
    ("05.3", lambda base, seed=0: (0.99, 1.0 - base / 1e6), "only part of the time"),
    ("05.3", lambda base, seed=0: [0.99, 0.6], "return the pair"),
    ("05.4", short_untrained_off_by_one, "off by one"),
    ("05.4", short_lists_moved_rows, "rows that training moved"),
    ("05.4", short_full_length, "Pass length on"),
    ("05.4", short_untrained_model, "no row of the model's table moved"),
    ("05.4", lambda length: CopyModel(length), "return the pair"),
    ("05.4", lambda length: (nn.Linear(2, 2), []), "no learned table"),
]


def test_interleaved_shift_matrix_shifts_the_encoding():
    table = attn.sinusoidal_positional_encoding(50, 8)
    for k in (1, 4, 13):
        assert np.allclose(table[:-k] @ interleaved_shift_matrix(k, 8).T, table[k:], atol=1e-12)


def test_moved_rows_and_copy_accuracy_measure_the_model():
    model = CopyModel(32)
    assert moved_rows(model.table) == list(range(32))
    accuracy = copy_accuracy(model, 128)  # accuracy[p - 1] is position p
    assert accuracy[:31].min() == 1.0 and accuracy[31:].mean() < 0.2
