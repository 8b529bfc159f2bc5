"""truncated_attention equals attention with a window mask (at the edges too, for lengths that
do not fill a block, with batch and head axes, causal or not) and never builds an L×L array."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

from attnlib import _tiles, _torch_tiled
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


def assert_equals_dense_with_gradients(band_out, q, k, v, window, causal, upstream):
    """``band_out`` (computed from float64 ``q``, ``k``, ``v``) equals dense attention with the
    band as its mask, and so do the gradients of ``(band_out · upstream).sum()``: 1e-10."""
    length = q.shape[-2]
    mask = atorch.window_mask(length, window) & (atorch.causal_mask(length) if causal else True)
    dense_out = atorch.attention(q, k, v, mask)[0]
    torch.testing.assert_close(band_out, dense_out, rtol=1e-10, atol=1e-10)
    dense = torch.autograd.grad(dense_out, (q, k, v), upstream)
    banded = torch.autograd.grad(band_out, (q, k, v), upstream)
    for name, a, b in zip("qkv", dense, banded):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-10, msg=f"gradient of {name}")


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


@pytest.mark.parametrize(
    "length, window", [(37, 3), (70, 40), (200, 100), (65, 64)], ids=["w3", "w40", "w100", "w64"]
)
@pytest.mark.parametrize("causal", [False, True], ids=["both-sided", "causal"])
def test_gradients_match_dense(length, window, causal):
    """Gradients for q, k and v, with k shared by the heads and v by the batch (broadcast
    axes), equal dense attention's, for windows that reach 1, 2 and 4 blocks to each side."""
    torch.manual_seed(length + window)
    q = torch.randn(2, 3, length, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 1, length, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 3, length, 5, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 3, length, 5, dtype=torch.float64)
    band_out = atorch.truncated_attention(q, k, v, window, causal=causal)
    assert_equals_dense_with_gradients(band_out, q, k, v, window, causal, upstream)


@pytest.mark.parametrize("window, causal", [(64, False), (100, False), (64, True), (5, True)])
@pytest.mark.parametrize("length", [5000, 4992])
def test_band_plan_copies_only_the_blocks_at_the_ends(length, window, causal):
    """Every group's key windows are a view of the sequence's rows, except the groups of the
    blocks whose span reaches past an end (at most ``reach + 1`` blocks at each end, taken as
    one block with one window): only their rows are copied, with the zero padding."""
    plan = _tiles.BandPlan(length, window, causal, sequences=1)
    k = torch.randn(1, length, 8)
    padded_blocks = 0
    for group in plan.query_groups():
        tile = plan.key_tiles(group)[0]
        windows = _torch_tiled.key_windows(k, tile, k.dtype)
        is_view = windows.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()
        assert is_view == (_tiles.rows_outside(tile, length) == (0, 0))
        if not is_view:
            assert group.count == 1 and windows.shape[0] == 1  # one block, one window
            padded_blocks += -(-group.size // plan.block)
    assert 0 < padded_blocks <= 2 * plan.reach + 1
    assert plan.span == (plan.reach + 1 + (0 if causal else plan.reach)) * plan.block
    if window % plan.block == 0 and not causal:
        assert plan.span == plan.block + 2 * window  # no key outside the band but the corners


@pytest.mark.parametrize("causal", [False, True])
def test_a_gpus_band_plan_all_sequences_at_once_on_the_cpu(causal):
    """The plan ``truncated_attention`` uses on a GPU, where all sequences are scored together
    (their key windows copied) in large groups, run here on the CPU with groups small enough
    that there are several: the same output and gradients as dense attention."""
    length, window = 300, 40
    rng = np.random.default_rng(7)
    q, k, v = (torch.from_numpy(x).requires_grad_(True) for x in qkv(rng, (3,), length))
    plan = _tiles.BandPlan(length, window, causal, sequences=3, group_scores=3 * 32 * 160 * 2)
    assert plan.blocks_per_group > 1 and len(list(plan.query_groups())) > 4
    for group in plan.query_groups():  # all three sequences in one slice, in every group
        assert [range(3)[s] for s in _torch_tiled.sequence_slices(plan, 3, group)] == [range(3)]
    band_out = _torch_tiled.tiled(q, k, v, None, 8**-0.5, plan)
    upstream = torch.from_numpy(rng.standard_normal(band_out.shape))
    assert_equals_dense_with_gradients(band_out, q, k, v, window, causal, upstream)


@pytest.mark.parametrize("causal", [False, True])
def test_the_cpus_band_plan_scores_the_edges_of_several_sequences_at_once(causal):
    """On the CPU the band takes one sequence at a time away from the edges (its key windows
    are views of that sequence's rows), but at the edges, whose keys are copied anyway, as
    many as fit in the group's scores (here 1 to 5 of the 5, by edge). Output and gradients
    are still dense attention's."""
    length, window, count = 300, 40, 5
    rng = np.random.default_rng(8)
    q, k, v = (torch.from_numpy(x).requires_grad_(True) for x in qkv(rng, (count,), length))
    plan = _tiles.BandPlan(length, window, causal, sequences=1, group_scores=2 * 64 * 192)
    most_at_an_edge = 0
    for group in plan.query_groups():
        slices = _torch_tiled.sequence_slices(plan, count, group)
        sizes = [len(range(count)[s]) for s in slices]
        assert [n for s in slices for n in range(count)[s]] == list(range(count))
        tile = plan.key_tiles(group)[0]
        scores_per_sequence = group.count * group.size * tile.span
        if _tiles.rows_outside(tile, length) == (0, 0):
            assert sizes == [1] * count  # views of one sequence's rows
        else:
            assert max(sizes) == max(1, min(count, plan.group_scores // scores_per_sequence))
            most_at_an_edge = max(most_at_an_edge, max(sizes))
    assert most_at_an_edge > 1
    band_out = _torch_tiled.tiled(q, k, v, None, 8**-0.5, plan)
    upstream = torch.from_numpy(rng.standard_normal(band_out.shape))
    assert_equals_dense_with_gradients(band_out, q, k, v, window, causal, upstream)


def test_a_sequence_of_one_block_is_scored_with_the_others():
    """A sequence of up to 32 tokens is one block, whose one key window is a view for any
    number of sequences: the CPU's plan takes them all at once (lesson 16 trains on 32 of
    them), with the same result as one at a time."""
    plan = _tiles.BandPlan(32, 2, False, sequences=1)
    (group,) = plan.query_groups()
    at_once = plan.sequences_at_once(group)
    assert _torch_tiled.sequence_slices(plan, 64, group) == [slice(0, at_once)]
    rng = np.random.default_rng(9)
    q, k, v = (torch.from_numpy(x) for x in qkv(rng, (64,), 32))
    one_at_a_time = torch.stack([atorch.truncated_attention(*x, 2) for x in zip(q, k, v)])
    torch.testing.assert_close(atorch.truncated_attention(q, k, v, 2), one_at_a_time)


def test_key_gradients_need_windows_of_whole_steps():
    """The kernel adds overlapping key windows' gradients ``step`` rows at a time, which covers
    a window only if its span is whole steps (true of every plan's tiles): a tile that is not
    is refused, not summed with rows missing."""
    grad, tile_grad = torch.zeros(1, 10, 2), torch.ones(3, 3, 2)
    _torch_tiled.add_to_keys(grad, _tiles.KeyTile(0, 9, span=3, step=3), tile_grad, before=0)
    assert grad.sum() == tile_grad.sum()
    with pytest.raises(AssertionError, match="whole steps"):
        _torch_tiled.add_to_keys(grad, _tiles.KeyTile(0, 7, span=3, step=2), tile_grad, before=0)


def test_the_cpu_takes_larger_groups_only_without_gradients(monkeypatch):
    """Without gradients the CPU's groups hold ``CPU_BAND_GROUP_SCORES`` scores (fewer groups,
    less Python per call); with them ``GROUP_SCORES``, because the backward pass keeps several
    temporaries the size of a group's scores (lesson 08 measures that memory)."""
    asked = []

    def spy(*args, **kwargs):
        asked.append(kwargs["group_scores"])
        return _tiles.BandPlan(*args, **kwargs)

    monkeypatch.setattr(_tiles, "band_plan", spy)
    q = torch.randn(1, 100, 8)
    atorch.truncated_attention(q, q, q, 40)
    atorch.truncated_attention(q.requires_grad_(), q, q, 40)
    with torch.no_grad():
        atorch.truncated_attention(q, q, q, 40)
    expected = [_tiles.CPU_BAND_GROUP_SCORES, _tiles.GROUP_SCORES, _tiles.CPU_BAND_GROUP_SCORES]
    assert asked == expected
    assert _tiles.CPU_BAND_GROUP_SCORES > _tiles.GROUP_SCORES


def test_band_plans_are_made_once():
    """The same arguments give the same plan, so its tile masks (and a GPU's copies of them)
    are made on the first call only."""
    assert _tiles.band_plan(1000, 64, False, 1) is _tiles.band_plan(1000, 64, False, 1)
    assert _tiles.band_plan(1000, 64, True, 1) is not _tiles.band_plan(1000, 64, False, 1)


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
