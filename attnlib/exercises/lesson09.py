"""Checkers for the exercises of lesson 09."""

from __future__ import annotations

import numpy as np

from .. import numpy as attn
from . import exercise, expect, phrase

# --------------------------------------------------------------------------- 09.1


def partial_state(scores: np.ndarray, values: np.ndarray):
    """The online softmax's state after some keys: ``(m, ℓ, y)`` with ``m`` the largest
    score, ``ℓ = Σ exp(s − m)`` and ``y = Σ exp(s − m) v``; ``(-inf, 0, 0)`` for no keys."""
    if len(scores) == 0:
        return -np.inf, 0.0, np.zeros(values.shape[1])
    m = float(scores.max())
    e = np.exp(scores - m)
    return m, float(e.sum()), e @ values


@exercise("09.1", "merge two partial softmax results")
def _check_merge_partial(merge_partial) -> None:
    rng = np.random.default_rng(705)
    cases = [(6, 4, 0.0), (5, 5, 3.0), (1, 9, -4.0), (8, 2, 40.0), (3, 3, 700.0)]
    cases += [(0, 5, 0.0), (5, 0, 0.0), (0, 0, 0.0)]  # a part with no keys at all
    for n_a, n_b, shift in cases:
        scores = rng.normal(0.0, 2.0, n_a + n_b)
        scores[:n_a] += shift  # the first part's scores larger (or smaller) than the second's
        values = rng.normal(0.0, 1.0, (n_a + n_b, 3))
        part_a = partial_state(scores[:n_a], values[:n_a])
        part_b = partial_state(scores[n_a:], values[n_a:])
        call = phrase("merge_partial(a, b) with {n_a} and {n_b} keys", n_a=n_a, n_b=n_b)
        got = merge_partial(part_a, part_b)
        expect(
            isinstance(got, tuple) and len(got) == 3,
            "{call}: return a tuple (m, l, y) like the parts themselves.",
            call=call,
        )
        m, total, y = float(got[0]), float(got[1]), np.asarray(got[2], dtype=float)
        want_m, want_total, want_y = partial_state(scores, values)
        if n_a + n_b == 0:
            expect(
                np.isfinite(total) and np.isfinite(y).all(),
                "{call}: both parts are empty (m = -inf); e^(m_a − m) is then "
                "e^(-inf − (-inf)) = NaN. Return (-inf, 0.0, zeros) in that case.",
                call=call,
            )
            expect(
                m == -np.inf and total == 0 and not y.any(),
                "{call}: expected (-inf, 0, 0).",
                call=call,
            )
            continue
        expect(
            np.isfinite(total),
            "{call}: l = {total}; an exponent was positive or NaN.",
            call=call,
            total=total,
        )
        expect(
            m == want_m,
            "{call}: m = {m}, expected {want_m}, the larger of the two maxima.",
            call=call,
            m=m,
            want_m=want_m,
        )
        expect(
            not np.isclose(total, part_a[1] + part_b[1]) or np.isclose(total, want_total),
            "{call}: l = l_a + l_b adds sums measured against different maxima. Rescale "
            "each first: l = e^(m_a − m)·l_a + e^(m_b − m)·l_b.",
            call=call,
        )
        expect(
            np.isclose(total, want_total, rtol=1e-10),
            "{call}: l = {total:.6g}, expected {want_total:.6g}. Each part's sum is scaled by "
            "e^(m_part − m), a number <= 1.",
            call=call,
            total=total,
            want_total=want_total,
        )
        expect(
            np.allclose(y, want_y, rtol=1e-10, atol=1e-12),
            "{call}: y is wrong; rescale it exactly like l: y = e^(m_a − m)·y_a + e^(m_b − m)·y_b.",
            call=call,
        )
    # The meaning: merging the parts gives attention over all the keys.
    q, k = rng.normal(0.0, 1.0, (2, 12, 4))
    v = rng.normal(0.0, 1.0, (12, 3))
    scores = k @ q[0] / 2.0
    merged = merge_partial(partial_state(scores[:5], v[:5]), partial_state(scores[5:], v[5:]))
    expect(
        np.allclose(merged[2] / merged[1], attn.attention(q[:1], k, v)[0][0], atol=1e-10),
        "merged y / l should equal the attention output over all the keys.",
    )


# --------------------------------------------------------------------------- 09.2


def causal_tiles_reference(length: int, block_q: int, block_k: int) -> int:
    """How many (query block, key tile) pairs of a causal mask have at least one allowed
    score: those whose first key is at most the block's last query.

    >>> causal_tiles_reference(8, 4, 4)  # of four tiles, the one above the diagonal is empty
    3
    """
    count = 0
    for first_query in range(0, length, block_q):
        last_query = min(first_query + block_q, length) - 1
        count += sum(1 for first_key in range(0, length, block_k) if first_key <= last_query)
    return count


def _causal_tiles_by_mask(length: int, block_q: int, block_k: int) -> int:
    """The same count, read off ``causal_mask`` tile by tile."""
    mask = attn.causal_mask(length)
    return sum(
        bool(mask[i : i + block_q, j : j + block_k].any())
        for i in range(0, length, block_q)
        for j in range(0, length, block_k)
    )


@exercise("09.2", "the tiles a causal mask leaves")
def _check_causal_tiles(causal_tiles) -> None:
    cases = [(8, 4, 4), (10, 4, 3), (16, 4, 8), (16, 8, 4), (1, 4, 4), (7, 7, 7), (9, 2, 5)]
    cases += [(100, 16, 16), (130, 32, 64), (64, 64, 16), (33, 1, 1), (50, 7, 3)]
    for length, block_q, block_k in cases:
        call = f"causal_tiles(length={length}, block_q={block_q}, block_k={block_k})"
        got = causal_tiles(length, block_q, block_k)
        expect(
            np.ndim(got) == 0,
            "{call} returned {got!r}; return one count (an integer).",
            call=call,
            got=got,
        )
        want = _causal_tiles_by_mask(length, block_q, block_k)
        if got == want:
            continue
        all_tiles = -(-length // block_q) * -(-length // block_k)
        expect(
            got != all_tiles,
            "{call} = {got} counts every tile; a tile whose keys all come after the block's "
            "last query is fully masked, and the kernel skips it.",
            call=call,
            got=got,
        )
        strict = sum(
            1
            for i in range(0, length, block_q)
            for j in range(0, length, block_k)
            if j < min(i + block_q, length) - 1
        )
        expect(
            got != strict,
            "{call} = {got}: a tile whose first key equals the block's last query still has "
            "one allowed score (the query itself): count it.",
            call=call,
            got=got,
        )
        expect(False, "{call} = {got}, expected {want}.", call=call, got=got, want=want)


# --------------------------------------------------------------------------- 09.3


def bytes_moved_reference(length: int, d: int, block_q: int, itemsize: int) -> tuple[int, int]:
    """Bytes that explicit and tiled attention move between slow and fast memory (lesson 09's
    loops): the tiled loop reads Q once, writes O once and reads K and V once per block of
    ``block_q`` queries; explicit attention also writes S and P and reads them back.

    >>> bytes_moved_reference(1024, 64, 256, 4)
    (19398656, 2621440)
    """
    passes = -(-length // block_q)
    tiled = itemsize * (2 * length * d + 2 * passes * length * d)
    return tiled + 4 * itemsize * length * length, tiled


@exercise("09.3", "bytes moved, by formula")
def _check_bytes_moved(bytes_moved) -> None:
    cases = [(1024, 64, 211, 4), (1024, 64, 1024, 4), (100, 8, 30, 8), (2048, 128, 101, 2)]
    cases += [(1, 4, 1, 4), (37, 16, 5, 4), (4096, 64, 256, 2)]
    for length, d, block_q, itemsize in cases:
        call = f"bytes_moved(length={length}, d={d}, block_q={block_q}, itemsize={itemsize})"
        got = bytes_moved(length, d, block_q, itemsize)
        expect(
            isinstance(got, tuple) and len(got) == 2,
            "{call}: return a tuple of two numbers, (explicit, tiled).",
            call=call,
        )
        explicit, tiled = (int(round(float(g))) for g in got)
        want_explicit, want_tiled = bytes_moved_reference(length, d, block_q, itemsize)
        passes = -(-length // block_q)
        expect(
            tiled == want_tiled or tiled != itemsize * (2 * length * d + 2 * length * d),
            "{call}: tiled = {tiled} reads K and V only once; the loop reads them again for "
            "every block of queries.",
            call=call,
            tiled=tiled,
        )
        expect(
            tiled == want_tiled or tiled != itemsize * (2 * length * d + passes * length * d),
            "{call}: tiled = {tiled} reads only K (or only V) in each pass; it reads both.",
            call=call,
            tiled=tiled,
        )
        expect(
            tiled == want_tiled
            or tiled != itemsize * (2 * length * d + 2 * (length // block_q) * length * d),
            "{call}: tiled = {tiled}: a last, shorter block of queries is a pass too. "
            "Round the number of blocks up: -(-length // block_q).",
            call=call,
            tiled=tiled,
        )
        expect(
            tiled == want_tiled,
            "{call}: tiled = {tiled}, expected {want_tiled}: itemsize · (2Ld + 2nLd), "
            "Q read and O written once, K and V read once per block of queries.",
            call=call,
            tiled=tiled,
            want_tiled=want_tiled,
        )
        expect(
            explicit - tiled != 2 * itemsize * length * length,
            "{call}: explicit = {explicit} adds 2L² numbers; both S and P are written and "
            "read back: 4L².",
            call=call,
            explicit=explicit,
        )
        expect(
            explicit == want_explicit,
            "{call}: explicit = {explicit}, expected {want_explicit}: the tiled traffic plus "
            "4 · itemsize · L² for S and P, each written once and read once.",
            call=call,
            explicit=explicit,
            want_explicit=want_explicit,
        )


# --------------------------------------------------------------------------- 09.4

#: The fast memory of lesson 09's experiment, in bytes.
FAST_BYTES = 192 * 1024


def query_block_reference(fast_bytes: int, length: int, d: int, block_k: int, itemsize: int):
    """Lesson 09's block size: the most queries (at most ``length``) whose block, with its
    running state, fits in fast memory next to one tile of ``block_k`` keys and values and
    the tile of scores: ``itemsize · (B_q(2d + 2) + 2·block_k·d + B_q·block_k) <= fast_bytes``.

    >>> query_block_reference(192 * 1024, 1024, 64, 64, 4)
    211
    """
    numbers = fast_bytes // itemsize - 2 * block_k * d
    return max(1, min(length, numbers // (2 * d + 2 + block_k)))


def traffic_ratio_reference(d: int, length: int = 1024, fast_bytes: int = FAST_BYTES) -> float:
    """Bytes moved by explicit attention divided by those of tiled attention, float32 inputs
    of width ``d``, lesson 09's tiles."""
    block_q = query_block_reference(fast_bytes, length, d, 64, 4)
    explicit, tiled = bytes_moved_reference(length, d, block_q, 4)
    return explicit / tiled


@exercise("09.4", "a wider head")
def _check_traffic_ratio(traffic_ratio) -> None:
    for d in (32, 128):
        call = f"traffic_ratio({d})"
        got = traffic_ratio(d)
        expect(
            np.ndim(got) == 0,
            "{call} returned {got!r}; return one ratio (a number).",
            call=call,
            got=got,
        )
        got, want = float(got), traffic_ratio_reference(d)
        expect(
            not np.isclose(got, traffic_ratio_reference(64)),
            "{call} = {got:.2f} is the ratio for d = 64: make q, k and v {d} numbers wide, "
            "float32_heads(1024, {d}).",
            call=call,
            got=got,
            d=d,
        )
        expect(
            not np.isclose(got, 1 / want),
            "{call} = {got:.3f} is tiled / explicit; return explicit / tiled (above 1).",
            call=call,
            got=got,
        )
        expect(
            np.isclose(got, want, rtol=1e-9),
            "{call} = {got:.3f}, expected {want:.3f}: explicit_io(q, k, v, FAST).bytes_moved "
            "/ tiled_io(q, k, v, FAST).bytes_moved with L = 1024 and the lesson's FAST.",
            call=call,
            got=got,
            want=want,
        )
