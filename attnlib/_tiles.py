"""Which tiles the tiled attention kernel visits: the plan shared by both backends.

Tiled attention (``tiled_attention`` and ``truncated_attention``) never builds the ``L_q × L_k``
score matrix. It cuts the queries into blocks and, for each *group* of query blocks, visits
a few *key tiles*: ranges of consecutive keys, scored against the group's queries, folded into
a running maximum and a running sum per query row (the online softmax). Two plans say which
tiles to visit:

* ``FullPlan`` (``tiled_attention``): one block of ``block_q`` queries at a time, against every
  tile of ``block_k`` keys (with ``causal``, every tile that reaches a key ``j <= i``: the
  tiles above the diagonal are skipped). A mask, if any, is cut into the same tiles.
* ``BandPlan`` (``truncated_attention``): blocks of ``B = 32`` queries; block ``i`` can only
  reach keys in key blocks ``i − n … i + n``, ``n = ⌈window / B⌉``, so that range,
  ``span = (2n + 1)·B`` keys, is its one tile. The blocks outside the band are never visited.
  Query blocks are taken a group at a time, each block with its own span (overlapping views
  of the same key rows), as many blocks as keep the group's scores in the processor's cache.
  The few blocks at each end, whose spans reach past the sequence, are one larger block with
  one span: their key rows are copied with zero padding anyway, and one product costs less
  than several small ones.

A tile is described by key rows ``start … stop − 1`` (negative or past the end for the band's
edges: those rows are zero padding, masked) cut into ``count`` overlapping windows of
``span`` rows, ``step`` rows apart: window ``c`` serves query block ``c`` of the group.

The constants below are tuning knobs, each with one line of why; what was measured to choose
them, on which machine and when, is in ``docs/performance-notes.md``.

>>> plan = BandPlan(length=10, window=2, causal=False, sequences=1)
>>> plan.block, plan.span  # one block of 10 queries: its own keys are all it can reach
(10, 10)
>>> plan = BandPlan(length=100, window=40, causal=False, sequences=1)
>>> plan.block, plan.reach, plan.span  # blocks of 32 queries, two blocks on each side
(32, 2, 160)
>>> [(g.start, g.stop) for g in plan.query_groups()]  # the first two blocks reach before 0
[(0, 64), (64, 100)]
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

#: ``tiled_attention``'s default block sizes on the CPU (queries and keys per tile): tiles that
#: stay in the processor's caches; larger blocks were hardly faster.
DEFAULT_BLOCK = 256
#: On a GPU every operation costs a launch of several microseconds, however small it is, so
#: the tiles are large: ``GPU_BLOCK_K`` keys, and as many queries as keep a tile's scores
#: (summed over the sequences) within ``GPU_TILE_SCORES`` (64 MiB in float32).
GPU_BLOCK_K = 1024
GPU_TILE_SCORES = 2**24
#: A band plan's groups on a GPU, where all sequences are scored at once and each group's key
#: and value windows are copies: larger groups mean fewer launches but more memory; this is
#: the middle of that trade.
GPU_BAND_GROUP_SCORES = 2**22
#: Queries per block of a band plan: small, so that little of a block's span lies outside the
#: band (the span is ``2·reach + 1`` blocks), large enough for efficient matrix products.
BAND_BLOCK = 32
#: Scores a group of band tiles may hold at once, summed over the sequences scored together
#: (float32: 2 MiB): large enough that little Python is spent per score, small enough that a
#: group's temporaries stay in the processor's caches.
GROUP_SCORES = 2**19
#: The same for PyTorch on the CPU without gradients, where the band keeps a single tile-sized
#: buffer and larger groups (fewer of them, less Python) pay; a backward pass holds several
#: temporaries of a group's size, so with gradients the groups stay at ``GROUP_SCORES``.
CPU_BAND_GROUP_SCORES = 2**20


def default_blocks(length_q: int, length_k: int, sequences: int, on_cpu: bool):
    """``tiled_attention``'s ``(block_q, block_k)`` when none are given: 256 × 256 on the CPU;
    on a GPU up to 1024 keys, and as many queries as fit in ``GPU_TILE_SCORES`` scores.

    >>> default_blocks(8192, 8192, sequences=4, on_cpu=False)
    (4096, 1024)
    >>> default_blocks(100, 100, sequences=512, on_cpu=False)  # many short sequences
    (100, 100)
    """
    if on_cpu:
        return DEFAULT_BLOCK, DEFAULT_BLOCK
    block_k = max(1, min(length_k, GPU_BLOCK_K))
    block_q = GPU_TILE_SCORES // (max(1, sequences) * block_k)
    return max(1, min(length_q, block_q)), block_k


class QueryGroup(NamedTuple):
    """Queries ``start … stop − 1`` in ``count`` blocks of ``size`` (the last block may run
    past the sequence: those query rows are padding, computed and dropped)."""

    start: int
    stop: int
    count: int
    size: int


class KeyTile(NamedTuple):
    """Key rows ``start … stop − 1``, in ``count`` windows of ``span`` rows, ``step`` apart."""

    start: int
    stop: int
    span: int
    step: int


class FullPlan:
    """Every block of ``block_q`` queries meets every tile of ``block_k`` keys; with
    ``causal`` (query ``i`` sees keys ``j <= i``), only the tiles that reach such a key.

    >>> plan = FullPlan(length_q=6, length_k=6, block_q=2, block_k=2, causal=True)
    >>> [[t.start for t in plan.key_tiles(g)] for g in plan.query_groups()]
    [[0], [0, 2], [0, 2, 4]]
    """

    def __init__(self, length_q: int, length_k: int, block_q: int, block_k: int, causal=False):
        self.length_q, self.length_k = length_q, length_k
        self.block_q, self.block_k, self.causal = block_q, block_k, causal
        self.patterns: dict[tuple[int, int], np.ndarray] = {}  # causal_pattern's, made once
        self.converted: dict = {}  # a backend's copies of them (as BandPlan.converted)

    def query_groups(self) -> Iterator[QueryGroup]:
        for start in range(0, self.length_q, self.block_q):
            stop = min(self.length_q, start + self.block_q)
            yield QueryGroup(start, stop, 1, stop - start)

    def key_tiles(self, group: QueryGroup) -> list[KeyTile]:
        # causal: the group's last query, stop − 1, sees keys up to stop − 1; later tiles skipped
        end = min(self.length_k, group.stop) if self.causal else self.length_k
        tiles = []
        for start in range(0, end, self.block_k):
            stop = min(self.length_k, start + self.block_k)
            tiles.append(KeyTile(start, stop, stop - start, stop - start))
        return tiles

    def key_padding(self) -> tuple[int, int]:
        """Zero rows the tiles reach before key 0 and after the last key: none."""
        return 0, 0

    def tile_mask(self, mask, group: QueryGroup, tile: KeyTile):
        """The part of ``mask`` (already broadcast to ``(..., L_q, L_k)``) that this tile
        scores, with the block axis: ``(..., 1, block_q, block_k)``; None without a mask."""
        if mask is None:
            return None
        return mask[..., None, group.start : group.stop, tile.start : tile.stop]

    def causal_pattern(self, group: QueryGroup, tile: KeyTile) -> np.ndarray | None:
        """``(size, span)`` booleans, ``j <= i`` for the tile's queries and keys, for a causal
        plan's tile that crosses the diagonal; None for a tile wholly below it (or without
        ``causal``)."""
        if not self.causal or tile.stop - 1 <= group.start:
            return None
        key = (group.start, tile.start)
        if key not in self.patterns:  # kept: a backend keys its copy on the array (TileBiases)
            queries = np.arange(group.start, group.stop)[:, None]
            self.patterns[key] = np.arange(tile.start, tile.stop)[None, :] <= queries
        return self.patterns[key]


@functools.lru_cache(maxsize=32)
def band_plan(
    length: int, window: int, causal: bool, sequences: int, group_scores: int = GROUP_SCORES
) -> BandPlan:
    """A ``BandPlan``, the same object for the same arguments: what a backend makes of its tile
    masks (biases on a GPU, say) is then made once, not on every call.

    The cached plans are not immutable: each fills two caches of its own as it is used,
    ``edges`` (NumPy tile masks of the groups at the ends) and ``converted`` (a backend's
    copies of them, device tensors keyed by ``(id(mask), device, dtype)``; the ``id`` is safe
    because the plan keeps the mask alive). Concurrent calls may fill an entry twice, with the
    same value. The cache keeps up to 32 plans, and their device copies, alive."""
    return BandPlan(length, window, causal, sequences, group_scores)


class BandPlan:
    """Blocks of ``B`` queries, each against its own key block and the ``reach`` blocks on
    either side: the tiles that touch the band ``|i − j| <= window`` (``j <= i`` if causal).
    ``sequences``: how many sequences the kernel scores at once (at least; more at the edges,
    ``sequences_at_once``); with ``group_scores`` it sizes the groups."""

    def __init__(
        self, length: int, window: int, causal: bool, sequences: int, group_scores=GROUP_SCORES
    ):
        self.length, self.causal = length, causal
        self.sequences, self.group_scores = sequences, group_scores
        self.window = max(0, min(window, length - 1))  # a longer window sees everything
        self.block = max(1, min(length, BAND_BLOCK))  # (1 for an empty sequence)
        one_block = self.block == length  # then the block is the whole sequence
        # Key blocks on each side that a query block's band touches: ceil(window / block).
        self.reach = 0 if one_block else -(-self.window // self.block)
        self.blocks_ahead = 0 if causal else self.reach
        self.span = (self.reach + 1 + self.blocks_ahead) * self.block
        # (an empty batch, sequences = 0, counts as one sequence: no work, and no zero divisor)
        self.blocks_per_group = max(1, group_scores // (max(1, sequences) * self.block * self.span))
        offsets = (  # j − i: query row × key column of a block's span
            np.arange(self.span)[None, :] - self.reach * self.block - np.arange(self.block)[:, None]
        )
        self.band = self.in_band(offsets)
        # Filled as the plan is used (see band_plan): the tile masks of the groups at the ends,
        # by (group.start, group.size), and a backend's own form of those masks, by its own key.
        self.edges: dict[tuple[int, int], np.ndarray] = {}
        self.converted: dict = {}

    def in_band(self, offsets: np.ndarray) -> np.ndarray:
        """Whether a query may attend to the key ``offsets = j − i`` positions away."""
        inside = np.abs(offsets) <= self.window
        return inside & (offsets <= 0) if self.causal else inside

    def query_groups(self) -> Iterator[QueryGroup]:
        """Groups of up to ``blocks_per_group`` blocks of ``B`` queries. The blocks whose span
        reaches past an end of the sequence are, at each end, one group of a single larger
        block (``count`` = 1) with a single span: the key rows copied with zero padding
        (``rows_outside``) are only theirs, and are copied once, not as overlapping windows."""
        blocks = -(-self.length // self.block)
        front = min(blocks, self.reach)  # blocks whose span starts before key 0
        back = max(front, self.length // self.block - self.blocks_ahead)  # … ends past L − 1
        if front:
            yield self._one_block(0, front)
        for first in range(front, back, self.blocks_per_group):
            stop = min(back, first + self.blocks_per_group)
            yield QueryGroup(first * self.block, stop * self.block, stop - first, self.block)
        if blocks > back:
            yield self._one_block(back, blocks)

    def _one_block(self, first: int, stop: int) -> QueryGroup:
        """Blocks ``first … stop − 1`` as a group of one block (the last may pass the end)."""
        end = min(self.length, stop * self.block)
        return QueryGroup(first * self.block, end, 1, (stop - first) * self.block)

    def key_tiles(self, group: QueryGroup) -> list[KeyTile]:
        """One tile: for each block of the group, the keys from ``reach`` blocks before it to
        ``blocks_ahead`` blocks after it (a group of one block has one window: step = span)."""
        span = group.size + (self.reach + self.blocks_ahead) * self.block
        start = group.start - self.reach * self.block
        step = group.size if group.count > 1 else span
        return [KeyTile(start, start + (group.count - 1) * step + span, span, step)]

    def sequences_at_once(self, group: QueryGroup) -> int:
        """How many sequences the kernel scores together in ``group``: the plan's
        ``sequences``, except where the group's key windows are copies anyway (a group at an
        end: its rows are copied with the zero padding) or one view for any number of
        sequences (a sequence that is a single block): there, as many as keep the group
        within ``group_scores``, so that a batch of sequences is a few large products rather
        than many small ones."""
        tile = self.key_tiles(group)[0]
        if rows_outside(tile, self.length) == (0, 0) and self.block < self.length:
            return self.sequences
        return max(self.sequences, self.group_scores // (group.count * group.size * tile.span))

    def key_padding(self) -> tuple[int, int]:
        """Zero rows the tiles reach before key 0 and after the last key (the ends' spans)."""
        blocks = -(-self.length // self.block)
        last_key = (blocks + self.blocks_ahead) * self.block  # one past the last tile
        return self.reach * self.block, last_key - self.length

    def causal_pattern(self, group: QueryGroup, tile: KeyTile) -> None:
        """None: a causal band is in the band's own pattern (``tile_mask``)."""
        return None

    def tile_mask(self, mask, group: QueryGroup, tile: KeyTile) -> np.ndarray:
        """``(size, span)`` booleans, query row × key of a window: inside the band and a real
        key, ``0 <= j < L``. Away from the ends every window has the same (``band``); a group
        at an end (one block, one window) has its own, made once. ``mask`` is unused (the band
        is the mask)."""
        if tile.start >= 0 and tile.stop <= self.length:
            return self.band
        key = (group.start, group.size)  # which fix the group's one tile (key_tiles)
        if key not in self.edges:
            queries = group.start + np.arange(group.size)[:, None]
            keys = tile.start + np.arange(tile.span)[None, :]
            real = (keys >= 0) & (keys < self.length)
            self.edges[key] = self.in_band(keys - queries) & real
        return self.edges[key]


def rows_outside(tile: KeyTile, length: int) -> tuple[int, int]:
    """How many of the tile's key rows lie before 0 and past ``length − 1`` (zero padding)."""
    return max(0, -tile.start), max(0, tile.stop - length)
