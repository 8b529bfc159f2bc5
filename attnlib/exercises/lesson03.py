"""Checkers for the exercises of lesson 03."""

from __future__ import annotations

import numpy as np

from .. import numpy as attn
from . import exercise, expect
from .lesson02 import LARGE, on_large_scores


def _random_layers(seed: int):
    """Inputs ``x`` (L, d) and weights ``w_q``, ``w_k`` (d, d_k), ``w_v`` (d, d_v)."""
    rng = np.random.default_rng(seed)
    shapes = [(3, 4, 2, 3), (5, 8, 4, 6), (6, 3, 5, 2), (7, 6, 9, 4), (1, 2, 2, 2)]
    cases = []
    for length, d, d_k, d_v in shapes:
        x = rng.normal(0.0, 1.0, (length, d))
        w_q, w_k = rng.normal(0.0, 1.0, (d, d_k)), rng.normal(0.0, 1.0, (d, d_k))
        w_v = rng.normal(0.0, 1.0, (d, d_v))
        cases.append((x, w_q, w_k, w_v))
    return cases


def _pair(result, name: str, first: str, second: str):
    """The two arrays of a returned pair, or a failed check naming what was expected."""
    expect(
        isinstance(result, tuple) and len(result) == 2,
        "{name} should return a pair ({first}, {second}).",
        name=name,
        first=first,
        second=second,
    )
    return tuple(np.asarray(r, dtype=float) for r in result)


# --------------------------------------------------------------------------- 03.1


@exercise("03.1", "self-attention with given weights")
def _check_self_attention(self_attention) -> None:
    cases = [(*case, False) for case in _random_layers(seed=31)]
    x, w_q, w_k, w_v, _ = cases[1]
    cases.append((LARGE * x, w_q, w_k, w_v, True))  # scores in the thousands: e^s overflows
    for x, w_q, w_k, w_v, large in cases:
        length, d = x.shape
        d_k, d_v = w_q.shape[1], w_v.shape[1]
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        args = (x.copy(), w_q.copy(), w_k.copy(), w_v.copy())
        call = "self_attention(x, w_q, w_k, w_v)"
        if large:
            top = float((q @ k.T).max() / np.sqrt(d_k))
            result = on_large_scores(self_attention, *args, call=call, top=top)
        else:
            result = self_attention(*args)
        output, weights = _pair(result, call, "output", "weights")
        expected_out, expected_w = attn.attention(q, k, v)
        shapes = f"x {x.shape}, w_q {w_q.shape}, w_v {w_v.shape}"
        expect(
            weights.shape == (length, length),
            "With {shapes} the weights should have shape (L, L) = {shape}; got {got}.",
            shapes=shapes,
            shape=(length, length),
            got=weights.shape,
        )
        expect(
            np.allclose(weights.sum(axis=1), 1.0),
            "Each row of the weights should sum to 1: take the softmax along each row (axis=1), "
            "one row per query.",
        )
        if not np.allclose(weights, expected_w, atol=1e-8):
            unscaled = attn.softmax(q @ k.T)
            by_d_model = attn.softmax(q @ k.T / np.sqrt(d))
            swapped = attn.softmax(k @ q.T / np.sqrt(d_k))
            expect(
                not np.allclose(weights, unscaled, atol=1e-8),
                "Almost: the scores must be divided by sqrt(d_k) before the softmax.",
            )
            expect(
                d == d_k or not np.allclose(weights, by_d_model, atol=1e-8),
                "Divide the scores by sqrt(d_k), the width of the queries and keys "
                "(w_q.shape[1]), not by sqrt of the width of x.",
            )
            expect(
                not np.allclose(weights, swapped, atol=1e-8),
                "Queries and keys are swapped: row i of the scores is query i against every "
                "key, Q @ K.T with Q = x @ w_q and K = x @ w_k.",
            )
            expect(
                False,
                "The weights are off. Project first (Q = x @ w_q, K = x @ w_k), then "
                "scores = Q @ K.T / sqrt(d_k), then a softmax of each row.",
            )
        expect(
            output.shape == (length, d_v),
            "The output should have one row of width d_v = {d_v} per token: shape "
            "{shape}; got {got}. Mix the values V = x @ w_v, not x.",
            d_v=d_v,
            shape=(length, d_v),
            got=output.shape,
        )
        expect(
            np.allclose(output, expected_out, atol=1e-8),
            "The weights are right but the output is off: output = weights @ V with "
            "V = x @ w_v (the values, not x itself).",
        )


# --------------------------------------------------------------------------- 03.2


def _true_count(d_model: int, d_k: int, d_v: int) -> int:
    return 2 * d_model * d_k + d_model * d_v


@exercise("03.2", "parameters of a self-attention layer")
def _check_num_parameters(num_parameters) -> None:
    rng = np.random.default_rng(32)
    # (10, 5, 20): a right count that happens to equal three square matrices, 3 * 10 * 10
    cases = [(4, 4, 4), (8, 2, 3), (16, 4, 8), (512, 64, 64), (3, 5, 7), (10, 5, 20)]
    cases += [tuple(int(n) for n in rng.integers(1, 100, size=3)) for _ in range(5)]
    for d_model, d_k, d_v in cases:
        got = num_parameters(d_model, d_k, d_v)
        call = f"num_parameters(d_model={d_model}, d_k={d_k}, d_v={d_v})"
        expect(
            isinstance(got, (int, np.integer)),
            "{call} should return a whole number (an int); got {type_name}.",
            call=call,
            type_name=type(got).__name__,
        )
        got = int(got)
        if got == _true_count(d_model, d_k, d_v):
            continue  # right; the hints below are for wrong counts only
        expect(
            got != 3 * d_model * d_model or d_k == d_v == d_model,
            "{call} = {got}: the three matrices are not square here. W_q and W_k are "
            "(d_model, d_k), W_v is (d_model, d_v).",
            call=call,
            got=got,
        )
        expect(
            got != 3 * d_model * d_k or d_k == d_v,
            "{call} = {got}: W_v has d_v columns, not d_k.",
            call=call,
            got=got,
        )
        expect(
            got != d_model * (d_k + d_v),
            "{call} = {got}: there are two matrices of width d_k (W_q for the queries and W_k "
            "for the keys), plus W_v.",
            call=call,
            got=got,
        )
        expect(
            got == _true_count(d_model, d_k, d_v),
            "{call} = {got} is not right. Count the entries of W_q (d_model × d_k), W_k "
            "(d_model × d_k) and W_v (d_model × d_v); the layer has nothing else to learn.",
            call=call,
            got=got,
        )


# --------------------------------------------------------------------------- 03.3


@exercise("03.3", "attention in the textbook's column convention")
def _check_column_attention(column_attention) -> None:
    for x, w_q, w_k, w_v in _random_layers(seed=33):
        length, d_v = x.shape[0], w_v.shape[1]
        columns = (x.T.copy(), w_q.T.copy(), w_k.T.copy(), w_v.T.copy())  # I, W^q, W^k, W^v
        out, weights = _pair(
            column_attention(*columns), "column_attention(I, Wq, Wk, Wv)", "O", "A'"
        )
        expected_y, expected_w = attn.attention(x @ w_q, x @ w_k, x @ w_v)
        expect(
            weights.shape == (length, length),
            "A' should be (L, L) = {shape}; got {got}.",
            shape=(length, length),
            got=weights.shape,
        )
        expect(
            np.allclose(weights.sum(axis=0), 1.0),
            "Each *column* of A' should sum to 1: in this convention column i belongs to query "
            "i (A = K^T Q), so the softmax runs down the columns (axis=0).",
        )
        if not np.allclose(weights, expected_w.T, atol=1e-8):
            q, k = x @ w_q, x @ w_k
            expect(
                not np.allclose(weights, attn.softmax(k @ q.T, axis=0), atol=1e-8),
                "Almost: divide A = K^T Q by sqrt(d_k) before the softmax.",
            )
            expect(
                False,
                "A' is off. Q = Wq @ I and K = Wk @ I have one column per token; "
                "A = K.T @ Q / sqrt(d_k) (entry (j, i) is k_j · q_i); then a softmax of each "
                "column.",
            )
        expect(
            out.shape == (d_v, length),
            "O should have one column per token, shape (d_v, L) = {shape}; got {got}.",
            shape=(d_v, length),
            got=out.shape,
        )
        expect(
            np.allclose(out, expected_y.T, atol=1e-8),
            "A' is right but O is off: O = V @ A' with V = Wv @ I, so that column i of O is "
            "the weighted sum of the value columns with the weights in column i of A'.",
        )


# --------------------------------------------------------------------------- 03.4


def reference_mean_max_weight(sigma_q, sigma_k, d_k, scale, n=4000, seed=0) -> float:
    """Lesson 03's experiment: the mean largest softmax weight of a query over 16 keys."""
    rng = np.random.default_rng(seed)
    q = rng.normal(0.0, sigma_q, (n, 1, d_k))
    k = rng.normal(0.0, sigma_k, (n, 16, d_k))
    return float(attn.softmax(attn.dot_product_scores(q, k, scale=scale)[:, 0]).max(-1).mean())


@exercise("03.4", "queries with a larger spread")
def _check_mean_max_weight(mean_max_weight) -> None:
    cases = [(1.0, 1.0, 64, None), (1.0, 1.0, 64, 1.0), (3.0, 1.0, 64, None), (2.0, 0.5, 16, 0.5)]
    cases.append((3.0, 1.0, 64, 1 / 24))
    for sigma_q, sigma_k, d_k, scale in cases:
        call = f"mean_max_weight({sigma_q}, {sigma_k}, {d_k}, scale={scale})"
        got = float(mean_max_weight(sigma_q, sigma_k, d_k, scale))
        want = reference_mean_max_weight(sigma_q, sigma_k, d_k, scale)
        expect(
            0.0 < got <= 1.0,
            "{call} = {got:.3f}; a softmax weight lies between 0 and 1.",
            call=call,
            got=got,
        )
        if (
            scale is not None
            and abs(got - reference_mean_max_weight(sigma_q, sigma_k, d_k, None)) < 0.02
        ):
            expect(
                abs(want - got) < 0.03,
                "{call} = {got:.3f} looks like attnlib's default scale 1/sqrt(d_k); "
                "pass scale=scale to attn.dot_product_scores.",
                call=call,
                got=got,
            )
        expect(
            abs(got - want) < 0.03,
            "{call} = {got:.3f}, expected about {want:.3f} (random draws: within 0.03). "
            "Draw q with standard deviation sigma_q (shape (n, 1, d_k)) and 16 keys per query "
            "with standard deviation sigma_k, score them with attn.dot_product_scores(q, k, "
            "scale=scale), take the softmax of each row, then the mean of the row maxima.",
            call=call,
            got=got,
            want=want,
        )
