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
