"""The checkers of lesson 04: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attnlib import numpy as attn
from attnlib import torch as tattn
from attnlib.exercises.lesson04 import (
    head_task,
    head_task_loss,
    head_verdict,
    multi_head_cost_reference,
)

# ---------------------------------------------------------------- reference solutions


def split_heads_by_hand(x, num_heads):
    *batch, length, width = x.shape
    x = x.reshape(*batch, length, num_heads, width // num_heads)
    return np.swapaxes(x, -2, -3)


def _softmax_rows(scores):
    exps = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return exps / exps.sum(axis=-1, keepdims=True)


def multi_head_forward(x, w_q, w_k, w_v, w_o, num_heads):
    heads = []
    d_k, d_v = w_q.shape[1] // num_heads, w_v.shape[1] // num_heads
    for h in range(num_heads):
        q = x @ w_q[:, h * d_k : (h + 1) * d_k]
        k = x @ w_k[:, h * d_k : (h + 1) * d_k]
        v = x @ w_v[:, h * d_v : (h + 1) * d_v]
        heads.append(_softmax_rows(q @ k.T / np.sqrt(d_k)) @ v)
    return np.concatenate(heads, axis=-1) @ w_o


def multi_head_cost(length, d_model, num_heads, d_k, d_v):
    params = 2 * d_model * num_heads * d_k + 2 * d_model * num_heads * d_v
    projections = 2 * length * d_model * num_heads * (2 * d_k + 2 * d_v)
    attention = 2 * num_heads * length * length * (d_k + d_v)
    return params, projections + attention, num_heads * length * length


def hand_built_layer(num_heads, sharpness=20.0):
    """A layer of the lesson's size (640 parameters, width 16 // num_heads per head) whose heads
    are set by hand: some find the previous token, the others the tokens of the same class.
    Queries and keys are points on a circle, so a head of width 2 can do it; lower sharpness
    blurs the weights and raises the loss."""
    width, length, classes = 16 // num_heads, 6, 4
    layer = tattn.MultiHeadAttention(10, num_heads, d_k=width, d_v=width, seed=0)
    w_q, w_k, w_v, w_o = (torch.zeros_like(w) for w in (layer.w_q, layer.w_k, layer.w_v, layer.w_o))
    scale = sharpness * math.sqrt(width)

    def circle(k, n):
        return torch.tensor([math.cos(2 * math.pi * k / n), math.sin(2 * math.pi * k / n)])

    head = 0
    # previous-token heads: query = the circle point of position i - 1, key = that of position j;
    # values carry the class, split over as many heads as it takes
    for first in range(0, classes, width):
        cols = slice(head * width, head * width + 2)
        for p in range(length):
            w_q[p, cols] = scale * circle(max(p - 1, 0), length)
            w_k[p, cols] = circle(p, length)
        for c in range(first, min(first + width, classes)):
            w_v[length + c, head * width + c - first] = 1.0
            w_o[head * width + c - first, c] = 1.0
        head += 1
    # same-class heads: query and key = the circle point of the class; values carry the position
    for first in range(0, length, width):
        cols = slice(head * width, head * width + 2)
        for c in range(classes):
            w_q[length + c, cols] = scale * circle(c, classes)
            w_k[length + c, cols] = circle(c, classes)
        for p in range(first, min(first + width, length)):
            w_v[p, head * width + p - first] = 1.0
            w_o[head * width + p - first, classes + p] = 1.0
        head += 1
    assert head <= num_heads
    with torch.no_grad():
        for param, value in zip((layer.w_q, layer.w_k, layer.w_v, layer.w_o), (w_q, w_k, w_v, w_o)):
            param.copy_(value)
    return layer


@cache
def head_layers(num_heads, seed):
    """Stands in for a trained layer of the lesson (the notebook's solution trains the real
    ones): hand-built heads, exact for even seeds and blurred, like a stuck run, for odd ones."""
    return hand_built_layer(num_heads, 20.0 if seed % 2 == 0 else 3.5)


def head_experiment(num_heads, seeds):
    return [head_layers(num_heads, seed) for seed in seeds]


# ---------------------------------------------------------------- plausible mistakes


def split_plain_reshape(x, num_heads):
    *batch, length, width = x.shape
    return x.reshape(*batch, num_heads, length, width // num_heads)


def split_strided(x, num_heads):
    return np.stack([x[..., h::num_heads] for h in range(num_heads)], axis=-3)


def forward_whole_width_scale(x, w_q, w_k, w_v, w_o, num_heads):
    q, k, v = (attn.split_heads(x @ w, num_heads) for w in (w_q, w_k, w_v))
    out, _ = attn.attention(q, k, v, scale=w_q.shape[1] ** -0.5)
    return attn.merge_heads(out) @ w_o


def forward_one_head(x, w_q, w_k, w_v, w_o, num_heads):
    return attn.attention(x @ w_q, x @ w_k, x @ w_v)[0] @ w_o


def forward_no_output_projection(x, w_q, w_k, w_v, w_o, num_heads):
    q, k, v = (attn.split_heads(x @ w, num_heads) for w in (w_q, w_k, w_v))
    return attn.merge_heads(attn.attention(q, k, v)[0])


def cost_half_flops(*args):
    params, flops, entries = multi_head_cost(*args)
    return params, flops // 2, entries


def cost_square_params(length, d_model, num_heads, d_k, d_v):
    _, flops, entries = multi_head_cost(length, d_model, num_heads, d_k, d_v)
    return 4 * d_model * d_model, flops, entries


def cost_one_matrix(length, d_model, num_heads, d_k, d_v):
    params, flops, _ = multi_head_cost(length, d_model, num_heads, d_k, d_v)
    return params, flops, length * length


def cost_no_heads_in_scores(length, d_model, num_heads, d_k, d_v):
    params, flops, entries = multi_head_cost(length, d_model, num_heads, d_k, d_v)
    return params, flops - 2 * (num_heads - 1) * length * length * (d_k + d_v), entries


def heads_final_training_losses(num_heads, seeds):
    """Numbers instead of layers: what train(num_heads, seed)[1][-1] gives (made up here)."""
    return [0.21 if num_heads == 1 else 0.01 * seed for seed in seeds]


def heads_pairs(num_heads, seeds):
    return [(layer, [0.5, 0.1]) for layer in head_experiment(num_heads, seeds)]  # train's pair


def heads_ignore_num_heads(num_heads, seeds):
    return head_experiment(2, seeds)


def heads_untrained(num_heads, seeds):
    width = 16 // num_heads
    return [tattn.MultiHeadAttention(10, num_heads, d_k=width, d_v=width, seed=s) for s in seeds]


CORRECT = {
    "04.1": split_heads_by_hand,
    "04.2": multi_head_forward,
    "04.3": multi_head_cost,
    "04.4": (head_experiment, "no reliable gain"),
}

WRONG = [
    ("04.1", split_plain_reshape, "plain reshape"),
    ("04.1", split_strided, "contiguous block"),
    ("04.1", lambda x, h: x, "shape"),
    ("04.2", forward_whole_width_scale, "1/sqrt(d_k)"),
    ("04.2", forward_one_head, "one head of width"),
    ("04.2", forward_no_output_projection, "output projection"),
    ("04.3", cost_half_flops, "2·m·n·p"),
    ("04.3", cost_square_params, "do not assume"),
    ("04.3", cost_one_matrix, "own (L, L)"),
    ("04.3", cost_no_heads_in_scores, "in each of the H heads"),
    ("04.3", lambda *args: 42, "tuple of three"),
    ("04.4", (heads_final_training_losses, "no reliable gain"), "not numbers"),
    ("04.4", (lambda heads, seeds: [0.01, 0.0, 0.05], "no reliable gain"), "one trained layer"),
    ("04.4", (heads_pairs, "no reliable gain"), "Keep only the layer"),
    ("04.4", (heads_ignore_num_heads, "no reliable gain"), "Pass num_heads on"),
    ("04.4", (heads_untrained, "no reliable gain"), "Is it trained?"),
    ("04.4", (head_experiment, "reliably better"), "does not match the runs"),
    ("04.4", (head_experiment, "worse"), "does not match the runs"),
    ("04.4", (head_experiment, "yes"), "answer with"),
    ("04.4", (head_experiment, None), "Now answer the question"),
    ("04.4", head_experiment, "Pass the function and your answer together"),
]


@pytest.mark.parametrize(
    "case", [(16, 8, 2, 4, 4), (32, 64, 8, 8, 8), (9, 12, 3, 5, 2), (20, 10, 2, 8, 8)]
)
def test_cost_reference_counts_what_pytorch_computes(case):
    length, d_model, heads, d_k, d_v = case
    layer = tattn.MultiHeadAttention(d_model, heads, d_k=d_k, d_v=d_v, seed=0)
    params, flops, entries = multi_head_cost_reference(*case)
    with FlopCounterMode(display=False) as counter:
        _, weights = layer(torch.randn(length, d_model))
    assert sum(p.numel() for p in layer.parameters()) == params
    assert counter.get_total_flops() == flops
    assert weights.numel() == entries


def test_hand_built_heads_solve_the_task_at_every_width():
    """The lesson's task can be solved exactly with 2, 4 or 8 heads of the same 640 parameters:
    more heads are no less expressive, so what 04.4 measures is what training finds."""
    x, y = head_task(500, seed=0)
    for heads in (2, 4, 8):
        layer = hand_built_layer(heads)
        assert sum(p.numel() for p in layer.parameters()) == 640
        assert head_task_loss(layer, x, y) < 1e-4
        assert 0.01 < head_task_loss(hand_built_layer(heads, sharpness=3.5), x, y) < 0.2


@pytest.mark.parametrize(
    ("more", "two", "verdict"),
    [
        ([0.01, 0.02], [0.05, 0.06], "reliably better"),
        ([0.0, 0.07], [0.0, 0.05], "no reliable gain"),
        ([0.052, 0.06], [0.0, 0.05], "no reliable gain"),  # within the margin
        ([0.06, 0.07], [0.0, 0.05], "worse"),
    ],
)
def test_head_verdict(more, two, verdict):
    assert head_verdict(more, two) == verdict
