"""Checkers for the exercises of lesson 13."""

from __future__ import annotations

import numpy as np

from .. import numpy as attn
from . import exercise, expect, phrase

# --------------------------------------------------------------------------- 13.1


def rnn_attention_costs_reference(length: int, d: int, g: int) -> tuple[int, int, int, int]:
    """(RNN sequential steps, RNN multiply-adds, attention steps, attention multiply-adds).

    An RNN layer of width ``d`` whose step multiplies ``x_t`` by ``W_x`` and ``h_{t-1}`` by
    ``W_h``, both ``d × g·d`` (``g`` = 1: the plain RNN, 3: a GRU, 4: an LSTM): one step per
    position, 2·g·d² multiply-adds each. A one-head self-attention layer with its four ``d × d``
    projections: one step, 4·L·d² for ``X W_q``, ``X W_k``, ``X W_v`` and the output ``W_o``,
    L·L·d for the scores ``QKᵀ`` and L·L·d for the weighted sum. Biases, activations, scaling
    and softmax are not counted.

    >>> rnn_attention_costs_reference(64, 64, 3)[1] == rnn_attention_costs_reference(64, 64, 3)[3]
    True
    """
    return length, 2 * g * length * d * d, 1, 4 * length * d * d + 2 * length * length * d


@exercise("13.1", "sequential steps and multiply-adds")
def _check_costs(rnn_attention_costs) -> None:
    rng = np.random.default_rng(901)
    cases = [(5, 3, 1), (128, 64, 3), (10, 10, 4), (1, 4, 3), (4096, 64, 1), (7, 5, 2)]
    cases += [
        (int(n), int(d), int(g))
        for n, d, g in zip(rng.integers(2, 300, 3), rng.integers(2, 100, 3), rng.integers(1, 5, 3))
    ]
    for length, d, g in cases:
        call = f"rnn_attention_costs(L={length}, d={d}, g={g})"
        got = rnn_attention_costs(length, d, g)
        expect(
            isinstance(got, (tuple, list)) and len(got) == 4,
            "Return a tuple of four numbers: (rnn_steps, rnn_madds, attention_steps, "
            "attention_madds).",
        )
        rnn_steps, rnn_madds, att_steps, att_madds = (int(round(float(x))) for x in got)
        want = rnn_attention_costs_reference(length, d, g)
        projections, pairs = 4 * length * d * d, 2 * length * length * d
        expect(
            rnn_steps == want[0],
            "{call}: rnn_steps = {rnn_steps}, expected {expected}. Every position is one step, "
            "and step t needs h_(t-1) from the step before: none of them can run together.",
            call=call,
            rnn_steps=rnn_steps,
            expected=want[0],
        )
        expect(
            att_steps == want[2],
            "{call}: attention_steps = {att_steps}, expected {expected}. No output of "
            "attention waits for another output: all L of them are computed in one step.",
            call=call,
            att_steps=att_steps,
            expected=want[2],
        )
        expect(
            rnn_madds != 2 * want[1],
            "{call}: rnn_madds is twice the expected value. Count one per multiply-add "
            "(FLOP counters count two: a multiplication and an addition).",
            call=call,
        )
        expect(
            g == 1 or rnn_madds != 2 * length * d * d,
            "{call}: rnn_madds = {rnn_madds} counts d × d matrices. W_x and W_h are d × g·d: "
            "with g = {g} each product is g·d² multiply-adds per position.",
            call=call,
            rnn_madds=rnn_madds,
            g=g,
        )
        expect(
            rnn_madds != want[1] // 2,
            "{call}: rnn_madds is half the expected value. Each step has two products: the "
            "input x_t by W_x and the previous state h_(t-1) by W_h.",
            call=call,
        )
        expect(
            rnn_madds == want[1],
            "{call}: rnn_madds = {rnn_madds}, expected {expected}. A vector of width d times a "
            "d × g·d matrix is g·d² multiply-adds; two such products per step, L steps.",
            call=call,
            rnn_madds=rnn_madds,
            expected=want[1],
        )
        expect(
            att_madds != 2 * want[3],
            "{call}: attention_madds is twice the expected value. Count one per multiply-add "
            "(FLOP counters count two).",
            call=call,
        )
        expect(
            att_madds != pairs,
            "{call}: attention_madds counts Q Kᵀ and A V only. The layer also computes "
            "X W_q, X W_k, X W_v and the output projection W_o: four products of L·d·d more.",
            call=call,
        )
        expect(
            att_madds != 3 * length * d * d + pairs,
            "{call}: attention_madds leaves out one projection: count the output "
            "projection W_o too (four d × d products in all).",
            call=call,
        )
        expect(
            att_madds != projections + pairs // 2,
            "{call}: attention_madds counts one of the two products over pairs. Q Kᵀ is "
            "(L, d) times (d, L): L·L·d; A V is (L, L) times (L, d): L·L·d more.",
            call=call,
        )
        expect(
            att_madds == want[3],
            "{call}: attention_madds = {att_madds}, expected {expected}: 4·L·d² for the four "
            "projections, plus L·L·d for Q Kᵀ and L·L·d for A V.",
            call=call,
            att_madds=att_madds,
            expected=want[3],
        )


# --------------------------------------------------------------------------- 13.2


def _run_steps(step, q, k, v):
    """Feed the tokens one at a time to ``step``; return the outputs and the final state."""
    d_k, d_v = k.shape[-1], v.shape[-1]
    state, normaliser = np.zeros((d_k, d_v)), np.zeros(d_k)
    outputs = []
    for i in range(q.shape[0]):
        result = step(state.copy(), normaliser.copy(), q[i].copy(), k[i].copy(), v[i].copy())
        expect(
            isinstance(result, (tuple, list)) and len(result) == 3,
            "Return three things: (state, normaliser, y).",
        )
        state, normaliser, y = (np.asarray(r, dtype=float) for r in result)
        expect(
            state.shape == (d_k, d_v),
            "The state has shape {state_shape}; it must keep the shape (d_k, d_v) = "
            "{d_k_d_v}: add the outer product φ(k) vᵀ, np.outer(phi_k, v).",
            state_shape=state.shape,
            d_k_d_v=(d_k, d_v),
        )
        expect(
            normaliser.shape == (d_k,),
            "The normaliser has shape {normaliser_shape}; it must keep the shape (d_k,) = "
            "({d_k},): add φ(k).",
            normaliser_shape=normaliser.shape,
            d_k=d_k,
        )
        expect(
            y.shape == (d_v,),
            "y has shape {y_shape}; expected (d_v,) = ({d_v},).",
            y_shape=y.shape,
            d_v=d_v,
        )
        outputs.append(y)
    return np.stack(outputs), state, normaliser


def _step_variant(phi=True, output_first=False, normalise=True):
    """Plausible wrong versions of one step, to recognise the learner's mistake."""

    def step(state, normaliser, q, k, v):
        fq, fk = (attn.elu_feature_map(q), attn.elu_feature_map(k)) if phi else (q, k)
        if output_first:
            y = (fq @ state) / max(fq @ normaliser, 1e-300) if normalise else fq @ state
        state, normaliser = state + np.outer(fk, v), normaliser + fk
        if not output_first:
            y = (fq @ state) / (fq @ normaliser) if normalise else fq @ state
        return state, normaliser, y

    return step


@exercise("13.2", "one step of linear attention")
def _check_linear_attention_step(linear_attention_step) -> None:
    rng = np.random.default_rng(902)
    for length, d_k, d_v in [(5, 3, 2), (8, 4, 4), (6, 2, 5), (1, 2, 2)]:
        q, k, v = (rng.normal(0.0, 1.0, (length, d)) for d in (d_k, d_k, d_v))
        got, state, normaliser = _run_steps(linear_attention_step, q, k, v)
        want = attn.linear_attention_recurrent(q, k, v)
        what = phrase(
            "On {length} tokens with d_k={d_k}, d_v={d_v}", length=length, d_k=d_k, d_v=d_v
        )
        if np.allclose(got, want, atol=1e-10):
            phi_k = attn.elu_feature_map(k)
            expect(
                np.allclose(state, phi_k.T @ v) and np.allclose(normaliser, phi_k.sum(0)),
                "{what} the outputs are right, but the final state is not Σ_j φ(k_j) v_jᵀ "
                "(or the normaliser not Σ_j φ(k_j)): return the updated state and normaliser.",
                what=what,
            )
            continue
        with np.errstate(all="ignore"):
            mistakes = [
                (
                    _step_variant(phi=False),
                    phrase("q and k go through the feature map first: φ = attn.elu_feature_map."),
                ),
                (
                    _step_variant(output_first=True),
                    phrase(
                        "compute y after adding token i to the state: causal attention lets "
                        "token i attend to itself (j ≤ i)."
                    ),
                ),
                (
                    _step_variant(normalise=False),
                    phrase(
                        "y must be divided by the normaliser φ(q)·z, so that the weights sum to 1."
                    ),
                ),
            ]
            for variant, hint in mistakes:
                wrong, _, _ = _run_steps(variant, q, k, v)
                expect(
                    not np.allclose(got, wrong, atol=1e-10, equal_nan=True),
                    "{what}: {hint}",
                    what=what,
                    hint=hint,
                )
        expect(
            False,
            "{what} your outputs differ from attn.linear_attention_recurrent. The step is "
            "S ← S + φ(k) vᵀ, z ← z + φ(k), y = φ(q)ᵀS / φ(q)ᵀz.",
            what=what,
        )


# --------------------------------------------------------------------------- 13.3


MODELS = ("rnn", "bidirectional rnn", "self-attention", "causal self-attention")


def path_length_reference(model: str, i: int, j: int):
    """Cells or layers the information passes through from input ``i`` to output ``j``."""
    if model == "rnn":
        return j - i + 1 if i <= j else None
    if model == "bidirectional rnn":
        return abs(j - i) + 1
    if model == "self-attention":
        return 1
    return 1 if i <= j else None


@exercise("13.3", "path lengths")
def _check_path_length(path_length) -> None:
    hints = {
        "rnn": phrase(
            "input i enters cell i and is carried through cells i+1, …, j: that is "
            "j − i + 1 cells; an output j < i has not read input i yet (None)."
        ),
        "bidirectional rnn": phrase(
            "the forward RNN carries input i to the right (j − i + 1 cells), "
            "the backward RNN to the left (i − j + 1 cells); output j has both."
        ),
        "self-attention": phrase(
            "one attention layer connects every output to every input directly, whatever "
            "the distance."
        ),
        "causal self-attention": phrase(
            "the causal mask lets output j attend to the inputs i ≤ j, "
            "directly; the inputs after j are out of reach (None)."
        ),
    }
    for model in MODELS:
        for i in range(7):
            for j in range(7):
                got, want = path_length(model, i, j), path_length_reference(model, i, j)
                call = f'path_length("{model}", i={i}, j={j})'
                if want is None:
                    expect(
                        got is None,
                        "{call} returned {got!r}, expected None. {reason}",
                        call=call,
                        got=got,
                        reason=hints[model],
                    )
                    continue
                expect(
                    got is not None and int(got) == want,
                    "{call} returned {got!r}, expected {want}. {reason}",
                    call=call,
                    got=got,
                    want=want,
                    reason=hints[model],
                )


# --------------------------------------------------------------------------- 13.4


@exercise("13.4", "attention without positions")
def _check_reader_accuracy(reader_accuracy) -> None:
    results = {}
    for positions in (True, False):
        call = f"reader_accuracy(10, positions={positions})"
        got = reader_accuracy(10, positions)
        expect(
            np.ndim(got) == 0,
            "{call} returned {got!r}; return one test accuracy.",
            call=call,
            got=got,
        )
        results[positions] = float(got)
        expect(
            0.0 <= results[positions] <= 1.0,
            "{call} = {got!r} is not an accuracy.",
            call=call,
            got=got,
        )
    expect(
        results[True] > 0.9,
        "reader_accuracy(10, positions=True) = {results_true:.2f}: with positions the "
        'attention reader solves L = 10. Train it with train_reader("attention", length, '
        "positions=positions), which returns the test accuracy.",
        results_true=results[True],
    )
    expect(
        results[False] < 0.6,
        "reader_accuracy(10, positions=False) = {results_false:.2f}, as if it still had "
        "positions: pass positions on to train_reader(..., positions=positions).",
        results_false=results[False],
    )
