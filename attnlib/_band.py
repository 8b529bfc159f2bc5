"""The block layout of ``truncated_attention``, shared by both backends.

The queries are cut into blocks of ``block`` rows. Block ``b`` holds queries
``i = b·block + r`` and can only reach keys ``j = b·block − window + c`` for
``c = 0 … span − 1``, ``span = block + 2·window``: that key range is all it is scored
against. Blocks are processed a *chunk* at a time (about a thousand queries), so that the
temporary arrays stay small (they fit in the processor's cache, and memory stays O(L·window)
with a small constant).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

CHUNK_QUERIES = 1024  # queries per chunk: tuned on a 2-core CPU (see python -m attnlib.bench)


def block_size(window: int, length: int) -> int:
    """Queries per block: about the window (so a block's scores, block × span, stay
    O(window²)), at least 32 (so small windows still make matrix products), at most ``length``."""
    return max(1, min(length, max(window, 32)))


class Chunk(NamedTuple):
    """Queries ``start … stop − 1`` in ``num_blocks`` blocks; the keys they reach are rows
    ``key_start … key_start + num_blocks·block + 2·window − 1`` (some may lie outside
    ``0 … L − 1``: those are zero-padded and masked)."""

    start: int
    stop: int
    first_block: int
    num_blocks: int
    key_start: int


def chunks(length: int, window: int, block: int) -> Iterator[Chunk]:
    """The chunks covering queries ``0 … length − 1``."""
    blocks_per_chunk = max(1, CHUNK_QUERIES // block)
    for first_block in range(0, -(-length // block), blocks_per_chunk):
        start = first_block * block
        stop = min(length, start + blocks_per_chunk * block)
        num_blocks = -(-(stop - start) // block)
        yield Chunk(start, stop, first_block, num_blocks, start - window)


def padding(chunk: Chunk, block: int, window: int, length: int) -> tuple[int, int, int, int]:
    """``(key_lo, key_hi, pad_before, pad_after)``: the rows of ``k`` and ``v`` that exist for
    this chunk, and how many zero rows complete its key range on each side."""
    key_end = chunk.key_start + chunk.num_blocks * block + 2 * window
    key_lo, key_hi = max(0, chunk.key_start), min(length, key_end)
    return key_lo, key_hi, key_lo - chunk.key_start, key_end - key_hi


def block_mask(chunk: Chunk, block: int, window: int, length: int, causal: bool) -> np.ndarray:
    """``(num_blocks, block, span)`` booleans: may query ``b·block + r`` attend to key
    ``b·block − window + c``? Yes if ``|j − i| <= window``, the key exists (``0 <= j < L``)
    and, when ``causal``, ``j <= i``. Padding queries past ``L`` (filling the last block)
    may attend to their whole span: their rows are dropped, and no row is left empty."""
    b = np.arange(chunk.first_block, chunk.first_block + chunk.num_blocks)[:, None, None]
    r = np.arange(block)[None, :, None]
    c = np.arange(block + 2 * window)[None, None, :]
    offset = c - r - window  # j − i
    key = b * block - window + c
    allowed = (np.abs(offset) <= window) & (key >= 0) & (key < length)
    if causal:
        allowed &= offset <= 0
    return allowed | (b * block + r >= length)
