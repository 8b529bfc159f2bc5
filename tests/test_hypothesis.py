"""Property-based tests: the core invariants hold across random shapes, masks and scales."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib import numpy as anp
from attnlib import torch as atorch

PROFILE = settings(max_examples=60, deadline=None)


@st.composite
def attention_inputs(draw, same_length=False):
    """q, k, v with random batch shape, lengths and widths, a random boolean mask, a scale."""
    seed = draw(st.integers(0, 2**32 - 1))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    lq = draw(st.integers(1, 9))
    lk = lq if same_length else draw(st.integers(1, 9))
    d_k, d_v = draw(st.integers(1, 6)), draw(st.integers(1, 5))
    magnitude = draw(st.sampled_from([1e-3, 1.0, 30.0]))
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*batch, lq, d_k)) * magnitude
    k = rng.standard_normal((*batch, lk, d_k)) * magnitude
    v = rng.standard_normal((*batch, lk, d_v))
    mask = rng.random((lq, lk)) < draw(st.floats(0.0, 1.0))
    return q, k, v, mask


@PROFILE
@given(attention_inputs())
def test_weights_are_distributions_and_masked_keys_get_nothing(inputs):
    q, k, v, mask = inputs
    out, weights = anp.attention(q, k, v, mask=mask)
    assert np.isfinite(out).all() and (weights >= 0).all()
    assert (weights[..., ~mask] == 0).all()
    attends = mask.any(axis=-1)
    np.testing.assert_allclose(weights.sum(-1)[..., attends], 1.0, atol=1e-12)
    assert (weights.sum(-1)[..., ~attends] == 0).all() and (out[..., ~attends, :] == 0).all()


@PROFILE
@given(attention_inputs())
def test_numpy_equals_torch(inputs):
    q, k, v, mask = inputs
    expected_out, expected_weights = anp.attention(q, k, v, mask=mask)
    tq, tk, tv, tmask = (torch.from_numpy(x) for x in (q, k, v, mask))
    out, weights = atorch.attention(tq, tk, tv, mask=tmask)
    np.testing.assert_allclose(out.numpy(), expected_out, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(weights.numpy(), expected_weights, rtol=1e-10, atol=1e-10)
    fused, _ = atorch.attention(tq, tk, tv, mask=tmask, need_weights=False)
    np.testing.assert_allclose(fused.numpy(), expected_out, rtol=1e-9, atol=1e-9)


@PROFILE
@given(attention_inputs(same_length=True), st.integers(0, 2**32 - 1))
def test_self_attention_is_permutation_equivariant(inputs, seed):
    x = inputs[0]
    perm = np.random.default_rng(seed).permutation(x.shape[-2])
    out, _ = anp.attention(x, x, x)
    out_p, _ = anp.attention(x[..., perm, :], x[..., perm, :], x[..., perm, :])
    np.testing.assert_allclose(out_p, out[..., perm, :], rtol=1e-9, atol=1e-9)


@PROFILE
@given(attention_inputs(same_length=True), st.integers(0, 12), st.booleans())
def test_truncated_equals_masked_dense(inputs, window, causal):
    q, k, v, _ = inputs
    length = q.shape[-2]
    mask = anp.window_mask(length, window)
    if causal:
        mask &= anp.causal_mask(length)
    expected, _ = anp.attention(q, k, v, mask=mask)
    np.testing.assert_allclose(
        anp.truncated_attention(q, k, v, window, causal=causal), expected, rtol=1e-9, atol=1e-9
    )
    got = atorch.truncated_attention(*(torch.from_numpy(x) for x in (q, k, v)), window, causal)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9, atol=1e-9)


@PROFILE
@given(
    st.lists(st.floats(-1e4, 1e4), min_size=1, max_size=12),
    st.floats(-1e4, 1e4),
)
def test_softmax_is_shift_invariant_and_finite_for_large_logits(values, shift):
    x = np.array(values)
    p = anp.softmax(x)
    assert np.isfinite(p).all() and abs(p.sum() - 1) < 1e-12
    np.testing.assert_allclose(anp.softmax(x + shift), p, atol=1e-9)
    np.testing.assert_allclose(atorch.softmax(torch.from_numpy(x)).numpy(), p, atol=1e-12)
    out, _ = anp.attention(x[:, None], x[:, None], x[:, None], scale=1.0)
    assert np.isfinite(out).all()
