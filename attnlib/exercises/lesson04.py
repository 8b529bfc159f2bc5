"""Checkers for the exercises of lesson 04."""

from __future__ import annotations

import numpy as np

from .. import numpy as attn
from . import exercise, expect, phrase

# --------------------------------------------------------------------------- 04.1


@exercise("04.1", "split_heads by hand")
def _check_split_heads(split_heads_by_hand) -> None:
    rng = np.random.default_rng(401)
    cases = [((4, 6), 2), ((4, 6), 3), ((5, 8), 1), ((3, 4), 4), ((2, 5, 8), 4), ((2, 3, 4, 6), 2)]
    for shape, heads in cases:
        x = rng.normal(0.0, 1.0, shape)
        got = np.asarray(split_heads_by_hand(x.copy(), heads))
        expected = attn.split_heads(x, heads)
        call = phrase(
            "split_heads_by_hand(x of shape {shape}, num_heads={num_heads})",
            shape=shape,
            num_heads=heads,
        )
        expect(
            got.shape == expected.shape,
            "{call} has shape {got_shape}; expected (..., H, L, d) = {expected_shape}.",
            call=call,
            got_shape=got.shape,
            expected_shape=expected.shape,
        )
        if np.allclose(got, expected):
            continue
        *batch, length, width = shape
        d = width // heads
        plain = x.reshape(*batch, heads, length, d)
        strided = np.stack([x[..., h::heads] for h in range(heads)], axis=-3)
        expect(
            not np.allclose(got, plain),
            "{call}: a plain reshape to (..., H, L, d) cuts the numbers in memory order, so "
            "head 0 gets whole tokens instead of the first d features of every token. Reshape "
            "to (..., L, H, d) first, then swap the L and H axes.",
            call=call,
        )
        expect(
            not np.allclose(got, strided),
            "{call}: head h owns a contiguous block of features, h·d … (h+1)·d − 1, not every "
            "H-th feature.",
            call=call,
        )
        expect(
            False,
            "{call} has the right shape but the wrong numbers. Head h, token i should be "
            "x[..., i, h*d:(h+1)*d].",
            call=call,
        )


# --------------------------------------------------------------------------- 04.2


def _layer(d_model: int, heads: int, d_k: int, d_v: int, seed: int):
    return attn.MultiHeadAttention(d_model, heads, d_k=d_k, d_v=d_v, seed=seed)


def _heads_output(x, layer, scale=None):
    """The concatenated heads (before W_o), with an optional wrong score scale."""
    q = attn.split_heads(x @ layer.w_q, layer.num_heads)
    k = attn.split_heads(x @ layer.w_k, layer.num_heads)
    v = attn.split_heads(x @ layer.w_v, layer.num_heads)
    return attn.merge_heads(attn.attention(q, k, v, scale=scale)[0])


@exercise("04.2", "multi_head_forward")
def _check_multi_head_forward(multi_head_forward) -> None:
    rng = np.random.default_rng(402)
    cases = [(8, 2, 4, 4, 5), (12, 3, 4, 4, 6), (6, 1, 6, 6, 4), (8, 4, 2, 2, 7), (8, 2, 6, 3, 5)]
    for seed, (d_model, heads, d_k, d_v, length) in enumerate(cases):
        layer = _layer(d_model, heads, d_k, d_v, seed)
        x = rng.normal(0.0, 1.0, (length, d_model))
        weights = [w.copy() for w in (layer.w_q, layer.w_k, layer.w_v, layer.w_o)]
        got = np.asarray(multi_head_forward(x.copy(), *weights, heads), dtype=float)
        expected, _ = layer(x)
        call = phrase(
            "multi_head_forward with d_model={d_model}, num_heads={num_heads}, d_k={d_k}, "
            "d_v={d_v}, L={length}",
            d_model=d_model,
            num_heads=heads,
            d_k=d_k,
            d_v=d_v,
            length=length,
        )
        expect(
            got.shape == expected.shape,
            "{call} returned shape {got_shape}; expected (L, d_model) = {expected_shape}. "
            "The concatenated heads (L, H·d_v) still need the output projection W_o.",
            call=call,
            got_shape=got.shape,
            expected_shape=expected.shape,
        )
        if np.allclose(got, expected, atol=1e-8):
            continue
        whole_width = _heads_output(x, layer, scale=(heads * d_k) ** -0.5) @ layer.w_o
        single = attn.attention(x @ layer.w_q, x @ layer.w_k, x @ layer.w_v)[0] @ layer.w_o
        expect(
            not np.allclose(got, whole_width, atol=1e-8),
            "{call}: each head scales its scores by 1/sqrt(d_k), with d_k the width of one "
            "head (w_q.shape[1] // num_heads), not of all heads together.",
            call=call,
        )
        expect(
            not np.allclose(got, _heads_output(x, layer), atol=1e-8),
            "{call}: these are the concatenated heads; the output projection is missing: "
            "multiply them by w_o.",
            call=call,
        )
        expect(
            heads == 1 or not np.allclose(got, single, atol=1e-8),
            "{call}: this is one head of width H·d_k. Split q, k and v into num_heads heads "
            "and give each head its own softmax.",
            call=call,
        )
        expect(
            False,
            "{call} gives the wrong numbers. Steps: Q = x @ w_q (and K, V), split each into "
            "heads, attention per head with scale 1/sqrt(d_k), concatenate, then @ w_o.",
            call=call,
        )


# --------------------------------------------------------------------------- 04.3


def multi_head_cost_reference(length, d_model, num_heads, d_k, d_v):
    """(parameters, FLOPs of the matrix products, attention-weight entries), no biases."""
    width_k, width_v = num_heads * d_k, num_heads * d_v
    parameters = 2 * d_model * width_k + 2 * d_model * width_v
    projections = 2 * length * d_model * (2 * width_k + width_v) + 2 * length * width_v * d_model
    attention = 2 * num_heads * length * length * (d_k + d_v)
    return parameters, projections + attention, num_heads * length * length


@exercise("04.3", "parameters and FLOPs")
def _check_cost(multi_head_cost) -> None:
    cases = [(128, 64, 1, 64, 64), (128, 64, 8, 8, 8), (10, 12, 3, 4, 4), (7, 10, 2, 8, 8)]
    cases.append((50, 16, 4, 3, 5))
    for case in cases:
        length, d_model, heads, d_k, d_v = case
        call = (
            f"multi_head_cost(length={length}, d_model={d_model}, num_heads={heads}, "
            f"d_k={d_k}, d_v={d_v})"
        )
        got = multi_head_cost(*case)
        expect(
            isinstance(got, tuple) and len(got) == 3,
            "Return a tuple of three numbers: (parameters, flops, weight_entries).",
        )
        params, flops, entries = (int(round(float(g))) for g in got)
        want_params, want_flops, want_entries = multi_head_cost_reference(*case)
        expect(
            params == want_params,
            "{call}: parameters = {params}, expected {want_params}. W_q and W_k are "
            "(d_model, H·d_k), W_v is (d_model, H·d_v), W_o is (H·d_v, d_model); d_k is given, "
            "so do not assume d_k = d_model / H.",
            call=call,
            params=params,
            want_params=want_params,
        )
        expect(
            entries == want_entries,
            "{call}: weight_entries = {entries}, expected {want_entries}: every head has its "
            "own (L, L) matrix of attention weights.",
            call=call,
            entries=entries,
            want_entries=want_entries,
        )
        expect(
            flops != want_flops // 2,
            "{call}: flops is half the expected value. A product of (m, n) and (n, p) "
            "matrices costs 2·m·n·p FLOPs: one multiplication and one addition per term.",
            call=call,
        )
        expect(
            flops == want_flops,
            "{call}: flops = {flops}, expected {want_flops}. Count four projections (Q, K, V "
            "and the output W_o) and, in each of the H heads, the scores Q_h K_hᵀ (L·L·d_k "
            "terms) and the weighted sum A_h V_h (L·L·d_v terms), at 2 FLOPs per term.",
            call=call,
            flops=flops,
            want_flops=want_flops,
        )


# --------------------------------------------------------------------------- 04.4


@exercise("04.4", "more heads, same parameters")
def _check_head_experiment(head_experiment) -> None:
    losses = {}
    for heads, seeds in [(1, [0]), (4, [0, 1])]:
        call = f"head_experiment({heads}, {seeds})"
        got = list(head_experiment(heads, seeds))
        expect(
            len(got) == len(seeds) and all(np.isscalar(v) for v in got),
            "{call} returned {got!r}; return one test loss (a number) per seed.",
            call=call,
            got=got,
        )
        losses[heads] = [float(v) for v in got]
    expect(
        losses[1][0] > 0.18,
        "head_experiment(1, [0]) = {loss:.3f}, but one head of width 16 stays above "
        "0.2 on this task: pass num_heads on to train(num_heads, seed).",
        loss=losses[1][0],
    )
    expect(
        max(losses[4]) < 0.2,
        "head_experiment(4, [0, 1]) = {losses}: four heads of width 4 beat every single "
        "head (below 0.2). Train with train(num_heads, seed), then measure the trained layer "
        "with test_loss(layer).",
        losses=losses[4],
    )
