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


def queen_weight():
    e = data.royal_embeddings()
    x = 5 * np.array([e["king"], e["queen"], e["dog"]])
    return float(attn.softmax(x[0] @ x.T)[1])


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


def is_permutation_invariant(f, x, perm):  # invariance is not equivariance
    return bool(np.allclose(f(x[perm]), f(x)))


CORRECT = {
    "02.1": attend_one,
    "02.2": attend_all,
    "02.3": queen_weight(),
    "02.4": is_permutation_equivariant,
}

WRONG = [
    ("02.1", attend_one_scaled, "no scaling"),
    ("02.1", attend_one_no_softmax, "softmax"),
    ("02.2", attend_all_columns, "axis=1"),
    ("02.2", attend_all_output_only, "pair"),
    ("02.3", 0.416, "before scaling"),
    ("02.3", 0.5, "Not quite"),
    ("02.3", 0.1235, "scaling by 10"),
    ("02.3", 0.4, "Not quite"),
    ("02.3", "0.123", "one number"),
    ("02.4", is_permutation_invariant, "f(x)[perm]"),
    ("02.4", lambda f, x, perm: "yes", "bool"),
]


def test_queen_weight_value():
    assert round(CORRECT["02.3"], 3) == 0.38
