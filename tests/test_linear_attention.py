"""Linear attention: the parallel and the recurrent forms agree, both backends agree, and both
equal the quadratic form with softmax's exp(q·k) replaced by φ(q)·φ(k)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import data
from attnlib import numpy as anp
from attnlib import torch as atorch


def quadratic_reference(q, k, v, causal):
    """The O(L²) form: weights φ(q_i)·φ(k_j), normalised over the allowed keys."""
    scores = anp.elu_feature_map(q) @ np.swapaxes(anp.elu_feature_map(k), -1, -2)
    if causal:
        scores = scores * anp.causal_mask(q.shape[-2])
    return (scores / scores.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_forms_and_backends_agree(batch, causal):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((*batch, 9, d)) for d in (5, 5, 3))
    expected = quadratic_reference(q, k, v, causal)
    np.testing.assert_allclose(anp.linear_attention(q, k, v, causal=causal), expected, atol=1e-10)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    got = atorch.linear_attention(tq, tk, tv, causal=causal)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-10)
    if causal:
        np.testing.assert_allclose(anp.linear_attention_recurrent(q, k, v), expected, atol=1e-10)
        recurrent = atorch.linear_attention_recurrent(tq, tk, tv)
        np.testing.assert_allclose(recurrent.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_non_causal_allows_cross_attention_lengths():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((4, 6)), rng.standard_normal((7, 6)), rng.standard_normal((7, 2))
    np.testing.assert_allclose(
        anp.linear_attention(q, k, v), quadratic_reference(q, k, v, False), atol=1e-12
    )


def test_feature_map_is_positive_and_matches_torch():
    x = np.linspace(-30, 30, 61)
    phi = anp.elu_feature_map(x)
    assert np.all(phi > 0)
    np.testing.assert_allclose(atorch.elu_feature_map(torch.from_numpy(x)).numpy(), phi, atol=1e-12)


def test_recurrent_state_has_a_fixed_size():
    """The recurrent form's memory does not grow with L: same state shape for any length."""
    rng = np.random.default_rng(2)
    for length in (3, 30):
        q, k, v = (rng.standard_normal((length, 4)) for _ in range(3))
        out = anp.linear_attention_recurrent(q, k, v)
        assert out.shape == (length, 4)
        # the output at i depends only on tokens <= i
        changed = v.copy()
        changed[-1] += 1.0
        np.testing.assert_allclose(anp.linear_attention_recurrent(q, k, changed)[:-1], out[:-1])


@pytest.mark.parametrize("backend", [anp, atorch], ids=["numpy", "torch"])
def test_bad_input(backend):
    def zeros(*shape):
        return np.zeros(shape) if backend is anp else torch.zeros(shape, dtype=torch.float64)

    with pytest.raises(ValueError, match=r"L_q == L_k"):
        backend.linear_attention(zeros(4, 3), zeros(5, 3), zeros(5, 2), causal=True)
    with pytest.raises(ValueError, match=r"L_q == L_k"):
        backend.linear_attention_recurrent(zeros(4, 3), zeros(5, 3), zeros(5, 2))
    with pytest.raises(ValueError, match="same last dimension d_k"):
        backend.linear_attention(zeros(4, 3), zeros(4, 2), zeros(4, 2))


def test_example_graph_follows_the_textbook():
    g = data.example_graph()
    neighbours = {name: set() for name in g.node_names}
    for i, j in g.edges:
        neighbours[g.node_names[i]].add(g.node_names[j])
        neighbours[g.node_names[j]].add(g.node_names[i])
    assert neighbours["1"] == {"5", "6", "8"} and neighbours["2"] == {"3"}
    assert g.features.shape == (8, 4)
    mask = anp.graph_mask(g.edges, 8)
    assert mask.sum() == 8 + 2 * len(g.edges)


def test_recurrent_form_keeps_float32_and_gradients_flow():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((5, 4)).astype(np.float32) for _ in range(3))
    assert anp.linear_attention_recurrent(q, k, v).dtype == np.float32
    tq, tk, tv = (torch.from_numpy(x.astype(np.float64)).requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(atorch.linear_attention_recurrent, (tq, tk, tv))
