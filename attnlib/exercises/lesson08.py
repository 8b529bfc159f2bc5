"""Checkers for the exercises of lesson 08."""

from __future__ import annotations

import itertools

import numpy as np

from .. import numpy as attn
from . import exercise, expect, phrase
from .lesson02 import LARGE, on_large_scores

# --------------------------------------------------------------------------- 08.1


def keys_seen_reference(length: int, window: int, i: int, causal: bool = False) -> int:
    """How many keys query ``i`` may attend to: ``|i − j| <= window``, ``0 <= j < length``
    (and ``j <= i`` when ``causal``)."""
    last = i if causal else min(i + window, length - 1)
    return last - max(i - window, 0) + 1


@exercise("08.1", "how many keys does a query see?")
def _check_keys_seen(keys_seen) -> None:
    rng = np.random.default_rng(701)
    cases = [(10, 2, 5), (10, 2, 0), (10, 2, 9), (10, 2, 1), (6000, 50, 3000), (6000, 50, 0)]
    cases += [(5, 10, 2), (1, 0, 0), (7, 0, 3), (100, 99, 0), (100, 100, 50)]
    for _ in range(20):
        length = int(rng.integers(1, 60))
        cases.append((length, int(rng.integers(0, 70)), int(rng.integers(0, length))))
    for causal in (False, True):
        for length, window, i in cases:
            call = f"keys_seen(length={length}, window={window}, i={i}, causal={causal})"
            got = keys_seen(length, window, i, causal)
            want = keys_seen_reference(length, window, i, causal)
            if got == want:
                continue
            middle = 2 * window + 1 if not causal else window + 1
            expect(
                got != middle,
                "{call} returned {got}: that is the count in the middle of the sequence. "
                "Near the edges some of those keys do not exist (j < 0 or j >= length).",
                call=call,
                got=got,
            )
            expect(
                got != want - 1 and got != want - 2,
                "{call} returned {got}, expected {want}. The window is inclusive: |i − j| "
                "<= window, and the query's own key j = i counts too.",
                call=call,
                got=got,
                want=want,
            )
            if causal:
                expect(
                    got != keys_seen_reference(length, window, i),
                    "{call} returned {got}: with causal=True the keys after i (j > i) are "
                    "blocked as well.",
                    call=call,
                    got=got,
                )
            expect(False, "{call} returned {got}, expected {want}.", call=call, got=got, want=want)
    # The meaning, checked against the mask itself.
    for length, window in [(9, 2), (13, 4), (4, 6)]:
        rows = attn.window_mask(length, window).sum(axis=1)
        got = [keys_seen(length, window, i, False) for i in range(length)]
        expect(
            list(rows) == got,
            "keys_seen does not match window_mask({length}, {window}).",
            length=length,
            window=window,
        )


# --------------------------------------------------------------------------- 08.2


def score_bytes_reference(length: int, num_heads: int, window: int, dtype) -> tuple[int, int]:
    """Bytes of the attention scores of one layer: all ``L × L`` pairs (dense) and only the
    pairs inside the band (truncated), ``num_heads`` heads, entries of ``dtype``."""
    size = np.dtype(dtype).itemsize
    band = sum(keys_seen_reference(length, window, i) for i in range(length))
    return num_heads * length * length * size, num_heads * band * size


@exercise("08.2", "memory of dense and truncated scores")
def _check_score_bytes(score_bytes) -> None:
    cases = [
        (6000, 8, 50, "float32"),
        (100, 1, 2, "float32"),
        (1000, 4, 5, "float16"),
        (2048, 12, 64, "float64"),
        (10, 2, 3, np.float32),
        (7, 3, 10, "float32"),
        (1, 1, 0, "float64"),
        (500, 8, 0, "float16"),
    ]
    for length, heads, window, dtype in cases:
        name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
        call = f"score_bytes(length={length}, num_heads={heads}, window={window}, dtype={name!r})"
        got = score_bytes(length, heads, window, dtype)
        expect(
            isinstance(got, tuple) and len(got) == 2,
            "Return a tuple of two numbers: (dense_bytes, truncated_bytes).",
        )
        dense, truncated = (int(round(float(g))) for g in got)
        want_dense, want_truncated = score_bytes_reference(length, heads, window, dtype)
        size = np.dtype(dtype).itemsize
        expect(
            dense != want_dense * 8,
            "{call}: dense = {dense} looks like bits. Count bytes: np.dtype(dtype).itemsize "
            "is 4 for float32.",
            call=call,
            dense=dense,
        )
        expect(
            dense != want_dense // heads or heads == 1,
            "{call}: dense = {dense} is one head's worth. Every head has its own L × L scores.",
            call=call,
            dense=dense,
        )
        expect(
            dense == want_dense,
            "{call}: dense = {dense}, expected {want_dense}: num_heads · L · L · bytes per entry.",
            call=call,
            dense=dense,
            want_dense=want_dense,
        )
        no_edges = heads * length * (2 * window + 1) * size
        expect(
            truncated != no_edges or no_edges == want_truncated,
            "{call}: truncated = {truncated} gives every query 2·window + 1 keys; near the "
            "edges (and when the window is longer than the sequence) a query sees fewer.",
            call=call,
            truncated=truncated,
        )
        expect(
            truncated == want_truncated,
            "{call}: truncated = {truncated}, expected {want_truncated}: num_heads · (number "
            "of pairs with |i − j| <= window) · bytes per entry.",
            call=call,
            truncated=truncated,
            want_truncated=want_truncated,
        )


# --------------------------------------------------------------------------- 08.3


@exercise("08.3", "truncated attention for one query, with loops")
def _check_attend_one(attend_one_truncated) -> None:
    rng = np.random.default_rng(703)
    cases = [(10, 4, 2, 5), (10, 4, 2, 0), (10, 4, 2, 9), (12, 3, 0, 6), (8, 5, 20, 3)]
    cases += [(30, 6, 4, 1), (30, 6, 4, 28), (1, 3, 2, 0)]
    for length, d, window, i in cases:
        q, k = rng.normal(0.0, 1.0, (2, length, d))
        v = rng.normal(0.0, 1.0, (length, d + 1))
        call = phrase(
            "attend_one_truncated(q, k, v, i={i}, window={window}) with L={length}, d={d}",
            i=i,
            window=window,
            length=length,
            d=d,
        )
        got = np.asarray(attend_one_truncated(q.copy(), k.copy(), v.copy(), i, window), float)
        want = attn.truncated_attention(q, k, v, window)[i]
        expect(
            got.shape == want.shape,
            "{call} has shape {got_shape}; expected one output vector of shape {want_shape}.",
            call=call,
            got_shape=got.shape,
            want_shape=want.shape,
        )
        if np.allclose(got, want, atol=1e-10):
            continue
        everything = attn.attention(q, k, v)[0][i]
        unscaled = attn.attention(q, k, v, attn.window_mask(length, window), scale=1.0)[0][i]
        narrow = attn.attention(q, k, v, attn.window_mask(length, max(window - 1, 0)))[0][i]
        expect(
            not np.allclose(got, everything, atol=1e-10),
            "{call} attends to every key; only keys with |i − j| <= window may take part.",
            call=call,
        )
        expect(
            not np.allclose(got, unscaled, atol=1e-10),
            "{call}: the scores need the usual scale 1/sqrt(d), as in truncated_attention.",
            call=call,
        )
        expect(
            window == 0 or not np.allclose(got, narrow, atol=1e-10),
            "{call}: the window is inclusive, |i − j| <= window: keys i − window and "
            "i + window take part too.",
            call=call,
        )
        expect(
            False,
            "{call} gives the wrong numbers; compare with truncated_attention(...)[i].",
            call=call,
        )
    _check_large_scores(attend_one_truncated, rng)


def _check_large_scores(attend_one_truncated, rng) -> None:
    """Scores in the thousands (q and k scaled by ``LARGE``): exp of a raw score overflows a
    float, so only a softmax that subtracts the largest score first gives finite numbers."""
    q, k = LARGE * rng.normal(0.0, 1.0, (2, 12, 4))
    v = rng.normal(0.0, 1.0, (12, 5))
    call = phrase("attend_one_truncated(q, k, v, i=6, window=3) with scores in the thousands")
    top = float(np.abs(q[6] @ k[3:10].T).max())
    got = on_large_scores(
        attend_one_truncated, q.copy(), k.copy(), v.copy(), 6, 3, call=call, top=top
    )
    expect(
        np.allclose(np.asarray(got, float), attn.truncated_attention(q, k, v, 3)[6], atol=1e-10),
        "{call} gives the wrong numbers; compare with truncated_attention(...)[i].",
        call=call,
    )


# --------------------------------------------------------------------------- 08.4


def best_local_accuracy(near: int, window: int) -> float:
    """The best accuracy on the ±near majority task for a layer that sees ±window frames:
    that of the majority of the visible frames, exact over all 2^(2·near + 1) patterns."""
    patterns = np.array(list(itertools.product([-1, 1], repeat=2 * near + 1)))
    majority = np.sign(patterns.sum(axis=1))
    w = min(window, near)
    visible = patterns[:, near - w : near + w + 1].sum(axis=1)  # an odd count: never 0
    return float(np.mean(np.sign(visible) == majority))


#: The reasons offered for the window that solves the wider task; "b" is the right one.
WIDE_REASONS = ("a", "b", "c")


@exercise("08.4", "a wider local task")
def _check_local_accuracy(answer) -> None:
    expect(
        isinstance(answer, (tuple, list)) and len(answer) == 3 and callable(answer[0]),
        "Pass the three answers together: wide_task = (local_accuracy, wide_window, wide_reason).",
    )
    local_accuracy, wide_window, wide_reason = answer
    for near, window in [(5, 2), (5, 5)]:
        call = f"local_accuracy({near}, {window})"
        got = local_accuracy(near, window)
        expect(
            np.ndim(got) == 0,
            "{call} returned {got!r}; return one accuracy (a number).",
            call=call,
            got=got,
        )
        got, best = float(got), best_local_accuracy(near, window)
        expect(
            abs(got - best_local_accuracy(3, window)) > 0.02 or abs(got - best) < 0.02,
            "{call} = {got:.3f} is the accuracy of the ±3 task: pass near on to train(...) "
            "and to accuracy(...), which both take near=.",
            call=call,
            got=got,
        )
        expect(
            abs(got - best) < 0.03,
            "{call} = {got:.3f}, but a trained layer reaches the best possible, {best:.3f}: "
            'train with r = train("local", window, near=near), then measure '
            'accuracy(r, "local", window, x_test, near=near).',
            call=call,
            got=got,
            best=best,
        )
    expect(
        wide_window is not None and wide_reason is not None,
        "local_accuracy works. Now read its results: set wide_window to the smallest window "
        "that solves the ±5 task, and wide_reason to the letter of the reason.",
    )
    expect(
        wide_window == 5,
        "wide_window = {got!r}, but the smallest window that solves the ±5 task is the one "
        "from which local_accuracy(5, window) reaches 1.00: run it for the windows 0 to 6 "
        "and read the results.",
        got=wide_window,
    )
    if isinstance(wide_reason, str):
        wide_reason = wide_reason.strip().lower()  # "B" or " b" is the letter b
    expect(
        wide_reason in WIDE_REASONS,
        'wide_reason = {got!r}; set it to one of the letters "a", "b" or "c".',
        got=wide_reason,
    )
    expect(
        wide_reason != "a",
        "Not a: the layer has the same parameters whatever the window, one score r for every "
        "offset (2L - 1 of them); the window only masks some of them out.",
    )
    expect(
        wide_reason != "c",
        "Not c: every window trained for the same 120 steps, and below w = 5 the layer "
        "already reaches the best accuracy its visible frames allow (the checker compares "
        "with it): more steps cannot lift it further.",
    )
