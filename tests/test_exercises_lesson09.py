"""The checkers of lesson 09: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib import numpy as attn
from attnlib.exercises.lesson09 import (
    FAST_BYTES,
    bytes_moved_reference,
    causal_tiles_reference,
    query_block_reference,
    traffic_ratio_reference,
)

# ---------------------------------------------------------------- reference solutions


def merge_partial(part_a, part_b):
    (m_a, l_a, y_a), (m_b, l_b, y_b) = part_a, part_b
    m = max(m_a, m_b)
    if m == -np.inf:
        return m, 0.0, np.zeros_like(y_a)
    scale_a, scale_b = np.exp(m_a - m), np.exp(m_b - m)
    return m, scale_a * l_a + scale_b * l_b, scale_a * y_a + scale_b * y_b


def causal_tiles(length, block_q, block_k):
    count = 0
    for i in range(0, length, block_q):
        last_query = min(i + block_q, length) - 1
        count += len(range(0, last_query + 1, block_k))  # tiles starting at or before it
    return count


def bytes_moved(length, d, block_q, itemsize):
    passes = -(-length // block_q)
    tiled = itemsize * 2 * length * d * (1 + passes)
    return tiled + 4 * itemsize * length**2, tiled


def traffic_ratio(d):
    """Counts with the lesson's loop structure, without running the loops (the notebook's
    solution runs them)."""
    explicit, tiled = bytes_moved(1024, d, query_block_reference(FAST_BYTES, 1024, d, 64, 4), 4)
    return explicit / tiled


# ---------------------------------------------------------------- plausible mistakes


def merge_no_rescale(part_a, part_b):
    return max(part_a[0], part_b[0]), part_a[1] + part_b[1], part_a[2] + part_b[2]


def merge_wrong_sign(part_a, part_b):
    (m_a, l_a, y_a), (m_b, l_b, y_b) = part_a, part_b
    m = max(m_a, m_b)
    if m == -np.inf:
        return m, 0.0, np.zeros_like(y_a)
    scale_a, scale_b = np.exp(m - m_a), np.exp(m - m_b)
    return m, scale_a * l_a + scale_b * l_b, scale_a * y_a + scale_b * y_b


def merge_nan_when_empty(part_a, part_b):
    (m_a, l_a, y_a), (m_b, l_b, y_b) = part_a, part_b
    m = max(m_a, m_b)
    with np.errstate(invalid="ignore"):
        scale_a, scale_b = np.exp(m_a - m), np.exp(m_b - m)
    return m, scale_a * l_a + scale_b * l_b, scale_a * y_a + scale_b * y_b


def merge_y_not_rescaled(part_a, part_b):
    m, total, _ = merge_partial(part_a, part_b)
    return m, total, part_a[2] + part_b[2]


def every_tile(length, block_q, block_k):
    return -(-length // block_q) * -(-length // block_k)


def tiles_strictly_below(length, block_q, block_k):
    return sum(
        1
        for i in range(0, length, block_q)
        for j in range(0, length, block_k)
        if j < min(i + block_q, length) - 1
    )


def kv_read_once(length, d, block_q, itemsize):
    tiled = itemsize * 4 * length * d
    return tiled + 4 * itemsize * length**2, tiled


def only_k_per_pass(length, d, block_q, itemsize):
    tiled = itemsize * (2 * length * d + -(-length // block_q) * length * d)
    return tiled + 4 * itemsize * length**2, tiled


def passes_rounded_down(length, d, block_q, itemsize):
    tiled = itemsize * (2 * length * d + 2 * (length // block_q) * length * d)
    return tiled + 4 * itemsize * length**2, tiled


def s_only(length, d, block_q, itemsize):
    explicit, tiled = bytes_moved(length, d, block_q, itemsize)
    return explicit - 2 * itemsize * length**2, tiled


def ratio_always_d64(d):
    return traffic_ratio(64)


def ratio_inverted(d):
    return 1 / traffic_ratio(d)


def ratio_other_fast_memory(d):
    explicit, tiled = bytes_moved(1024, d, query_block_reference(2**20, 1024, d, 64, 4), 4)
    return explicit / tiled


CORRECT = {
    "09.1": lambda a, b: merge_partial(a, b),
    "09.2": causal_tiles,
    "09.3": bytes_moved,
    "09.4": traffic_ratio,
}

WRONG = [
    ("09.1", merge_no_rescale, "different maxima"),
    ("09.1", merge_wrong_sign, "<= 1"),
    ("09.1", merge_nan_when_empty, "both parts are empty"),
    ("09.1", merge_y_not_rescaled, "rescale it exactly like l"),
    ("09.1", lambda a, b: [0, 1, 2], "tuple (m, l, y)"),
    ("09.2", every_tile, "fully masked"),
    ("09.2", tiles_strictly_below, "equals the block's last query"),
    ("09.2", lambda length, block_q, block_k: [3], "one count"),
    ("09.2", lambda length, block_q, block_k: 1, "expected"),
    ("09.3", kv_read_once, "only once"),
    ("09.3", only_k_per_pass, "reads both"),
    ("09.3", passes_rounded_down, "Round the number of blocks up"),
    ("09.3", s_only, "4L²"),
    ("09.3", lambda *args: 42, "tuple of two"),
    ("09.4", ratio_always_d64, "the ratio for d = 64"),
    ("09.4", ratio_inverted, "tiled / explicit"),
    ("09.4", ratio_other_fast_memory, "the lesson's FAST"),
    ("09.4", lambda d: [1.0], "one ratio"),
]


@pytest.mark.parametrize(
    ("length", "block_q", "block_k"), [(1, 1, 1), (8, 4, 4), (10, 4, 3), (37, 5, 8), (64, 16, 7)]
)
def test_causal_tiles_reference_counts_the_tiles_with_an_allowed_score(length, block_q, block_k):
    mask = attn.causal_mask(length)
    by_mask = sum(
        bool(mask[i : i + block_q, j : j + block_k].any())
        for i in range(0, length, block_q)
        for j in range(0, length, block_k)
    )
    assert causal_tiles_reference(length, block_q, block_k) == by_mask


def test_bytes_moved_reference_counts_what_each_loop_moves():
    # Q read once, O written once, K and V read once per block of queries; S and P on top
    explicit, tiled = bytes_moved_reference(10, 2, 4, 4)
    assert tiled == 4 * (10 * 2 + 10 * 2 + 3 * 2 * 10 * 2)
    assert explicit - tiled == 4 * 4 * 100
    # a fast memory that holds every query: everything moves once
    assert bytes_moved_reference(100, 8, 100, 4)[1] == 4 * 4 * 100 * 8


def test_query_block_reference_fills_the_fast_memory_and_no_more():
    for d in (16, 64, 128):
        block_q = query_block_reference(FAST_BYTES, 10**6, d, 64, 4)
        used = 4 * (block_q * (2 * d + 2) + 2 * 64 * d + block_q * 64)
        assert used <= FAST_BYTES < used + 4 * (2 * d + 2 + 64)


def test_a_wider_head_leaves_less_to_gain():
    ratios = [traffic_ratio_reference(d) for d in (32, 64, 128, 256)]
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] > 1
