"""The checkers of lesson 06: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib import numpy as attn
from attnlib.exercises.lesson06 import (
    NeighbourBlock,
    _random_block,
    affected_outputs_reference,
    moved_outputs_reference,
)

# ---------------------------------------------------------------- reference solutions


def to_pytorch_attn_mask(mask, num_heads):
    blocked = ~mask
    return blocked.repeat_interleave(num_heads, dim=0) if blocked.dim() == 3 else blocked


def moved_outputs(blocks, x, memory, t, causal):
    changed = x.copy()
    changed[t] += 1.0
    outputs = []
    for h in (x, changed):
        for blk in blocks:
            h, _, _ = blk(h, memory, causal=causal)
        outputs.append(h)
    return np.abs(outputs[1] - outputs[0]).max(axis=-1) > 1e-12


def moved_ignores_causal(blocks, x, memory, t, causal):
    return moved_outputs(blocks, x, memory, t, True)  # the blocks' default: causal


def moved_in_place(blocks, x, memory, t, causal):
    changed = x  # not a copy: x itself changes, and both runs see the change
    changed[t] += 1.0
    outputs = []
    for h in (x, changed):
        for blk in blocks:
            h, _, _ = blk(h, memory, causal=causal)
        outputs.append(h)
    return np.abs(outputs[1] - outputs[0]).max(axis=-1) > 1e-12


def moved_inputs(blocks, x, memory, t, causal):
    return np.arange(len(x)) == t  # where the input changed, not the outputs


def moved_first_block_only(blocks, x, memory, t, causal):
    return moved_outputs(blocks[:1], x, memory, t, causal)


def moved_each_block_on_x(blocks, x, memory, t, causal):
    changed = x.copy()
    changed[t] += 1.0
    last = [blk(x, memory, causal=causal)[0] for blk in blocks][-1]  # not chained
    last_changed = [blk(changed, memory, causal=causal)[0] for blk in blocks][-1]
    return np.abs(last_changed - last).max(axis=-1) > 1e-12


def moved_without_running(blocks, x, memory, t, causal):
    return np.arange(len(x)) >= t if causal else np.ones(len(x), bool)  # the rule, not a run


def mask_not_inverted(mask, num_heads):
    return mask.repeat_interleave(num_heads, dim=0) if mask.dim() == 3 else mask


def mask_repeat(mask, num_heads):
    return (~mask).repeat(num_heads, 1, 1) if mask.dim() == 3 else ~mask


def mask_four_dims(mask, num_heads):
    return (~mask)[:, None].expand(-1, num_heads, -1, -1) if mask.dim() == 3 else ~mask


def mask_as_float(mask, num_heads):
    return to_pytorch_attn_mask(mask, num_heads).float()


def affected_outputs(mask, t, num_layers):
    changed = np.arange(len(mask)) == t
    for _ in range(num_layers):
        changed = changed | (mask[:, changed]).any(axis=1)
    return changed


def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def decoder_block(x, memory, block, mask=None, memory_mask=None):
    causal = attn.causal_mask(x.shape[-2])
    attended, _ = block.self_attention(x, mask=causal if mask is None else mask & causal)
    h = block.norm1(x + attended)
    attended, _ = block.cross_attention(h, memory, memory, mask=memory_mask)
    h = block.norm2(h + attended)
    return block.norm3(h + block.feed_forward(h))


# ---------------------------------------------------------------- plausible mistakes


def affected_columns(mask, t, num_layers):
    return affected_outputs(mask.T, t, num_layers)


def affected_one_layer(mask, t, num_layers):
    return affected_outputs(mask, t, 1)


def affected_only_t(mask, t, num_layers):
    return np.arange(len(mask)) == t


def norm_over_tokens(x, gamma, beta, eps=1e-5):
    mean, var = x.mean(axis=-2, keepdims=True), x.var(axis=-2, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def norm_no_eps(x, gamma, beta, eps=1e-5):
    return gamma * (x - x.mean(axis=-1, keepdims=True)) / x.std(axis=-1, keepdims=True) + beta


def norm_unbiased(x, gamma, beta, eps=1e-5):
    centred = x - x.mean(axis=-1, keepdims=True)
    return gamma * centred / np.sqrt(x.var(axis=-1, ddof=1, keepdims=True) + eps) + beta


def norm_eps_outside(x, gamma, beta, eps=1e-5):
    centred = x - x.mean(axis=-1, keepdims=True)
    return gamma * centred / (x.std(axis=-1, keepdims=True) + eps) + beta


def norm_no_affine(x, gamma, beta, eps=1e-5):
    return layer_norm(x, 1.0, 0.0, eps)


def norm_swapped(x, gamma, beta, eps=1e-5):
    return layer_norm(x, beta, gamma, eps)


def decoder_not_causal(x, memory, block, mask=None, memory_mask=None):
    attended, _ = block.self_attention(x, mask=mask)
    h = block.norm1(x + attended)
    attended, _ = block.cross_attention(h, memory, memory, mask=memory_mask)
    h = block.norm2(h + attended)
    return block.norm3(h + block.feed_forward(h))


def decoder_self_twice(x, memory, block, mask=None, memory_mask=None):
    return decoder_block(x, x, block, mask, None)


def decoder_ignores_memory_mask(x, memory, block, mask=None, memory_mask=None):
    return decoder_block(x, memory, block, mask, None)


def decoder_ignores_mask(x, memory, block, mask=None, memory_mask=None):
    return decoder_block(x, memory, block, None, memory_mask)


def decoder_queries_from_input(x, memory, block, mask=None, memory_mask=None):
    causal = attn.causal_mask(x.shape[-2])
    attended, _ = block.self_attention(x, mask=causal if mask is None else mask & causal)
    h = block.norm1(x + attended)
    attended, _ = block.cross_attention(x, memory, memory, mask=memory_mask)
    h = block.norm2(h + attended)
    return block.norm3(h + block.feed_forward(h))


def decoder_pre_norm(x, memory, block, mask=None, memory_mask=None):
    causal = attn.causal_mask(x.shape[-2])
    x = x + block.self_attention(block.norm1(x), mask=causal if mask is None else mask & causal)[0]
    x = x + block.cross_attention(block.norm2(x), memory, memory, mask=memory_mask)[0]
    return x + block.feed_forward(block.norm3(x))


def decoder_returns_tuple(x, memory, block, mask=None, memory_mask=None):
    return block(x, memory, mask, memory_mask)


def decoder_norms_swapped(x, memory, block, mask=None, memory_mask=None):
    causal = attn.causal_mask(x.shape[-2])
    attended, _ = block.self_attention(x, mask=causal if mask is None else mask & causal)
    h = block.norm2(x + attended)
    attended, _ = block.cross_attention(h, memory, memory, mask=memory_mask)
    h = block.norm1(h + attended)
    return block.norm3(h + block.feed_forward(h))


CORRECT = {
    "06.1": to_pytorch_attn_mask,
    "06.2": affected_outputs,
    "06.3": layer_norm,
    "06.4": decoder_block,
    "06.5": moved_outputs,
}

WRONG = [
    ("06.1", mask_not_inverted, "not inverted"),
    ("06.1", mask_repeat, "repeat_interleave"),
    ("06.1", mask_four_dims, "(B·num_heads, L, S)"),
    ("06.1", mask_as_float, "boolean"),
    ("06.5", moved_ignores_causal, "Pass causal on to every block"),
    ("06.5", moved_in_place, "changed the x it was given"),
    ("06.5", moved_inputs, "only position t moved"),
    ("06.5", moved_first_block_only, "each block's reach adds up"),
    ("06.5", moved_each_block_on_x, "each block's reach adds up"),
    ("06.5", moved_without_running, "each block's reach adds up"),
    ("06.5", lambda blocks, x, memory, t, causal: np.zeros(len(x) + 1, bool), "shape"),
    ("06.2", affected_columns, "columns"),
    ("06.2", affected_one_layer, "one more step"),
    ("06.2", affected_only_t, "wrong"),
    ("06.2", lambda mask, t, n: np.ones(3, dtype=bool), "shape"),
    ("06.3", norm_over_tokens, "over the tokens"),
    ("06.3", norm_no_eps, "NaN"),
    ("06.3", norm_unbiased, "biased variance"),
    ("06.3", norm_eps_outside, "inside the square root"),
    ("06.3", norm_no_affine, "gamma and beta are missing"),
    ("06.3", norm_swapped, "swapped"),
    ("06.4", decoder_not_causal, "not causal"),
    ("06.4", decoder_self_twice, "must come from the memory"),
    ("06.4", decoder_ignores_memory_mask, "memory_mask was not used"),
    ("06.4", decoder_ignores_mask, "mask was not used"),
    ("06.4", decoder_queries_from_input, "output of the first sublayer"),
    ("06.4", decoder_pre_norm, "pre-norm"),
    ("06.4", decoder_returns_tuple, "tuple"),
    ("06.4", decoder_norms_swapped, "wrong numbers"),
]


@pytest.mark.parametrize("seed", range(4))
def test_affected_reference_matches_a_real_stack(seed):
    """The reachability rule predicts exactly which outputs of real blocks change."""
    rng = np.random.default_rng(seed)
    length, d = 9, 8
    mask = attn.window_mask(length, 1) if seed % 2 else attn.causal_mask(length)
    blocks = [_random_block(d, 2, 16, seed=10 * seed + n, norm_first=bool(n % 2)) for n in range(3)]
    x = rng.normal(size=(length, d))
    t = int(rng.integers(length))
    x_changed = x.copy()
    x_changed[t] += rng.normal(size=d)
    for num_layers in (1, 2, 3):
        y, y_changed = x, x_changed
        for block in blocks[:num_layers]:
            y, _ = block(y, mask)
            y_changed, _ = block(y_changed, mask)
        changed = np.abs(y - y_changed).max(axis=-1) > 1e-12
        assert np.array_equal(changed, affected_outputs_reference(mask, t, num_layers))


@pytest.mark.parametrize("t", range(5))
def test_moved_reference_sees_the_causal_mask(t):
    """A causal decoder moves positions t and after only; without the mask, every position."""
    rng = np.random.default_rng(t)
    blocks = [attn.TransformerDecoderBlock(8, 2, 16, seed=n) for n in range(2)]
    x, memory = rng.normal(size=(5, 8)), rng.normal(size=(3, 8))
    assert list(moved_outputs_reference(blocks, x, memory, t, True)) == [p >= t for p in range(5)]
    assert moved_outputs_reference(blocks, x, memory, t, False).all()


@pytest.mark.parametrize("causal", [True, False])
def test_stand_in_blocks_reach_one_neighbour_each(causal):
    """Changing x[2] moves positions 2..2+n after n stand-in blocks (and 2-n.. without the mask)."""
    x, memory = np.random.default_rng(0).normal(size=(7, 4)), np.zeros((3, 4))
    for n in (1, 2, 3):
        moved = moved_outputs_reference([NeighbourBlock()] * n, x, memory, 2, causal)
        low = 2 if causal else max(0, 2 - n)
        assert list(moved) == [low <= p <= 2 + n for p in range(7)]
