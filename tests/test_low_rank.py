"""Low-rank (Linformer-style) attention: exact with an invertible full-rank projection, equal
between backends, and the same as attention over the projected keys and values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import numpy as anp
from attnlib import torch as atorch


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_definition_and_backends(batch):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((*batch, 12, d)) for d in (4, 4, 3))
    e, f = rng.standard_normal((5, 12)) / 5, rng.standard_normal((5, 12)) / 5
    out, weights = anp.low_rank_attention(q, k, v, e, f)
    expected_out, expected_weights = anp.attention(q, e @ k, f @ v)
    np.testing.assert_allclose(out, expected_out, atol=1e-12)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-12)
    assert weights.shape == (*batch, 12, 5)
    t_out, t_weights = atorch.low_rank_attention(*(torch.from_numpy(x) for x in (q, k, v, e, f)))
    np.testing.assert_allclose(t_out.numpy(), out, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(t_weights.numpy(), weights, rtol=1e-10, atol=1e-10)


def test_identity_projection_is_exact_and_a_small_rank_is_not():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((64, 8)) for _ in range(3))
    exact, _ = anp.attention(q, k, v)
    np.testing.assert_allclose(anp.low_rank_attention(q, k, v, np.eye(64))[0], exact, atol=1e-12)
    e = rng.standard_normal((4, 64)) / 2.0
    error = np.abs(anp.low_rank_attention(q, k, v, e)[0] - exact).mean()
    assert error > 0.05  # a rank-4 sketch of 64 keys is only an approximation


@pytest.mark.parametrize("backend", [anp, atorch], ids=["numpy", "torch"])
def test_projection_shape_is_checked(backend):
    def zeros(*shape):
        return np.zeros(shape) if backend is anp else torch.zeros(shape, dtype=torch.float64)

    with pytest.raises(ValueError, match=r"projection_k must have shape \(rank, L_k=6\)"):
        backend.low_rank_attention(zeros(6, 4), zeros(6, 4), zeros(6, 2), zeros(3, 5))
    with pytest.raises(ValueError, match=r"projection_v must have shape \(rank, L_k=6\)"):
        backend.low_rank_attention(zeros(6, 4), zeros(6, 4), zeros(6, 2), zeros(3, 6), zeros(6))


@pytest.mark.parametrize("length, rank", [(6, 3), (7, 3), (5, 5), (9, 1)])
def test_segment_means_average_every_token_once(length, rank):
    projection = anp.segment_means(length, rank)
    assert projection.shape == (rank, length)
    assert np.allclose(projection.sum(axis=1), 1.0)  # a mean in every row
    assert np.all((projection > 0).sum(axis=0) == 1)  # every token in exactly one segment
    assert np.allclose(atorch.segment_means(length, rank, dtype=torch.float64).numpy(), projection)


def test_segment_means_rank_above_length_is_refused():
    with pytest.raises(ValueError, match="rank=5 must not exceed the number of tokens, 4"):
        anp.segment_means(4, 5)


def test_low_rank_layer_matches_between_backends_and_function():
    torch_layer = atorch.LowRankSelfAttention(8, max_len=12, rank=3, seed=1, dtype=torch.float64)
    numpy_layer = anp.LowRankSelfAttention(8, max_len=12, rank=3, seed=1)
    for name in ("w_q", "w_k", "w_v", "projection_k", "projection_v"):
        setattr(numpy_layer, name, getattr(torch_layer, name).detach().numpy().copy())
    x = np.random.default_rng(2).normal(size=(2, 10, 8))  # 10 of the 12 positions
    out, weights = numpy_layer(x)
    out_t, weights_t = torch_layer(torch.from_numpy(x))
    assert out.shape == (2, 10, 8) and weights.shape == (2, 10, 3)
    assert np.allclose(out, out_t.detach().numpy(), atol=1e-12)
    projection = numpy_layer.projection_k[:, :10]
    want, _ = anp.low_rank_attention(
        x @ numpy_layer.w_q, x @ numpy_layer.w_k, x @ numpy_layer.w_v, projection
    )
    assert np.allclose(out, want)


def test_low_rank_layer_learns_its_projections():
    """The projections get gradients and move: Linformer's E and F are learned, not fixed."""
    layer = atorch.LowRankSelfAttention(4, max_len=6, rank=2, seed=0, dtype=torch.float64)
    start = layer.projection_k.detach().clone()
    x = torch.randn(3, 6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    loss = (layer(x)[0] - x).pow(2).mean()
    loss.backward()
    assert layer.projection_k.grad.abs().sum() > 0 and layer.projection_v.grad.abs().sum() > 0
    optimizer.step()
    assert not torch.equal(layer.projection_k.detach(), start)


def test_low_rank_layer_refuses_a_longer_sequence():
    layer = anp.LowRankSelfAttention(4, max_len=6, rank=2)
    with pytest.raises(ValueError, match="length=7 exceeds max_len=6"):
        layer(np.ones((7, 4)))
