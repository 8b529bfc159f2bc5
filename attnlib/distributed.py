r"""Ring attention: exact attention of a sequence too long for one process, split across
several processes of a ``torch.distributed`` group (Liu et al., 2023, "Ring Attention with
Blockwise Transformers for Near-Infinite Context").

**The layout.** A sequence of ``L`` tokens is cut into ``P`` shards of ``n = L/P`` tokens, one
per process. Process ``r`` holds the queries, keys and values of its own shard, ``(B, H, n, d)``
each (any leading axes will do: tokens are rows), and computes the output rows of its own
queries. By default a shard is contiguous: process ``r`` holds positions ``r·n … (r+1)·n − 1``
(``layout="contiguous"``). ``split_sequence`` cuts a whole sequence into the shards of a layout
and ``join_shards`` puts them back together.

**The ring.** A query needs every key. So the key and value shards travel round the processes
in a ring: at step ``s = 0 … P−1`` process ``r`` holds the keys and values of process
``(r − s) mod P``, folds them into its queries' running state, and passes them on to process
``r + 1`` while it receives the next ones from ``r − 1``. The exchange of step ``s + 1`` is
started (``torch.distributed.batch_isend_irecv``) *before* the block of step ``s`` is
computed, so that sending and computing can overlap (where they run side by side; no test
measures it). After ``P`` steps every query has met every
key, and no process ever held more than two key shards or one tile of ``(n/2) × (n/2)``
scores (per sequence) at a time.

**The running state** is the online softmax of tiled attention (``attnlib.torch.tiled_attention``,
the same ``OnlineSoftmax``): each query row keeps a running maximum ``m``, a running sum ``ℓ``
and an unnormalised output ``y``; a block of scores ``s_j`` (in base 2, as in the tiled kernel)
updates them as

.. math:: m' = \max(m, \max_j s_j), \quad
          \ell \leftarrow 2^{m - m'}\,\ell + \textstyle\sum_j 2^{s_j - m'}, \quad
          y \leftarrow 2^{m - m'}\,y + \textstyle\sum_j 2^{s_j - m'}\, v_j ,

and the output is ``y / ℓ``, exactly softmax attention, in whatever order the blocks arrive.
The state is float32 for float16 and bfloat16 inputs (float64 for float64).

**The backward pass** runs the ring again. Each process recomputes its blocks' weights ``W``
(FlashAttention's ``P``) from the log-sum-exp ``lse = m + log₂ ℓ`` saved by the forward pass,
``W = 2^{S − lse}``, and with ``D = rowsum(dO ∘ O)`` and the scale ``s``:

.. math:: dS = W \circ (dO\,V^\top - D), \quad dQ \mathrel{+}= s\,dS\,K, \quad
          dK \mathrel{+}= s\,dS^\top Q, \quad dV \mathrel{+}= W^\top dO .

``dQ`` stays home. ``dK`` and ``dV`` belong to the key shard: they travel round the ring with
it, each process adding its queries' share, and arrive back at the shard's own process after
``P`` hops.

**Causal attention, balanced.** With a causal mask and contiguous shards, process 0's queries
need only its own keys while process ``P − 1``'s need all of them: the first process idles
while the last does all the work. ``layout="balanced"`` cuts the sequence into ``2P`` chunks
and gives process ``r`` chunks ``r`` and ``2P − 1 − r``, one from each end (the zig-zag
layout, used for the context parallelism of Llama 3, Dubey et al., 2024; striped attention,
Brandon et al., 2023, balances the work another way, giving each process every P-th token):
then every process computes the same number of tiles. In both layouts a shard is two chunks,
and a *tile* is one chunk of queries times one chunk of keys; tiles entirely above the
diagonal are skipped. ``tile_counts`` counts the tiles
of each process without running anything, and a ``RingStats`` passed to ``ring_attention``
counts those it computes and the bytes it sends at each step.

**Memory and messages.** A process holds its own q, k, v and output shards, the key and value
shards of the current step and of the next (arriving while it computes), and one tile of
scores at a time, ``(n/2) × (n/2)`` for each of the ``B·H`` sequences (two in the backward
pass): memory ``O(n·d + n²/4)`` against dense attention's ``O(L·d + L²)`` in one process. Each
tile is computed as explicit attention computes it, a whole block of scores in one matrix
product, which keeps the code short; production rings (Ring Attention; the
ring-flash-attention library) run a FlashAttention kernel at each step instead and merge its
output and log-sum-exp into the running result with the same online-softmax merge, in memory
``O(n·d)``. At each forward step but the last a process sends its key and value shards,
``B·H·n·(d_k + d_v)`` numbers; at each backward step also their gradients
(``RingStats.sent_bytes``), in the working dtype: float32 for float16 or bfloat16 inputs, so
that a backward step then sends three times a forward step's bytes.

**Starting processes.** ``launch(fn, P, *args)`` starts ``P`` local processes joined in a
``gloo`` group that talks over the loopback interface only, and returns what ``fn(*args)``
returned in each, rank by rank (from a notebook too: see ``launch`` for which functions it
can run on which system).
``python -m attnlib.distributed`` checks ring attention against dense attention, in local
processes or under ``torchrun`` (``main``).

>>> x = torch.arange(8.0).reshape(8, 1)  # 8 tokens of dimension 1
>>> [s.flatten().tolist() for s in split_sequence(x, 2, layout="balanced")]
[[0.0, 1.0, 6.0, 7.0], [2.0, 3.0, 4.0, 5.0]]
>>> [tile_counts(4, 16, layout=layout, causal=True) for layout in ("contiguous", "balanced")]
[[3, 7, 11, 15], [9, 9, 9, 9]]
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import pickle
import queue
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as multiprocessing
from torch.autograd.function import once_differentiable

from . import _checks, bench
from . import torch as attn
from ._torch_tiled import LOG2_E, OnlineSoftmax, tile_gradients, working_dtype

__all__ = [
    "LAYOUTS",
    "ring_attention",
    "split_sequence",
    "join_shards",
    "shard_chunks",
    "ring_plan",
    "tile_counts",
    "score_counts",
    "Tile",
    "RingStats",
    "launch",
    "compare_with_dense",
    "dense_reference",
    "peak_memory_bytes",
    "main",
]

#: The two ways of cutting the sequence into shards (``layout=``): contiguous, or balanced
#: (each process holds chunk r and chunk 2P - 1 - r of 2P, so that causal work is equal).
LAYOUTS = ("contiguous", "balanced")


# --------------------------------------------------------------------------- the layouts


def shard_chunks(rank: int, world_size: int, length: int, layout: str = "contiguous"):
    """The two chunks of process ``rank``'s shard, as ``(start, stop)`` positions of the whole
    sequence, in the order the shard stores them (empty chunks left out).

    ``"contiguous"``: the shard ``r·n … (r+1)·n − 1`` (``n = L/P``), cut in two halves.
    ``"balanced"``: chunks ``r`` and ``2P − 1 − r`` of ``2P`` chunks of ``L/(2P)`` tokens.

    >>> shard_chunks(0, 4, 16, "contiguous"), shard_chunks(0, 4, 16, "balanced")
    ([(0, 2), (2, 4)], [(0, 2), (14, 16)])
    """
    _check_layout_length("shard_chunks", length, world_size, layout)
    if layout == "contiguous":
        size = length // world_size
        start, middle = rank * size, rank * size + (size + 1) // 2
        chunks = [(start, middle), (middle, start + size)]
    else:
        size = length // (2 * world_size)
        last = 2 * world_size - 1 - rank
        chunks = [(rank * size, (rank + 1) * size), (last * size, (last + 1) * size)]
    return [(a, b) for a, b in chunks if b > a]


def split_sequence(x: torch.Tensor, world_size: int, layout: str = "contiguous"):
    """The ``world_size`` shards of a whole sequence ``x`` ``(..., L, d)``, process 0's first:
    a list of ``(..., L/P, d)`` tensors (copies). ``L`` must be divisible by ``P``
    (``"contiguous"``) or by ``2P`` (``"balanced"``).

    >>> [s.flatten().tolist() for s in split_sequence(torch.arange(6.0)[:, None], 3)]
    [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    """
    fn = "split_sequence"
    _checks.require_ndim(fn, "x", x, 2, "(..., L, d)")
    _checks.require_positive_int(fn, "world_size", world_size)
    length = x.shape[-2]
    _check_layout_length(fn, length, world_size, layout)
    return [
        torch.cat([x[..., a:b, :] for a, b in shard_chunks(r, world_size, length, layout)], -2)
        for r in range(world_size)
    ]


def join_shards(shards: Sequence[torch.Tensor], layout: str = "contiguous") -> torch.Tensor:
    """The whole sequence ``(..., L, d)`` from its shards ``(..., L/P, d)``, process 0's first:
    the inverse of ``split_sequence``.

    >>> x = torch.randn(2, 12, 3)
    >>> torch.equal(join_shards(split_sequence(x, 3, "balanced"), "balanced"), x)
    True
    """
    fn = "join_shards"
    _checks.check_choice(fn, "layout", layout, LAYOUTS)
    if not shards:
        raise ValueError(f"{fn}: shards must hold one tensor per process; got none")
    shapes = {tuple(s.shape) for s in shards}
    if len(shapes) > 1:
        got = ", ".join(_checks.shape_str(s) for s in shards)
        raise ValueError(f"{fn}: every shard must have the same shape (..., L/P, d); got {got}")
    world_size, size = len(shards), shards[0].shape[-2]
    pieces = []  # (start, rows) of every chunk, put in order of position below
    for rank, shard in enumerate(shards):
        offset = 0
        for a, b in shard_chunks(rank, world_size, size * world_size, layout):
            pieces.append((a, shard[..., offset : offset + b - a, :]))
            offset += b - a
    return torch.cat([rows for _, rows in sorted(pieces, key=lambda p: p[0])], -2)


def _check_layout_length(fn: str, length: int, world_size: int, layout: str) -> None:
    """``L`` divisible by ``P`` (contiguous) or ``2P`` (balanced), at least one token a shard."""
    _checks.check_choice(fn, "layout", layout, LAYOUTS)
    parts = world_size if layout == "contiguous" else 2 * world_size
    if length < parts or length % parts:
        how = "P" if layout == "contiguous" else "2P (two chunks per process)"
        raise ValueError(
            f"{fn}: layout={layout!r} needs a sequence length L divisible by {how} = {parts}, "
            f"at least one token per {'shard' if layout == 'contiguous' else 'chunk'}; "
            f"got L={length} for P={world_size} processes"
        )


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Tile:
    """One tile of a ring step: a chunk of queries times a chunk of keys.

    ``query`` and ``key`` are ``(start, stop)`` positions in the whole sequence;
    ``query_rows`` and ``key_rows`` the same rows in the query shard and in the key shard;
    ``masked``: the causal mask cuts the tile (some of its keys come after some of its
    queries), so it needs a mask; else every key is visible."""

    query: tuple[int, int]
    key: tuple[int, int]
    query_rows: slice
    key_rows: slice
    masked: bool

    @property
    def scores(self) -> int:
        """How many query–key scores the tile computes (per sequence)."""
        return (self.query[1] - self.query[0]) * (self.key[1] - self.key[0])

    def allowed(self, device=None) -> torch.Tensor:
        """The tile's causal mask ``(queries, keys)``: True where key position <= query
        position."""
        queries = torch.arange(*self.query, device=device)
        keys = torch.arange(*self.key, device=device)
        return keys[None, :] <= queries[:, None]


def _with_rows(chunks):
    """``(chunk, rows of the shard)`` for a shard's chunks, stored one after the other."""
    rows, offset = [], 0
    for a, b in chunks:
        rows.append(((a, b), slice(offset, offset + b - a)))
        offset += b - a
    return rows


def ring_plan(rank: int, world_size: int, length: int, layout: str, causal: bool):
    """The tiles process ``rank`` computes at each ring step: a list of ``P`` lists of
    ``Tile``. At step ``s`` it holds the keys of process ``(rank − s) mod P``; with
    ``causal``, tiles whose every key comes after every query are left out.

    >>> [len(step) for step in ring_plan(0, 4, 16, "contiguous", causal=True)]
    [3, 0, 0, 0]
    """
    _checks.require_flag("ring_plan", "causal", causal)
    queries = _with_rows(shard_chunks(rank, world_size, length, layout))
    plan = []
    for step in range(world_size):
        source = (rank - step) % world_size
        keys = _with_rows(shard_chunks(source, world_size, length, layout))
        tiles = []
        for (q, q_rows), (k, k_rows) in ((q, k) for q in queries for k in keys):
            if causal and k[0] > q[1] - 1:  # every key after every query
                continue
            masked = causal and k[1] - 1 > q[0]  # some key after some query
            tiles.append(Tile(q, k, q_rows, k_rows, masked))
        plan.append(tiles)
    return plan


def tile_counts(world_size: int, length: int, *, layout: str = "contiguous", causal: bool):
    """How many tiles (chunk of queries × chunk of keys) each process computes, rank by rank.

    With chunks of two tokens or more: contiguous causal shards give process ``r`` ``4r + 3``
    tiles (it needs the keys of every process before it), balanced ones ``2P + 1`` each;
    without a mask every process computes ``4P``.

    >>> tile_counts(4, 16, layout="balanced", causal=False)
    [16, 16, 16, 16]
    """
    return [
        sum(len(tiles) for tiles in ring_plan(r, world_size, length, layout, causal))
        for r in range(world_size)
    ]


def score_counts(world_size: int, length: int, *, layout: str = "contiguous", causal: bool):
    """How many query–key scores each process computes (per sequence), rank by rank: the
    areas of its tiles. Masked tiles count in full: they are computed, then masked.

    >>> score_counts(2, 8, layout="contiguous", causal=True)
    [12, 28]
    """
    return [
        sum(t.scores for tiles in ring_plan(r, world_size, length, layout, causal) for t in tiles)
        for r in range(world_size)
    ]


@dataclass
class RingStats:
    """What ``ring_attention`` did in this process, filled in when passed as ``stats=``
    (every call adds to it).

    ``tiles``: tile products ``Q_chunk K_chunkᵀ`` of the forward pass (each for all ``B·H``
    sequences at once), ``masked_tiles`` of them cut by the causal mask, ``scores``: the
    query–key scores they computed, per sequence. ``sent_bytes``: the bytes this process sent
    at each forward step (keys and values; 0 at the last step); ``backward_sent_bytes``: at
    each backward step (keys and values, and the gradients of the keys and values that travel
    with them, in the working dtype). The backward pass recomputes the forward's tiles.
    """

    tiles: int = 0
    masked_tiles: int = 0
    scores: int = 0
    sent_bytes: list[int] = field(default_factory=list)
    backward_sent_bytes: list[int] = field(default_factory=list)

    def count(self, tile: Tile) -> None:
        """Count one tile computed by the forward pass."""
        self.tiles += 1
        self.masked_tiles += tile.masked
        self.scores += tile.scores


# --------------------------------------------------------------------------- the ring


class Ring:
    """The neighbours of this process in a group's ring: it sends to ``rank + 1`` and
    receives from ``rank − 1`` (global ranks, as ``torch.distributed`` wants them)."""

    def __init__(self, group=None):
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.next = self._global((self.rank + 1) % self.size)
        self.previous = self._global((self.rank - 1) % self.size)

    def _global(self, rank: int) -> int:
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    def start(self, tensors: Sequence[torch.Tensor]) -> Transfer:
        """Start sending ``tensors`` to the next process and receiving as many tensors of the
        same shapes from the previous one; ``.wait()`` on the result returns them. The sent
        tensors must not change until then. With one process, nothing travels."""
        if self.size == 1:
            return Transfer(list(tensors), [], 0)
        tensors = [t.contiguous() for t in tensors]
        received = [torch.empty_like(t) for t in tensors]
        ops = [dist.P2POp(dist.isend, t, self.next, self.group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, t, self.previous, self.group) for t in received]
        sent = sum(t.numel() * t.element_size() for t in tensors)
        return Transfer(received, dist.batch_isend_irecv(ops), sent)


class Transfer:
    """An exchange under way: ``wait()`` returns the received tensors once every send and
    receive has completed. ``sent_bytes``: what this process sends in it."""

    def __init__(self, received: list[torch.Tensor], requests, sent_bytes: int):
        self.received, self.requests, self.sent_bytes = received, requests, sent_bytes

    def wait(self) -> list[torch.Tensor]:
        for request in self.requests:
            request.wait()
        return self.received


# --------------------------------------------------------------------------- ring attention


def ring_attention(
    q,
    k,
    v,
    *,
    causal: bool = False,
    layout: str = "contiguous",
    scale=None,
    group=None,
    stats: RingStats | None = None,
):
    r"""Exact attention of a sequence sharded across the processes of a ``torch.distributed``
    group: this process's shard of ``softmax(scale · Q Kᵀ + mask) V``, where ``Q``, ``K`` and
    ``V`` are the whole sequence's.

    Called in every process of ``group`` (the default group if None), with that process's
    shard ``q`` ``(..., n, d_k)``, ``k`` ``(..., n, d_k)``, ``v`` ``(..., n, d_v)``, ``n =
    L/P`` tokens of the sequence as ``split_sequence(x, P, layout)[rank]`` cuts them; returns
    the output rows of the same tokens, ``(..., n, d_v)``. The key and value shards travel
    round the ring (module docstring) while each block is computed; ``causal`` masks key
    ``j`` from query ``i`` when ``j > i`` (positions in the whole sequence); ``scale`` is
    ``1/√d_k`` by default. Differentiable: the backward pass (``torch.autograd.Function``)
    passes the key and value gradients round the ring, so every process must run it (as it
    must run the forward pass). Running state in float32 at least (``working_dtype``). Tested
    with ``gloo`` (CPU tensors); written for ``nccl`` too (CUDA tensors, one GPU per process),
    a path that has never run: no GPU was available to its authors.

    ``layout``: ``"contiguous"`` (process ``r`` holds positions ``r·n … (r+1)·n − 1``) or
    ``"balanced"`` (chunks ``r`` and ``2P−1−r`` of ``2P``: the same causal work in every
    process). ``stats``: a ``RingStats`` to count tiles and bytes sent into.

    The result equals the matching rows of ``attnlib.torch.attention(Q, K, V, mask)`` (float64:
    to 1e-10), and so do the gradients. Every process checks that all hold shards of one shape
    and dtype, with the same ``causal``, ``layout`` and ``scale`` (a ValueError in all of them
    if not); a RuntimeError if no process group is initialised.

    >>> def shard_of_attention():  # run in each of 2 processes by launch
    ...     x = torch.eye(4)[None]  # (1, L=4, d=4), the same in every process
    ...     shard = split_sequence(x, 2)[dist.get_rank()]  # (1, 2, 4)
    ...     return ring_attention(shard, shard, shard, causal=True)
    >>> from attnlib.torch import attention, causal_mask
    >>> whole = join_shards(launch(shard_of_attention, 2))  # fork: Linux
    >>> eye = torch.eye(4)[None]
    >>> torch.allclose(whole, attention(eye, eye, eye, causal_mask(4))[0])
    True
    """
    fn = "ring_attention"
    _require_group(fn, group)
    try:  # this process's own checks; their outcome is shared, so that all raise or none
        _check_ring_input(fn, q, k, v, layout, group)
        _checks.require_flag(fn, "causal", causal)
        scale = _checks.scale_or_default(fn, scale, q.shape[-1])
        failure = None
    except (TypeError, ValueError) as error:
        failure = (type(error).__name__, str(error))
    _check_same_everywhere(fn, q, k, v, causal, layout, scale, group, failure)
    ring = Ring(group)
    plan = ring_plan(ring.rank, ring.size, q.shape[-2] * ring.size, layout, causal)
    stats = RingStats() if stats is None else stats
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        return RingAttention.apply(q, k, v, plan, scale, ring, stats)
    sequences = [x.reshape(-1, *x.shape[-2:]) for x in (q, k, v)]
    out = ring_forward(*sequences, plan, scale, ring, stats)[0]
    return out.reshape(*q.shape[:-1], v.shape[-1])


def _require_group(fn: str, group) -> None:
    """A RuntimeError if this process is in no process group (then there is no one to tell)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{fn}: no torch.distributed process group is initialised in this process; call "
            f"torch.distributed.init_process_group(...) in every process first (torchrun sets "
            f"up what it needs), or start the processes with attnlib.distributed.launch"
        )
    if group is not None and dist.get_rank(group) < 0:
        raise ValueError(f"{fn}: this process (rank {dist.get_rank()}) is not in group")


def _check_ring_input(fn: str, q, k, v, layout: str, group) -> None:
    """This process's own checks: tensors, shapes, dtypes, values, layout."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(x).__name__}")
    _checks.check_attention(fn, q, k, v, None)
    if not (q.shape[:-1] == k.shape[:-1] == v.shape[:-1]):
        raise ValueError(
            f"{fn}: q, k and v must be shards of one sequence, (..., n, d) with the same "
            f"leading axes and n; got q.shape={_checks.shape_str(q)}, "
            f"k.shape={_checks.shape_str(k)} and v.shape={_checks.shape_str(v)}"
        )
    _check_layout_length(
        fn, q.shape[-2] * dist.get_world_size(group), dist.get_world_size(group), layout
    )


def _check_same_everywhere(fn: str, q, k, v, causal, layout, scale, group, failure) -> None:
    """Every process of the group passed its own checks (``failure``: None, or the name and
    message of the error it raised), holds shards of one shape and dtype and asks for the same
    attention; else an error in all of them: a process's own, or a ValueError or TypeError that
    names the process that failed, or what each process holds. Without this, a process whose
    input failed would raise alone while the others waited for it in the ring until their
    timeout. It costs an ``all_gather_object`` (a pickle and a collective; under ``nccl`` a
    wait for the GPU) on every call: a check for learners, which a production ring leaves out."""
    mine = tuple(tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in (q, k, v)) + (
        str(getattr(q, "dtype", None)),
        bool(causal),
        layout,
        scale,
    )
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, (failure, mine), group=group)
    if failure is not None:
        raise {"TypeError": TypeError}.get(failure[0], ValueError)(failure[1])
    failed = [(rank, error) for rank, (error, _) in enumerate(everyone) if error is not None]
    if failed:
        rank, (kind, message) = failed[0]
        raise {"TypeError": TypeError}.get(kind, ValueError)(
            f"{fn}: process {rank} could not start the ring, so no process can: {message}"
        )
    everyone = [held for _, held in everyone]
    if all(theirs == mine for theirs in everyone):
        return
    held = "; ".join(
        f"process {r}: q {s[0]}, k {s[1]}, v {s[2]}, {s[3].removeprefix('torch.')}, "
        f"causal={s[4]}, layout={s[5]!r}, scale={s[6]:.6g}"
        for r, s in enumerate(everyone)
    )
    raise ValueError(
        f"{fn}: every process must hold shards of the same shape and dtype and ask for the "
        f"same causal, layout and scale; got {held}"
    )


class RingAttention(torch.autograd.Function):
    """``ring_forward`` with ``ring_backward``: the key and value gradients travel round the
    ring with the key and value shards."""

    @staticmethod
    def forward(ctx, q, k, v, plan, scale, ring, stats):
        sequences = [x.reshape(-1, *x.shape[-2:]) for x in (q, k, v)]
        out, logsumexp = ring_forward(*sequences, plan, scale, ring, stats, keep_logsumexp=True)
        ctx.save_for_backward(q, k, v, out, logsumexp)
        ctx.plan, ctx.scale, ctx.ring, ctx.stats = plan, scale, ring, stats
        return out.reshape(*q.shape[:-1], v.shape[-1])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        q, k, v, out, logsumexp = ctx.saved_tensors
        sequences = [x.reshape(-1, *x.shape[-2:]) for x in (q, k, v, grad_out)]
        grads = ring_backward(*sequences, out, logsumexp, ctx.plan, ctx.scale, ctx.ring, ctx.stats)
        return (*(g.reshape(x.shape).to(x.dtype) for g, x in zip(grads, (q, k, v))), *[None] * 4)


def _scores(q_rows, k_rows, tile: Tile, scale: float) -> torch.Tensor:
    """A tile's scores ``scale · Q Kᵀ`` ``(N, queries, keys)``, -inf where the causal mask
    hides a key."""
    scores = torch.bmm(q_rows, k_rows.mT).mul_(scale)
    if tile.masked:
        scores.masked_fill_(~tile.allowed(scores.device), -math.inf)
    return scores


def ring_forward(q, k, v, plan, scale, ring, stats, keep_logsumexp=False):
    """The forward pass in this process, for ``(N, n, d)`` shards: its output rows
    ``(N, n, d_v)`` (q's dtype) and, with ``keep_logsumexp``, each row's log-sum-exp in base 2
    ``(N, n, 1)`` (working dtype). Step by step, the next keys and values are sent for before
    the current ones are used."""
    dtype = working_dtype(q.dtype)
    queries = q.to(dtype)
    states = {}  # one online softmax per chunk of queries, by its rows
    keys_values = [k, v]
    for step, tiles in enumerate(plan):
        last = step == len(plan) - 1
        incoming = None if last else ring.start(keys_values)
        stats.sent_bytes.append(0 if last else incoming.sent_bytes)
        keys, values = (x.to(dtype) for x in keys_values)
        for tile in tiles:
            rows = tile.query_rows
            state = states.setdefault(rows.start, (rows, OnlineSoftmax(False, scale)))[1]
            scores = _scores(queries[:, rows], keys[:, tile.key_rows], tile, state.scale)
            state.fold(scores, values[:, tile.key_rows])
            stats.count(tile)
        if incoming is not None:
            keys_values = incoming.wait()
    results = [state.result() for _, (rows, state) in sorted(states.items())]
    out = torch.cat([output for output, _ in results], 1).to(q.dtype)
    return out, (torch.cat([lse for _, lse in results], 1) if keep_logsumexp else None)


def ring_backward(q, k, v, grad_out, out, logsumexp, plan, scale, ring, stats):
    """The backward pass in this process, for ``(N, n, d)`` shards: the gradients of its q, k
    and v shards, in the working dtype. ``dQ`` is summed here; the ``dK`` and ``dV`` of the
    key shard held at each step are added to the sums that arrive with it from the previous
    process, and passed on; after ``P`` steps this process's own come home."""
    dtype = logsumexp.dtype
    queries, d_out = q.to(dtype), grad_out.to(dtype)
    delta = (d_out * out.to(dtype)).sum(-1, keepdim=True)  # D = rowsum(dO ∘ O)
    base_2_scale = scale * LOG2_E  # scores in the base of the saved log-sum-exp
    grad_q = torch.zeros_like(queries)
    keys_values, carried = [k, v], None
    for step, tiles in enumerate(plan):
        last = step == len(plan) - 1
        incoming = None if last else ring.start(keys_values)
        keys, values = (x.to(dtype) for x in keys_values)
        grad_k = keys.new_zeros(keys.shape)
        grad_v = values.new_zeros(values.shape)
        for tile in tiles:
            rows, key_rows = tile.query_rows, tile.key_rows
            scores = _scores(queries[:, rows], keys[:, key_rows], tile, base_2_scale)
            weights = scores.sub_(logsumexp[:, rows]).exp2_()  # W = 2^(S − lse)
            grad_k_tile, grad_v_tile = tile_gradients(  # the tiled backward's, tile by tile
                weights, queries[:, rows], keys[:, key_rows].mT, values[:, key_rows].mT,
                d_out[:, rows], delta[:, rows], grad_q[:, rows],
            )  # fmt: skip
            grad_k[:, key_rows] += grad_k_tile
            grad_v[:, key_rows] += grad_v_tile
        if carried is not None:  # the sums for this key shard, from the previous process
            sum_k, sum_v = carried.wait()
            grad_k += sum_k
            grad_v += sum_v
        carried = ring.start([grad_k, grad_v])  # on to the next process
        stats.backward_sent_bytes.append(carried.sent_bytes + (0 if last else incoming.sent_bytes))
        if incoming is not None:
            keys_values = incoming.wait()
    grad_k, grad_v = carried.wait()  # this process's own key shard, home after P hops
    return grad_q * scale, grad_k * scale, grad_v


# --------------------------------------------------------------------------- local processes


def default_start_method() -> str:
    """``"fork"`` on Linux (quick, and runs functions defined in a notebook), else
    ``"spawn"`` (macOS and Windows: fork is unsafe or missing there)."""
    return "fork" if sys.platform.startswith("linux") else "spawn"


def launch(
    fn: Callable,
    world_size: int,
    *args,
    backend: str = "gloo",
    timeout: float = 120.0,
    start_method: str | None = None,
    **kwargs,
) -> list:
    """Run ``fn(*args, **kwargs)`` in ``world_size`` new local processes joined in one
    ``torch.distributed`` group, and return what each returned, rank by rank.

    Inside ``fn``, ``torch.distributed.get_rank()`` says which process it is. What ``fn``
    returns must be picklable (tensors are). If a process raises, the others are stopped and a
    RuntimeError carries its traceback; if they have not all answered after ``timeout``
    seconds (a hang), they are stopped and a TimeoutError says which did not answer.

    The processes find each other through a file in a new temporary folder
    (``torch.distributed.FileStore``), not a TCP port: no port to collide with another
    program's, and nothing that listens on the network for the meeting itself. ``gloo`` then
    connects the processes over the loopback interface only (``GLOO_SOCKET_IFNAME``, set in
    each process to the interface of 127.0.0.1 where the system names one). The group is made
    in the new processes only: this one holds no part of it, so that nothing of it is copied
    half-working into a forked process. ``backend``: ``"gloo"`` (CPU tensors) or ``"nccl"``
    (process ``r`` uses GPU ``r``: a ValueError if there are more processes than GPUs; CUDA
    cannot be used in a forked process, so spawn is the default then). On Linux a process
    dies with the one that launched it, even when that one is killed (``_die_with_parent``).

    ``start_method`` (``default_start_method``): ``"fork"`` copies this process, so ``fn`` can
    be any function, one defined in a notebook cell included; each process then computes on one
    thread (PyTorch's OpenMP threads do not survive a fork). ``"spawn"`` starts fresh Python
    interpreters (seconds each, to import torch), which must import ``fn`` by name: it has to
    be defined at the top level of a ``.py`` file, such as
    ``attnlib.distributed.compare_with_dense``, not in a notebook cell (and a script that calls
    ``launch`` must do so under ``if __name__ == "__main__":``). Linux: both; macOS and
    Windows: spawn.

    >>> launch(dist.get_rank, 3)
    [0, 1, 2]
    """
    _checks.require_positive_int("launch", "world_size", world_size)
    _checks.check_choice("launch", "backend", backend, ("gloo", "nccl"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "nccl" and world_size > gpus:
        raise ValueError(
            f"launch: backend='nccl' needs one GPU per process; got world_size={world_size} "
            f"with {gpus} GPU(s) here. Use fewer processes, or backend='gloo' on the CPU"
        )
    method = start_method or ("spawn" if backend == "nccl" else default_start_method())
    for attempt in range(1, GROUP_ATTEMPTS + 1):
        with tempfile.TemporaryDirectory(prefix="attnlib-launch-") as folder:
            job = Job(
                fn, args, kwargs, world_size, rendezvous_file(folder), backend, timeout, method
            )
            try:
                return _launch_once(job)
            except GroupNotFormed as failure:
                last_failure = failure
        if attempt == GROUP_ATTEMPTS:
            raise RuntimeError(
                f"launch: the {world_size} processes could not form a group "
                f"({GROUP_ATTEMPTS} attempts); the last error:\n{last_failure}"
            ) from last_failure


#: How many times ``launch`` starts the processes again when they fail to form their group:
#: gloo's connections between processes fail now and then, rarely (about 1 launch in 50 on the
#: 2-core machine, ``Connection closed by peer`` in ``connectFullMesh``; PyTorch's own test
#: suite has met it too).
GROUP_ATTEMPTS = 3


class GroupNotFormed(RuntimeError):
    """A process of ``launch`` failed while joining the group, before it ran anything."""


def _launch_once(job: Job) -> list:
    """Start the processes of ``job``, collect their results, stop them."""
    context = multiprocessing.get_context(job.start_method)
    answers = context.Queue()
    processes = [
        context.Process(target=_run_in_group, args=(rank, job, answers), daemon=True)
        for rank in range(job.world_size)
    ]
    try:
        for process in processes:
            _start(process, job)
        results = _collect(processes, answers, job.timeout)
    except BaseException:
        _stop(processes, grace=0.0)
        raise
    _stop(processes, grace=10.0)
    return results


def rendezvous_file(folder: str) -> str:
    """The file in ``folder`` through which the processes of one launch find each other
    (``torch.distributed.FileStore``); a new folder for every attempt."""
    return os.path.join(folder, "rendezvous")


def open_rendezvous(path: str, world_size: int) -> dist.Store:
    """The store of one launch's processes: a ``FileStore`` on ``path``, which every process
    opens (nothing listens on a port for it)."""
    return dist.FileStore(path, world_size)


def loopback_interface() -> str | None:
    """The name of the network interface of 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS),
    or None where the system does not list its interfaces by name."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):  # Windows without if_nameindex
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)


def _die_with_parent(parent: int) -> None:
    """On Linux, ask the kernel to end this process when its parent ends, however the parent
    ends (``prctl(PR_SET_PDEATHSIG, SIGKILL)``); if the parent has already gone, end now.
    Elsewhere nothing: there a process of ``launch`` ends only when its parent exits normally
    (``daemon=True``) or when ``launch`` stops it."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the request took hold
        os._exit(1)


@dataclass
class Job:
    """What every process of ``launch`` needs: the call, and how to join the group."""

    fn: Callable
    args: tuple
    kwargs: dict
    world_size: int
    rendezvous: str  # the file through which the processes find each other (FileStore)
    backend: str
    timeout: float
    start_method: str
    parent: int = field(default_factory=os.getpid)  # the process that launched them


def _start(process, job: Job) -> None:
    """Start one process; explain the usual reason a spawned process cannot get ``fn``."""
    try:
        process.start()
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        name = getattr(job.fn, "__qualname__", job.fn)
        raise RuntimeError(
            f"launch: start_method={job.start_method!r} must send {name!r} to new Python "
            f"processes, which import it by name, and could not ({error}). Define it at the top "
            f"level of a module (a .py file), not in a notebook cell, or use "
            f"start_method='fork' (Linux)"
        ) from error


def _run_in_group(rank: int, job: Job, answers) -> None:
    """One process of ``launch``: join the group, run the call, send back its result (pickled
    here, so that tensors travel by value) or the traceback (and whether it had joined)."""
    _die_with_parent(job.parent)
    forked = job.start_method == "fork"  # then one thread: OpenMP's do not survive a fork
    torch.set_num_threads(1 if forked else max(1, (os.cpu_count() or 1) // job.world_size))
    joined = False
    try:
        if job.backend == "nccl":
            torch.cuda.set_device(rank)
        loopback = loopback_interface()
        if job.backend == "gloo" and loopback is not None:
            os.environ["GLOO_SOCKET_IFNAME"] = loopback  # gloo's connections: 127.0.0.1 only
        dist.init_process_group(
            job.backend,
            store=open_rendezvous(job.rendezvous, job.world_size),
            rank=rank,
            world_size=job.world_size,
            timeout=timedelta(seconds=job.timeout),
        )
        joined = True
        answers.put((rank, None, pickle.dumps(job.fn(*job.args, **job.kwargs))))
    except BaseException:
        answers.put((rank, (joined, traceback.format_exc()), None))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _collect(processes, answers, timeout: float) -> list:
    """Every process's result, rank by rank; raise at the first failure, or at the timeout."""
    results, answered = [None] * len(processes), set()
    deadline = time.monotonic() + timeout
    while len(answered) < len(processes):
        try:
            rank, error, payload = answers.get(timeout=0.2)
        except queue.Empty:
            _check_alive(processes, answered, deadline, timeout)
            continue
        if error is not None:
            joined, trace = error
            failed = RuntimeError if joined else GroupNotFormed
            raise failed(f"launch: process {rank} of {len(processes)} failed:\n{trace}")
        results[rank] = pickle.loads(payload)
        answered.add(rank)
    return results


def _check_alive(processes, answered, deadline: float, timeout: float) -> None:
    """Raise if a process died without answering, or if the time is up."""
    for rank, process in enumerate(processes):
        if rank not in answered and process.exitcode not in (None, 0):
            raise RuntimeError(
                f"launch: process {rank} of {len(processes)} died (exit code "
                f"{process.exitcode}) without an answer"
            )
    if time.monotonic() > deadline:
        silent = [rank for rank in range(len(processes)) if rank not in answered]
        raise TimeoutError(
            f"launch: processes {silent} of {len(processes)} did not answer within "
            f"{timeout:g} s (a hang: a process waiting for a message no other process sends?)"
        )


def _stop(processes, grace: float) -> None:
    """Let the processes finish for up to ``grace`` seconds, then end those still running."""
    deadline = time.monotonic() + grace
    for process in processes:
        if process.pid is not None:
            process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.pid is not None and process.is_alive():
            process.terminate()
            process.join(2.0)
            if process.is_alive():
                process.kill()
                process.join()


# --------------------------------------------------------------------------- the check


def compare_with_dense(
    batch: int = 1,
    heads: int = 2,
    length: int = 24,
    dim: int = 8,
    *,
    causal: bool = False,
    layout: str = "contiguous",
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    group=None,
) -> dict:
    """Run in every process of a group: ring attention of a random sequence ``(batch, heads,
    length, dim)`` (the same in every process, drawn from ``seed``) against dense attention
    of the whole sequence, forward and backward. Returns this process's figures: ``rank``,
    ``world_size``, ``errors`` (the largest absolute difference of the output and of the q, k
    and v gradients from dense attention's, on this process's shard), the ``tiles``,
    ``masked_tiles`` and ``scores`` it computed, the bytes it sent at each step
    (``sent_bytes``, ``backward_sent_bytes``) and ``peak_bytes`` (``peak_memory_bytes`` of
    the ring's forward and backward passes, or None where it cannot be measured).

    Uses the GPU of this process under ``nccl``, else the CPU. Every process computes the
    dense reference of the whole sequence itself (then keeps its own shard of it).

    >>> [r["errors"]["out"] < 1e-12 for r in launch(compare_with_dense, 2)]
    [True, True]
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    on_gpu = dist.get_backend(group) == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    _return_freed_blocks()  # before the dense reference, so that the ring's peak is its own
    generator = torch.Generator().manual_seed(seed)
    whole = [  # q, k, v and the gradient of the loss with respect to the output
        torch.randn(batch, heads, length, dim, generator=generator, dtype=dtype).to(device)
        for _ in range(4)
    ]
    expected = [
        split_sequence(x, world_size, layout)[rank] for x in dense_reference(*whole, causal)
    ]
    q, k, v, upstream = (split_sequence(x, world_size, layout)[rank] for x in whole)
    inputs = [x.requires_grad_() for x in (q, k, v)]
    stats = RingStats()

    def forward_and_backward():
        out = ring_attention(*inputs, causal=causal, layout=layout, group=group, stats=stats)
        out.backward(upstream)
        return out.detach()

    _warm_up(dim, dtype, device, group)  # one-time allocations are not the ring's
    out, peak = peak_memory_bytes(forward_and_backward, device)
    got = [out, *(x.grad for x in inputs)]
    errors = {
        name: float((a.double() - b.double()).abs().max())
        for name, a, b in zip(("out", "grad_q", "grad_k", "grad_v"), got, expected)
    }
    return {
        "rank": rank,
        "world_size": world_size,
        "errors": errors,
        "tiles": stats.tiles,
        "masked_tiles": stats.masked_tiles,
        "scores": stats.scores,
        "sent_bytes": stats.sent_bytes,
        "backward_sent_bytes": stats.backward_sent_bytes,
        "peak_bytes": peak,
    }


def _warm_up(dim: int, dtype: torch.dtype, device: torch.device, group) -> None:
    """Ring attention of two tokens a process, forward and backward: what the first call in
    a process sets up once (connections, buffers) is then in place."""
    x = torch.zeros(1, 1, 2, dim, dtype=dtype, device=device, requires_grad=True)
    ring_attention(x, x, x, group=group).sum().backward()


def dense_reference(q, k, v, upstream, causal: bool) -> list[torch.Tensor]:
    """Dense attention of whole sequences (``attnlib.torch.attention``, the plain formula)
    and the gradients of ``sum(output ∘ upstream)`` with respect to q, k and v: ``[output,
    dq, dk, dv]``."""
    inputs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    mask = attn.causal_mask(q.shape[-2], device=q.device) if causal else None
    out = attn.attention(*inputs, mask)[0]
    out.backward(upstream)
    return [out.detach(), *(x.grad for x in inputs)]


def peak_memory_bytes(call: Callable[[], object], device: torch.device):
    """``(call(), bytes)``: what ``call`` returns and the memory it added at its peak
    (``attnlib.bench.peak_of``). On a Linux CPU the C library is first told to return freed
    blocks of 64 KiB or more to the system, so that the figure is the call's own; on a CPU
    where that cannot be done, None."""
    if device.type != "cuda" and not _return_freed_blocks():
        return call(), None
    return bench.peak_of(call, device)


def _return_freed_blocks() -> bool:
    """Tell the C library (glibc, Linux) to give every block of 64 KiB or more back to the
    system as soon as it is freed, so that a resident-set peak measures what a call itself
    needs, not memory freed earlier and reused. False where that cannot be done."""
    if not sys.platform.startswith("linux"):
        return False
    M_MMAP_THRESHOLD = -3  # mallopt's parameter, glibc's malloc.h
    try:
        return bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 65536))
    except (AttributeError, OSError):  # not glibc (musl has no mallopt)
        return False


# --------------------------------------------------------------------------- the command


def main(argv: list[str] | None = None) -> int:
    """``python -m attnlib.distributed``: check ring attention against dense attention,
    without and with the causal mask, in both layouts, forward and backward; print each
    process's largest error, tiles, peak memory of the ring (``peak_memory_bytes``) and bytes
    sent; exit 1 if an error is too large (float64: 1e-10; float32: 1e-4). Each process also
    computes dense attention of the whole sequence, the reference, so ``--length`` is limited
    by what one process can hold densely.

    Two ways to run it::

        python -m attnlib.distributed --processes 4       # 4 local gloo processes (CPU)
        torchrun --nproc-per-node 4 -m attnlib.distributed --length 4096 --dtype float32

    Under ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
    ``MASTER_ADDR``), each process joins the group torchrun describes: ``nccl`` on GPU
    ``LOCAL_RANK`` when CUDA is available (one GPU per process), else ``gloo``; process 0
    prints. ``--backend`` chooses another. (The ``nccl`` path has never run: no GPU was
    available to the authors.)
    """
    parser = argparse.ArgumentParser(
        prog="python -m attnlib.distributed", description=main.__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--processes", type=int, default=4, help="local processes (without torchrun)"
    )
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--length", type=int, default=64, help="tokens of the whole sequence")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    options = parser.parse_args(argv)
    sizes = (options.batch, options.heads, options.length, options.dim)
    dtype = getattr(torch, options.dtype)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        return _main_in_group(sizes, dtype, options.backend)
    results = launch(_run_every_check, options.processes, sizes, dtype)
    print(_report(results, dtype))
    return 0 if _passed(results, dtype) else 1


#: The largest error ``main`` accepts, by dtype.
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4}
CHECKS = [(causal, layout) for causal in (False, True) for layout in LAYOUTS]


def _run_every_check(sizes, dtype) -> list[dict]:
    """``compare_with_dense`` for every entry of ``CHECKS``, in this process."""
    return [compare_with_dense(*sizes, causal=c, layout=lay, dtype=dtype) for c, lay in CHECKS]


def _main_in_group(sizes, dtype, backend) -> int:
    """``main`` in a process started by torchrun."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    try:
        mine = _run_every_check(sizes, dtype)
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
    finally:
        dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        print(f"backend {backend}")
        print(_report(everyone, dtype))
    return 0 if _passed(everyone, dtype) else 1


def _report(results: list[list[dict]], dtype) -> str:
    """A table: one line per check and process."""
    lines = [
        f"{'causal':>6} {'layout':>10} {'rank':>4} {'largest error':>13} {'tiles':>5} "
        f"{'peak MiB':>8}  bytes sent per step (forward)"
    ]
    for index, (causal, layout) in enumerate(CHECKS):
        for per_rank in results:
            r = per_rank[index]
            error = max(r["errors"].values())
            peak = "-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.1f}"
            lines.append(
                f"{causal!s:>6} {layout:>10} {r['rank']:>4} {error:>13.2e} {r['tiles']:>5} "
                f"{peak:>8}  {r['sent_bytes']}"
            )
    verdict = "passed" if _passed(results, dtype) else "FAILED"
    lines.append(f"{verdict}: every error below {TOLERANCE[dtype]:g} ({str(dtype)[6:]})")
    return "\n".join(lines)


def _passed(results: list[list[dict]], dtype) -> bool:
    """Whether every error of every check in every process is within ``TOLERANCE``."""
    return all(max(r["errors"].values()) < TOLERANCE[dtype] for rs in results for r in rs)


if __name__ == "__main__":
    sys.exit(main())
