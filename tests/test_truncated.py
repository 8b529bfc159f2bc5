"""truncated_attention equals attention with a window mask (at the edges too, for lengths that
do not fill a block, with batch and head axes, causal or not) and never builds an L×L array."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

from attnlib import numpy as anp
from attnlib import torch as atorch

LENGTHS = [1, 2, 7, 32, 33, 64, 100, 257]
WINDOWS = [0, 1, 2, 5, 31, 32, 64, 300]


def qkv(rng, batch, length, d_k=8, d_v=6):
    return (
        rng.standard_normal((*batch, length, d_k)),
        rng.standard_normal((*batch, length, d_k)),
        rng.standard_normal((*batch, length, d_v)),
    )


def dense_reference(q, k, v, window, causal):
    mask = anp.window_mask(q.shape[-2], window)
    if causal:
        mask &= anp.causal_mask(q.shape[-2])
    return anp.attention(q, k, v, mask=mask)[0]


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("causal", [False, True])
def test_equals_masked_dense_attention(length, window, causal):
    rng = np.random.default_rng(length * 1000 + window)
    q, k, v = qkv(rng, (2, 3), length)
    expected = dense_reference(q, k, v, window, causal)
    got_np = anp.truncated_attention(q, k, v, window, causal=causal)
    np.testing.assert_allclose(got_np, expected, rtol=1e-10, atol=1e-10)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    got_t = atorch.truncated_attention(tq, tk, tv, window, causal=causal)
    np.testing.assert_allclose(got_t.numpy(), expected, rtol=1e-10, atol=1e-10)
    got_32 = atorch.truncated_attention(tq.float(), tk.float(), tv.float(), window, causal=causal)
    np.testing.assert_allclose(got_32.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch", [(), (4,), (2, 1, 3)])
def test_batch_and_scale(batch):
    rng = np.random.default_rng(1)
    q, k, v = qkv(rng, batch, 45)
    expected = anp.attention(q, k, v, mask=anp.window_mask(45, 4), scale=0.3)[0]
    np.testing.assert_allclose(anp.truncated_attention(q, k, v, 4, scale=0.3), expected, atol=1e-10)
    got = atorch.truncated_attention(*(torch.from_numpy(x) for x in (q, k, v)), 4, scale=0.3)
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-10)


def test_window_convention_is_inclusive():
    """window=w means |i − j| <= w: 2w + 1 keys in the middle, w + 1 at each edge."""
    length, window = 9, 2
    # Equal queries and keys give equal scores, so the weights are uniform over the allowed
    # keys; with the key indices as values, each output is the mean of its allowed indices.
    ones = np.ones((length, length))
    out = anp.truncated_attention(ones, ones, np.arange(length, dtype=float)[:, None], window)
    expected = [np.mean([j for j in range(length) if abs(i - j) <= window]) for i in range(length)]
    np.testing.assert_allclose(out[:, 0], expected)


def test_gradients_match_dense():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 37, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = atorch.window_mask(37, 3) & atorch.causal_mask(37)
    dense = torch.autograd.grad(atorch.attention(q, k, v, mask)[0].sum(), (q, k, v))
    banded = torch.autograd.grad(
        atorch.truncated_attention(q, k, v, 3, causal=True).sum(), (q, k, v)
    )
    for a, b in zip(dense, banded):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_numpy_memory_is_linear_in_length():
    """At L = 8192 one dense float64 L×L matrix is 512 MiB; the band needs a few MiB."""
    length, window, d = 8192, 8, 4
    rng = np.random.default_rng(2)
    q, k, v = qkv(rng, (), length, d, d)
    tracemalloc.start()
    anp.truncated_attention(q, k, v, window)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    dense_bytes = length * length * 8
    assert peak < 0.05 * dense_bytes, f"peak {peak / 2**20:.1f} MiB"


@pytest.mark.parametrize("backend", [anp, atorch], ids=["numpy", "torch"])
def test_bad_input(backend):
    def zeros(*shape):
        return np.zeros(shape) if backend is anp else torch.zeros(shape, dtype=torch.float64)

    with pytest.raises(ValueError, match=r"L_q == L_k.*q.shape=\(5, 4\) and k.shape=\(6, 4\)"):
        backend.truncated_attention(zeros(5, 4), zeros(6, 4), zeros(6, 4), 2)
    with pytest.raises(ValueError, match="window must be >= 0; got window=-1"):
        backend.truncated_attention(zeros(5, 4), zeros(5, 4), zeros(5, 4), -1)
    with pytest.raises(TypeError, match="window must be an int"):
        backend.truncated_attention(zeros(5, 4), zeros(5, 4), zeros(5, 4), 2.0)
