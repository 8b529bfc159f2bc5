"""Public functions and layers check their input once: one finiteness scan (one value read
back) per call, however many functions and layers the call goes through. (Tensors on a GPU are
not scanned at all, so that no call makes the host wait for the device: tests/test_cuda.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import _checks
from attnlib import numpy as anp
from attnlib import torch as atorch


def calls(backend):
    """(name, call) pairs: each call is one public entry point on valid input."""
    d, heads, length = 8, 2, 6
    x = np.random.default_rng(0).standard_normal((2, length, d))
    memory = np.random.default_rng(1).standard_normal((2, length + 1, d))
    if backend is atorch:
        x, memory = torch.from_numpy(x), torch.from_numpy(memory)
        kinds = {"seed": 0, "dtype": torch.float64}
    else:
        kinds = {"seed": 0}
    mask = backend.causal_mask(length)
    return [
        ("attention", lambda: backend.attention(x, x, x, mask)),
        ("tiled_attention", lambda: backend.tiled_attention(x, x, x, mask, block_q=4, block_k=4)),
        ("truncated_attention", lambda: backend.truncated_attention(x, x, x, 2)),
        ("SelfAttention", lambda: backend.SelfAttention(d, **kinds)(x, mask)),
        ("MultiHeadAttention", lambda: backend.MultiHeadAttention(d, heads, **kinds)(x, mask=mask)),
        (
            "LayerNorm",
            lambda: backend.LayerNorm(d, **{k: v for k, v in kinds.items() if k != "seed"})(x),
        ),
        ("FeedForward", lambda: backend.FeedForward(d, 16, **kinds)(x)),
        ("encoder block", lambda: backend.TransformerEncoderBlock(d, heads, 16, **kinds)(x, mask)),
        (
            "pre-norm encoder block",
            lambda: backend.TransformerEncoderBlock(d, heads, 16, norm_first=True, **kinds)(x),
        ),
        (
            "decoder block",
            lambda: backend.TransformerDecoderBlock(d, heads, 16, **kinds)(x, memory),
        ),
    ]


@pytest.mark.parametrize("backend", [anp, atorch], ids=["numpy", "torch"])
def test_one_finiteness_scan_per_public_call(backend, monkeypatch):
    scans = []
    original = _checks.require_all_finite

    def counted(fn, named, allow_negative_inf=False):
        scans.append(fn)
        return original(fn, named, allow_negative_inf)

    monkeypatch.setattr(_checks, "require_all_finite", counted)
    for name, call in calls(backend):
        call()  # build the layer (no scans) and call it once
        scans.clear()
        call()
        assert len(scans) == 1, f"{name}: {len(scans)} finiteness scans ({scans})"


def test_one_scan_reads_back_one_value(monkeypatch):
    """Within the scan, the tensors' sums are combined on the device and read back once."""
    reads = []
    original_bool = torch.Tensor.__bool__

    def counted_bool(self):
        reads.append(tuple(self.shape))
        return original_bool(self)

    q = torch.randn(2, 5, 4)
    monkeypatch.setattr(torch.Tensor, "__bool__", counted_bool)
    atorch.attention(q, q + 1, q + 2, need_weights=False)
    assert len(reads) == 1


@pytest.mark.parametrize("backend", [anp, atorch], ids=["numpy", "torch"])
def test_bad_values_are_still_found_and_named(backend):
    x = np.zeros((2, 5, 8))
    x[1, 3, 2] = np.inf
    x = torch.from_numpy(x) if backend is atorch else x
    block = backend.TransformerEncoderBlock(8, 2, 16, seed=0)
    if backend is atorch:
        block = block.double()
    with pytest.raises(
        ValueError, match=r"TransformerEncoderBlock: query contains NaN.*\(1, 3, 2\)"
    ):
        block(x)
    big = np.full((3, 4), 1e308)  # finite values whose sum overflows are not mistaken for inf
    big = torch.from_numpy(big) if backend is atorch else big
    backend.attention(big * 0 + 1, big * 0 + 1, big)
