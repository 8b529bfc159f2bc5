"""Checkers for the exercises of lesson 01."""

from __future__ import annotations

import numpy as np

from .. import data
from . import exercise, expect

# --------------------------------------------------------------------------- 01.1


@exercise("01.1", "one-hot encoding")
def _check_one_hot(one_hot) -> None:
    rng = np.random.default_rng(101)
    vocabulary = ["apple", "bag", "cat", "dog", "elephant"]
    cases = [(word, vocabulary) for word in vocabulary]
    cases.append(("saw", ("i", "saw", "a")))
    big = [f"w{i}" for i in range(50)]
    cases += [(str(w), big) for w in rng.choice(big, size=4, replace=False)]
    for word, vocab in cases:
        v = np.asarray(one_hot(word, vocab))
        call = f"one_hot({word!r}, <vocabulary of {len(vocab)} words>)"
        expect(v.shape == (len(vocab),), f"{call} has shape {v.shape}; expected ({len(vocab)},).")
        expect(
            np.issubdtype(v.dtype, np.floating),
            f"{call} has dtype {v.dtype}; return a float array (np.zeros makes one).",
        )
        where = list(vocab).index(word)
        expect(
            v[where] == 1.0,
            f"{call}: the 1 belongs at position {where}, the word's index in the vocabulary.",
        )
        expect(
            np.count_nonzero(v) == 1 and v.sum() == 1.0,
            f"{call} should have exactly one 1 and zeros everywhere else.",
        )


# --------------------------------------------------------------------------- 01.2


def _cosine(a, b) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@exercise("01.2", "cosine similarity")
def _check_cosine_similarity(cosine_similarity) -> None:
    e = data.word_embeddings()
    rng = np.random.default_rng(102)
    pairs = [
        (np.array([1.0, 0.0]), np.array([0.0, 1.0])),
        (np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])),
        (np.array([1.0, 2.0, 3.0]), np.array([-2.0, -4.0, -6.0])),
        (e["cat"], e["dog"]),
        (e["cat"], e["apple"]),
    ]
    pairs += [(rng.normal(size=8), 5.0 * rng.normal(size=8)) for _ in range(4)]
    for a, b in pairs:
        got = cosine_similarity(a, b)
        expect(
            np.ndim(got) == 0,
            f"cosine_similarity should return one number; got shape {np.shape(got)}.",
        )
        want = _cosine(a, b)
        if not np.isclose(float(got), want, atol=1e-9):
            if np.isclose(float(got), float(a @ b), atol=1e-9):
                hint = "that is the plain dot product: divide by the two vectors' lengths."
            else:
                hint = "compute a·b / (‖a‖ ‖b‖)."
            expect(
                False,
                f"for a={np.round(a, 3)}, b={np.round(b, 3)} you returned {float(got):.4f}, "
                f"expected {want:.4f}; {hint}",
            )
    a = rng.normal(size=6)
    expect(
        np.isclose(float(cosine_similarity(a, 3.0 * a)), 1.0),
        "scaling a vector must not change its cosine similarity: cos(a, 3a) should be 1.",
    )


# --------------------------------------------------------------------------- 01.3


@exercise("01.3", "counting frames")
def _check_num_frames(num_frames) -> None:
    rng = np.random.default_rng(103)
    cases = [
        (1.0, 16000, 25, 10),
        (60.0, 16000, 25, 10),
        (0.025, 16000, 25, 10),
        (0.5, 8000, 25, 10),
        (2.0, 48000, 25, 10),
        (1.0, 16000, 20, 5),
        (3.0, 16000, 50, 25),
    ]
    cases += [(int(ms) / 1000, 16000, 25, 10) for ms in rng.integers(30, 5000, size=5)]
    for duration_s, rate, window_ms, hop_ms in cases:
        n = int(round(duration_s * rate))
        want = data.frame_signal(np.zeros(n), rate, window_ms, hop_ms).shape[0]
        got = num_frames(duration_s, sample_rate=rate, window_ms=window_ms, hop_ms=hop_ms)
        call = (
            f"num_frames({duration_s}, sample_rate={rate}, window_ms={window_ms}, hop_ms={hop_ms})"
        )
        expect(
            isinstance(got, (int, np.integer)),
            f"{call} returned {got!r} ({type(got).__name__}); a number of frames is an int.",
        )
        if got != want:
            if np.isclose(got, duration_s * 1000 / hop_ms):
                hint = (
                    "that counts one frame per hop, but the last window has to fit inside "
                    "the signal: 1 + (n - W) // H."
                )
            else:
                hint = (
                    "count in samples: n = round(duration_s * sample_rate), W and H the window "
                    "and hop in samples, then 1 + (n - W) // H."
                )
            expect(False, f"{call} returned {got}; data.frame_signal makes {want} frames; {hint}")
    expect(
        num_frames(1.0) == 98,
        "with the default arguments (16 kHz, 25 ms, 10 ms) one second has 98 frames.",
    )


# --------------------------------------------------------------------------- 01.4

TASK_TYPES = {
    "part-of-speech tagging": "N→N",
    "sentiment analysis": "N→1",
    "machine translation": "seq2seq",
    "speaker identification": "N→1",
    "speech recognition": "seq2seq",
    "voiced/silent label for every audio frame": "N→N",
    "predicting whether a molecule dissolves in water": "N→1",
    "predicting which people in a social network will buy a product": "N→N",
}
_CANONICAL = {
    "n→n": "N→N",
    "n->n": "N→N",
    "n→1": "N→1",
    "n->1": "N→1",
    "seq2seq": "seq2seq",
    "sequence to sequence": "seq2seq",
    "sequence-to-sequence": "seq2seq",
}


@exercise("01.4", "which kind of output?")
def _check_task_types(answer) -> None:
    expect(isinstance(answer, dict), f"the answer should be a dict; got {type(answer).__name__}.")
    if all(value is None for value in answer.values()):
        raise NotImplementedError
    for task in TASK_TYPES:
        expect(task in answer, f"the dict has no entry for {task!r}; keep all the given keys.")
    for task, right in TASK_TYPES.items():
        given = answer[task]
        expect(given is not None, f"you have not classified {task!r} yet.")
        kind = _CANONICAL.get(str(given).strip().lower())
        expect(
            kind is not None,
            f"{task!r}: {given!r} is not one of the three kinds; write 'N→N', 'N→1' or 'seq2seq'.",
        )
        expect(
            kind == right,
            f"look again at {task!r}: is there one output per input vector, one output for "
            "the whole input, or an output whose length the model decides?",
        )
