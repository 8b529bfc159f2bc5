"""Checkers for the exercises of lesson 02."""

from __future__ import annotations

import numpy as np

from .. import numpy as attn
from ..data import royal_embeddings
from . import exercise, expect, phrase


def _random_inputs(seed: int = 2):
    """A few float64 sentences of different lengths and widths, from a fixed seed."""
    rng = np.random.default_rng(seed)
    shapes = [(1, 2), (3, 3), (4, 5), (6, 2), (7, 8)]
    return [rng.normal(0.0, 1.0, shape) for shape in shapes]


def _reference(x):
    """Parameter-free self-attention: softmax(X X^T) X, row by row."""
    return attn.attention(x, x, x, scale=1.0)


#: The checkers of 02.1, 02.2 and 03.1 end with inputs scaled by this factor: their scores run
#: into the thousands, far past s ≈ 709, where e^s overflows a float64.
LARGE = 30.0


def _large_input(seed: int = 5) -> np.ndarray:
    """A (4, 6) sentence scaled by LARGE: its dot products are in the thousands."""
    return LARGE * np.random.default_rng(seed).normal(0.0, 1.0, (4, 6))


def on_large_scores(function, *args, call: str, top: float):
    """``function(*args)``, or a failed check naming the overflow of a softmax without its max.

    The learner's code runs with NumPy's overflow warnings off: the hint says what went wrong.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            result = function(*args)
        except OverflowError:  # math.exp of a large score
            result = None
        parts = result if isinstance(result, tuple) else (result,)
        try:
            finite = result is not None and all(
                np.isfinite(np.asarray(p, float)).all() for p in parts
            )
        except (TypeError, ValueError):
            finite = True  # not arrays: the checks that follow say what is wrong
    expect(
        finite,
        "{call} breaks down on large scores (inputs scaled by {factor:g}, scores up to {top:.0f}): "
        "e^s overflows once s passes about 709. Subtract each row's largest score before the "
        "exponential; the softmax stays the same.",
        call=call,
        factor=LARGE,
        top=top,
    )
    return result


@exercise("02.1", "attend_one with loops")
def _check_attend_one(attend_one) -> None:
    e = royal_embeddings()
    royal = np.array([e["king"], e["queen"], e["dog"]])
    large = _large_input()
    for x in [royal, *_random_inputs(), large]:
        expected, _ = _reference(x)
        for i in range(len(x)):
            if x is large:
                call = f"attend_one(x, {i})"
                top = float((x @ x.T).max())
                got = on_large_scores(attend_one, x.copy(), i, call=call, top=top)
            else:
                got = attend_one(x.copy(), i)
            got = np.asarray(got, dtype=float)
            expect(
                got.shape == (x.shape[1],),
                "attend_one(x, {i}) should return one vector of length d = {d}; got shape {shape}.",
                i=i,
                d=x.shape[1],
                shape=got.shape,
            )
            expect(
                np.allclose(got, expected[i], atol=1e-8),
                "attend_one(x, {i}) is off for x of shape {shape}. Check the three steps: "
                "scores s_j = x_i · x_j (no scaling), weights = softmax of all L scores "
                "(they sum to 1), output = sum_j w_j x_j.",
                i=i,
                shape=x.shape,
            )


@exercise("02.2", "attend_all in matrix form")
def _check_attend_all(attend_all) -> None:
    large = _large_input()
    for x in [*_random_inputs(seed=3), large]:
        if x is large:
            top = float((x @ x.T).max())
            result = on_large_scores(attend_all, x.copy(), call="attend_all(x)", top=top)
        else:
            result = attend_all(x.copy())
        expect(
            isinstance(result, tuple) and len(result) == 2,
            "attend_all(x) should return a pair (output, weights).",
        )
        output, weights = (np.asarray(r, dtype=float) for r in result)
        expected_out, expected_w = _reference(x)
        expect(
            weights.shape == expected_w.shape,
            "weights should have shape (L, L) = {shape}; got {got}.",
            shape=expected_w.shape,
            got=weights.shape,
        )
        expect(
            np.allclose(weights.sum(axis=1), 1.0),
            "Each row of the weights should sum to 1: take the softmax along each row (axis=1).",
        )
        expect(
            np.allclose(weights, expected_w, atol=1e-8),
            "The weights are off: scores = x @ x.T (no scaling), then a softmax of each row.",
        )
        expect(
            output.shape == expected_out.shape and np.allclose(output, expected_out, atol=1e-8),
            "The weights are right but the output is off: output = weights @ x.",
        )


def _king_row(scale: float) -> np.ndarray:
    """King's softmax weights over (king, queen, dog) with the embeddings scaled by ``scale``."""
    e = royal_embeddings()
    x = scale * np.array([e["king"], e["queen"], e["dog"]])
    return attn.softmax(x[0] @ x.T)


@exercise("02.3", "turning the scale dial")
def _check_king_weights(king_weights) -> None:
    for scale in (0.0, 1.0, 2.0, 5.0, 10.0, 16.0, 0.5):
        got = np.asarray(king_weights(scale), dtype=float)
        call = f"king_weights({scale})"
        expect(
            got.shape == (3,),
            "{call} should be king's 3 weights; got shape {shape}.",
            call=call,
            shape=got.shape,
        )
        expect(
            np.isclose(got.sum(), 1.0),
            "{call} sums to {total:.3f}; a softmax row sums to 1.",
            call=call,
            total=got.sum(),
        )
        want = _king_row(scale)
        if scale not in (0.0, 1.0):
            expect(
                not np.allclose(got, _king_row(np.sqrt(scale)), atol=1e-9),
                "{call} is the row for scores × {scale}: scaling both vectors by {scale} "
                "multiplies each dot product by {scale} × {scale}.",
                call=call,
                scale=scale,
            )
        expect(
            np.allclose(got, want, atol=1e-9),
            "{call} is off: scale king, queen and dog by {scale}, take the dot products of "
            "king with all three, then the softmax of that row.",
            call=call,
            scale=scale,
        )


def _rolled(x):
    """Not equivariant: each token is mixed with its right-hand neighbour (position matters)."""
    return x + 0.5 * np.roll(x, -1, axis=0)


@exercise("02.4", "is_permutation_equivariant")
def _check_equivariance(is_permutation_equivariant) -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(0.0, 1.0, (5, 3))
    perm = np.array([2, 0, 4, 1, 3])
    cases = [
        (lambda x: _reference(x)[0], True, phrase("parameter-free self-attention")),
        (np.tanh, True, phrase("an element-wise function (np.tanh)")),
        (
            lambda x: np.cumsum(x, axis=0),
            False,
            phrase("a running sum over positions (np.cumsum)"),
        ),
        (_rolled, False, phrase("mixing each token with its right neighbour")),
        (
            lambda x: np.repeat(x.mean(axis=0, keepdims=True), len(x), axis=0),
            True,
            phrase("the mean"),
        ),
        (lambda x: x[::-1].copy(), False, phrase("reversing the sequence")),
    ]
    for f, truth, name in cases:
        got = is_permutation_equivariant(f, x.copy(), perm.copy())
        expect(
            isinstance(got, (bool, np.bool_)),
            "Return True or False (a bool); got {type_name}.",
            type_name=type(got).__name__,
        )
        expect(
            bool(got) == truth,
            "For f = {name} the answer should be {truth}. Equivariance means "
            "f(x[perm]) equals f(x)[perm] (compare with np.allclose): permuting the input "
            "permutes the output in the same way.",
            name=name,
            truth=truth,
        )
