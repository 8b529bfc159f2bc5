"""Checkers for the exercises of lesson 01."""

from __future__ import annotations

import numpy as np

from .. import data
from . import exercise, expect, phrase

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
        call = phrase("one_hot({word!r}, <vocabulary of {size} words>)", word=word, size=len(vocab))
        expect(
            v.shape == (len(vocab),),
            "{call} has shape {shape}; expected ({size},).",
            call=call,
            shape=v.shape,
            size=len(vocab),
        )
        expect(
            np.issubdtype(v.dtype, np.floating),
            "{call} has dtype {dtype}; return a float array (np.zeros makes one).",
            call=call,
            dtype=v.dtype,
        )
        where = list(vocab).index(word)
        expect(
            v[where] == 1.0,
            "{call}: the 1 belongs at position {where}, the word's index in the vocabulary.",
            call=call,
            where=where,
        )
        expect(
            np.count_nonzero(v) == 1 and v.sum() == 1.0,
            "{call} should have exactly one 1 and zeros everywhere else.",
            call=call,
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
            "cosine_similarity should return one number; got shape {shape}.",
            shape=np.shape(got),
        )
        want = _cosine(a, b)
        if not np.isclose(float(got), want, atol=1e-9):
            if np.isclose(float(got), float(a @ b), atol=1e-9):
                hint = phrase("that is the plain dot product: divide by the two vectors' lengths.")
            else:
                hint = phrase("compute a·b / (‖a‖ ‖b‖).")
            expect(
                False,
                "for a={a}, b={b} you returned {got:.4f}, expected {want:.4f}; {hint}",
                a=np.round(a, 3),
                b=np.round(b, 3),
                got=float(got),
                want=want,
                hint=hint,
            )
    a = rng.normal(size=6)
    expect(
        np.isclose(float(cosine_similarity(a, 3.0 * a)), 1.0),
        "scaling a vector must not change its cosine similarity: cos(a, 3a) should be 1.",
    )


# --------------------------------------------------------------------------- 01.3

#: The voiced/silent rule of lesson 01 per sample: its energy threshold, 0.1 (a log10 energy
#: of −1), shared out over the 400 samples of a 25 ms frame.
VOICED_POWER = 0.1 / 400
#: (window_ms, hop_ms) settings the checker tries: the lesson's and longer ones. The mean and
#: the summed energy agree at 25/10, 50/20 and 100/50; 80/40 tells them apart (2 segments vs 1).
FRAME_SETTINGS = [(25, 10), (50, 20), (80, 40), (100, 50), (30, 15)]


def _segments(labels) -> int:
    """The number of runs of True in a boolean array."""
    padded = np.concatenate([[False], labels, [False]]).astype(int)
    return int(np.sum(np.diff(padded) == 1))


def _frames(window_ms: float, hop_ms: float) -> np.ndarray:
    """The 1 s signal of lesson 01 cut into frames of ``window_ms`` every ``hop_ms``."""
    signal, _ = data.speech_like_signal(duration_s=1.0, sample_rate=16000)
    return data.frame_signal(signal, 16000, window_ms, hop_ms)


def frames_and_segments(window_ms: float, hop_ms: float) -> tuple[int, int]:
    """Lesson 01's experiment with other frames: (frames, voiced segments) of the 1 s signal."""
    frames = _frames(window_ms, hop_ms)
    return len(frames), _segments((frames**2).mean(axis=1) > VOICED_POWER)


def summed_segments(window_ms: float, hop_ms: float) -> int:
    """The voiced segments that the lesson's own rule, summed energy above 0.1, would find.

    It is the plausible mistake of exercise 01.3: it agrees with the mean rule at 25/10, 50/20
    and 100/50 ms, and finds fewer segments at 70/35, 80/40 and 90/45 (one instead of two at
    80/40).
    """
    return _segments((_frames(window_ms, hop_ms) ** 2).sum(axis=1) > 0.1)


@exercise("01.3", "longer frames")
def _check_count_segments(count_segments) -> None:
    for window_ms, hop_ms in FRAME_SETTINGS:
        call = f"count_segments({window_ms}, {hop_ms})"
        got = count_segments(window_ms, hop_ms)
        expect(
            isinstance(got, tuple) and len(got) == 2,
            "{call} returned {got!r}; return the pair (number of frames, number of segments).",
            call=call,
            got=got,
        )
        frames, segments = frames_and_segments(window_ms, hop_ms)
        expect(
            got[0] == frames,
            "{call} counts {counted} frames; data.frame_signal(signal, sample_rate, "
            "{window_ms}, {hop_ms}) cuts {frames}. Pass the window and hop through.",
            call=call,
            counted=got[0],
            window_ms=window_ms,
            hop_ms=hop_ms,
            frames=frames,
        )
        summed = summed_segments(window_ms, hop_ms)
        samples = window_ms * 16
        expect(
            got[1] == segments or got[1] != summed,
            "{call} gives the segment count {found} of the summed energy, "
            "(frames**2).sum(axis=1) > 0.1; the mean power gives {segments}. Frames of "
            "{window_ms} ms hold {samples} samples, {ratio:g} times as many as frames of 25 ms, "
            "so their summed energy is {ratio:g} times larger for the same sound, and frames "
            "over the quiet gaps pass the threshold. Use (frames**2).mean(axis=1) > 0.1 / 400.",
            call=call,
            found=got[1],
            segments=segments,
            window_ms=window_ms,
            samples=samples,
            ratio=samples / 400,
        )
        expect(
            got[1] == segments,
            "{call} finds {found} voiced segments, but the rule finds {segments}: label a "
            "frame voiced when (frames**2).mean(axis=1) > 0.1 / 400 (the mean, not the sum: "
            "a longer window holds more samples), then count the runs of voiced frames.",
            call=call,
            found=got[1],
            segments=segments,
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
    expect(
        isinstance(answer, dict),
        "the answer should be a dict; got {type_name}.",
        type_name=type(answer).__name__,
    )
    if all(value is None for value in answer.values()):
        raise NotImplementedError
    for task in TASK_TYPES:
        expect(
            task in answer,
            "the dict has no entry for {task!r}; keep all the given keys.",
            task=task,
        )
    for task, right in TASK_TYPES.items():
        given = answer[task]
        expect(given is not None, "you have not classified {task!r} yet.", task=task)
        kind = _CANONICAL.get(str(given).strip().lower())
        expect(
            kind is not None,
            "{task!r}: {given!r} is not one of the three kinds; write 'N→N', 'N→1' or 'seq2seq'.",
            task=task,
            given=given,
        )
        expect(
            kind == right,
            "look again at {task!r}: is there one output per input vector, one output for "
            "the whole input, or an output whose length the model decides?",
            task=task,
        )
