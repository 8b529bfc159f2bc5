"""Checkers for the exercises of lesson 06."""

from __future__ import annotations

import numpy as np

from .. import numpy as attn
from . import Message, exercise, expect, expect_shape, phrase

# --------------------------------------------------------------------------- 06.1


@exercise("06.1", "masks for torch.nn.MultiheadAttention")
def _check_torch_mask(to_pytorch_attn_mask) -> None:
    import torch  # only this checker needs PyTorch

    generator = torch.Generator().manual_seed(404)
    eye = torch.eye(5, dtype=torch.bool)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    per_example = (torch.rand(3, 5, 5, generator=generator) < 0.5) | eye
    cases = [(causal, 2), (causal[:3, :3], 1), (per_example, 2), (per_example[:2], 4)]
    for mask, heads in cases:
        got = torch.as_tensor(to_pytorch_attn_mask(mask.clone(), heads))
        call = phrase(
            "to_pytorch_attn_mask(mask of shape {shape}, num_heads={num_heads})",
            shape=tuple(mask.shape),
            num_heads=heads,
        )
        batched = mask.dim() == 3
        want_shape = (mask.shape[0] * heads, *mask.shape[1:]) if batched else tuple(mask.shape)
        expect(
            got.dtype == torch.bool,
            "{call} has dtype {got_dtype}; return a boolean mask (True = blocked).",
            call=call,
            got_dtype=got.dtype,
        )
        expect(
            tuple(got.shape) == want_shape,
            "{call} has shape {got_shape}; nn.MultiheadAttention wants "
            "{want_shape}: an (L, S) mask as it is, a per-example mask as (B·num_heads, L, S).",
            call=call,
            got_shape=tuple(got.shape),
            want_shape=want_shape,
        )
        inverted = (~mask).repeat_interleave(heads, dim=0) if batched else ~mask
        if torch.equal(got, inverted):
            continue
        same = mask.repeat_interleave(heads, dim=0) if batched else mask
        expect(
            not torch.equal(got, same),
            "{call} is not inverted. In nn.MultiheadAttention True means *blocked*; in "
            "attnlib True means *may attend*: use ~mask.",
            call=call,
        )
        expect(
            not (batched and torch.equal(got, (~mask).repeat(heads, 1, 1))),
            "{call}: the heads are in the wrong order. PyTorch reads row b·H + h as example b, "
            "head h, so all heads of example 0 come first: use repeat_interleave, not repeat.",
            call=call,
        )
        expect(
            False,
            "{call} blocks the wrong entries: it should be ~mask, one copy per head.",
            call=call,
        )
    # The meaning, checked end to end: PyTorch with the converted mask equals attnlib.
    torch.manual_seed(4)
    module = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    x = torch.randn(3, 5, 8, dtype=torch.float64, generator=generator)
    with torch.no_grad():
        theirs, _ = module(x, x, x, attn_mask=to_pytorch_attn_mask(per_example.clone(), 2))
    layer = attn.MultiHeadAttention.from_torch(module)
    ours, _ = layer(x.numpy(), mask=per_example[:, None].numpy())
    expect(
        np.allclose(theirs.numpy(), ours, atol=1e-10),
        "With your mask nn.MultiheadAttention does not reproduce attnlib's output.",
    )


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
        (phrase("a random mask"), random_masks[0], 4, 1),
        (phrase("a random mask"), random_masks[1], 0, 2),
    ]
    for name, mask, t, layers in cases:
        got = np.asarray(affected_outputs(mask.copy(), t, layers))
        want = affected_outputs_reference(mask, t, layers)
        call = phrase(
            "affected_outputs({name}, t={t}, num_layers={layers})", name=name, t=t, layers=layers
        )
        expect(
            got.shape == want.shape,
            "{call} has shape {got_shape}; return one boolean per output position, "
            "shape {want_shape}.",
            call=call,
            got_shape=got.shape,
            want_shape=want.shape,
        )
        got = got.astype(bool)
        if np.array_equal(got, want):
            continue
        expect(
            not np.array_equal(got, affected_outputs_reference(mask.T, t, layers)),
            "{call}: you followed the columns of the mask. Row i lists what output i reads: "
            "output i depends on input t when mask[i, t] is True (for the causal mask: the "
            "outputs at t and after, not before).",
            call=call,
        )
        expect(
            not np.array_equal(got, affected_outputs_reference(mask, t, 1)),
            "{call}: that is one layer. Each layer spreads the change one more step: an "
            "output of layer 1 that changed is an input of layer 2. Repeat the step "
            "num_layers times.",
            call=call,
        )
        expect(
            False,
            "{call} is wrong; expected {want}.",
            call=call,
            want=want.astype(int),
        )


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
        call = phrase(
            "layer_norm(x of shape {shape}, gamma, beta, eps={eps})", shape=shape, eps=eps
        )
        expect_shape(got, want, call)
        expect(
            bool(np.all(np.isfinite(got))),
            "{call} contains NaN or inf. A token whose features are all equal has variance 0: "
            "add eps inside the square root, sqrt(var + eps).",
            call=call,
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
            "{call}: you normalised over the tokens. Layer normalisation normalises each "
            "token over its own features: mean and variance along the last axis (axis=-1).",
            call=call,
        )
        expect(
            not np.allclose(got, plain, atol=1e-6),
            "{call}: the normalisation is right, but gamma and beta are missing: "
            "return gamma * x_hat + beta.",
            call=call,
        )
        expect(
            not np.allclose(got, unbiased * gamma + beta, atol=1e-6),
            "{call}: use the biased variance, dividing by d (np.var's default, ddof=0), "
            "as PyTorch's LayerNorm does.",
            call=call,
        )
        expect(
            not np.allclose(got, outside * gamma + beta, atol=1e-6),
            "{call}: eps goes inside the square root, sqrt(var + eps), not sqrt(var) + eps; "
            "it matters for tokens whose features are nearly equal.",
            call=call,
        )
        expect(
            not np.allclose(got, plain * beta + gamma, atol=1e-6),
            "{call}: gamma and beta are swapped: scale by gamma, then shift by beta.",
            call=call,
        )
        expect(False, "{call} gives the wrong numbers; compare with attn.LayerNorm.", call=call)


# --------------------------------------------------------------------------- 06.4


def _randomise(block, rng: np.random.Generator):
    """Give every bias and LayerNorm parameter of ``block`` random values (not 0 and 1)."""
    for part in vars(block).values():
        if isinstance(part, attn.MultiHeadAttention):
            for name in ("b_q", "b_k", "b_v", "b_o"):
                setattr(part, name, rng.normal(0.0, 0.3, getattr(part, name).shape))
        elif isinstance(part, attn.FeedForward):
            part.b_1 = rng.normal(0.0, 0.3, part.b_1.shape)
            part.b_2 = rng.normal(0.0, 0.3, part.b_2.shape)
        elif isinstance(part, attn.LayerNorm):
            part.weight = rng.uniform(0.5, 1.5, part.weight.shape)
            part.bias = rng.normal(0.0, 0.3, part.bias.shape)
    return block


def _random_block(d_model: int, heads: int, d_ff: int, seed: int, norm_first: bool = True):
    """An encoder block whose biases and LayerNorm parameters are not 0 and 1."""
    block = attn.TransformerEncoderBlock(d_model, heads, d_ff, norm_first=norm_first, seed=seed)
    return _randomise(block, np.random.default_rng(seed))


def _random_decoder_block(d_model: int, heads: int, d_ff: int, seed: int):
    """A post-norm decoder block whose biases and LayerNorm parameters are not 0 and 1."""
    block = attn.TransformerDecoderBlock(d_model, heads, d_ff, seed=seed)
    return _randomise(block, np.random.default_rng(seed))


def _decoder_variant(x, memory, block, self_mask, memory_mask, keys=None, queries=None):
    """The post-norm decoder block with the given self-attention mask; ``keys`` (default:
    the memory) feed the cross-attention's keys and values, ``queries`` (default: the output
    of the first sublayer) its queries."""
    attended, _ = block.self_attention(x, mask=self_mask)
    h = block.norm1(x + attended)
    source = memory if keys is None else keys(x, h)
    query = h if queries is None else queries(x, h)
    attended, _ = block.cross_attention(query, source, source, mask=memory_mask)
    h = block.norm2(h + attended)
    return block.norm3(h + block.feed_forward(h))


def _decoder_mistakes(x, memory, block, mask, memory_mask) -> list[tuple[np.ndarray, Message]]:
    """What plausible mistakes compute, each with its hint."""
    causal = attn.causal_mask(x.shape[-2])
    full = causal if mask is None else mask & causal
    pre = x + block.self_attention(block.norm1(x), mask=full)[0]
    pre = pre + block.cross_attention(block.norm2(pre), memory, memory, mask=memory_mask)[0]
    pre = pre + block.feed_forward(block.norm3(pre))
    return [
        (
            _decoder_variant(x, memory, block, mask, memory_mask),
            phrase(
                "the self-attention is not causal. The block adds the causal mask by itself; "
                "by hand you must: use attn.causal_mask(L), combined with mask by & when mask "
                "is given."
            ),
        ),
        *(
            (
                _decoder_variant(x, memory, block, full, None, keys=keys),
                phrase(
                    "the keys and values of the cross-attention must come from the memory (the "
                    "encoder's output): block.cross_attention(h, memory, memory, "
                    "mask=memory_mask)."
                ),
            )
            for keys in (lambda x, h: h, lambda x, h: x)
        ),
        (
            _decoder_variant(x, memory, block, full, None),
            phrase(
                "memory_mask was not used. Pass it to the cross-attention: "
                "block.cross_attention(h, memory, memory, mask=memory_mask)."
            ),
        ),
        (
            _decoder_variant(x, memory, block, causal, memory_mask),
            phrase(
                "mask was not used. The self-attention needs the causal mask *and* the "
                "target's mask: mask & attn.causal_mask(L)."
            ),
        ),
        (
            _decoder_variant(x, memory, block, full, memory_mask, queries=lambda x, h: x),
            phrase(
                "the cross-attention's queries are the output of the first sublayer, "
                "h = norm1(x + self-attention), not the block's input x."
            ),
        ),
        (
            pre,
            phrase(
                "that is the pre-norm block, x + F(LN(x)). This block is post-norm, as in the "
                "paper: each sublayer's output is added to its input, then normalised, "
                "LN(x + F(x))."
            ),
        ),
    ]


@exercise("06.4", "a decoder block by hand")
def _check_decoder_block(decoder_block) -> None:
    rng = np.random.default_rng(604)
    target_padding = attn.padding_mask([5, 3], 5)[:, None]  # (B, 1, 1, L)
    source_padding = attn.padding_mask([6, 4], 6)[:, None]  # (B, 1, 1, S)
    some_mask = (rng.random((2, 1, 5, 5)) < 0.6) | np.eye(5, dtype=bool)
    cases = [
        ((4, 8), (6, 8), 2, None, None, phrase("no masks")),
        ((2, 5, 8), (2, 6, 8), 2, target_padding, source_padding, phrase("padding masks")),
        ((5, 12), (3, 12), 3, None, None, phrase("no masks")),
        (
            (2, 5, 8),
            (2, 6, 8),
            4,
            some_mask,
            source_padding,
            phrase("a random mask, source padding"),
        ),
    ]
    for seed, (x_shape, memory_shape, heads, mask, memory_mask, what) in enumerate(cases):
        d = x_shape[-1]
        block = _random_decoder_block(d, heads, 4 * d, seed=640 + seed)
        x, memory = rng.normal(0.0, 1.0, x_shape), rng.normal(0.0, 1.0, memory_shape)
        want, _, _ = block(x, memory, mask, memory_mask)
        call = phrase(
            "decoder_block(x of shape {x_shape}, memory of shape {memory_shape}, block, {what})",
            x_shape=x_shape,
            memory_shape=memory_shape,
            what=what,
        )
        got = decoder_block(
            x.copy(),
            memory.copy(),
            block,
            None if mask is None else mask.copy(),
            None if memory_mask is None else memory_mask.copy(),
        )
        expect(
            not isinstance(got, tuple),
            "{call} returned a tuple; return only the block's output y (L, d_model).",
            call=call,
        )
        got = np.asarray(got, dtype=float)
        expect_shape(got, want, call)
        if np.allclose(got, want, atol=1e-10):
            continue
        for wrong, hint in _decoder_mistakes(x, memory, block, mask, memory_mask):
            expect(
                np.allclose(wrong, want, atol=1e-8) or not np.allclose(got, wrong, atol=1e-8),
                "{call}: {hint}",
                call=call,
                hint=hint,
            )
        expect(
            False,
            "{call} gives the wrong numbers. Steps: h = norm1(x + self-attention(x, causal "
            "mask)), h = norm2(h + cross_attention(h, memory, memory)), y = norm3(h + FFN(h)).",
            call=call,
        )


# --------------------------------------------------------------------------- 06.5


def moved_outputs_reference(blocks, x, memory, t: int, causal: bool) -> np.ndarray:
    """Boolean (T,): the outputs of the decoder ``blocks`` that move when ``x[t]`` changes."""
    changed = x.copy()
    changed[t] += 1.0
    outputs = []
    for h in (x, changed):
        for block in blocks:
            h, _, _ = block(h, memory, causal=causal)
        outputs.append(h)
    return np.abs(outputs[1] - outputs[0]).max(axis=-1) > 1e-12


class NeighbourBlock:
    """A stand-in decoder block whose reach is easy to count: each position adds the vector to
    its left, and without the causal mask the one to its right too, so a change travels one
    position per block (two blocks, change at t: t, t + 1 and t + 2 move).

    Called like a ``TransformerDecoderBlock``: ``blk(h, memory, causal=True) -> (y, None, None)``.
    """

    def __call__(self, x, memory, mask=None, memory_mask=None, causal=True, need_weights=True):
        """y_i = x_i + x_{i-1} (+ x_{i+1} when ``causal`` is False); ``memory`` is not read."""
        x = np.asarray(x, dtype=float)
        y = x.copy()
        y[1:] += x[:-1]
        if not causal:
            y[:-1] += x[1:]
        return y, None, None


@exercise("06.5", "a decoder that can peek")
def _check_moved_outputs(moved_outputs) -> None:
    rng = np.random.default_rng(605)
    # Real decoder blocks, then stand-ins whose reach grows by one position per block: with real
    # blocks the pattern is the same for one block or many, so only the stand-ins can tell
    # whether every block ran on the output of the one before.
    stacks = [
        (
            phrase("{n} decoder block(s)", n=n),
            [attn.TransformerDecoderBlock(8, 2, 16, seed=60 + 3 * i) for i in range(n)],
        )
        for n in (1, 2)
    ] + [
        (phrase("{n} stand-in block(s) that each reach one neighbour", n=n), [NeighbourBlock()] * n)
        for n in (1, 2, 3)
    ]
    for what, blocks in stacks:
        x, memory = rng.normal(0.0, 1.0, (7, 8)), rng.normal(0.0, 1.0, (4, 8))
        for t in (0, 2, 4):
            for causal in (True, False):
                call = phrase(
                    "moved_outputs({what}, x of shape (7, 8), t={t}, causal={causal})",
                    what=what,
                    t=t,
                    causal=causal,
                )
                given = x.copy()
                got = np.asarray(moved_outputs(blocks, given, memory.copy(), t, causal))
                expect(
                    np.array_equal(given, x),
                    "{call} changed the x it was given. Change x[t] in a copy (x.copy()), so "
                    "that the first run sees the original.",
                    call=call,
                )
                want = moved_outputs_reference(blocks, x, memory, t, causal)
                expect_shape(got, want, call)
                if np.array_equal(got.astype(bool), want):
                    continue
                expect(
                    got.any(),
                    "{call}: nothing moved. Run the blocks twice, on x and on a copy with x[t] "
                    "changed, and compare the outputs of the last block.",
                    call=call,
                )
                expect(
                    not np.array_equal(got, np.arange(len(x)) == t),
                    "{call}: only position t moved, as in the input. Compare the outputs of the "
                    "last block, not its inputs.",
                    call=call,
                )
                expect(
                    causal
                    or not np.array_equal(got, moved_outputs_reference(blocks, x, memory, t, True)),
                    "{call} gives the causal decoder's answer: the blocks still used the causal "
                    "mask. Pass causal on to every block: blk(h, memory, causal=causal).",
                    call=call,
                )
                expect(
                    False,
                    "{call} = {got}, expected {want}. Run every block in turn on the output of "
                    "the one before (each block's reach adds up), for x and for the changed copy, "
                    "and compare the two final outputs.",
                    call=call,
                    got=got.astype(int).tolist(),
                    want=want.astype(int).tolist(),
                )
