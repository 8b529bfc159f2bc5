"""The checkers of lesson 05: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import math

import numpy as np

from attnlib import numpy as attn
from attnlib.exercises.lesson05 import interleaved_shift_matrix, untrained_positions_reference

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


def untrained_positions(max_len, train_lengths):
    return list(range(min(max(train_lengths), max_len), max_len))


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


def untrained_off_by_one(max_len, train_lengths):
    return list(range(max(train_lengths) + 1, max_len))


def untrained_none(max_len, train_lengths):
    return []


def untrained_beyond_table(max_len, train_lengths):
    return list(range(max(train_lengths), max_len + 1))


def extrapolation(base, seed=0):
    """Stands in for the lesson's training (the notebook's solution trains the real models):
    the sinusoidal model copies inside the training length and is partly right beyond it."""
    return 1.0, 0.6 + base / 1e6


CORRECT = {
    "05.1": sinusoidal_row,
    "05.2": shift_matrix_split,
    "05.3": extrapolation,
    "05.4": untrained_positions,
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
    ("05.4", untrained_off_by_one, "off by one"),
    ("05.4", untrained_none, "every row was trained"),
    ("05.4", untrained_beyond_table, "no such rows"),
]


def test_interleaved_shift_matrix_shifts_the_encoding():
    table = attn.sinusoidal_positional_encoding(50, 8)
    for k in (1, 4, 13):
        assert np.allclose(table[:-k] @ interleaved_shift_matrix(k, 8).T, table[k:], atol=1e-12)


def test_untrained_reference_asks_autograd():
    assert untrained_positions_reference(10, [3, 5]) == [5, 6, 7, 8, 9]
    assert untrained_positions_reference(4, [4]) == []
