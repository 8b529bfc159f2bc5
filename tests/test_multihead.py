"""Multi-head attention: NumPy vs PyTorch (float64, 1e-10), and attnlib's layer loaded from
``torch.nn.MultiheadAttention`` against the module itself (float32 1e-5, float64 1e-10),
with ``batch_first`` both ways, attention masks and key-padding masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import numpy as anp
from attnlib import torch as atorch

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def reference_module(d_model, num_heads, dtype, bias=True, batch_first=True):
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(
        d_model, num_heads, bias=bias, batch_first=batch_first, dtype=dtype
    )
    if bias:  # PyTorch starts its biases at zero: give them values so that they are tested
        with torch.no_grad():
            module.in_proj_bias.normal_()
            module.out_proj.bias.normal_()
    return module.eval()


def masks(batch, lq, lk):
    """(attnlib mask True = may attend, with a head axis; PyTorch's attn_mask and
    key_padding_mask, True = blocked). No query row is fully blocked."""
    causal = atorch.causal_mask(max(lq, lk))[:lq, :lk]
    lengths = torch.tensor([lk] + [max(1, lk - 2)] * (batch - 1))
    valid = atorch.padding_mask(lengths, lk)  # (B, 1, L_k)
    ours = causal & valid[:, None]  # (B, 1, L_q, L_k): broadcast over heads
    return ours, ~causal, ~valid[:, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("with_masks", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_torch_multihead_attention(dtype, batch_first, with_masks, bias):
    batch, lq, lk, d_model, heads = 3, 5, 7, 16, 4
    module = reference_module(d_model, heads, dtype, bias=bias, batch_first=batch_first)
    query = torch.randn(batch, lq, d_model, dtype=dtype)
    key = torch.randn(batch, lk, d_model, dtype=dtype)
    value = torch.randn(batch, lk, d_model, dtype=dtype)
    ours_mask, attn_mask, key_padding_mask = masks(batch, lq, lk) if with_masks else (None,) * 3

    def torch_inputs(x):  # nn.MultiheadAttention wants (L, B, E) unless batch_first
        return x if batch_first else x.transpose(0, 1)

    kwargs = {"attn_mask": attn_mask, "key_padding_mask": key_padding_mask}
    expected, per_head = module(
        *map(torch_inputs, (query, key, value)), average_attn_weights=False, **kwargs
    )
    _, averaged = module(*map(torch_inputs, (query, key, value)), **kwargs)
    expected, per_head, averaged = (
        torch_inputs(expected).detach(),
        per_head.detach(),
        averaged.detach(),
    )

    tol = {"rtol": TOLERANCE[dtype], "atol": TOLERANCE[dtype]}
    layer = atorch.MultiHeadAttention.from_torch(module)
    out, weights = (t.detach() for t in layer(query, key, value, mask=ours_mask))
    torch.testing.assert_close(out, expected, **tol)
    torch.testing.assert_close(weights, per_head, **tol)
    torch.testing.assert_close(weights.mean(dim=1), averaged, **tol)
    fused, none = layer(query, key, value, mask=ours_mask, need_weights=False)
    assert none is None
    torch.testing.assert_close(fused, expected, **tol)

    layer_np = anp.MultiHeadAttention.from_torch(module)
    mask_np = None if ours_mask is None else ours_mask.numpy()
    out_np, weights_np = layer_np(query.numpy(), key.numpy(), value.numpy(), mask=mask_np)
    assert out_np.dtype == expected.numpy().dtype
    np.testing.assert_allclose(out_np, expected.numpy(), **tol)
    np.testing.assert_allclose(weights_np, per_head.numpy(), **tol)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_numpy_and_torch_layers_agree(bias, batch):
    layer_np = anp.MultiHeadAttention(12, 3, d_k=5, d_v=2, bias=bias, seed=4)
    layer_t = atorch.MultiHeadAttention(12, 3, d_k=5, d_v=2, bias=bias, dtype=torch.float64)
    with torch.no_grad():
        for name, parameter in layer_t.named_parameters():
            parameter.copy_(torch.from_numpy(getattr(layer_np, name)))
            if name.startswith("b_"):
                parameter.add_(1.0)
                setattr(layer_np, name, parameter.numpy().copy())
    rng = np.random.default_rng(5)
    query, memory = rng.standard_normal((*batch, 4, 12)), rng.standard_normal((*batch, 6, 12))
    mask = rng.random((4, 6)) < 0.7
    mask[0] = False  # a query with nothing to attend to: zeros, not NaN
    out_np, w_np = layer_np(query, memory, mask=mask)
    out_t, w_t = layer_t(
        torch.from_numpy(query), torch.from_numpy(memory), mask=torch.from_numpy(mask)
    )
    np.testing.assert_allclose(out_t.detach().numpy(), out_np, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(w_t.detach().numpy(), w_np, rtol=1e-10, atol=1e-10)
    assert w_np.shape == (*batch, 3, 4, 6) and out_np.shape == (*batch, 4, 12)
    assert np.all(w_np[..., 0, :] == 0)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_grouped_query_layers_agree_with_sdpa_and_each_other(num_kv_heads):
    """4 query heads sharing num_kv_heads key-value heads (1: multi-query attention): the
    NumPy and PyTorch layers agree, and equal PyTorch's scaled_dot_product_attention with
    enable_gqa=True on the same projections, causal mask included."""
    layer_np = anp.MultiHeadAttention(16, 4, bias=True, seed=7, num_kv_heads=num_kv_heads)
    layer_t = atorch.MultiHeadAttention(
        16, 4, bias=True, dtype=torch.float64, num_kv_heads=num_kv_heads
    )
    assert layer_np.w_k.shape == (16, 4 * num_kv_heads) == tuple(layer_t.w_v.shape)
    with torch.no_grad():
        for name, parameter in layer_t.named_parameters():
            parameter.copy_(torch.from_numpy(getattr(layer_np, name)) + name.startswith("b_"))
            setattr(layer_np, name, parameter.numpy().copy())
    x = np.random.default_rng(8).standard_normal((2, 9, 16))
    out_np, weights_np = layer_np(x, mask=anp.causal_mask(9))
    out_t, _ = layer_t(torch.from_numpy(x), mask=atorch.causal_mask(9), need_weights=False)
    np.testing.assert_allclose(out_t.detach().numpy(), out_np, rtol=1e-10, atol=1e-10)
    assert weights_np.shape == (2, 4, 9, 9)
    tx = torch.from_numpy(x)
    q, k, v = (
        atorch.split_heads(tx @ getattr(layer_t, f"w_{n}") + getattr(layer_t, f"b_{n}"), heads)
        for n, heads in (("q", 4), ("k", num_kv_heads), ("v", num_kv_heads))
    )
    heads = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True
    )
    expected = atorch.merge_heads(heads) @ layer_t.w_o + layer_t.b_o
    np.testing.assert_allclose(out_np, expected.detach().numpy(), rtol=1e-10, atol=1e-10)


def test_one_key_value_head_per_query_head_is_plain_multi_head_attention():
    """num_kv_heads = num_heads draws the same weights as the layer without it."""
    plain, grouped = (
        anp.MultiHeadAttention(8, 2, seed=3),
        anp.MultiHeadAttention(8, 2, seed=3, num_kv_heads=2),
    )
    x = np.random.default_rng(9).standard_normal((5, 8))
    np.testing.assert_array_equal(plain(x)[0], grouped(x)[0])


def test_heads_are_independent_attentions_concatenated():
    rng = np.random.default_rng(6)
    layer = anp.MultiHeadAttention(8, 2, seed=1)
    x = rng.standard_normal((5, 8))
    out, weights = layer(x)
    heads = []
    for h in range(2):
        cols = slice(4 * h, 4 * (h + 1))
        head_out, head_w = anp.attention(
            x @ layer.w_q[:, cols], x @ layer.w_k[:, cols], x @ layer.w_v[:, cols]
        )
        np.testing.assert_allclose(weights[h], head_w, atol=1e-12)
        heads.append(head_out)
    np.testing.assert_allclose(out, np.concatenate(heads, axis=-1) @ layer.w_o, atol=1e-12)


@pytest.mark.parametrize("backend", [anp, atorch], ids=["numpy", "torch"])
def test_split_and_merge_heads_are_inverse(backend):
    x = np.arange(2 * 3 * 12, dtype=float).reshape(2, 3, 12)
    if backend is atorch:
        x = torch.from_numpy(x)
    split = backend.split_heads(x, 4)
    assert tuple(split.shape) == (2, 4, 3, 3)
    assert float(split[0, 1, 2, 0]) == float(x[0, 2, 3])  # head 1, token 2, its first feature
    assert np.array_equal(np.asarray(backend.merge_heads(split)), np.asarray(x))


def test_parameter_count_does_not_depend_on_heads():
    counts = {
        h: sum(p.numel() for p in atorch.MultiHeadAttention(64, h).parameters())
        for h in (1, 2, 4, 8)
    }
    assert set(counts.values()) == {4 * 64 * 64}


def test_more_heads_than_features_with_explicit_head_sizes():
    """Nine heads of width 1 on 3 features (lesson 12's convolution): allowed when d_k and
    d_v are given, even though d_model // num_heads is 0."""
    layer = anp.MultiHeadAttention(3, 9, d_k=1, d_v=3, seed=0)
    out, weights = layer(np.ones((4, 3)))
    assert out.shape == (4, 3) and weights.shape == (9, 4, 4)
    assert layer.w_v.shape == (3, 27) and layer.w_o.shape == (27, 3)


def test_from_torch_refuses_what_attnlib_cannot_copy():
    with pytest.raises(ValueError, match="add_bias_kv"):
        anp.MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="kdim or vdim"):
        atorch.MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, kdim=4))


@pytest.mark.parametrize("backend", [anp, atorch], ids=["numpy", "torch"])
@pytest.mark.parametrize(
    "call, error, words",
    [
        (
            lambda b: b.MultiHeadAttention(10, 3),
            ValueError,
            ["d_model=10 is not divisible by num_heads=3"],
        ),
        (lambda b: b.MultiHeadAttention(8, 0), ValueError, ["num_heads must be >= 1"]),
        (
            lambda b: b.MultiHeadAttention(8, 4, num_kv_heads=3),
            ValueError,
            ["num_kv_heads=3 must divide num_heads=4"],
        ),
        (
            lambda b: b.MultiHeadAttention(8, 4, num_kv_heads=2.0),
            TypeError,
            ["num_kv_heads must be an int"],
        ),
        (
            lambda b: b.MultiHeadAttention(8, 2)(zeros(b, (2, 5, 6))),
            ValueError,
            ["query must have shape (..., L, d_model=8)", "query.shape=(2, 5, 6)"],
        ),
        (
            lambda b: b.MultiHeadAttention(8, 2)(
                zeros(b, (5, 8)), zeros(b, (4, 8)), zeros(b, (3, 8))
            ),
            ValueError,
            ["key and value must have the same length", "value.shape=(3, 8)"],
        ),
        (
            lambda b: b.split_heads(zeros(b, (5, 10)), 4),
            ValueError,
            ["divisible by num_heads=4", "x.shape=(5, 10)"],
        ),
        (
            lambda b: b.merge_heads(zeros(b, (5, 10))),
            ValueError,
            ["(..., num_heads, L, d)", "x.shape=(5, 10)"],
        ),
    ],
)
def test_multihead_bad_input(backend, call, error, words):
    with pytest.raises(error) as caught:
        call(backend)
    for word in words:
        assert word in str(caught.value)


def zeros(backend, shape):
    return np.zeros(shape) if backend is anp else torch.zeros(shape, dtype=torch.float64)


def as_array(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_padding_and_causal_masks_apply_to_every_head_even_when_batch_equals_heads(backend):
    """padding_mask (B, 1, L) and causal & padding (B, L, L) are per example, never read as
    per-head masks, also when B == H (where plain broadcasting would accept them)."""
    batch = heads = 4
    x = np.random.default_rng(7).normal(size=(batch, 6, 8))
    valid = anp.padding_mask([6, 4, 3, 2], max_len=6)  # (4, 1, 6)
    both = valid & anp.causal_mask(6)  # (4, 6, 6)
    layer = anp.MultiHeadAttention(8, heads, seed=1)
    if backend == "torch":
        layer = atorch.MultiHeadAttention(8, heads, seed=1, dtype=torch.float64)
        x, valid, both = (torch.from_numpy(a) for a in (x, valid, both))
    padding = ~as_array(valid)[:, None, :, :]  # (B, 1, 1, L): the padded keys
    for mask in (valid, both):
        out, weights = (as_array(t) for t in layer(x, mask=mask))
        explicit, _ = (as_array(t) for t in layer(x, mask=mask[:, None]))  # all heads, spelled out
        assert weights.shape == (batch, heads, 6, 6)
        assert np.allclose(out, explicit, atol=1e-12)
        assert np.all(weights[np.broadcast_to(padding, weights.shape)] == 0)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_mask_that_fits_neither_reading_names_both(backend):
    layer = anp.MultiHeadAttention(8, 4, seed=1)
    x, mask = np.ones((4, 6, 8)), np.ones((3, 6, 6), dtype=bool)
    if backend == "torch":
        layer = atorch.MultiHeadAttention(8, 4, seed=1)
        x, mask = torch.ones(4, 6, 8), torch.ones(3, 6, 6, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"mask.shape=\(3, 6, 6\).*per head is \(B, H, L_q, L_k\)"):
        layer(x, mask=mask)
