"""Ring attention itself: the layouts of the shards, the plan of tiles of each process, the
ring of point-to-point exchanges, and the forward and backward passes (the package's
docstring explains them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from .. import _checks
from .._torch_tiled import LOG2_E, OnlineSoftmax, tile_gradients, working_dtype

__all__ = [
    "LAYOUTS",
    "ring_attention",
    "split_sequence",
    "join_shards",
    "shard_chunks",
    "shard_positions",
    "ring_plan",
    "tile_counts",
    "score_counts",
    "Tile",
    "RingStats",
]

#: The ways of cutting the sequence into shards (``layout=``): contiguous; balanced (each
#: process holds chunk r and chunk 2P - 1 - r of 2P, so that causal work is equal); striped
#: (process r holds every P-th token from token r: causal work equal too).
LAYOUTS = ("contiguous", "balanced", "striped")


# --------------------------------------------------------------------------- the layouts


def shard_chunks(rank: int, world_size: int, length: int, layout: str = "contiguous"):
    """The chunks of process ``rank``'s shard, as ``range`` objects of positions of the whole
    sequence, in the order the shard stores them (empty chunks left out).

    ``"contiguous"``: the shard ``r·n … (r+1)·n − 1`` (``n = L/P``), cut in two halves.
    ``"balanced"``: chunks ``r`` and ``2P − 1 − r`` of ``2P`` chunks of ``L/(2P)`` tokens.
    ``"striped"``: one chunk, every ``P``-th position from ``r`` (Brandon et al., 2023).

    >>> shard_chunks(0, 4, 16, "contiguous"), shard_chunks(0, 4, 16, "balanced")
    ([range(0, 2), range(2, 4)], [range(0, 2), range(14, 16)])
    >>> shard_chunks(1, 4, 16, "striped")
    [range(1, 16, 4)]
    """
    _check_layout_length("shard_chunks", length, world_size, layout)
    if layout == "striped":
        return [range(rank, length, world_size)]
    if layout == "contiguous":
        size = length // world_size
        start, middle = rank * size, rank * size + (size + 1) // 2
        chunks = [range(start, middle), range(middle, start + size)]
    else:
        size = length // (2 * world_size)
        last = 2 * world_size - 1 - rank
        chunks = [range(rank * size, (rank + 1) * size), range(last * size, (last + 1) * size)]
    return [chunk for chunk in chunks if len(chunk)]


def shard_positions(rank: int, world_size: int, length: int, layout: str = "contiguous"):
    """The positions in the whole sequence of the tokens that process ``rank``'s shard holds,
    in the order it stores them: a ``(L/P,)`` integer tensor. Whatever depends on a token's
    position (rotary encodings, the labels of the loss) must use these, not ``0 … n − 1``.

    >>> shard_positions(0, 2, 8, "balanced").tolist()
    [0, 1, 6, 7]
    """
    return torch.cat([_positions(c) for c in shard_chunks(rank, world_size, length, layout)])


def _positions(chunk: range, device=None) -> torch.Tensor:
    """The positions of a chunk (a ``range``) as an integer tensor."""
    return torch.arange(chunk.start, chunk.stop, chunk.step, device=device)


def split_sequence(x: torch.Tensor, world_size: int, layout: str = "contiguous"):
    """The ``world_size`` shards of a whole sequence ``x`` ``(..., L, d)``, process 0's first:
    a list of ``(..., L/P, d)`` tensors (copies). ``L`` must be divisible by ``P``
    (``"contiguous"``, ``"striped"``) or by ``2P`` (``"balanced"``).

    >>> [s.flatten().tolist() for s in split_sequence(torch.arange(6.0)[:, None], 3)]
    [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    """
    fn = "split_sequence"
    _checks.require_ndim(fn, "x", x, 2, "(..., L, d)")
    _checks.require_positive_int(fn, "world_size", world_size)
    length = x.shape[-2]
    _check_layout_length(fn, length, world_size, layout)
    return [x[..., shard_positions(r, world_size, length, layout), :] for r in range(world_size)]


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
    world_size, length = len(shards), shards[0].shape[-2] * len(shards)
    positions = torch.cat(
        [shard_positions(r, world_size, length, layout) for r in range(world_size)]
    )
    return torch.cat(list(shards), -2)[..., torch.argsort(positions), :]  # in order of position


def _check_layout_length(fn: str, length: int, world_size: int, layout: str) -> None:
    """``L`` divisible by ``P`` (contiguous, striped) or ``2P`` (balanced), at least one token
    a shard."""
    _checks.check_choice(fn, "layout", layout, LAYOUTS)
    parts = 2 * world_size if layout == "balanced" else world_size
    if length < parts or length % parts:
        how = "2P (two chunks per process)" if layout == "balanced" else "P"
        raise ValueError(
            f"{fn}: layout={layout!r} needs a sequence length L divisible by {how} = {parts}, "
            f"at least one token per {'chunk' if layout == 'balanced' else 'shard'}; "
            f"got L={length} for P={world_size} processes"
        )


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Tile:
    """One tile of a ring step: a chunk of queries times a chunk of keys.

    ``query`` and ``key`` are the positions in the whole sequence (``range`` objects, strided in
    the striped layout); ``query_rows`` and ``key_rows`` the same rows in the query shard and in
    the key shard; ``masked``: the causal mask cuts the tile (some of its keys come after some
    of its queries), so it needs a mask; else every key is visible."""

    query: range
    key: range
    query_rows: slice
    key_rows: slice
    masked: bool

    @property
    def scores(self) -> int:
        """How many query–key scores the tile computes (per sequence)."""
        return len(self.query) * len(self.key)

    def allowed(self, device=None) -> torch.Tensor:
        """The tile's causal mask ``(queries, keys)``: True where key position <= query
        position."""
        queries, keys = _positions(self.query, device), _positions(self.key, device)
        return keys[None, :] <= queries[:, None]


#: The largest block of a tile computed at once: at most ``BLOCK`` queries against ``BLOCK``
#: keys, so that a process holds one block of scores per sequence, whatever its shard's length
#: (FlashAttention's blocks; ``tiled_attention`` uses 256 × 256 on the CPU too).
BLOCK = 256


def tile_blocks(tile: Tile, size: int | None = None):
    """The blocks of at most ``size`` (default ``BLOCK``) queries × ``size`` keys that
    ``tile`` is computed in,
    each a ``Tile`` itself; under the causal mask, blocks whose every key comes after every
    query are left out.

    >>> whole = Tile(range(6), range(6), slice(0, 6), slice(0, 6), masked=True)
    >>> for block in tile_blocks(whole, size=4):
    ...     print(block.query, block.key, block.masked)
    range(0, 4) range(0, 4) True
    range(4, 6) range(0, 4) False
    range(4, 6) range(4, 6) True
    """
    size = size or BLOCK
    for i in range(0, len(tile.query), size):
        queries = tile.query[i : i + size]
        for j in range(0, len(tile.key), size):
            keys = tile.key[j : j + size]
            if tile.masked and keys[0] > queries[-1]:  # every key after every query
                continue
            masked = tile.masked and keys[-1] > queries[0]
            q_rows = _shifted(tile.query_rows, i, len(queries))
            k_rows = _shifted(tile.key_rows, j, len(keys))
            yield Tile(queries, keys, q_rows, k_rows, masked)


def _shifted(rows: slice, offset: int, count: int) -> slice:
    """``count`` rows from ``offset`` within ``rows``."""
    return slice(rows.start + offset, rows.start + offset + count)


def _with_rows(chunks):
    """``(chunk, rows of the shard)`` for a shard's chunks, stored one after the other."""
    rows, offset = [], 0
    for chunk in chunks:
        rows.append((chunk, slice(offset, offset + len(chunk))))
        offset += len(chunk)
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
            if causal and k[0] > q[-1]:  # every key after every query
                continue
            masked = causal and k[-1] > q[0]  # some key after some query
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


def score_counts(
    world_size: int,
    length: int,
    *,
    layout: str = "contiguous",
    causal: bool,
    block: int | None = None,
):
    """How many query–key scores each process computes (per sequence), rank by rank: the
    areas of the blocks (``tile_blocks``, of ``block`` × ``block``, ``BLOCK`` by default) that
    its tiles are computed in. A block the causal mask cuts counts in full (it is computed,
    then masked); a block it hides entirely is skipped.

    >>> score_counts(2, 8, layout="contiguous", causal=True)
    [12, 28]
    >>> [score_counts(2, 8, layout="striped", causal=True, block=b) for b in (None, 1)]
    [[32, 32], [16, 20]]
    """
    plans = [ring_plan(r, world_size, length, layout, causal) for r in range(world_size)]
    return [
        sum(b.scores for tiles in plan for t in tiles for b in tile_blocks(t, block))
        for plan in plans
    ]


@dataclass
class RingStats:
    """What ``ring_attention`` did in this process, filled in when passed as ``stats=``
    (every call adds to it).

    ``tiles``: tile products ``Q_chunk K_chunkᵀ`` of the forward pass (each for all ``B·H``
    sequences at once), ``masked_tiles`` of them cut by the causal mask, ``scores``: the
    query–key scores they computed, per sequence, in blocks (as ``score_counts``).
    ``sent_bytes``: the bytes this process sent at each forward step (keys and values; 0 at
    the last step); ``backward_sent_bytes``: at each backward step (keys and values, and the
    gradients of the keys and values that travel with them, in the working dtype). The
    backward pass recomputes the forward's tiles.
    """

    tiles: int = 0
    masked_tiles: int = 0
    scores: int = 0
    sent_bytes: list[int] = field(default_factory=list)
    backward_sent_bytes: list[int] = field(default_factory=list)

    def count(self, tile: Tile, blocks: Sequence[Tile]) -> None:
        """Count one tile computed by the forward pass, in the ``blocks`` it was computed in."""
        self.tiles += 1
        self.masked_tiles += tile.masked
        self.scores += sum(block.scores for block in blocks)


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
    receive has completed (again at once if called again: ``gloo`` would wait for a second
    completion that never comes). ``sent_bytes``: what this process sends in it."""

    def __init__(self, received: list[torch.Tensor], requests, sent_bytes: int):
        self.received, self.requests, self.sent_bytes = received, requests, sent_bytes

    def wait(self) -> list[torch.Tensor]:
        for request in self.requests:
            request.wait()
        self.requests = []
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

    >>> from attnlib.distributed import launch
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
    _require_tensors(fn, {"q": q, "k": k, "v": v})
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


def _require_tensors(fn: str, named: dict) -> None:
    """A TypeError naming the first of ``named`` (name: value) that is not a tensor."""
    for name, x in named.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(x).__name__}")


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
            f"{fn}: process {rank} could not start, so no process can: {message}"
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


def ring_forward(q, k, v, plan, scale, ring, stats, keep_logsumexp=False, overlap=True):
    """The forward pass in this process, for ``(N, n, d)`` shards: its output rows
    ``(N, n, d_v)`` (q's dtype) and, with ``keep_logsumexp``, each row's log-sum-exp in base 2
    ``(N, n, 1)`` (working dtype). Step by step, the next keys and values are sent for before
    the current ones are used, and waited for after (``overlap``); with ``overlap=False``
    each exchange is waited for as soon as it starts, before the step computes (the schedule
    that ``attnlib.distributed.time_overlap`` measures against)."""
    dtype = working_dtype(q.dtype)
    queries = q.to(dtype)
    states = {}  # one online softmax per chunk of queries, by its rows
    keys_values = [k, v]
    for step, tiles in enumerate(plan):
        last = step == len(plan) - 1
        incoming = None if last else ring.start(keys_values)
        if incoming is not None and not overlap:
            incoming.wait()  # the schedule that waits: the keys arrive, then the step computes
        stats.sent_bytes.append(0 if last else incoming.sent_bytes)
        keys, values = (x.to(dtype) for x in keys_values)
        for tile in tiles:
            blocks = list(tile_blocks(tile))  # FlashAttention inside the step: block by block
            for block in blocks:
                rows = block.query_rows
                state = states.setdefault(rows.start, (rows, OnlineSoftmax(False, scale)))[1]
                scores = _scores(queries[:, rows], keys[:, block.key_rows], block, state.scale)
                state.fold(scores, values[:, block.key_rows])
            stats.count(tile, blocks)
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
        for block in (block for tile in tiles for block in tile_blocks(tile)):
            rows, key_rows = block.query_rows, block.key_rows
            scores = _scores(queries[:, rows], keys[:, key_rows], block, base_2_scale)
            weights = scores.sub_(logsumexp[:, rows]).exp2_()  # W = 2^(S − lse)
            tile_gradients(  # the tiled backward's, block by block
                weights, queries[:, rows], keys[:, key_rows].mT, values[:, key_rows].mT,
                d_out[:, rows], delta[:, rows], grad_q[:, rows],
                add_k=grad_k[:, key_rows].add_, add_v=grad_v[:, key_rows].add_,
            )  # fmt: skip
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
