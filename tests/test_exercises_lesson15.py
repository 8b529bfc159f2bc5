"""The checkers of lesson 15: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import numpy as np

from attnlib import numpy as attn
from attnlib.exercises.lesson15 import (
    SOLVERS,
    attention_madds_reference,
    pooling_projection,
    reference_relative_errors,
)

# ---------------------------------------------------------------- reference solutions


def low_rank_by_hand(q, k, v, projection_k, projection_v):
    k_small, v_small = projection_k @ k, projection_v @ v  # (rank, d_k), (rank, d_v)
    scores = q @ k_small.T / np.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True) @ v_small


def attention_madds(L, d, window, rank):
    return {
        "exact": 2 * L * L * d,
        "truncated": 2 * L * (2 * window + 1) * d,
        "linear": 2 * L * d * d,
        "low-rank": 4 * L * rank * d,
    }


WHICH = {
    "smooth": {"exact", "truncated"},
    "copy far": {"exact"},
    "global mean": {"exact", "linear", "low-rank"},
}

# ---------------------------------------------------------------- plausible mistakes


def low_rank_no_projection(q, k, v, projection_k, projection_v):
    return attn.attention(q, k, v)[0]


def low_rank_shared(q, k, v, projection_k, projection_v):
    return attn.low_rank_attention(q, k, v, projection_k, projection_k)[0]


def low_rank_unscaled(q, k, v, projection_k, projection_v):
    return attn.low_rank_attention(q, k, v, projection_k, projection_v, scale=1.0)[0]


def low_rank_rank_scale(q, k, v, projection_k, projection_v):
    rank = projection_k.shape[0]
    return attn.low_rank_attention(q, k, v, projection_k, projection_v, scale=rank**-0.5)[0]


def low_rank_projects_queries(q, k, v, projection_k, projection_v):
    return attn.attention(projection_k @ q, projection_k @ k, projection_v @ v)[0]


def madds_one_product(L, d, window, rank):
    return {name: count // 2 for name, count in attention_madds(L, d, window, rank).items()}


def madds_window_one_side(L, d, window, rank):
    return {**attention_madds(L, d, window, rank), "truncated": 2 * L * window * d}


def madds_masked(L, d, window, rank):
    return {**attention_madds(L, d, window, rank), "truncated": 2 * L * L * d}


def madds_no_projection(L, d, window, rank):
    return {**attention_madds(L, d, window, rank), "low-rank": 2 * L * rank * d}


def madds_linear_quadratic(L, d, window, rank):
    return {**attention_madds(L, d, window, rank), "linear": 2 * L * L * d}


def relative_errors(sharpness):
    return reference_relative_errors(sharpness)


def linear_recall(key_width):
    """A stand-in for the trained models: what the lesson's linear attention recalls."""
    return {8: 0.24, 16: 0.41, 32: 0.61, 64: 0.85}[key_width]


CORRECT = {
    "15.5": linear_recall,
    "15.1": low_rank_by_hand,
    "15.2": attention_madds,
    "15.4": relative_errors,
    "15.3": WHICH,
}

WRONG = [
    ("15.5", lambda key_width: linear_recall(8), "changed nothing"),  # the width ignored
    ("15.5", lambda key_width: 1.0, "far above"),  # exact attention, not linear
    # the width given to the wrong layer (the values'): the state of 8 rows stays
    ("15.5", lambda key_width: linear_recall(8) + key_width / 3200, "not far above"),
    ("15.5", lambda key_width: [linear_recall(key_width)] * 3, "a number from 0 to 1"),
    ("15.4", lambda sharpness: reference_relative_errors(2.0), "pass the sharpness on"),
    ("15.4", lambda s: {k: 2 * v for k, v in reference_relative_errors(s).items()}, "expected"),
    ("15.4", lambda s: list(reference_relative_errors(s).values()), "a dict"),
    ("15.1", low_rank_no_projection, "mixed down"),
    ("15.1", low_rank_shared, "projection_v"),
    ("15.1", low_rank_unscaled, "1/sqrt(d_k)"),
    ("15.1", low_rank_rank_scale, "not 1/sqrt(rank)"),
    ("15.1", low_rank_projects_queries, "queries stay"),
    ("15.2", madds_one_product, "two"),
    ("15.2", madds_window_one_side, "2w + 1"),
    ("15.2", madds_masked, "never computes"),
    ("15.2", madds_no_projection, "projections"),
    ("15.2", madds_linear_quadratic, "never forms"),
    ("15.2", lambda *args: 42, "dict"),
    ("15.3", {**WHICH, "smooth": {"exact", "truncated", "linear"}}, "linear cannot"),
    ("15.3", {**WHICH, "copy far": {"exact", "low-rank"}}, "rank must be L"),
    ("15.3", {**WHICH, "copy far": {"exact", "linear"}}, "rank at most d = 64"),
    ("15.3", {**WHICH, "global mean": {"exact"}}, "linear can"),
    ("15.3", {**WHICH, "global mean": {"exact", "truncated", "linear", "low-rank"}}, "129"),
    ("15.3", {**WHICH, "smooth": {"exact", "window"}}, "the variants are"),
    ("15.3", {"smooth": {"exact"}}, "keys"),
]


def test_references_agree_with_attnlib():
    assert attention_madds_reference(4096, 64, 64, 64) == attention_madds(4096, 64, 64, 64)
    assert SOLVERS == WHICH
    projection = pooling_projection(12, 3)
    assert projection.shape == (3, 12) and np.allclose(projection.sum(axis=1), 1.0)
    x = np.arange(12.0)[:, None]
    assert np.allclose(projection @ x, [[1.5], [5.5], [9.5]])  # segment means


def test_global_mean_is_exact_for_linear_and_low_rank():
    rng = np.random.default_rng(0)
    length, d = 256, 8
    q = np.zeros((length, d))
    k, v = rng.normal(0.0, 1.0, (2, length, d))
    mean = np.broadcast_to(v.mean(axis=0), v.shape)
    assert np.allclose(attn.linear_attention(q, q, v), mean)  # q = k = 0: phi = 1, uniform
    assert not np.allclose(attn.linear_attention(q, k, v), mean)  # q = 0 alone is not enough
    assert np.allclose(attn.low_rank_attention(q, k, v, pooling_projection(length, 64))[0], mean)
    assert np.allclose(attn.attention(q, k, v)[0], mean)
