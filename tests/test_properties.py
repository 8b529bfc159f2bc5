"""Properties the book states: weights are distributions, fully masked rows are zero,
parameter-free self-attention is permutation-equivariant, the positional encoding is the
paper's formula, masks mean what their names say."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlib import numpy as anp
from attnlib import torch as atorch


def random_mask(rng, shape):
    mask = rng.random(shape) < 0.5
    mask[..., 1, :] = False  # a query with nothing to attend to
    return mask


@pytest.mark.parametrize("seed", range(5))
def test_weights_are_distributions_or_zero(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 6, 4)) * 5
    mask = random_mask(rng, (3, 6, 6))
    out, weights = anp.attention(x, x, x, mask=mask)
    assert (weights >= 0).all()
    assert (weights[~np.broadcast_to(mask, weights.shape)] == 0).all()
    row_sums = weights.sum(-1)
    attends = mask.any(-1)
    np.testing.assert_allclose(row_sums[attends], 1.0, atol=1e-12)
    assert (row_sums[~attends] == 0).all()
    assert (out[~attends] == 0).all() and np.isfinite(out).all()


@pytest.mark.parametrize("backend", [anp, atorch], ids=["numpy", "torch"])
def test_fully_masked_everything_gives_zeros_not_nan(backend):
    x = np.ones((2, 3, 4))
    mask = np.zeros((3, 3), dtype=bool)
    if backend is atorch:
        x, mask = torch.from_numpy(x), torch.from_numpy(mask)
    out, weights = backend.attention(x, x, x, mask=mask)
    assert (np.asarray(out) == 0).all() and (np.asarray(weights) == 0).all()
    if backend is atorch:
        fast, _ = atorch.attention(x, x, x, mask=mask, need_weights=False)
        assert (fast == 0).all()


def test_softmax_is_stable_for_large_logits():
    x = np.array([1000.0, 1000.0, -1000.0])
    np.testing.assert_allclose(anp.softmax(x), [0.5, 0.5, 0.0])
    np.testing.assert_allclose(atorch.softmax(torch.tensor(x)).numpy(), [0.5, 0.5, 0.0])
    np.testing.assert_allclose(anp.softmax(x + 1e6), anp.softmax(x))  # shift invariance


@pytest.mark.parametrize("seed", range(3))
def test_parameter_free_self_attention_is_permutation_equivariant(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((7, 5))
    perm = rng.permutation(7)
    out, weights = anp.attention(x, x, x)
    out_p, weights_p = anp.attention(x[perm], x[perm], x[perm])
    np.testing.assert_allclose(out_p, out[perm], atol=1e-12)
    np.testing.assert_allclose(weights_p, weights[perm][:, perm], atol=1e-12)


def test_learned_self_attention_is_permutation_equivariant_too():
    rng = np.random.default_rng(4)
    layer = anp.SelfAttention(6, seed=1)
    x = rng.standard_normal((5, 6))
    perm = rng.permutation(5)
    np.testing.assert_allclose(layer(x[perm])[0], layer(x)[0][perm], atol=1e-12)


def test_positional_encoding_matches_the_paper_elementwise():
    length, d_model = 20, 10
    pe = anp.sinusoidal_positional_encoding(length, d_model)
    for pos in range(length):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert pe[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-12)


def test_positional_encoding_odd_width_drops_last_cosine():
    pe = anp.sinusoidal_positional_encoding(4, 5)
    assert pe.shape == (4, 5)
    assert pe[1, 4] == pytest.approx(math.sin(1 / 10000 ** (4 / 5)))


def test_masks_mean_what_they_say():
    causal = anp.causal_mask(5)
    assert all(causal[i, j] == (j <= i) for i in range(5) for j in range(5))
    window = anp.window_mask(6, 2)
    assert all(window[i, j] == (abs(i - j) <= 2) for i in range(6) for j in range(6))
    padding = anp.padding_mask([2, 4], 5)
    assert padding.shape == (2, 1, 5)
    assert padding[0, 0].tolist() == [True, True, False, False, False]
    graph = anp.graph_mask([(0, 1)], 3, directed=True, self_loops=False)
    assert graph.tolist() == [[False, True, False], [False, False, False], [False, False, False]]


def test_causal_attention_does_not_see_the_future():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 4))
    changed = x.copy()
    changed[4:] += 10.0  # change the last two tokens
    mask = anp.causal_mask(6)
    out, _ = anp.attention(x, x, x, mask=mask)
    out_changed, _ = anp.attention(changed, changed, changed, mask=mask)
    np.testing.assert_allclose(out_changed[:4], out[:4], atol=1e-12)
    assert not np.allclose(out_changed[4:], out[4:])


def test_scale_none_means_one_over_sqrt_dk():
    rng = np.random.default_rng(6)
    q, k = rng.standard_normal((3, 16)), rng.standard_normal((4, 16))
    np.testing.assert_allclose(anp.dot_product_scores(q, k), q @ k.T / 4.0)
    np.testing.assert_allclose(anp.dot_product_scores(q, k, scale=1.0), q @ k.T)


def test_additive_scores_formula():
    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((2, 3)), rng.standard_normal((4, 5))
    w_q, w_k, w = rng.standard_normal((3, 6)), rng.standard_normal((5, 6)), rng.standard_normal(6)
    scores = anp.additive_scores(q, k, w_q, w_k, w)
    for i in range(2):
        for j in range(4):
            assert scores[i, j] == pytest.approx(w @ np.tanh(q[i] @ w_q + k[j] @ w_k))


def test_self_attention_layer_is_seeded_and_shaped():
    a, b, c = (
        anp.SelfAttention(8, 4, 3, seed=0),
        anp.SelfAttention(8, 4, 3, seed=0),
        anp.SelfAttention(8, 4, 3, seed=1),
    )
    assert np.array_equal(a.w_q, b.w_q) and not np.array_equal(a.w_q, c.w_q)
    assert (a.w_q.shape, a.w_k.shape, a.w_v.shape) == ((8, 4), (8, 4), (8, 3))
    out, weights = a(np.ones((2, 5, 8)))
    assert out.shape == (2, 5, 3) and weights.shape == (2, 5, 5)
    t1, t2 = atorch.SelfAttention(8, seed=0), atorch.SelfAttention(8, seed=0)
    assert torch.equal(t1.w_q, t2.w_q)
    assert sum(p.numel() for p in t1.parameters()) == 3 * 64


def test_torch_layer_trains():
    torch.manual_seed(0)
    layer = atorch.SelfAttention(4, seed=0)
    x = torch.randn(3, 6, 4)
    target = x.flip(1)
    optimiser = torch.optim.Adam(layer.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        loss = ((layer(x)[0] - target) ** 2).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_torch_functions_follow_the_device_argument():
    device = atorch.default_device()
    assert atorch.causal_mask(3, device=device).device.type == device.type
    assert atorch.sinusoidal_positional_encoding(3, 4, device=device).device.type == device.type
    assert atorch.padding_mask(torch.tensor([1, 2], device=device)).device.type == device.type
