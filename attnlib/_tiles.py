"""Which tiles the tiled attention kernel visits: the plan shared by both backends.

Tiled attention (``tiled_attention`` and ``truncated_attention``) never builds the ``L_q × L_k``
score matrix. It cuts the queries into blocks and, for each *group* of query blocks, visits
a few *key tiles*: ranges of consecutive keys, scored against the group's queries, folded into
a running maximum and a running sum per query row (the online softmax). Two plans say which
tiles to visit:

* ``FullPlan`` (``tiled_attention``): one block of ``block_q`` queries at a time, against every
  tile of ``block_k`` keys. A mask, if any, is cut into the same tiles.
* ``BandPlan`` (``truncated_attention``): blocks of ``B = 32`` queries; block ``i`` can only
  reach keys in key blocks ``i − n … i + n``, ``n = ⌈window / B⌉``, so that range,
  ``span = (2n + 1)·B`` keys, is its one tile. The blocks outside the band are never visited.
  Query blocks are taken a group at a time, each block with its own span (overlapping views
  of the same key rows), as many blocks as keep the group's scores in the processor's cache.

A tile is described by key rows ``start … stop − 1`` (negative or past the end for the band's
edges: those rows are zero padding, masked) cut into ``count`` overlapping windows of
``span`` rows, ``step`` rows apart: window ``c`` serves query block ``c`` of the group.

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

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

#: ``tiled_attention``'s default block sizes (queries and keys per tile), timed at L = 8192 on
#: two 2-core CPUs: larger blocks were no faster on one (AVX2), at most 9% faster on the other
#: (AVX-512: 256 queries × 512 keys).
DEFAULT_BLOCK = 256
#: Queries per block of a band plan: small, so that little of a block's span lies outside the
#: band (the span is ``2·reach + 1`` blocks), large enough for efficient matrix products.
BAND_BLOCK = 32
#: Scores a group of band tiles may hold at once, summed over the sequences scored together
#: (float32: 2 MiB): groups of 2**18 … 2**20 scores ran about equally fast, smaller ones slower
#: (more Python per score), and a group's temporaries still fit in the processor's caches.
GROUP_SCORES = 2**19


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
    """Every block of ``block_q`` queries meets every tile of ``block_k`` keys."""

    def __init__(self, length_q: int, length_k: int, block_q: int, block_k: int):
        self.length_q, self.length_k = length_q, length_k
        self.block_q, self.block_k = block_q, block_k

    def query_groups(self) -> Iterator[QueryGroup]:
        for start in range(0, self.length_q, self.block_q):
            stop = min(self.length_q, start + self.block_q)
            yield QueryGroup(start, stop, 1, stop - start)

    def key_tiles(self, group: QueryGroup) -> list[KeyTile]:
        tiles = []
        for start in range(0, self.length_k, self.block_k):
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


class BandPlan:
    """Blocks of ``B`` queries, each against its own key block and the ``reach`` blocks on
    either side: the tiles that touch the band ``|i − j| <= window`` (``j <= i`` if causal).
    ``sequences``: how many sequences the kernel scores at once (it sizes the groups)."""

    def __init__(self, length: int, window: int, causal: bool, sequences: int):
        self.length, self.causal = length, causal
        self.window = max(0, min(window, length - 1))  # a longer window sees everything
        self.block = max(1, min(length, BAND_BLOCK))  # (1 for an empty sequence)
        one_block = self.block == length  # then the block is the whole sequence
        # Key blocks on each side that a query block's band touches: ceil(window / block).
        self.reach = 0 if one_block else -(-self.window // self.block)
        self.blocks_ahead = 0 if causal else self.reach
        self.span = (self.reach + 1 + self.blocks_ahead) * self.block
        self.blocks_per_group = max(1, GROUP_SCORES // (sequences * self.block * self.span))
        offsets = (
            np.arange(self.span)[None, :] - self.reach * self.block - np.arange(self.block)[:, None]
        )
        allowed = np.abs(offsets) <= self.window  # offsets: j − i, query row × key column
        self.band = allowed & (offsets <= 0) if causal else allowed
        self.edges: dict[int, np.ndarray] = {}  # the tile masks of groups at the edges

    def query_groups(self) -> Iterator[QueryGroup]:
        """Groups of up to ``blocks_per_group`` blocks. The blocks whose span reaches past an
        end of the sequence are groups of their own, so that the key rows copied with zero
        padding (``rows_outside``) are only theirs."""
        blocks = -(-self.length // self.block)
        front = min(blocks, self.reach)  # blocks whose span starts before key 0
        back = max(front, self.length // self.block - self.blocks_ahead)  # … ends past L − 1
        firsts = [0, *range(front, back, self.blocks_per_group), back, blocks]
        for first, stop in zip(firsts, firsts[1:]):
            if stop > first:
                start = first * self.block
                end = min(self.length, stop * self.block)
                yield QueryGroup(start, end, stop - first, self.block)

    def key_tiles(self, group: QueryGroup) -> list[KeyTile]:
        start = group.start - self.reach * self.block
        stop = start + (group.count - 1) * self.block + self.span
        return [KeyTile(start, stop, self.span, self.block)]

    def key_padding(self) -> tuple[int, int]:
        """Zero rows the tiles reach before key 0 and after the last key (the edges' spans)."""
        blocks = -(-self.length // self.block)
        last_key = (blocks - 1 - self.reach) * self.block + self.span  # one past the last tile
        return self.reach * self.block, last_key - self.length

    def tile_mask(self, mask, group: QueryGroup, tile: KeyTile) -> np.ndarray:
        """``(count, B, span)`` booleans (or ``(B, span)`` away from the edges): inside the band
        and a real key, ``0 <= j < L``. ``mask`` is unused (the band is the mask)."""
        if tile.start >= 0 and tile.stop <= self.length:
            return self.band
        if tile.start not in self.edges:  # made once, then the same array for every sequence
            first_key = tile.start + np.arange(group.count)[:, None] * tile.step
            key = first_key + np.arange(tile.span)[None, :]
            exists = (key >= 0) & (key < self.length)
            self.edges[tile.start] = self.band[None, :, :] & exists[:, None, :]
        return self.edges[tile.start]


def rows_outside(tile: KeyTile, length: int) -> tuple[int, int]:
    """How many of the tile's key rows lie before 0 and past ``length − 1`` (zero padding)."""
    return max(0, -tile.start), max(0, tile.stop - length)
