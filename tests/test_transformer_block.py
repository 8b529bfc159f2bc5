"""The Transformer blocks against PyTorch's own layers (weights copied, dropout off), both
norm placements, with masks; NumPy vs PyTorch; learned positional embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import numpy as anp
from attnlib import torch as atorch

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}
D_MODEL, HEADS, D_FF = 16, 4, 40


def randomised(layer):
    """Give every LayerNorm a non-trivial scale and shift, so that copying them is tested."""
    torch.manual_seed(1)
    with torch.no_grad():
        for module in layer.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_()
    # train() keeps PyTorch off its inference fast path (which zeroes padded positions);
    # with dropout=0.0 training mode computes exactly the same function.
    return layer.train()


def batch(dtype, lengths=(6, 4, 2), length=6):
    torch.manual_seed(2)
    x = torch.randn(len(lengths), length, D_MODEL, dtype=dtype)
    valid = atorch.padding_mask(torch.tensor(lengths), length)  # (B, 1, L), True = real token
    return x, valid


def tolerance(dtype):
    return {"rtol": TOLERANCE[dtype], "atol": TOLERANCE[dtype]}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("padded", [False, True])
def test_encoder_block_matches_torch(dtype, norm_first, activation, padded):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        D_MODEL,
        HEADS,
        D_FF,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
        dtype=dtype,
    )
    layer = randomised(layer)
    x, valid = batch(dtype)
    mask = valid[:, None] if padded else None
    kwargs = {"src_key_padding_mask": ~valid[:, 0]} if padded else {}
    expected = layer(x, **kwargs).detach()

    block = atorch.TransformerEncoderBlock.from_torch(layer)
    got, weights = block(x, mask=mask)
    torch.testing.assert_close(got.detach(), expected, **tolerance(dtype))
    assert weights.shape == (3, HEADS, 6, 6)

    block_np = anp.TransformerEncoderBlock.from_torch(layer)
    got_np, _ = block_np(x.numpy(), mask=None if mask is None else mask.numpy())
    np.testing.assert_allclose(got_np, expected.numpy(), **tolerance(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("padded_memory", [False, True])
def test_decoder_block_matches_torch(dtype, norm_first, padded_memory):
    torch.manual_seed(0)
    layer = torch.nn.TransformerDecoderLayer(
        D_MODEL, HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=dtype
    )
    layer = randomised(layer)
    memory, valid = batch(dtype, lengths=(6, 5, 3))
    torch.manual_seed(3)
    x = torch.randn(3, 4, D_MODEL, dtype=dtype)
    causal = atorch.causal_mask(4)
    kwargs = {"tgt_mask": ~causal}
    if padded_memory:
        kwargs["memory_key_padding_mask"] = ~valid[:, 0]
    memory_mask = valid[:, None] if padded_memory else None
    expected = layer(x, memory, **kwargs).detach()

    block = atorch.TransformerDecoderBlock.from_torch(layer)
    got, self_weights, cross_weights = block(x, memory, memory_mask=memory_mask)
    torch.testing.assert_close(got.detach(), expected, **tolerance(dtype))
    assert self_weights.shape == (3, HEADS, 4, 4) and cross_weights.shape == (3, HEADS, 4, 6)
    assert torch.all(self_weights.detach()[..., ~causal] == 0)

    block_np = anp.TransformerDecoderBlock.from_torch(layer)
    mask_np = None if memory_mask is None else memory_mask.numpy()
    got_np, _, _ = block_np(x.numpy(), memory.numpy(), memory_mask=mask_np)
    np.testing.assert_allclose(got_np, expected.numpy(), **tolerance(dtype))


@pytest.mark.parametrize("norm_first", [False, True])
def test_numpy_and_torch_blocks_agree_from_their_own_init(norm_first):
    encoder_np = anp.TransformerEncoderBlock(8, 2, 24, norm_first=norm_first, seed=5)
    decoder_np = anp.TransformerDecoderBlock(8, 2, 24, norm_first=norm_first, seed=6)
    encoder_t = atorch.TransformerEncoderBlock(8, 2, 24, norm_first=norm_first, dtype=torch.float64)
    decoder_t = atorch.TransformerDecoderBlock(8, 2, 24, norm_first=norm_first, dtype=torch.float64)
    for ours, theirs in ((encoder_np, encoder_t), (decoder_np, decoder_t)):
        copy_numpy_block_into_torch(ours, theirs)
    rng = np.random.default_rng(7)
    source, target = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 3, 8))
    encoded_np, _ = encoder_np(source)
    encoded_t, _ = encoder_t(torch.from_numpy(source))
    np.testing.assert_allclose(encoded_t.detach().numpy(), encoded_np, rtol=1e-10, atol=1e-10)
    decoded_np, *_ = decoder_np(target, encoded_np)
    decoded_t, *_ = decoder_t(torch.from_numpy(target), encoded_t)
    np.testing.assert_allclose(decoded_t.detach().numpy(), decoded_np, rtol=1e-10, atol=1e-10)


def copy_numpy_block_into_torch(block_np, block_t):
    """Copy every array of a NumPy block into the same-named parameter of the torch block."""
    with torch.no_grad():
        for name, parameter in block_t.named_parameters():
            owner = block_np
            *path, leaf = name.split(".")
            for part in path:
                owner = getattr(owner, part)
            parameter.copy_(torch.from_numpy(np.asarray(getattr(owner, leaf))))


def test_decoder_block_is_causal():
    block = anp.TransformerDecoderBlock(8, 2, 16, seed=0)
    rng = np.random.default_rng(8)
    x, memory = rng.standard_normal((5, 8)), rng.standard_normal((4, 8))
    changed = x.copy()
    changed[3:] += 5.0
    out, self_weights, _ = block(x, memory)
    out_changed, _, _ = block(changed, memory)
    np.testing.assert_allclose(out_changed[:3], out[:3], atol=1e-12)
    assert not np.allclose(out_changed[3:], out[3:])
    assert np.all(np.triu(self_weights, k=1) == 0)


def test_layer_norm_and_feed_forward():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 6)) * 3 + 1
    normed = anp.LayerNorm(6)(x)
    np.testing.assert_allclose(normed.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(normed.var(-1), 1, atol=1e-4)  # eps = 1e-5
    ffn = anp.FeedForward(6, 12, seed=0)
    perm = rng.permutation(4)
    np.testing.assert_allclose(ffn(x[perm]), ffn(x)[perm], atol=1e-12)  # one MLP per token
    torch_ffn = atorch.FeedForward(6, 12, activation="gelu", dtype=torch.float64)
    numpy_ffn = anp.FeedForward(6, 12, activation="gelu")
    copy_numpy_block_into_torch(numpy_ffn, torch_ffn)
    np.testing.assert_allclose(
        torch_ffn(torch.from_numpy(x)).detach().numpy(), numpy_ffn(x), rtol=1e-10, atol=1e-10
    )


def test_learned_positional_embedding_ends_at_max_len():
    positions = atorch.LearnedPositionalEmbedding(max_len=128, d_model=8, seed=0)
    assert positions(128).shape == (128, 8)
    assert torch.equal(positions(5), positions(128)[:5])
    with pytest.raises(ValueError, match="length=129 exceeds max_len=128"):
        positions(129)
    assert sum(p.numel() for p in positions.parameters()) == 128 * 8
    assert torch.equal(positions.weight, atorch.LearnedPositionalEmbedding(128, 8, seed=0).weight)


@pytest.mark.parametrize("backend", [anp, atorch], ids=["numpy", "torch"])
def test_block_errors_name_the_argument(backend):
    with pytest.raises(ValueError, match="activation must be one of 'relu', 'gelu'; got 'tanh'"):
        backend.FeedForward(4, 8, activation="tanh")
    with pytest.raises(ValueError, match="d_ff must be >= 1"):
        backend.FeedForward(4, 0)
    x = np.zeros((3, 5)) if backend is anp else torch.zeros(3, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., L, d_model=4\)"):
        backend.LayerNorm(4)(x)
    with pytest.raises(ValueError, match=r"query must have shape \(\.\.\., L, d_model=8\)"):
        backend.TransformerEncoderBlock(8, 2, 16)(x)


def test_from_torch_refuses_other_activations():
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, activation=torch.tanh)
    with pytest.raises(ValueError, match="only relu and gelu"):
        anp.TransformerEncoderBlock.from_torch(layer)
