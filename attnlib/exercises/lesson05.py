"""Checkers for the exercises of lesson 05."""

from __future__ import annotations

import math

import numpy as np

from .. import numpy as attn
from . import exercise, expect


def _vector(result, call: str, size: int) -> np.ndarray:
    """``result`` as a float vector of ``size`` numbers, or a failed check saying so."""
    try:
        vector = np.asarray(result, dtype=float)
    except (TypeError, ValueError):
        expect(
            False,
            "{call} should return {size} numbers; got {type_name}.",
            call=call,
            size=size,
            type_name=type(result).__name__,
        )
    expect(
        vector.shape == (size,),
        "{call} should return a vector of d_model = {size} numbers; got shape {vector_shape}.",
        call=call,
        size=size,
        vector_shape=vector.shape,
    )
    return vector


def _split(encoding: np.ndarray) -> np.ndarray:
    """The "split" layout of a sinusoidal table: all sines first, then all cosines."""
    return np.concatenate([encoding[..., 0::2], encoding[..., 1::2]], axis=-1)


def _interleave(even: np.ndarray, odd: np.ndarray) -> np.ndarray:
    """One vector with ``even`` at the even indices and ``odd`` at the odd ones."""
    out = np.empty(len(even) + len(odd))
    out[0::2], out[1::2] = even, odd
    return out


def interleaved_shift_matrix(k: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """M_k for attnlib's interleaved layout: PE(p + k) = M_k @ PE(p) (for even d_model)."""
    matrix = np.zeros((d_model, d_model))
    for i, omega in enumerate(base ** (-np.arange(0, d_model, 2) / d_model)):
        c, s = math.cos(k * omega), math.sin(k * omega)
        matrix[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    return matrix


# --------------------------------------------------------------------------- 05.1


def _row_cases():
    rng = np.random.default_rng(501)
    cases = [(0, 4, 10000.0), (1, 4, 10000.0), (7, 8, 10000.0), (50, 16, 10000.0)]
    cases += [(3, 6, 100.0), (129, 64, 10000.0)]
    cases += [(int(rng.integers(0, 500)), 2 * int(rng.integers(1, 33)), 10000.0) for _ in range(4)]
    return cases


@exercise("05.1", "one position by hand")
def _check_sinusoidal_row(sinusoidal_row) -> None:
    for pos, d, base in _row_cases():
        call = f"sinusoidal_row({pos}, {d}, base={base:g})"
        got = _vector(sinusoidal_row(pos, d, base), call, d)
        want = attn.sinusoidal_positional_encoding(pos + 1, d, base)[pos]
        if np.allclose(got, want, atol=1e-9):
            continue
        i, j = np.arange(d // 2), np.arange(d)
        angle = pos / base ** (2 * i / d)
        swapped = _interleave(np.cos(angle), np.sin(angle))
        pairs_by_i = _interleave(np.sin(pos / base ** (i / d)), np.cos(pos / base ** (i / d)))
        per_column = np.where(
            j % 2 == 0, np.sin(pos / base ** (j / d)), np.cos(pos / base ** (j / d))
        )
        default_base = attn.sinusoidal_positional_encoding(pos + 1, d)[pos]
        off_by_one = attn.sinusoidal_positional_encoding(pos + 2, d, base)[pos + 1]
        expect(
            not np.allclose(got, off_by_one, atol=1e-9),
            "{call} is the encoding of position {next_pos}: positions count from 0, and "
            "position 0 is sin(0) = 0, cos(0) = 1 in every pair.",
            call=call,
            next_pos=pos + 1,
        )
        expect(
            not np.allclose(got, _split(want), atol=1e-9),
            "{call} puts all the sines first and then all the cosines. attnlib interleaves "
            "them: column 2i is sin(pos·ω_i) and column 2i + 1 is cos(pos·ω_i).",
            call=call,
        )
        expect(
            not np.allclose(got, swapped, atol=1e-9),
            "{call}: sine and cosine are swapped. The even column 2i is the sine, the odd "
            "column 2i + 1 the cosine.",
            call=call,
        )
        expect(
            not np.allclose(got, pairs_by_i, atol=1e-9),
            "{call}: the exponent should be 2i/d_model, where i counts the *pairs* "
            "(i = 0 … d_model/2 − 1); you used i/d_model.",
            call=call,
        )
        expect(
            not np.allclose(got, per_column, atol=1e-9),
            "{call}: both columns of a pair share one frequency ω_i = 1/base^(2i/d_model); "
            "you gave column j its own exponent j/d_model.",
            call=call,
        )
        expect(
            base == 10000.0 or not np.allclose(got, default_base, atol=1e-9),
            "{call} ignores base: use base^(2i/d_model), not 10000^(2i/d_model).",
            call=call,
        )
        worst = int(np.argmax(np.abs(got - want)))
        expect(
            False,
            "{call} differs from the encoding at column {worst}: got {got_worst:.4f}, "
            "expected {want_worst:.4f}. Column 2i is sin(pos / base^(2i/d_model)), "
            "column 2i + 1 is cos of the same angle.",
            call=call,
            worst=worst,
            got_worst=got[worst],
            want_worst=want[worst],
        )


# --------------------------------------------------------------------------- 05.2


@exercise("05.2", "the shift matrix in the split layout")
def _check_shift_matrix_split(shift_matrix_split) -> None:
    rng = np.random.default_rng(502)
    cases = [(1, 4, 10000.0), (3, 8, 10000.0), (-2, 8, 10000.0), (0, 6, 10000.0), (5, 6, 50.0)]
    cases += [(int(rng.integers(-20, 40)), 2 * int(rng.integers(2, 33)), 10000.0) for _ in range(3)]
    for k, d, base in cases:
        call = f"shift_matrix_split({k}, {d}, base={base:g})"
        try:
            got = np.asarray(shift_matrix_split(k, d, base), dtype=float)
        except (TypeError, ValueError) as error:
            expect(
                False,
                "{call} should return a (d_model, d_model) array; {error}",
                call=call,
                error=error,
            )
        expect(
            got.shape == (d, d),
            "{call} should have shape {want_shape}; got {got_shape}.",
            call=call,
            want_shape=(d, d),
            got_shape=got.shape,
        )
        table = _split(attn.sinusoidal_positional_encoding(60, d, base))
        first = max(0, -k)  # pos and pos + k both inside the table
        here, there = table[first : 60 - max(k, 0)], table[first + k : 60 + min(k, 0)]
        if np.allclose(here @ got.T, there, atol=1e-9):
            continue
        expect(
            not np.allclose(got, interleaved_shift_matrix(k, d, base), atol=1e-9),
            "{call} is M_k for the interleaved layout (sin, cos, sin, cos, …). Here the "
            "first d_model/2 = {half} entries are the sines and the last {half} the "
            "cosines, so sin(pos·ω_i) sits at index i and cos(pos·ω_i) at index d_model/2 + i.",
            call=call,
            half=d // 2,
        )
        expect(
            not np.allclose(there @ got.T, here, atol=1e-9),
            "{call} shifts by −k instead of +k: it is the transpose of M_k (for a rotation, "
            "also its inverse). Either the signs of the sine terms are flipped, or you built it "
            "for row vectors, PE(pos) @ M; the exercise wants PE(pos + k) = M_k @ PE(pos). "
            "Recall sin(a + b) = sin a cos b + cos a sin b and "
            "cos(a + b) = cos a cos b − sin a sin b.",
            call=call,
        )
        expect(
            False,
            "With M = {call}, M @ PE(pos) is not PE(pos + {k}). Write PE(pos + k) with the "
            "angle-sum formulas: each pair (sin, cos) of frequency ω_i is rotated by k·ω_i, "
            "and M has only four non-zero entries per pair.",
            call=call,
            k=k,
        )


# --------------------------------------------------------------------------- 05.3


@exercise("05.3", "faster sinusoids")
def _check_extrapolation(extrapolation) -> None:
    results = {}
    for base in (10000.0, 20.0):
        call = f"extrapolation({base:g})"
        got = extrapolation(base)
        expect(
            isinstance(got, tuple) and len(got) == 2,
            "{call} returned {got!r}; return the pair (accuracy on positions 1-127, accuracy "
            "on positions 128-511).",
            call=call,
            got=got,
        )
        inside, beyond = (float(v) for v in got)
        expect(
            inside > 0.9,
            "{call} = ({inside:.2f}, {beyond:.2f}): inside the training length the trained "
            "model copies almost every token. Take np.mean(accuracy[1:128]) of "
            "accuracy_by_position(model, test_512) (position 0 has no target).",
            call=call,
            inside=inside,
            beyond=beyond,
        )
        expect(
            0.2 < beyond < 0.95,
            "{call} = ({inside:.2f}, {beyond:.2f}): beyond position 127 the sinusoidal model "
            "is right only part of the time. Average accuracy[128:].",
            call=call,
            inside=inside,
            beyond=beyond,
        )
        results[base] = (inside, beyond)
    expect(
        results[10000.0] != results[20.0],
        "extrapolation gives the same numbers for base 10000 and base 20: pass the base on, "
        'train("sinusoidal", seed=seed, base=base).',
    )


# --------------------------------------------------------------------------- 05.4


def moved_rows(table) -> list[int]:
    """The rows of a ``LearnedPositionalEmbedding`` that differ from the same table before
    training (``seed=0``, as the lesson's model builds it): the rows that training moved."""
    import torch  # only this checker needs PyTorch

    from .. import torch as tattn

    weight = table.weight.detach()
    initial = tattn.LearnedPositionalEmbedding(*weight.shape, seed=0, dtype=weight.dtype).weight
    return [int(p) for p in torch.nonzero((weight != initial.detach()).any(dim=-1)).flatten()]


def copy_accuracy(model, length: int, seed: int = 505):
    """Fraction of 200 random sequences of ``length`` tokens whose output at position p is the
    token at p - 1, for p = 1 … length - 1 (the lesson's copy task), measured here."""
    import torch

    with torch.no_grad():
        symbols = model(torch.zeros(1, 2, dtype=torch.long))[0].shape[-1]
        generator = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, symbols, (200, length), generator=generator)
        logits = model(tokens)[0]
    return (logits[:, 1:].argmax(-1) == tokens[:, :-1]).double().mean(0).numpy()


@exercise("05.4", "a table trained on short sequences")
def _check_short_training(short_training) -> None:
    from .. import torch as tattn

    length = 32
    call = f"short_training({length})"
    got = short_training(length)
    expect(
        isinstance(got, tuple) and len(got) == 2,
        "{call} returned {got_type}; return the pair (model, untrained rows).",
        call=call,
        got_type=type(got).__name__,
    )
    model, untrained = got
    table = getattr(model, "table", None)
    expect(
        isinstance(table, tattn.LearnedPositionalEmbedding),
        "{call}: the model has no learned table (model.table). Train the learned model: "
        'train("learned", length=length).',
        call=call,
    )
    max_len = table.weight.shape[0]
    moved = moved_rows(table)
    expect(
        bool(moved),
        "{call}: no row of the model's table moved from its initial values. Return the model "
        'that train("learned", length=length) trained.',
        call=call,
    )
    expect(
        moved == list(range(length)),
        "{call}: training moved rows {first} … {last} of the table, but sequences of {length} "
        'tokens read rows 0 … {last_row} only. Pass length on: train("learned", length=length), '
        "with the default seed.",
        call=call,
        first=moved[0],
        last=moved[-1],
        length=length,
        last_row=length - 1,
    )
    try:
        untrained = sorted(int(p) for p in untrained)
    except TypeError:
        expect(
            False,
            "{call}: untrained should be a list of row numbers; got {got!r}.",
            call=call,
            got=untrained,
        )
    want = list(range(length, max_len))
    if untrained != want:
        expect(
            untrained != moved,
            "{call}: these are the rows that training moved. The question asks for the rows "
            "it left exactly as they were.",
            call=call,
        )
        expect(
            untrained not in (list(range(length + 1, max_len)), list(range(length - 1, max_len))),
            "{call}: off by one. Sequences of {length} tokens read rows 0 … {last_row}, so row "
            "{length} is the first one that training never touches.",
            call=call,
            length=length,
            last_row=length - 1,
        )
        expect(
            False,
            "{call}: untrained = {got_start}{got_more}, expected the rows that training left "
            "as they were. Compare model.table.weight with "
            'PreviousTokenModel("learned").table.weight, row by row.',
            call=call,
            got_start=untrained[:8],
            got_more="…" if len(untrained) > 8 else "",
        )
    accuracy = copy_accuracy(model, max_len)  # accuracy[p - 1] is position p
    inside, beyond = accuracy[: length - 1].mean(), accuracy[length - 1 :].mean()
    expect(
        inside > 0.9,
        "{call}: the model copies the previous token at only {inside:.2f} of positions 1 … "
        "{last_row}, where its rows are trained. Is it trained for the full 250 steps?",
        call=call,
        inside=inside,
        last_row=length - 1,
    )
    expect(
        beyond < 0.3,
        "{call}: at positions {length} … {last} the model is right {beyond:.2f} of the time; "
        "with their rows untrained it should be at chance. Return the model as training left it.",
        call=call,
        length=length,
        last=max_len - 1,
        beyond=beyond,
    )
