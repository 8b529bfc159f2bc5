"""Checkers for the exercises of lesson 15."""

from __future__ import annotations

import numpy as np

from .. import numpy as attn
from . import exercise, expect, phrase

# --------------------------------------------------------------------------- 15.1


def pooling_projection(length: int, rank: int) -> np.ndarray:
    """``(rank, length)``: row ``r`` averages the ``length // rank`` tokens of segment ``r``."""
    size = length // rank
    return np.kron(np.eye(rank), np.full((1, size), 1.0 / size))


@exercise("15.1", "low-rank attention by hand")
def _check_low_rank_by_hand(low_rank_by_hand) -> None:
    rng = np.random.default_rng(1101)
    projections = {"pooling": phrase("pooling projections"), "random": phrase("random projections")}
    cases = [(16, 8, 4, 4, "pooling"), (32, 4, 6, 8, "random"), (12, 6, 3, 12, "random")]
    cases += [(40, 16, 8, 5, "pooling"), (9, 2, 2, 1, "random"), (64, 8, 8, 16, "random")]
    for length, d_k, d_v, rank, kind in cases:
        q, k = rng.normal(0.0, 1.0, (2, length, d_k))
        v = rng.normal(0.0, 1.0, (length, d_v))
        if kind == "pooling":
            e = f = pooling_projection(length, rank)
        else:
            e, f = rng.normal(0.0, length**-0.5, (2, rank, length))
        call = phrase(
            "low_rank_by_hand(q, k, v, projection_k, projection_v) with L={length}, "
            "d_k={d_k}, d_v={d_v}, rank={rank} ({kind})",
            length=length,
            d_k=d_k,
            d_v=d_v,
            rank=rank,
            kind=projections[kind],
        )
        args = (q.copy(), k.copy(), v.copy(), e.copy(), f.copy())
        got = np.asarray(low_rank_by_hand(*args), dtype=float)
        want = attn.low_rank_attention(q, k, v, e, f)[0]
        expect(
            got.shape != (rank, d_v) or rank == length,
            "{call} has shape {got_shape}: one row per projected key. Only the keys and values "
            "are projected; the {length} queries stay, so the output has shape {want_shape}.",
            call=call,
            got_shape=got.shape,
            length=length,
            want_shape=want.shape,
        )
        expect(
            got.shape == want.shape,
            "{call} has shape {got_shape}; expected {want_shape} (one output per query).",
            call=call,
            got_shape=got.shape,
            want_shape=want.shape,
        )
        if np.allclose(got, want, atol=1e-10):
            continue
        wrong = {
            "exact": attn.attention(q, k, v)[0],
            "shared": attn.low_rank_attention(q, k, v, e, e)[0],
            "unscaled": attn.low_rank_attention(q, k, v, e, f, scale=1.0)[0],
            "rank": attn.low_rank_attention(q, k, v, e, f, scale=rank**-0.5)[0],
        }
        expect(
            not np.allclose(got, wrong["exact"], atol=1e-10),
            "{call} equals exact attention: the keys must first be mixed down to `rank` rows, "
            "projection_k @ k, and the values to projection_v @ v.",
            call=call,
        )
        expect(
            kind == "pooling" or not np.allclose(got, wrong["shared"], atol=1e-10),
            "{call}: the values are projected with projection_v, not projection_k.",
            call=call,
        )
        expect(
            not np.allclose(got, wrong["unscaled"], atol=1e-10),
            "{call}: the scores need the usual scale 1/sqrt(d_k), as in attention.",
            call=call,
        )
        expect(
            not np.allclose(got, wrong["rank"], atol=1e-10),
            "{call}: the scale is 1/sqrt(d_k), the width of a key, not 1/sqrt(rank).",
            call=call,
        )
        expect(
            False,
            "{call} gives the wrong numbers; compare with attn.low_rank_attention.",
            call=call,
        )


# --------------------------------------------------------------------------- 15.2

VARIANTS = ("exact", "truncated", "linear", "low-rank")


def attention_madds_reference(length: int, d: int, window: int, rank: int) -> dict[str, int]:
    """Multiply-adds of the matrix products of one head (``d_k = d_v = d``): exact
    ``2 L² d``; truncated ``2 L (2w + 1) d`` (edges ignored); linear ``2 L d²``
    (``φ(K)ᵀ V`` and ``φ(Q) S``); low-rank ``4 L r d`` (``E K``, ``F V``, the scores, the sum)."""
    return {
        "exact": 2 * length * length * d,
        "truncated": 2 * length * (2 * window + 1) * d,
        "linear": 2 * length * d * d,
        "low-rank": 4 * length * rank * d,
    }


@exercise("15.2", "multiply-adds of each variant")
def _check_attention_madds(attention_madds) -> None:
    cases = [(4096, 64, 64, 64), (1024, 32, 8, 16), (100, 8, 3, 10), (6000, 64, 50, 256)]
    cases += [(7, 5, 0, 1), (2048, 128, 16, 32)]
    for length, d, window, rank in cases:
        call = f"attention_madds(L={length}, d={d}, window={window}, rank={rank})"
        got = attention_madds(length, d, window, rank)
        expect(
            isinstance(got, dict) and set(got) == set(VARIANTS),
            "{call} must return a dict with the keys {variants}; got {got!r}.",
            call=call,
            variants=", ".join(map(repr, VARIANTS)),
            got=got,
        )
        want = attention_madds_reference(length, d, window, rank)
        for name in VARIANTS:
            value = float(got[name])
            if value == want[name]:
                continue
            hint = phrase(
                "{call}[{name!r}] = {value:,.0f}, expected {want:,}.",
                call=call,
                name=name,
                value=value,
                want=want[name],
            )
            if name == "low-rank":
                expect(
                    value != 2 * length * rank * d,
                    "{hint} Don't forget the projections E K and F V: r × L times L × d each.",
                    hint=hint,
                )
            expect(
                value != want[name] / 2,
                "{hint} That counts one matrix product; attention has two (scores, then "
                "the weighted sum of the values).",
                hint=hint,
            )
            if name == "truncated":
                expect(
                    value != 2 * length * window * d and value != 4 * length * window * d,
                    "{hint} A query sees 2w + 1 keys: w on each side and its own.",
                    hint=hint,
                )
                expect(
                    value != 2 * length * length * d,
                    "{hint} That is dense attention with a mask: truncated attention never "
                    "computes the scores outside the band.",
                    hint=hint,
                )
            if name == "linear":
                expect(
                    value != 2 * length * length * d,
                    "{hint} Linear attention never forms the L × L matrix: it computes "
                    "S = φ(K)ᵀ V (d × d) once, then φ(Q) S.",
                    hint=hint,
                )
            expect(False, "{hint}", hint=hint)


# --------------------------------------------------------------------------- 15.3

TASKS = ("smooth", "copy far", "global mean")

#: Which variants can produce each task's outputs (with suitable queries and keys), at
#: L = 4096 with window 64, the elu + 1 feature map (d = 64) and rank 64 (segment means).
SOLVERS = {
    "smooth": {"exact", "truncated"},
    "copy far": {"exact"},
    "global mean": {"exact", "linear", "low-rank"},
}

_WHY = {
    ("smooth", "exact"): phrase(
        "exact attention can put its weight on any keys, neighbours included"
    ),
    ("smooth", "truncated"): phrase("the 21 neighbours (±10) all lie inside the window of ±64"),
    ("smooth", "linear"): phrase(
        "every query would need its weight on its own 21 neighbours, a band of weights whose "
        "rank is close to L = 4096; linear attention's weight matrix has rank at most d = 64"
    ),
    ("smooth", "low-rank"): phrase(
        "with rank 64 every key is a mean over a segment of 64 tokens: a window of ±10 is "
        "finer than the projection can see"
    ),
    ("copy far", "exact"): phrase("exact attention can put almost all its weight on one key"),
    ("copy far", "truncated"): phrase(
        "the token 2000 positions away lies outside the window of ±64"
    ),
    ("copy far", "linear"): phrase(
        "each query would need a sharp peak on its own far key, a permutation of rank 4096; "
        "linear attention's weight matrix has rank at most d = 64"
    ),
    ("copy far", "low-rank"): phrase(
        "with rank 64 the value is averaged with 63 others in its segment; to pick one of L "
        "values the rank must be L"
    ),
    ("global mean", "exact"): phrase("with q = 0 all scores are equal: uniform weights"),
    ("global mean", "truncated"): phrase("a query sees at most 129 of the 4096 values"),
    ("global mean", "linear"): phrase(
        "with q = k = 0, φ(q) and φ(k) are all ones: every key gets the same weight"
    ),
    ("global mean", "low-rank"): phrase(
        "uniform weights over the 64 segment means give the mean of all values exactly"
    ),
}


@exercise("15.3", "which variant can do it?")
def _check_which_variants(answer) -> None:
    expect(
        isinstance(answer, dict) and set(answer) == set(TASKS),
        "answer must be a dict with the keys {tasks}; got {answer!r}.",
        tasks=", ".join(map(repr, TASKS)),
        answer=answer,
    )
    for task in TASKS:
        chosen = answer[task]
        expect(
            isinstance(chosen, (set, frozenset, list, tuple)),
            "answer[{task!r}] must be a set of variant names, such as {{'exact'}}.",
            task=task,
        )
        chosen = set(chosen)
        unknown = chosen - set(VARIANTS)
        expect(
            not unknown,
            "answer[{task!r}] contains {unknown}; the variants are {variants}.",
            task=task,
            unknown=sorted(unknown),
            variants=", ".join(map(repr, VARIANTS)),
        )
        for variant in VARIANTS:
            if (variant in chosen) == (variant in SOLVERS[task]):
                continue
            expect(
                variant not in SOLVERS[task],
                "{task!r}: {variant} can do it: {why}.",
                task=task,
                variant=variant,
                why=_WHY[task, variant],
            )
            expect(
                False,
                "{task!r}: {variant} cannot do it: {why}.",
                task=task,
                variant=variant,
                why=_WHY[task, variant],
            )


# --------------------------------------------------------------------------- 15.4


def reference_relative_errors(sharpness: float, length: int = 1024) -> dict[str, float]:
    """Lesson 15's local task at a given sharpness: each approximation's mean absolute error,
    relative to uniform attention's (window and rank 64)."""
    position = attn.sinusoidal_positional_encoding(length, 64)
    values = np.random.default_rng(0).normal(0.0, 1.0, (length, 64))
    q = k = sharpness * position
    exact, _ = attn.attention(q, k, values)
    size = length // 64
    projection = np.kron(np.eye(64), np.full((1, size), 1.0 / size))
    outputs = {
        "truncated": attn.truncated_attention(q, k, values, 64),
        "linear": attn.linear_attention(q, k, values),
        "low-rank": attn.low_rank_attention(q, k, values, projection)[0],
    }
    uniform = np.abs(values.mean(axis=0) - exact).mean()
    return {name: float(np.abs(y - exact).mean() / uniform) for name, y in outputs.items()}


@exercise("15.4", "softer attention")
def _check_relative_errors(relative_errors) -> None:
    at_two = reference_relative_errors(2.0)  # (the value a learner gets by ignoring sharpness)
    for sharpness in (0.5, 2.0):
        call = f"relative_errors({sharpness})"
        got = relative_errors(sharpness)
        want = at_two if sharpness == 2.0 else reference_relative_errors(sharpness)
        expect(
            isinstance(got, dict) and set(got) == set(want),
            "{call} should be a dict with the keys {keys}; got {got!r}.",
            call=call,
            keys=sorted(want),
            got=got,
        )
        for name in want:
            value = float(got[name])
            expect(
                not np.isclose(value, at_two[name], rtol=1e-6) or sharpness == 2.0,
                "{call}[{name!r}] is the value at sharpness 2: pass the sharpness on, "
                "local_inputs(1024, sharpness=sharpness).",
                call=call,
                name=name,
            )
            expect(
                np.isclose(value, want[name], rtol=1e-6),
                "{call}[{name!r}] = {value:.4f}, expected {want:.4f}: divide "
                "mae(y, y_exact) by mae(uniform output, y_exact), with y_exact from "
                "attn.attention(q, k, v) on local_inputs(1024, sharpness=sharpness).",
                call=call,
                name=name,
                value=value,
                want=want[name],
            )


# --------------------------------------------------------------------------- 15.5


@exercise("15.5", "a larger state")
def _check_larger_state(linear_recall) -> None:
    """Re-measures: trains through the learner's function at the lesson's d_k and at 8 times
    it. A state of 8 rows recalls about a quarter of 32 pairs; one of 64 rows, most of them."""
    got = {}
    for width in (8, 64):
        value = linear_recall(width)
        expect(
            isinstance(value, (int, float, np.floating)) and 0.0 <= float(value) <= 1.0,
            "linear_recall({width}) should be an accuracy, a number from 0 to 1; got {got!r}.",
            width=width,
            got=value,
        )
        got[width] = float(value)
    expect(
        got[8] < 0.45,
        "linear_recall(8) = {small:.2f}, far above the lesson's linear attention with 32 pairs "
        '(about a quarter): train linear attention, recall_accuracy("linear", 32, seed, '
        "key_width).",
        small=got[8],
    )
    expect(
        got[64] != got[8],
        "linear_recall(64) = linear_recall(8) = {small:.2f}: the key width changed nothing. Pass "
        'it on, recall_accuracy("linear", 32, seed, key_width).',
        small=got[8],
    )
    expect(
        got[64] > got[8] + 0.25,
        "linear_recall(64) = {large:.2f} is not far above linear_recall(8) = {small:.2f}: a "
        "state of 64 rows instead of 8 should recall far more of the 32 pairs. Is it the median "
        "of the three seeds, with queries and keys of width key_width?",
        large=got[64],
        small=got[8],
    )
