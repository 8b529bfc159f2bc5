"""Edge cases with a documented, tested result or a clear error: empty sequences, complex
dtypes, NaN and infinity, tensors on different devices, half precision."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import numpy as anp
from attnlib import torch as atorch

BACKENDS = pytest.mark.parametrize("b", [anp, atorch], ids=["numpy", "torch"])


def arrays(b, *shapes, dtype=np.float64, fill=0.0):
    made = [np.full(shape, fill, dtype=dtype) for shape in shapes]
    return made if b is anp else [torch.from_numpy(a) for a in made]


# --------------------------------------------------------------------------- empty sequences


@BACKENDS
def test_no_keys_means_zero_output(b):
    """L_k = 0: every query has nothing to attend to, so (as with a fully masked row) it gets
    a zero output; the weights are an empty (L_q, 0) array."""
    out, weights = b.attention(*arrays(b, (3, 4), (0, 4), (0, 2)))
    assert tuple(out.shape) == (3, 2) and tuple(weights.shape) == (3, 0)
    assert float(np.abs(np.asarray(out)).sum()) == 0.0


@BACKENDS
def test_no_keys_in_tiled_attention_means_zero_output_too(b):
    """The tiled kernel has no key tile to visit: it gives dense attention's zeros, with a
    batch and a mask too (it used to fail)."""
    q, k, v = arrays(b, (2, 3, 4), (1, 0, 4), (1, 0, 2), fill=1.0)
    mask = arrays(b, (3, 0), dtype=bool)[0]
    for given in (None, mask):
        out = b.tiled_attention(q, k, v, given, block_q=2, block_k=2)
        assert tuple(out.shape) == (2, 3, 2)
        assert float(np.abs(np.asarray(out)).sum()) == 0.0


@BACKENDS
def test_no_queries_means_empty_output(b):
    out, weights = b.attention(*arrays(b, (0, 4), (5, 4), (5, 2)))
    assert tuple(out.shape) == (0, 2) and tuple(weights.shape) == (0, 5)


@BACKENDS
def test_empty_sequence_in_banded_and_linear_attention(b):
    q, k, v = arrays(b, (2, 0, 4), (2, 0, 4), (2, 0, 3))
    assert tuple(b.truncated_attention(q, k, v, 3).shape) == (2, 0, 3)
    assert tuple(b.linear_attention(q, k, v, causal=True).shape) == (2, 0, 3)
    assert tuple(b.linear_attention_recurrent(q, k, v).shape) == (2, 0, 3)


@BACKENDS
def test_no_keys_in_linear_attention_means_zero_output(b):
    """As in every attention function: a query with no keys gets zeros, not 0 / 0 = NaN."""
    out = b.linear_attention(*arrays(b, (3, 4), (0, 4), (0, 2), fill=1.0))
    assert tuple(out.shape) == (3, 2) and float(np.abs(np.asarray(out)).sum()) == 0.0


@BACKENDS
@pytest.mark.parametrize("kind", ["tiled", "truncated", "attention", "linear"])
def test_an_empty_batch_gives_an_empty_output(b, kind):
    """No sequences at all: an empty result of the right shape (the band plan divided by the
    number of sequences, and the tiled kernel could not reshape nothing)."""
    q, k, v = arrays(b, (0, 5, 4), (0, 5, 4), (0, 5, 3), fill=1.0)
    calls = {
        "tiled": lambda: b.tiled_attention(q, k, v, block_q=2, block_k=2),
        "truncated": lambda: b.truncated_attention(q, k, v, 1),
        "attention": lambda: b.attention(q, k, v)[0],
        "linear": lambda: b.linear_attention(q, k, v),
    }
    assert tuple(calls[kind]().shape) == (0, 5, 3)


@pytest.mark.parametrize("kind", ["tiled", "truncated"])
def test_an_empty_batch_has_empty_gradients(kind):
    q = torch.ones(0, 5, 4, requires_grad=True)
    k, v = torch.ones(1, 5, 4, requires_grad=True), torch.ones(0, 5, 3, requires_grad=True)
    if kind == "tiled":
        out = atorch.tiled_attention(q, k, v, block_q=2, block_k=2)
    else:
        out = atorch.truncated_attention(q, k.expand(0, 5, 4), v, 1)
    out.sum().backward()
    assert q.grad.shape == q.shape and v.grad.shape == v.shape
    assert k.grad is None or float(k.grad.abs().sum()) == 0.0


@BACKENDS
def test_masks_need_at_least_one_position(b):
    with pytest.raises(ValueError, match="causal_mask: length must be >= 1; got length=0"):
        b.causal_mask(0)
    with pytest.raises(ValueError, match="window_mask: length must be >= 1"):
        b.window_mask(0, 1)


# --------------------------------------------------------------------------- dtypes


@BACKENDS
@pytest.mark.parametrize("dtype", [np.complex128, np.int32, np.bool_])
def test_non_float_dtypes_are_refused_by_name(b, dtype):
    q, k, v = arrays(b, (3, 4), (3, 4), (3, 2))
    (bad,) = arrays(b, (3, 4), dtype=dtype)
    with pytest.raises(TypeError, match=r"attention: q must be a floating-point array"):
        b.attention(bad, k, v)
    with pytest.raises(TypeError, match=r"softmax: x must be a floating-point array"):
        b.softmax(bad)


@pytest.mark.parametrize(
    "dtype, tolerance", [(torch.float16, 5e-3), (torch.bfloat16, 3e-2)], ids=["fp16", "bf16"]
)
def test_half_precision_stays_close_to_float64(dtype, tolerance):
    """float16 keeps about 3 decimal digits, bfloat16 about 2: the stated tolerances."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 16, dtype=torch.float64) for _ in range(3))
    mask = atorch.causal_mask(40)
    expected, _ = atorch.attention(q, k, v, mask)
    half = [x.to(dtype) for x in (q, k, v)]
    for need_weights in (True, False):
        out, _ = atorch.attention(*half, mask, need_weights=need_weights)
        assert out.dtype == dtype
        torch.testing.assert_close(out.double(), expected, rtol=tolerance, atol=tolerance)
    banded = atorch.truncated_attention(*half, 5)
    reference = atorch.truncated_attention(q, k, v, 5)
    torch.testing.assert_close(banded.double(), reference, rtol=tolerance, atol=tolerance)
    layer = atorch.MultiHeadAttention(16, 4, seed=0, dtype=dtype)
    assert torch.isfinite(layer(half[0])[0]).all()


HALF_L = 1024  # keys: 8 tiles of 128, or a band of 9 key blocks of 32 per query block
TILED_CALLS = {
    "tiled": lambda q, k, v: atorch.tiled_attention(q, k, v, block_k=128),
    "tiled causal": lambda q, k, v: atorch.tiled_attention(
        q, k, v, atorch.causal_mask(HALF_L), block_k=128
    ),
    "band": lambda q, k, v: atorch.truncated_attention(q, k, v, 100),
    "band causal": lambda q, k, v: atorch.truncated_attention(q, k, v, 100, causal=True),
}
DENSE_MASKS = {
    "tiled": None,
    "tiled causal": atorch.causal_mask(HALF_L),
    "band": atorch.window_mask(HALF_L, 100),
    "band causal": atorch.window_mask(HALF_L, 100) & atorch.causal_mask(HALF_L),
}


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest deviation from ``expected``, relative to its largest entry."""
    got, expected = got.detach().double(), expected.detach()
    return float((got - expected).abs().max() / expected.abs().max())


@pytest.mark.parametrize(
    "dtype, tolerance", [(torch.float16, 7e-4), (torch.bfloat16, 6e-3)], ids=["fp16", "bf16"]
)
@pytest.mark.parametrize("kind", TILED_CALLS)
def test_half_precision_over_many_tiles_stays_within_rounding(kind, dtype, tolerance):
    """Over many tiles, float16 and bfloat16 output and gradients stay within the rounding of
    the result (half a unit in the last place: 4.9e-4 in fp16, 3.9e-3 in bf16, relative to
    the largest entry) of float64 dense attention on the same inputs, because the kernel keeps
    its scores, running state and log-sum-exp in float32. Measured here: at most 4.5e-4
    (fp16) and 3.6e-3 (bf16). With that state in the input dtype the worst error of each case
    was 1.7e-3 … 3.3e-3 (fp16) and 1.4e-2 … 2.9e-2 (bf16), in the gradients, whose weights
    are recomputed from the log-sum-exp."""
    torch.manual_seed(0)
    q, k, v, upstream = (torch.randn(1, HALF_L, 64).to(dtype) for _ in range(4))
    exact = [x.double().requires_grad_(True) for x in (q, k, v)]
    expected = atorch.attention(*exact, DENSE_MASKS[kind])[0]
    expected_grads = torch.autograd.grad(expected, exact, upstream.double())
    half = [x.requires_grad_(True) for x in (q, k, v)]
    got = TILED_CALLS[kind](*half)
    grads = torch.autograd.grad(got, half, upstream)
    assert got.dtype == dtype and all(g.dtype == dtype for g in grads)
    errors = {"output": relative_error(got, expected)}
    for name, g, e in zip("qkv", grads, expected_grads):
        errors[f"gradient of {name}"] = relative_error(g, e)
    assert max(errors.values()) < tolerance, errors


def test_half_precision_softmax_survives_huge_logits():
    x = torch.tensor([1e4, -1e4, 3.0], dtype=torch.float16)
    p = atorch.softmax(x)
    assert torch.isfinite(p).all() and p.tolist() == [1.0, 0.0, 0.0]


# --------------------------------------------------------------------------- NaN and infinity


@BACKENDS
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("argument", ["q", "k", "v"])
def test_non_finite_inputs_are_refused_by_name(b, value, argument):
    q, k, v = arrays(b, (5, 3), (5, 3), (5, 2), fill=1.0)
    {"q": q, "k": k, "v": v}[argument][1, 1] = value
    calls = {
        "attention": b.attention,
        "truncated_attention": lambda q, k, v: b.truncated_attention(q, k, v, 1),
        "linear_attention": b.linear_attention,
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=rf"{name}: {argument} contains NaN or infinite"):
            call(q, k, v)


@BACKENDS
def test_softmax_allows_minus_infinity_but_not_nan(b):
    (x,) = arrays(b, (3,))
    x[0], x[1], x[2] = -np.inf, 0.0, 1.0
    p = np.asarray(b.softmax(x))
    np.testing.assert_allclose(p, [0.0, 0.26894142, 0.73105858], atol=1e-8)
    x[0] = np.nan
    with pytest.raises(ValueError, match=r"softmax: x contains NaN or infinite values .*\(0,\)"):
        b.softmax(x)
    x[0] = np.inf
    with pytest.raises(ValueError, match="softmax: x contains NaN or infinite"):
        b.softmax(x)


@BACKENDS
def test_layers_refuse_non_finite_inputs(b):
    (x,) = arrays(b, (2, 5, 8), fill=0.5)
    x[1, 3, 0] = np.nan
    for layer in (b.SelfAttention(8, seed=0), b.MultiHeadAttention(8, 2, seed=0)):
        with pytest.raises(ValueError, match="contains NaN or infinite values"):
            layer(x)
    with pytest.raises(ValueError, match=r"LayerNorm: x contains NaN .*\(1, 3, 0\)"):
        b.LayerNorm(8)(x)


def test_finite_inputs_never_produce_nan():
    """Extreme but finite inputs, fully masked rows, huge scales: no NaN comes out."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((6, 4)) * 1e3
    mask = rng.random((6, 6)) < 0.3
    mask[2] = False
    for scale in (None, 1e3, 1e-6):
        out, weights = anp.attention(q, q, q, mask=mask, scale=scale)
        assert np.isfinite(out).all() and np.isfinite(weights).all()
        t_out, t_weights = atorch.attention(
            *(torch.from_numpy(x) for x in (q, q, q, mask)), scale=scale
        )
        assert torch.isfinite(t_out).all() and torch.isfinite(t_weights).all()


# --------------------------------------------------------------------------- devices


def test_tensors_on_different_devices_are_refused_by_name():
    """The "meta" device stands in for a GPU: no data, but a different device."""
    cpu, meta = torch.zeros(3, 4), torch.zeros(3, 4, device="meta")
    with pytest.raises(
        ValueError, match="attention: all tensors must be on one device; got q on cpu, k on meta"
    ):
        atorch.attention(cpu, meta, cpu)
    with pytest.raises(ValueError, match="mask on meta"):
        atorch.attention(cpu, cpu, cpu, mask=torch.ones(3, 3, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match="one device"):
        atorch.truncated_attention(cpu, cpu, meta, 1)
