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

#: The answers 04.4 accepts, and the margin by which "every run" must beat (or lose to) "every run".
HEAD_VERDICTS = ("reliably better", "no reliable gain", "worse")
VERDICT_MARGIN = 0.005


def head_task(n: int, seed: int, length: int = 6, classes: int = 4):
    """``n`` random sequences of the lesson's task, as float32 tensors ``(x, y)``.

    A token is ``[position one-hot | class one-hot]``; its target is ``[the previous token's
    class | a uniform distribution over the positions of its own class]`` (token 0 reports its
    own class).
    """
    import torch  # only this checker needs PyTorch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, classes, (n, length), generator=generator)
    one_hot = torch.nn.functional.one_hot(ids, classes).float()
    prev = torch.clamp(torch.arange(length) - 1, min=0)
    x = torch.cat([torch.eye(length).expand(n, length, length), one_hot], dim=-1)
    same = (ids[:, :, None] == ids[:, None, :]).float()
    y = torch.cat([one_hot[:, prev], same / same.sum(-1, keepdim=True)], dim=-1)
    return x, y


def head_task_loss(layer, x, y) -> float:
    """The lesson's loss, the squared error summed over features, averaged over tokens."""
    import torch

    with torch.no_grad():
        return ((layer(x)[0] - y) ** 2).sum(-1).mean().item()


def head_verdict(more_losses, two_losses, margin: float = VERDICT_MARGIN) -> str:
    """The verdict on more heads: "reliably better" if every run with more heads ends below every
    two-head run (by more than ``margin``), "worse" if every one ends above every two-head run,
    "no reliable gain" otherwise."""
    if max(more_losses) < min(two_losses) - margin:
        return "reliably better"
    if min(more_losses) > max(two_losses) + margin:
        return "worse"
    return "no reliable gain"


def _trained_layers(head_experiment, num_heads: int, seeds: list[int], x, y) -> list[float]:
    """Call ``head_experiment(num_heads, seeds)``, check that it returns trained layers of the
    lesson's size, and measure them on ``(x, y)``: one test loss per seed."""
    import torch

    call = f"head_experiment({num_heads}, {seeds})"
    got = head_experiment(num_heads, list(seeds))
    expect(
        isinstance(got, (list, tuple)) and len(got) == len(seeds),
        "{call} returned {got_type}; return a list with one trained layer per seed.",
        call=call,
        got_type=type(got).__name__,
    )
    losses = []
    for index, layer in enumerate(got):
        expect(
            not (isinstance(layer, tuple) and len(layer) == 2),
            "{call} returns a pair for each seed: train(num_heads, seed) returns the layer and "
            "its training losses. Keep only the layer.",
            call=call,
        )
        expect(
            isinstance(layer, torch.nn.Module),
            "{call} returned {got_type} values: return the trained layers themselves, not "
            "numbers. The checker measures them on test sequences of its own.",
            call=call,
            got_type=type(layer).__name__,
        )
        heads = getattr(layer, "num_heads", None)
        expect(
            heads == num_heads,
            "{call}: layer {index} (counting from 0) has {heads} heads. Pass num_heads on to "
            "train(num_heads, seed).",
            call=call,
            index=index,
            heads=heads,
        )
        params = sum(p.numel() for p in layer.parameters())
        expect(
            params == 640,
            "{call}: layer {index} (counting from 0) has {params} parameters, not the lesson's "
            "640. Train it with train(num_heads, seed).",
            call=call,
            index=index,
            params=params,
        )
        loss = head_task_loss(layer, x, y)
        expect(
            loss < 0.2,
            "{call}: layer {index} (counting from 0) has a test loss of {loss:.3f}, no better "
            "than a single head (above 0.2). Is it trained? Return the layer that "
            "train(num_heads, seed) returns.",
            call=call,
            index=index,
            loss=loss,
        )
        losses.append(loss)
    return losses


@exercise("04.4", "more heads, same parameters")
def _check_head_experiment(answer) -> None:
    expect(
        isinstance(answer, (tuple, list)) and len(answer) == 2 and callable(answer[0]),
        "Pass the function and your answer together: head_answer = (head_experiment, "
        'more_heads_help), then check("04.4", head_answer).',
    )
    head_experiment, verdict = answer
    x, y = head_task(300, seed=404)  # test sequences of the checker's own
    two = _trained_layers(head_experiment, 2, list(range(8)), x, y)
    more = [
        loss
        for heads in (4, 8)
        for loss in _trained_layers(head_experiment, heads, [0, 1, 2], x, y)
    ]
    expect(
        verdict is not None,
        "head_experiment works. Now answer the question: set more_heads_help to "
        '"reliably better", "no reliable gain" or "worse".',
    )
    given = str(verdict).strip().lower()
    expect(
        given in HEAD_VERDICTS,
        'more_heads_help = {verdict!r}: answer with "reliably better", "no reliable gain" '
        'or "worse".',
        verdict=verdict,
    )
    expect(
        given == head_verdict(more, two),
        "more_heads_help = {verdict!r} does not match the runs. The checker measured test "
        "losses from {more_min:.3f} to {more_max:.3f} with 4 or 8 heads (seeds 0-2) and from "
        "{two_min:.3f} to {two_max:.3f} with two heads (seeds 0-7). Compare every run with "
        "more heads with every two-head run.",
        verdict=verdict,
        more_min=min(more),
        more_max=max(more),
        two_min=min(two),
        two_max=max(two),
    )
