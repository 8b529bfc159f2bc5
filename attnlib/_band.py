"""The block layout of ``truncated_attention``, shared by both backends.

The queries are cut into blocks of ``block`` rows. Block ``b`` holds queries
``i = b·block + r`` and can only reach keys ``j = b·block − window + c`` for
``c = 0 … block + 2·window − 1``: that key range, the *span*, is all it is scored against.
"""

from __future__ import annotations

import numpy as np


def block_size(window: int, length: int) -> int:
    """Queries per block: about the window (so a block's scores, block × span, stay
    O(window²)), at least 32 (so small windows still make matrix products), at most ``length``."""
    return max(1, min(length, max(window, 32)))


def block_mask(num_blocks: int, block: int, window: int, length: int, causal: bool) -> np.ndarray:
    """``(num_blocks, block, block + 2·window)`` booleans: may query ``b·block + r`` attend to
    key ``b·block − window + c``? Yes if ``|j − i| <= window``, the key exists (``0 <= j < L``)
    and, when ``causal``, ``j <= i``."""
    b = np.arange(num_blocks)[:, None, None]
    r = np.arange(block)[None, :, None]
    c = np.arange(block + 2 * window)[None, None, :]
    offset = c - r - window  # j − i
    key = b * block - window + c
    allowed = (np.abs(offset) <= window) & (key >= 0) & (key < length)
    if causal:
        allowed &= offset <= 0
    return allowed | (b * block + r >= length)
