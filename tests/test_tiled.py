"""tiled_attention (the FlashAttention algorithm) equals attention for every mask kind, in both
backends, with PyTorch gradients equal to dense attention's, and never holds an L×L array,
forward or backward. truncated_attention runs on the same kernel."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib import _torch_tiled
from attnlib import numpy as anp
from attnlib import torch as atorch

L_Q, L_K = 37, 29  # lengths that fill no block exactly


def masks(rng) -> dict[str, np.ndarray]:
    """One mask of every kind the library makes, for L_q × L_k scores (a batch of 2)."""
    square = max(L_Q, L_K)
    no_keys = np.ones((L_Q, L_K), dtype=bool)
    no_keys[[0, 5, 36]] = False  # three queries with nothing to attend to
    return {
        "none": None,
        "padding": anp.padding_mask(np.array([29, 11]), L_K),  # (2, 1, L_k)
        "causal": anp.causal_mask(square)[:L_Q, :L_K],
        "window": anp.window_mask(square, 4)[:L_Q, :L_K],
        "graph": anp.graph_mask(rng.integers(0, L_K, (60, 2)), square)[:L_Q, :L_K],
        "random per sequence": rng.random((2, L_Q, L_K)) < 0.3,
        "fully masked rows": no_keys,
        "keys only (L_k,)": rng.random(L_K) < 0.5,
    }


MASK_KINDS = list(masks(np.random.default_rng(0)))
BLOCKS = [(1, 1), (5, 7), (16, 8), (256, 256)]


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("block_q, block_k", BLOCKS)
def test_equals_attention_for_every_mask(kind, block_q, block_k):
    rng = np.random.default_rng(MASK_KINDS.index(kind))
    mask = masks(rng)[kind]
    q, k = rng.standard_normal((2, 3, L_Q, 8)), rng.standard_normal((2, 3, L_K, 8))
    v = rng.standard_normal((2, 3, L_K, 5))
    if mask is not None and mask.ndim == 3:
        mask = mask[:, None]  # one mask per sequence, shared by the 3 heads
    expected = anp.attention(q, k, v, mask)[0]
    blocks = {"block_q": block_q, "block_k": block_k}
    np.testing.assert_allclose(anp.tiled_attention(q, k, v, mask, **blocks), expected, atol=1e-10)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    tmask = None if mask is None else torch.from_numpy(mask)
    got = atorch.tiled_attention(tq, tk, tv, tmask, **blocks)
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-10)
    if kind == "fully masked rows":
        assert np.all(got.numpy()[:, :, [0, 5, 36]] == 0) and np.isfinite(got.numpy()).all()


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_gradients_equal_dense_attention(kind):
    rng = np.random.default_rng(10 + MASK_KINDS.index(kind))
    mask = masks(rng)[kind]
    mask = None if mask is None else torch.from_numpy(mask[:, None] if mask.ndim == 3 else mask)
    torch.manual_seed(0)
    q = torch.randn(2, 3, L_Q, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 1, L_K, 8, dtype=torch.float64, requires_grad=True)  # broadcast over heads
    v = torch.randn(2, 3, L_K, 5, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 3, L_Q, 5, dtype=torch.float64)
    dense = torch.autograd.grad(atorch.attention(q, k, v, mask)[0], (q, k, v), upstream)
    tiled_out = atorch.tiled_attention(q, k, v, mask, block_q=8, block_k=6)
    tiled = torch.autograd.grad(tiled_out, (q, k, v), upstream)
    for name, a, b in zip("qkv", dense, tiled):
        assert a.shape == b.shape, name
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-10, msg=f"gradient of {name}")
        assert torch.isfinite(b).all()


def test_gradcheck():
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 6, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = atorch.causal_mask(6)
    assert torch.autograd.gradcheck(
        lambda q, k, v: atorch.tiled_attention(q, k, v, mask, block_q=4, block_k=4), (q, k, v)
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v: atorch.truncated_attention(q, k, v, 2, causal=True), (q, k, v)
    )


@pytest.mark.parametrize("kind", ["none", "padding", "random per sequence", "fully masked rows"])
@pytest.mark.parametrize("length_q, length_k", [(L_Q, L_K), (L_K, L_Q), (L_Q, L_Q)])
def test_causal_equals_attention_under_the_causal_mask_and_the_given_one(kind, length_q, length_k):
    """causal=True is query i seeing keys j <= i (aligned at the top left, as is_causal=True),
    added to the mask; forward in both backends, gradients in PyTorch."""
    rng = np.random.default_rng(20 + MASK_KINDS.index(kind))
    mask = masks(rng)[kind]
    if mask is not None:
        mask = (mask[:, None] if mask.ndim == 3 else mask)[..., :length_q, :length_k]
        rows, cols = length_q - mask.shape[-2], length_k - mask.shape[-1]  # where L_q > L_Q
        mask = np.pad(
            mask, [(0, 0)] * (mask.ndim - 2) + [(0, rows), (0, cols)], constant_values=True
        )
    below = np.tril(np.ones((length_q, length_k), dtype=bool))  # j <= i
    q, k = rng.standard_normal((2, 3, length_q, 8)), rng.standard_normal((2, 3, length_k, 8))
    v = rng.standard_normal((2, 3, length_k, 5))
    both = below if mask is None else mask & below
    expected = anp.attention(q, k, v, both)[0]
    got = anp.tiled_attention(q, k, v, mask, causal=True, block_q=8, block_k=6)
    np.testing.assert_allclose(got, expected, atol=1e-10)
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    tmask = None if mask is None else torch.from_numpy(mask)
    upstream = torch.from_numpy(rng.standard_normal(expected.shape))
    dense = atorch.attention(tq, tk, tv, torch.from_numpy(both))[0]
    tiled = atorch.tiled_attention(tq, tk, tv, tmask, causal=True, block_q=8, block_k=6)
    np.testing.assert_allclose(tiled.detach().numpy(), expected, atol=1e-10)
    grads = torch.autograd.grad(tiled, (tq, tk, tv), upstream)
    for name, a, b in zip("qkv", torch.autograd.grad(dense, (tq, tk, tv), upstream), grads):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-10, msg=f"gradient of {name}")


def test_causal_agrees_with_pytorch_is_causal_when_the_lengths_differ():
    torch.manual_seed(3)
    for length_q, length_k in [(40, 70), (70, 40)]:
        q, k, v = (
            torch.randn(2, 4, length_q, 16),
            torch.randn(2, 4, length_k, 16),
            torch.randn(2, 4, length_k, 16),
        )
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        got = atorch.tiled_attention(q, k, v, causal=True, block_q=16, block_k=16)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def counting(monkeypatch, module, name: str) -> list:
    """Replace ``module.name`` by a wrapper that records each call; return the record."""
    calls, original = [], getattr(module, name)

    def wrapper(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.parametrize("causal", [False, True])
def test_causal_scores_only_the_tiles_on_and_below_the_diagonal(monkeypatch, causal):
    """4 blocks of 256 queries and keys: 16 tiles, of which causal=True scores 10 (the 4 on the
    diagonal, the 6 below it), in the NumPy loop and in each pass of the PyTorch kernel."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1024, 8)) for _ in range(3))
    numpy_tiles = counting(monkeypatch, anp, "_tile_mask")
    anp.tiled_attention(q, k, v, causal=causal)
    torch_tiles = counting(monkeypatch, _torch_tiled, "tile_scores")
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    atorch.tiled_attention(tq, tk, tv, causal=causal).sum().backward()
    tiles = 10 if causal else 16
    assert len(numpy_tiles) == tiles and len(torch_tiles) == 2 * tiles  # forward + backward


def test_float32_agrees_with_pytorch_sdpa():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 4, 300, 32) for _ in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    got = atorch.tiled_attention(q, k, v, atorch.causal_mask(300), block_q=64, block_k=48)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    batch=st.lists(st.integers(1, 3), max_size=2).map(tuple),
    lengths=st.tuples(st.integers(1, 40), st.integers(1, 40)),
    blocks=st.tuples(st.integers(1, 50), st.integers(1, 50)),
    density=st.floats(0.0, 1.0),
    magnitude=st.sampled_from([1e-3, 1.0, 30.0]),
)
def test_random_shapes_blocks_and_masks(seed, batch, lengths, blocks, density, magnitude):
    rng = np.random.default_rng(seed)
    (l_q, l_k), (block_q, block_k) = lengths, blocks
    q = rng.standard_normal((*batch, l_q, 4)) * magnitude
    k = rng.standard_normal((*batch, l_k, 4)) * magnitude
    v = rng.standard_normal((*batch, l_k, 3))
    mask = rng.random((l_q, l_k)) < density
    expected = anp.attention(q, k, v, mask)[0]
    got = anp.tiled_attention(q, k, v, mask, block_q=block_q, block_k=block_k)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    tensors = [torch.from_numpy(x) for x in (q, k, v)]
    got_t = atorch.tiled_attention(
        *tensors, torch.from_numpy(mask), block_q=block_q, block_k=block_k
    )
    np.testing.assert_allclose(got_t.numpy(), expected, rtol=1e-9, atol=1e-9)


def test_numpy_memory_is_linear_in_length():
    """At L = 4096 one float64 L×L matrix is 128 MiB; tiled attention holds a few tiles."""
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 4096, 16))
    tracemalloc.start()
    anp.tiled_attention(q, k, v, block_q=128, block_k=128)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 0.02 * 4096 * 4096 * 8, f"peak {peak / 2**20:.1f} MiB"


@pytest.mark.parametrize(
    "call",
    [
        lambda q, k, v: atorch.tiled_attention(q, k, v, block_q=64, block_k=64),
        lambda q, k, v: atorch.truncated_attention(q, k, v, 16),
    ],
    ids=["tiled", "truncated"],
)
def test_backward_saves_no_square_array(call):
    """What autograd keeps for the backward pass is O(L·d): q, k, v, the output and one
    log-sum-exp per row, never the L×L weights."""
    length, d = 1024, 16
    q, k, v = (torch.randn(length, d, requires_grad=True) for _ in range(3))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = call(q, k, v)
    assert saved and max(t.numel() for t in saved) <= length * d
    out.sum().backward()  # and the backward runs
    assert q.grad.shape == q.shape


@pytest.mark.parametrize(
    "call",
    [
        lambda q, k, v: atorch.tiled_attention(q, k, v, block_q=3, block_k=3),
        lambda q, k, v: atorch.truncated_attention(q, k, v, 2),
    ],
    ids=["tiled", "truncated"],
)
def test_a_second_derivative_is_refused_clearly(call):
    """The backward pass is not itself differentiable (``once_differentiable``): a gradient
    taken with ``create_graph=True`` can be computed, but differentiating it again raises
    PyTorch's clear error instead of failing inside the kernel's in-place products."""
    q, k, v = (torch.randn(1, 8, 4, dtype=torch.float64, requires_grad=True) for _ in "qkv")
    (grad_q,) = torch.autograd.grad((call(q, k, v) ** 2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice a function that was marked"):
        grad_q.sum().backward()


@pytest.mark.parametrize("b", [anp, atorch], ids=["numpy", "torch"])
def test_bad_input_gets_the_errors_of_attention(b):
    def zeros(*shape, dtype=np.float64):
        z = np.zeros(shape, dtype=dtype)
        return z if b is anp else torch.from_numpy(z)

    bad_calls = [
        (zeros(2, 5, 8), zeros(2, 5, 4), zeros(2, 5, 4)),
        (zeros(5, 4), zeros(6, 4), zeros(5, 3)),
        (zeros(4), zeros(4), zeros(4)),
        (zeros(5, 4, dtype=np.int64), zeros(5, 4), zeros(5, 4)),
        (zeros(5, 4), zeros(6, 4), zeros(6, 4), zeros(6, 6, dtype=bool)),
        (zeros(5, 4), zeros(5, 4), zeros(5, 4), zeros(5, 5)),
    ]
    for args in bad_calls:
        with pytest.raises((ValueError, TypeError)) as dense:
            b.attention(*args)
        with pytest.raises(dense.type) as tiled:
            b.tiled_attention(*args)
        assert str(tiled.value) == str(dense.value).replace("attention:", "tiled_attention:", 1)
    nan = zeros(5, 4)
    nan[2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"tiled_attention: k contains NaN.*index \(2, 1\)"):
        b.tiled_attention(zeros(5, 4), nan, zeros(5, 4))
    with pytest.raises(ValueError, match="tiled_attention: block_q must be >= 1; got block_q=0"):
        b.tiled_attention(zeros(5, 4), zeros(5, 4), zeros(5, 4), block_q=0)
    with pytest.raises(TypeError, match="tiled_attention: block_k must be an int"):
        b.tiled_attention(zeros(5, 4), zeros(5, 4), zeros(5, 4), block_k=2.0)
