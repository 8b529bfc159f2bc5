"""The two backends agree (float64, 1e-10), and the PyTorch path agrees with PyTorch's own
``scaled_dot_product_attention`` (float32, 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib import numpy as anp
from attnlib import torch as atorch

TOL64 = {"rtol": 1e-10, "atol": 1e-10}
TOL32 = {"rtol": 1e-5, "atol": 1e-5}

# (batch shape, L_q, L_k, d_k, d_v): no batch, a batch, batch and heads, broadcast batch
SHAPES = [
    ((), 5, 5, 4, 4),
    ((3,), 6, 4, 8, 5),
    ((2, 4), 7, 7, 16, 16),
    ((2, 1), 3, 9, 4, 2),
]


def random_qkv(rng, batch, lq, lk, dk, dv):
    return (
        rng.standard_normal((*batch, lq, dk)),
        rng.standard_normal((*batch, lk, dk)),
        rng.standard_normal((*batch, lk, dv)),
    )


def as_torch(*arrays):
    return [torch.from_numpy(np.asarray(a)) for a in arrays]


def random_mask(rng, shape, fully_masked_row=True):
    mask = rng.random(shape) < 0.6
    if fully_masked_row:
        mask[..., 0, :] = False  # one query with nothing to attend to
    return mask


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_attention_numpy_equals_torch(shape, with_mask, scale):
    rng = np.random.default_rng(0)
    batch, lq, lk, dk, dv = shape
    q, k, v = random_qkv(rng, batch, lq, lk, dk, dv)
    mask = random_mask(rng, (*batch, lq, lk)) if with_mask else None
    out_np, w_np = anp.attention(q, k, v, mask=mask, scale=scale)
    tq, tk, tv = as_torch(q, k, v)
    tmask = None if mask is None else torch.from_numpy(mask)
    out_t, w_t = atorch.attention(tq, tk, tv, mask=tmask, scale=scale)
    np.testing.assert_allclose(out_t.numpy(), out_np, **TOL64)
    np.testing.assert_allclose(w_t.numpy(), w_np, **TOL64)
    fast, none = atorch.attention(tq, tk, tv, mask=tmask, scale=scale, need_weights=False)
    assert none is None
    np.testing.assert_allclose(fast.numpy(), out_np, **TOL64)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4, 6)])
def test_softmax_numpy_equals_torch(shape):
    rng = np.random.default_rng(1)
    x = 30 * rng.standard_normal(shape)
    mask = random_mask(rng, shape, fully_masked_row=False)
    for m in (None, mask):
        expected = anp.softmax(x, mask=m)
        got = atorch.softmax(torch.from_numpy(x), mask=None if m is None else torch.from_numpy(m))
        np.testing.assert_allclose(got.numpy(), expected, **TOL64)
    for axis in range(-len(shape), len(shape)):
        np.testing.assert_allclose(
            atorch.softmax(torch.from_numpy(x), axis=axis).numpy(),
            anp.softmax(x, axis=axis),
            **TOL64,
        )


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("scale", [None, 1.0])
def test_scores_numpy_equal_torch(shape, scale):
    rng = np.random.default_rng(2)
    batch, lq, lk, dk, dv = shape
    q, k, _ = random_qkv(rng, batch, lq, lk, dk, dv)
    hidden = 5
    w_q, w_k, w = (
        rng.standard_normal((dk, hidden)),
        rng.standard_normal((dk, hidden)),
        rng.standard_normal(hidden),
    )
    np.testing.assert_allclose(
        atorch.dot_product_scores(*as_torch(q, k), scale=scale).numpy(),
        anp.dot_product_scores(q, k, scale=scale),
        **TOL64,
    )
    np.testing.assert_allclose(
        atorch.additive_scores(*as_torch(q, k, w_q, w_k, w)).numpy(),
        anp.additive_scores(q, k, w_q, w_k, w),
        **TOL64,
    )


def test_masks_numpy_equal_torch():
    for length in (1, 2, 7):
        assert np.array_equal(atorch.causal_mask(length).numpy(), anp.causal_mask(length))
        for window in (0, 1, 3, 10):
            assert np.array_equal(
                atorch.window_mask(length, window).numpy(), anp.window_mask(length, window)
            )
    lengths = [3, 0, 5]
    assert np.array_equal(atorch.padding_mask(lengths).numpy(), anp.padding_mask(lengths))
    assert np.array_equal(atorch.padding_mask(lengths, 8).numpy(), anp.padding_mask(lengths, 8))
    edges = [(0, 1), (1, 2), (3, 1), (4, 4)]
    for directed in (False, True):
        for self_loops in (False, True):
            assert np.array_equal(
                atorch.graph_mask(edges, 6, directed, self_loops).numpy(),
                anp.graph_mask(edges, 6, directed, self_loops),
            )


@pytest.mark.parametrize("length,d_model", [(1, 2), (50, 16), (7, 5)])
def test_positional_encoding_numpy_equals_torch(length, d_model):
    np.testing.assert_allclose(
        atorch.sinusoidal_positional_encoding(length, d_model, dtype=torch.float64).numpy(),
        anp.sinusoidal_positional_encoding(length, d_model),
        **TOL64,
    )


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_self_attention_layer_numpy_equals_torch(batch):
    rng = np.random.default_rng(3)
    layer_np = anp.SelfAttention(d_model=6, d_k=4, d_v=5, seed=7)
    layer_t = atorch.SelfAttention(d_model=6, d_k=4, d_v=5, dtype=torch.float64)
    with torch.no_grad():
        for name in ("w_q", "w_k", "w_v"):
            getattr(layer_t, name).copy_(torch.from_numpy(getattr(layer_np, name)))
    x = rng.standard_normal((*batch, 5, 6))
    mask = anp.causal_mask(5)
    out_np, w_np = layer_np(x, mask=mask)
    out_t, w_t = layer_t(torch.from_numpy(x), mask=torch.from_numpy(mask))
    np.testing.assert_allclose(out_t.detach().numpy(), out_np, **TOL64)
    np.testing.assert_allclose(w_t.detach().numpy(), w_np, **TOL64)


# ---------------------------------------------------------------- against PyTorch's own SDPA


def sdpa_masks(length, batch):
    """The masks of the book, each broadcastable to (batch, heads, L, L)."""
    lengths = torch.tensor([length, 3][:batch])
    ring = [(i, (i + 1) % length) for i in range(length)]
    return {
        "none": None,
        "causal": atorch.causal_mask(length),
        "padding": atorch.padding_mask(lengths, length)[:, None],
        "window": atorch.window_mask(length, 2),
        "graph": atorch.graph_mask(ring, length),
    }


@pytest.mark.parametrize("mask_name", ["none", "causal", "padding", "window", "graph"])
@pytest.mark.parametrize("scale", [None, 0.25])
@pytest.mark.parametrize("need_weights", [True, False])
def test_attention_matches_torch_sdpa(mask_name, scale, need_weights):
    torch.manual_seed(0)
    batch, heads, length, d = 2, 3, 8, 16
    q, k, v = (torch.randn(batch, heads, length, d) for _ in range(3))
    mask = sdpa_masks(length, batch)[mask_name]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    got, _ = atorch.attention(q, k, v, mask=mask, scale=scale, need_weights=need_weights)
    torch.testing.assert_close(got, expected, **TOL32)


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_gradients_flow_and_stay_finite_with_a_fully_masked_row(need_weights):
    """Both paths: the explicit softmax, and PyTorch's fused kernel (``need_weights=False``),
    whose output attnlib zeroes after the kernel for such a row. A NaN there would reach every
    key's gradient through dS; lessons and the bench train through this path."""
    q, k, v = (torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = atorch.causal_mask(4).repeat(2, 1, 1)
    mask[0, 2] = False  # query 2 of sequence 0 sees nothing
    upstream = torch.randn(2, 4, 8, dtype=torch.float64)

    def attend(q, k, v):
        return atorch.attention(q, k, v, mask=mask, need_weights=need_weights)[0]

    grads = torch.autograd.grad(attend(q, k, v), (q, k, v), upstream)
    explicit = torch.autograd.grad(atorch.attention(q, k, v, mask=mask)[0], (q, k, v), upstream)
    for got, expected in zip(grads, explicit):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, expected)
    assert float(grads[0][0, 2].abs().sum()) == 0.0  # the hidden query's own gradient
    assert torch.autograd.gradcheck(attend, (q, k, v))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_attention_on_cuda_matches_cpu():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32) for _ in range(3))
    mask = atorch.causal_mask(64)
    expected, _ = atorch.attention(q, k, v, mask=mask)
    device = torch.device("cuda")
    for need_weights in (True, False):
        got, _ = atorch.attention(
            q.to(device),
            k.to(device),
            v.to(device),
            mask=atorch.causal_mask(64, device=device),
            need_weights=need_weights,
        )
        assert got.device.type == "cuda"
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)
