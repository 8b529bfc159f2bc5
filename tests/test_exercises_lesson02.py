"""The checkers of lesson 02: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import numpy as np

from attnlib import data
from attnlib import numpy as attn


def _softmax_rows(scores):
    exps = np.exp(scores - scores.max(axis=1, keepdims=True))
    return exps / exps.sum(axis=1, keepdims=True)


# ---------------------------------------------------------------- reference solutions


def attend_one(x, i):
    scores = [float(np.dot(x[i], x[j])) for j in range(len(x))]
    top = max(scores)
    exps = [np.exp(s - top) for s in scores]
    weights = [e / sum(exps) for e in exps]
    out = np.zeros(x.shape[1])
    for j in range(len(x)):
        out += weights[j] * x[j]
    return out


def attend_all(x):
    weights = _softmax_rows(x @ x.T)
    return weights @ x, weights


def king_weights(scale):
    e = data.royal_embeddings()
    x = scale * np.array([e["king"], e["queen"], e["dog"]])
    return attn.softmax(x[0] @ x.T)


def is_permutation_equivariant(f, x, perm):
    return bool(np.allclose(f(x[perm]), f(x)[perm]))


# ---------------------------------------------------------------- plausible mistakes


def attend_one_scaled(x, i):  # divides by sqrt(d): that is lesson 03's attention
    return attn.attention(x, x, x)[0][i]


def attend_one_no_softmax(x, i):  # raw scores as weights
    return (x[i] @ x.T) @ x


def attend_all_columns(x):  # softmax down the columns instead of along the rows
    weights = _softmax_rows(x @ x.T).T
    return weights @ x, weights


def attend_all_output_only(x):
    return attend_all(x)[0]


def attend_one_naive(x, i):  # math.exp of the raw scores: overflows on large ones
    import math

    scores = [float(np.dot(x[i], x[j])) for j in range(len(x))]
    exps = [math.exp(s) for s in scores]
    return sum(e / sum(exps) * x[j] for j, e in enumerate(exps))


def attend_all_naive(x):  # np.exp of the raw scores: inf / inf = nan on large ones
    exps = np.exp(x @ x.T)
    weights = exps / exps.sum(axis=1, keepdims=True)
    return weights @ x, weights


def is_permutation_invariant(f, x, perm):  # invariance is not equivariance
    return bool(np.allclose(f(x[perm]), f(x)))


CORRECT = {
    "02.1": attend_one,
    "02.2": attend_all,
    "02.3": king_weights,
    "02.4": is_permutation_equivariant,
}

WRONG = [
    ("02.1", attend_one_scaled, "no scaling"),
    ("02.1", attend_one_no_softmax, "softmax"),
    ("02.1", attend_one_naive, "Subtract each row's largest score"),
    ("02.2", attend_all_columns, "axis=1"),
    ("02.2", attend_all_naive, "breaks down on large scores"),
    ("02.2", attend_all_output_only, "pair"),
    ("02.3", lambda scale: king_weights(scale**0.5), "multiplies each dot product"),
    ("02.3", lambda scale: king_weights(1.0), "is off"),
    ("02.3", lambda scale: np.exp(king_weights(scale)), "sums to"),
    ("02.3", lambda scale: king_weights(scale)[:2], "3 weights"),
    ("02.4", is_permutation_invariant, "f(x)[perm]"),
    ("02.4", lambda f, x, perm: "yes", "bool"),
]


def test_the_scale_dial_goes_from_average_to_argmax():
    assert np.allclose(king_weights(0.0), 1 / 3)
    assert round(float(king_weights(5.0)[1]), 3) == 0.38
    assert king_weights(15.0)[0] < 0.99 < king_weights(16.0)[0]
