"""Checkers for the exercises of lesson 06."""

from __future__ import annotations

import numpy as np

from .. import numpy as attn
from . import exercise, expect

# --------------------------------------------------------------------------- 06.1


@exercise("06.1", "a padding mask by hand")
def _check_padding_mask(padding_mask_by_hand) -> None:
    rng = np.random.default_rng(601)
    cases = [([5, 3, 2], 5), ([1], 4), ([4, 4], 4), ([0, 2], 3), ([2, 6, 1], 7)]
    cases += [(rng.integers(0, 9, size=4).tolist(), 9) for _ in range(3)]
    for lengths, max_len in cases:
        got = np.asarray(padding_mask_by_hand(list(lengths), max_len))
        want = attn.padding_mask(lengths, max_len)
        call = f"padding_mask_by_hand({lengths}, max_len={max_len})"
        expect(
            got.dtype == bool,
            f"{call} has dtype {got.dtype}; return a boolean mask (True = a real token).",
        )
        if got.shape == want[:, 0].shape and np.array_equal(got, want[:, 0]):
            expect(
                False,
                f"{call} has shape {got.shape}, the right values but no query axis. The mask "
                f"must broadcast against scores (B, L_q, L_k): return shape {want.shape}, "
                "e.g. with [:, None, :].",
            )
        expect(
            got.shape == want.shape,
            f"{call} has shape {got.shape}; expected (B, 1, max_len) = {want.shape}.",
        )
        if np.array_equal(got, want):
            continue
        expect(
            not np.array_equal(got, ~want),
            f"{call} is inverted: in attnlib True means *may attend*, so True marks the real "
            "tokens and False the padding.",
        )
        positions = np.arange(max_len)
        off_by_one = (positions <= np.asarray(lengths)[:, None])[:, None, :]
        expect(
            not np.array_equal(got, off_by_one),
            f"{call} marks one position too many: positions are counted from 0, so a sequence "
            "of length n has real tokens at 0, …, n − 1.",
        )
        expect(False, f"{call} gives the wrong mask; expected\n{want.astype(int)}")


# --------------------------------------------------------------------------- 06.2


def affected_outputs_reference(mask, t: int, num_layers: int) -> np.ndarray:
    """Which outputs of ``num_layers`` blocks with ``mask`` can change when input ``t`` changes.

    Output ``i`` of a layer reads the inputs ``j`` with ``mask[i, j]`` (and, through the
    residual connection, input ``i``); a change spreads one such step per layer.
    """
    mask = np.asarray(mask, dtype=bool)
    reached = np.zeros(mask.shape[0], dtype=bool)
    reached[t] = True
    for _ in range(num_layers):
        reached = reached | (mask & reached[None, :]).any(axis=1)
    return reached


@exercise("06.2", "which outputs can change?")
def _check_affected(affected_outputs) -> None:
    rng = np.random.default_rng(602)
    random_masks = [(rng.random((7, 7)) < 0.25) | np.eye(7, dtype=bool) for _ in range(2)]
    cases = [
        ("causal_mask(6)", attn.causal_mask(6), 3, 1),
        ("causal_mask(6)", attn.causal_mask(6), 0, 2),
        ("window_mask(8, 1)", attn.window_mask(8, 1), 2, 1),
        ("window_mask(8, 1)", attn.window_mask(8, 1), 2, 3),
        ("window_mask(10, 2)", attn.window_mask(10, 2), 9, 2),
        ("causal_mask(8) & window_mask(8, 1)", attn.causal_mask(8) & attn.window_mask(8, 1), 1, 3),
        ("a random mask", random_masks[0], 4, 1),
        ("a random mask", random_masks[1], 0, 2),
    ]
    for name, mask, t, layers in cases:
        got = np.asarray(affected_outputs(mask.copy(), t, layers))
        want = affected_outputs_reference(mask, t, layers)
        call = f"affected_outputs({name}, t={t}, num_layers={layers})"
        expect(
            got.shape == want.shape,
            f"{call} has shape {got.shape}; return one boolean per output position, "
            f"shape {want.shape}.",
        )
        got = got.astype(bool)
        if np.array_equal(got, want):
            continue
        expect(
            not np.array_equal(got, affected_outputs_reference(mask.T, t, layers)),
            f"{call}: you followed the columns of the mask. Row i lists what output i reads: "
            "output i depends on input t when mask[i, t] is True (for the causal mask: the "
            "outputs at t and after, not before).",
        )
        expect(
            not np.array_equal(got, affected_outputs_reference(mask, t, 1)),
            f"{call}: that is one layer. Each layer spreads the change one more step: an "
            "output of layer 1 that changed is an input of layer 2. Repeat the step "
            "num_layers times.",
        )
        expect(False, f"{call} is wrong; expected {want.astype(int)}.")


# --------------------------------------------------------------------------- 06.3


@exercise("06.3", "layer normalisation by hand")
def _check_layer_norm(layer_norm) -> None:
    rng = np.random.default_rng(603)
    shapes = [(4, 8), (2, 3, 6), (1, 5), (6, 16)]
    for index, shape in enumerate(shapes):
        d = shape[-1]
        x = rng.normal(2.0, 3.0, shape)
        x[..., 0, :] = 1.5  # a token whose features are all equal: variance 0
        if shape[-2] > 1:
            x[..., 1, :] = 0.7 + 1e-4 * rng.normal(size=d)  # a nearly constant token
        gamma, beta = rng.uniform(0.5, 2.0, d), rng.normal(0.0, 1.0, d)
        eps = 1e-5 if index < 3 else 1e-3
        reference = attn.LayerNorm(d, eps=eps)
        reference.weight, reference.bias = gamma, beta
        want = reference(x)
        with np.errstate(divide="ignore", invalid="ignore"):  # a missing eps gives 0 / 0
            got = np.asarray(layer_norm(x.copy(), gamma.copy(), beta.copy(), eps), dtype=float)
        call = f"layer_norm(x of shape {shape}, gamma, beta, eps={eps})"
        expect(got.shape == want.shape, f"{call} has shape {got.shape}; expected {want.shape}.")
        expect(
            bool(np.all(np.isfinite(got))),
            f"{call} contains NaN or inf. A token whose features are all equal has variance 0: "
            "add eps inside the square root, sqrt(var + eps).",
        )
        if np.allclose(got, want, atol=1e-8):
            continue
        centred = x - x.mean(axis=-1, keepdims=True)
        plain = centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps)
        unbiased = centred / np.sqrt(x.var(axis=-1, ddof=1, keepdims=True) + eps)
        outside = centred / (np.sqrt((centred**2).mean(axis=-1, keepdims=True)) + eps)
        over_tokens = (x - x.mean(axis=-2, keepdims=True)) / np.sqrt(
            x.var(axis=-2, keepdims=True) + eps
        )
        expect(
            not np.allclose(got, over_tokens * gamma + beta, atol=1e-6),
            f"{call}: you normalised over the tokens. Layer normalisation normalises each "
            "token over its own features: mean and variance along the last axis (axis=-1).",
        )
        expect(
            not np.allclose(got, plain, atol=1e-6),
            f"{call}: the normalisation is right, but gamma and beta are missing: "
            "return gamma * x_hat + beta.",
        )
        expect(
            not np.allclose(got, unbiased * gamma + beta, atol=1e-6),
            f"{call}: use the biased variance, dividing by d (np.var's default, ddof=0), "
            "as PyTorch's LayerNorm does.",
        )
        expect(
            not np.allclose(got, outside * gamma + beta, atol=1e-6),
            f"{call}: eps goes inside the square root, sqrt(var + eps), not sqrt(var) + eps; "
            "it matters for tokens whose features are nearly equal.",
        )
        expect(
            not np.allclose(got, plain * beta + gamma, atol=1e-6),
            f"{call}: gamma and beta are swapped: scale by gamma, then shift by beta.",
        )
        expect(False, f"{call} gives the wrong numbers; compare with attn.LayerNorm.")


# --------------------------------------------------------------------------- 06.4


def _random_block(d_model: int, heads: int, d_ff: int, seed: int, norm_first: bool = True):
    """An encoder block whose biases and LayerNorm parameters are not 0 and 1."""
    rng = np.random.default_rng(seed)
    block = attn.TransformerEncoderBlock(d_model, heads, d_ff, norm_first=norm_first, seed=seed)
    mha, ffn = block.self_attention, block.feed_forward
    for owner, name in [(mha, "b_q"), (mha, "b_k"), (mha, "b_v"), (mha, "b_o")]:
        setattr(owner, name, rng.normal(0.0, 0.3, getattr(owner, name).shape))
    ffn.b_1, ffn.b_2 = rng.normal(0.0, 0.3, ffn.b_1.shape), rng.normal(0.0, 0.3, ffn.b_2.shape)
    for norm in (block.norm1, block.norm2):
        norm.weight = rng.uniform(0.5, 1.5, d_model)
        norm.bias = rng.normal(0.0, 0.3, d_model)
    return block


def _post_norm(x, block, mask):
    attended, _ = block.self_attention(x, mask=mask)
    h = block.norm1(x + attended)
    return block.norm2(h + block.feed_forward(h))


@exercise("06.4", "a pre-norm encoder block")
def _check_pre_norm_block(pre_norm_block) -> None:
    rng = np.random.default_rng(604)
    causal = attn.causal_mask(5)
    padding = attn.padding_mask([5, 3], 5)[:, None]
    cases = [
        ((5, 8), 2, None, "no mask"),
        ((2, 5, 8), 2, padding, "a padding mask"),
        ((5, 12), 3, causal, "a causal mask"),
        ((2, 5, 8), 4, padding & causal, "a padding and a causal mask"),
    ]
    for seed, (shape, heads, mask, what) in enumerate(cases):
        d = shape[-1]
        block = _random_block(d, heads, 4 * d, seed=640 + seed)
        x = rng.normal(0.0, 1.0, shape)
        want, _ = block(x, mask=mask)
        call = f"pre_norm_block(x of shape {shape}, block, {what})"
        got = pre_norm_block(x.copy(), block, mask)
        expect(
            not isinstance(got, tuple),
            f"{call} returned a tuple; return only the block's output y (L, d_model).",
        )
        got = np.asarray(got, dtype=float)
        expect(got.shape == want.shape, f"{call} has shape {got.shape}; expected {want.shape}.")
        if np.allclose(got, want, atol=1e-10):
            continue
        expect(
            not np.allclose(got, _post_norm(x, block, mask), atol=1e-8),
            f"{call} computes the post-norm block, LN(x + F(x)). In pre-norm each sublayer "
            "reads a normalised copy and its output is added to the untouched x: "
            "x + F(LN(x)).",
        )
        h = block.self_attention(block.norm1(x))[0]
        no_mask = h + x
        no_mask = no_mask + block.feed_forward(block.norm2(no_mask))
        expect(
            mask is None or not np.allclose(got, no_mask, atol=1e-8),
            f"{call}: the mask was not used. Pass it on: block.self_attention(..., mask=mask).",
        )
        attended = block.self_attention(block.norm1(x), mask=mask)[0]
        expect(
            not np.allclose(got, attended + block.feed_forward(block.norm2(attended)), atol=1e-8),
            f"{call}: the residual connection of the attention sublayer is missing: add its "
            "output to x.",
        )
        expect(
            False,
            f"{call} gives the wrong numbers. Steps: x = x + MHA(norm1(x), mask), then "
            "y = x + FFN(norm2(x)).",
        )
