"""The checkers of lesson 03: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import numpy as np

from attnlib import numpy as attn


def _softmax(scores, axis):
    exps = np.exp(scores - scores.max(axis=axis, keepdims=True))
    return exps / exps.sum(axis=axis, keepdims=True)


# ---------------------------------------------------------------- reference solutions


def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = _softmax(q @ k.T / np.sqrt(q.shape[-1]), axis=1)
    return weights @ v, weights


def num_parameters(d_model, d_k, d_v):
    return 2 * d_model * d_k + d_model * d_v


def column_attention(I, Wq, Wk, Wv):  # noqa: E741 (the textbook's name for the input matrix)
    Q, K, V = Wq @ I, Wk @ I, Wv @ I
    A_prime = _softmax(K.T @ Q / np.sqrt(Q.shape[0]), axis=0)
    return V @ A_prime, A_prime


def mean_max_weight(sigma_q, sigma_k, d_k, scale, n=2000):
    rng = np.random.default_rng(1)
    q = rng.normal(0.0, sigma_q, (n, 1, d_k))
    k = rng.normal(0.0, sigma_k, (n, 16, d_k))
    return attn.softmax(attn.dot_product_scores(q, k, scale=scale)[:, 0]).max(-1).mean()


# ---------------------------------------------------------------- plausible mistakes


def self_attention_naive(x, w_q, w_k, w_v):  # a softmax without the max: overflows
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    exps = np.exp(q @ k.T / np.sqrt(q.shape[-1]))
    weights = exps / exps.sum(axis=1, keepdims=True)
    return weights @ v, weights


def self_attention_unscaled(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = _softmax(q @ k.T, axis=1)
    return weights @ v, weights


def self_attention_scaled_by_d_model(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = _softmax(q @ k.T / np.sqrt(x.shape[1]), axis=1)
    return weights @ v, weights


def self_attention_swapped(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = _softmax(k @ q.T / np.sqrt(q.shape[1]), axis=1)
    return weights @ v, weights


def self_attention_columns(x, w_q, w_k, w_v):  # softmax down the columns
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = _softmax(q @ k.T / np.sqrt(q.shape[1]), axis=0)
    return weights @ v, weights


def self_attention_mixes_x(x, w_q, w_k, w_v):  # forgets the values
    _, weights = self_attention(x, w_q, w_k, w_v)
    return weights @ x, weights


def column_attention_rows(I, Wq, Wk, Wv):  # noqa: E741 (row convention, untransposed)
    y, w = attn.attention(I.T @ Wq.T, I.T @ Wk.T, I.T @ Wv.T)
    return y, w


def column_attention_unscaled(I, Wq, Wk, Wv):  # noqa: E741
    Q, K, V = Wq @ I, Wk @ I, Wv @ I
    A_prime = _softmax(K.T @ Q, axis=0)
    return V @ A_prime, A_prime


def column_attention_wrong_product(I, Wq, Wk, Wv):  # noqa: E741 (A' V instead of V A')
    Q, K, V = Wq @ I, Wk @ I, Wv @ I
    A_prime = _softmax(K.T @ Q / np.sqrt(Q.shape[0]), axis=0)
    return (A_prime.T @ V.T), A_prime


CORRECT = {
    "03.1": self_attention,
    "03.2": num_parameters,
    "03.3": column_attention,
    "03.4": mean_max_weight,
}

WRONG = [
    ("03.1", self_attention_naive, "e^s overflows once s passes about 709"),
    ("03.1", self_attention_unscaled, "sqrt(d_k) before the softmax"),
    ("03.1", self_attention_scaled_by_d_model, "not by sqrt of the width of x"),
    ("03.1", self_attention_swapped, "swapped"),
    ("03.1", self_attention_columns, "axis=1"),
    ("03.1", self_attention_mixes_x, "V = x @ w_v"),
    ("03.1", lambda x, w_q, w_k, w_v: self_attention(x, w_q, w_k, w_v)[0], "pair"),
    ("03.2", lambda d_model, d_k, d_v: 3 * d_model * d_k, "d_v columns"),
    ("03.2", lambda d_model, d_k, d_v: 3 * d_model * d_model, "not square"),
    ("03.2", lambda d_model, d_k, d_v: d_model * (d_k + d_v), "two matrices"),
    ("03.2", lambda d_model, d_k, d_v: float(num_parameters(d_model, d_k, d_v)), "int"),
    ("03.2", lambda d_model, d_k, d_v: 2 * d_model * d_k + d_v, "not right"),
    ("03.3", column_attention_rows, "down the columns"),
    ("03.3", column_attention_unscaled, "sqrt(d_k)"),
    ("03.3", column_attention_wrong_product, "O = V @ A'"),
    ("03.4", lambda sq, sk, d_k, scale: mean_max_weight(sq, sk, d_k, None), "default scale"),
    ("03.4", lambda sq, sk, d_k, scale: mean_max_weight(sq**2, sk**2, d_k, scale), "expected"),
    ("03.4", lambda sq, sk, d_k, scale: 1.5, "between 0 and 1"),
]
