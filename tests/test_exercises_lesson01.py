"""Lesson 01's exercise checkers: reference solutions pass, plausible mistakes get a hint."""

from __future__ import annotations

import numpy as np

from attnlib import data
from attnlib.exercises import check
from attnlib.exercises.lesson01 import TASK_TYPES

# --------------------------------------------------------------------------- reference solutions


def one_hot(word, vocabulary):
    vector = np.zeros(len(vocabulary))
    vector[list(vocabulary).index(word)] = 1.0
    return vector


def cosine_similarity(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


SIGNAL, _ = data.speech_like_signal(duration_s=1.0, sample_rate=16000)


def voiced_segments(labels):
    padded = np.concatenate([[False], labels, [False]]).astype(int)
    return list(zip(np.flatnonzero(np.diff(padded) == 1), np.flatnonzero(np.diff(padded) == -1)))


def count_segments(window_ms, hop_ms):
    cut = data.frame_signal(SIGNAL, 16000, window_ms, hop_ms)
    return len(cut), len(voiced_segments((cut**2).mean(axis=1) > 0.1 / 400))


CORRECT = {
    "01.1": one_hot,
    "01.2": cosine_similarity,
    "01.3": count_segments,
    "01.4": dict(TASK_TYPES),
}


def test_dict_of_none_is_not_attempted():
    assert check("01.4", {task: None for task in TASK_TYPES}).status == "not attempted"


# --------------------------------------------------------------------------- wrong answers


def summed_energy(window_ms, hop_ms):  # the lesson's sum, not the mean: window-dependent
    cut = data.frame_signal(SIGNAL, 16000, window_ms, hop_ms)
    return len(cut), len(voiced_segments(np.log10((cut**2).sum(axis=1)) > -1.0))


def summed_power(window_ms, hop_ms):  # the same mistake, written without the logarithm
    cut = data.frame_signal(SIGNAL, 16000, window_ms, hop_ms)
    return len(cut), len(voiced_segments((cut**2).sum(1) > 0.1))


def task_types_with(**changes):
    answer = {**TASK_TYPES, **{t.replace("_", " "): v for t, v in changes.items()}}
    return {task: kind for task, kind in answer.items() if kind is not ...}


WRONG = [
    ("01.1", lambda w, v: np.eye(len(v), dtype=int)[list(v).index(w)], "float"),
    ("01.1", lambda w, v: np.eye(len(v) + 1)[list(v).index(w)], "shape"),
    ("01.1", lambda w, v: np.eye(len(v))[(list(v).index(w) + 1) % len(v)], "position"),
    ("01.1", lambda w, v: np.ones(len(v)), "exactly one 1"),
    ("01.2", lambda a, b: float(a @ b), "plain dot product"),
    ("01.2", lambda a, b: float(a @ b / np.linalg.norm(a) ** 2), "‖a‖ ‖b‖"),
    ("01.2", lambda a, b: a * b, "one number"),
    ("01.3", summed_energy, "the segment count 1 of the summed energy"),
    ("01.3", summed_power, "Frames of 80 ms hold 1280 samples, 3.2 times as many"),
    ("01.3", lambda w, h: (count_segments(w, h)[0], 4), "the mean, not the sum"),
    ("01.3", lambda w, h: count_segments(25, 10), "Pass the window and hop through"),
    ("01.3", lambda w, h: count_segments(w, h)[1], "pair"),
    ("01.4", task_types_with(speech_recognition="N→N"), "speech recognition"),
    ("01.4", task_types_with(sentiment_analysis="classification"), "not one of the three kinds"),
    ("01.4", task_types_with(machine_translation=...), "no entry"),
    ("01.4", ["N→N"], "dict"),
]


def test_longer_frames_merge_the_vowels():
    settings = [(25, 10), (50, 20), (80, 40), (100, 50)]  # the runs exercise 01.3 asks for
    assert [count_segments(w, h) for w, h in settings] == [(98, 4), (48, 4), (24, 2), (19, 1)]
    # The sum agrees with the mean except at 80/40, where the learner sees why the mean matters.
    assert [summed_power(w, h) for w, h in settings] == [(98, 4), (48, 4), (24, 1), (19, 1)]


def test_task_types_accepts_ascii_arrows():
    answer = {task: kind.replace("→", "->") for task, kind in TASK_TYPES.items()}
    assert check("01.4", answer)
