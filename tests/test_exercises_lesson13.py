"""The checkers of lesson 13: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from attnlib import numpy as attn
from attnlib.exercises.lesson13 import path_length_reference, rnn_attention_costs_reference

# ---------------------------------------------------------------- reference solutions


def rnn_attention_costs(length, d, g):
    return length, length * 2 * g * d * d, 1, 4 * length * d * d + 2 * length * length * d


def linear_attention_step(state, normaliser, q, k, v):
    phi_q, phi_k = attn.elu_feature_map(q), attn.elu_feature_map(k)
    state = state + np.outer(phi_k, v)
    normaliser = normaliser + phi_k
    return state, normaliser, (phi_q @ state) / (phi_q @ normaliser)


def path_length(model, i, j):
    if model == "rnn":
        return j - i + 1 if j >= i else None
    if model == "bidirectional rnn":
        return abs(i - j) + 1
    if model == "self-attention":
        return 1
    return 1 if j >= i else None


# ---------------------------------------------------------------- plausible mistakes


def costs_flops(length, d, g):
    s, m, a, n = rnn_attention_costs(length, d, g)
    return s, 2 * m, a, 2 * n


def costs_one_matrix(length, d, g):
    s, m, a, n = rnn_attention_costs(length, d, g)
    return s, m // 2, a, n


def costs_square_weights(length, d, g):
    """W_x and W_h taken as d × d, whatever g."""
    s, _, a, n = rnn_attention_costs(length, d, g)
    return s, 2 * length * d * d, a, n


def costs_rnn_parallel(length, d, g):
    _, m, a, n = rnn_attention_costs(length, d, g)
    return 1, m, a, n


def costs_attention_steps_l(length, d, g):
    s, m, _, n = rnn_attention_costs(length, d, g)
    return s, m, length, n


def costs_no_projections(length, d, g):
    s, m, a, _ = rnn_attention_costs(length, d, g)
    return s, m, a, 2 * length * length * d


def costs_no_output_projection(length, d, g):
    s, m, a, _ = rnn_attention_costs(length, d, g)
    return s, m, a, 3 * length * d * d + 2 * length * length * d


def costs_scores_only(length, d, g):
    s, m, a, _ = rnn_attention_costs(length, d, g)
    return s, m, a, 4 * length * d * d + length * length * d


def costs_attention_flops(length, d, g):
    s, m, a, n = rnn_attention_costs(length, d, g)
    return s, m, a, 2 * n


def step_no_feature_map(state, normaliser, q, k, v):
    state = state + np.outer(k, v)
    normaliser = normaliser + k
    return state, normaliser, (q @ state) / (q @ normaliser)


def step_output_before_update(state, normaliser, q, k, v):
    phi_q, phi_k = attn.elu_feature_map(q), attn.elu_feature_map(k)
    y = (phi_q @ state) / max(phi_q @ normaliser, 1e-300)
    return state + np.outer(phi_k, v), normaliser + phi_k, y


def step_not_normalised(state, normaliser, q, k, v):
    phi_q, phi_k = attn.elu_feature_map(q), attn.elu_feature_map(k)
    state = state + np.outer(phi_k, v)
    return state, normaliser + phi_k, phi_q @ state


def step_state_not_returned(state, normaliser, q, k, v):
    _, _, y = linear_attention_step(state.copy(), normaliser.copy(), q, k, v)
    # updates a copy in place for the output, but returns the old state: the next steps are wrong
    return state, normaliser, y


def step_transposed_state(state, normaliser, q, k, v):
    new_state, new_normaliser, y = linear_attention_step(state, normaliser, q, k, v)
    return new_state.T, new_normaliser, y


def path_off_by_one(model, i, j):
    got = path_length(model, i, j)
    return None if got is None else (got - 1 if model in ("rnn", "bidirectional rnn") else got)


def path_rnn_sees_right(model, i, j):
    return abs(j - i) + 1 if model == "rnn" else path_length(model, i, j)


def path_attention_distance(model, i, j):
    if model == "self-attention":
        return abs(j - i) + 1
    return path_length(model, i, j)


def path_causal_sees_all(model, i, j):
    return 1 if model == "causal self-attention" else path_length(model, i, j)


def reader_accuracy(length, positions):
    """Stands in for the lesson's training (the notebook's solution trains the real readers):
    with positions the reader solves the task, without them it guesses a token it saw."""
    return 1.0 if positions else 0.3


CORRECT = {
    "13.1": rnn_attention_costs,
    "13.2": linear_attention_step,
    "13.3": path_length,
    "13.4": reader_accuracy,
}

WRONG = [
    ("13.4", lambda length, positions: 1.0, "pass positions on"),
    ("13.4", lambda length, positions: 0.3, "with positions the"),
    ("13.4", lambda length, positions: (0.9, 0.3), "one test accuracy"),
    ("13.1", costs_flops, "FLOP counters count two"),
    ("13.1", costs_one_matrix, "two products"),
    ("13.1", costs_square_weights, "counts d × d matrices"),
    ("13.1", costs_rnn_parallel, "needs h_(t-1)"),
    ("13.1", costs_attention_steps_l, "in one step"),
    ("13.1", costs_no_projections, "four products of L·d·d more"),
    ("13.1", costs_no_output_projection, "output projection W_o too"),
    ("13.1", costs_scores_only, "one of the two products"),
    ("13.1", costs_attention_flops, "twice the expected"),
    ("13.1", lambda length, d, g: 7, "tuple of four"),
    ("13.2", step_no_feature_map, "feature map"),
    ("13.2", step_output_before_update, "after adding token i"),
    ("13.2", step_not_normalised, "normaliser"),
    ("13.2", step_state_not_returned, "differ from attn.linear_attention_recurrent"),
    ("13.2", step_transposed_state, "(d_k, d_v)"),
    ("13.2", lambda s, z, q, k, v: q, "three things"),
    ("13.3", path_off_by_one, "j − i + 1"),
    ("13.3", path_rnn_sees_right, "has not read input i yet"),
    ("13.3", path_attention_distance, "whatever the distance"),
    ("13.3", path_causal_sees_all, "out of reach"),
]


def attention_layer(x, weights):
    """One head with its projections, as the lesson's SelfAttentionLayer."""
    w_q, w_k, w_v, w_o = weights
    return F.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v) @ w_o


@pytest.mark.parametrize(("length", "d"), [(5, 3), (16, 8), (33, 12)])
@pytest.mark.parametrize(("cell", "g"), [(torch.nn.RNN, 1), (torch.nn.GRU, 3)])
def test_cost_reference_counts_what_pytorch_computes(length, d, cell, g):
    x = torch.randn(1, length, d)
    steps, rnn_madds, _, attention_madds = rnn_attention_costs_reference(length, d, g)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        cell(d, d, batch_first=True)(x)
    assert counter.get_total_flops() == 2 * rnn_madds  # a FLOP counter counts 2 per multiply-add
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        attention_layer(x, torch.randn(4, d, d))
    assert counter.get_total_flops() == 2 * attention_madds
    assert steps == length


def test_path_length_reference_matches_what_changes():
    """Changing input i moves output j of a one-layer model exactly where a path exists."""
    torch.manual_seed(0)
    length, d = 6, 4
    x = torch.randn(1, length, d, dtype=torch.float64)
    models = {
        "rnn": torch.nn.RNN(d, d, batch_first=True, dtype=torch.float64),
        "bidirectional rnn": torch.nn.RNN(
            d, d, batch_first=True, bidirectional=True, dtype=torch.float64
        ),
    }
    for name, model in models.items():
        for i in range(length):
            changed = x.clone()
            changed[0, i] += 1.0
            with torch.no_grad():
                moved = (model(changed)[0] - model(x)[0]).abs().amax(-1)[0] > 0
            reachable = [path_length_reference(name, i, j) is not None for j in range(length)]
            assert moved.tolist() == reachable
