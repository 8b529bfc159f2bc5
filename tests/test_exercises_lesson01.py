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


def num_frames(duration_s, sample_rate=16000, window_ms=25, hop_ms=10):
    n = int(round(duration_s * sample_rate))
    window = int(round(window_ms * sample_rate / 1000))
    hop = int(round(hop_ms * sample_rate / 1000))
    return 1 + (n - window) // hop


CORRECT = {
    "01.1": one_hot,
    "01.2": cosine_similarity,
    "01.3": num_frames,
    "01.4": dict(TASK_TYPES),
}


def test_dict_of_none_is_not_attempted():
    assert check("01.4", {task: None for task in TASK_TYPES}).status == "not attempted"


# --------------------------------------------------------------------------- wrong answers


def _wrong(exercise_id, answer, *fragments):
    result = check(exercise_id, answer)
    assert result.status == "wrong", result
    assert not bool(result)
    for fragment in fragments:
        assert fragment in result.message, result.message
    return result


def test_one_hot_wrong_answers():
    _wrong("01.1", lambda w, v: np.eye(len(v), dtype=int)[list(v).index(w)], "float")
    _wrong("01.1", lambda w, v: np.eye(len(v) + 1)[list(v).index(w)], "shape")
    _wrong("01.1", lambda w, v: np.eye(len(v))[(list(v).index(w) + 1) % len(v)], "position")
    _wrong("01.1", lambda w, v: np.ones(len(v)), "exactly one 1")


def test_cosine_similarity_wrong_answers():
    _wrong("01.2", lambda a, b: float(a @ b), "plain dot product")
    _wrong("01.2", lambda a, b: float(a @ b / np.linalg.norm(a) ** 2), "‖a‖ ‖b‖")
    _wrong("01.2", lambda a, b: a * b, "one number")


def test_num_frames_wrong_answers():
    _wrong(
        "01.3",
        lambda d, sample_rate=16000, window_ms=25, hop_ms=10: round(d * 1000 / hop_ms),
        "last window",
    )
    _wrong(
        "01.3",
        lambda d, sample_rate=16000, window_ms=25, hop_ms=10: (
            1 + (d * sample_rate - window_ms * sample_rate / 1000) // (hop_ms * sample_rate / 1000)
        ),
        "int",
    )
    # Hard-coding the 16 kHz / 25 ms / 10 ms answer fails for other settings.
    _wrong(
        "01.3",
        lambda d, sample_rate=16000, window_ms=25, hop_ms=10: (
            1 + (int(round(d * 16000)) - 400) // 160
        ),
        "data.frame_signal",
    )


def test_task_types_wrong_answers():
    answer = dict(TASK_TYPES)
    answer["speech recognition"] = "N→N"
    _wrong("01.4", answer, "speech recognition")
    answer = dict(TASK_TYPES)
    answer["sentiment analysis"] = "classification"
    _wrong("01.4", answer, "not one of the three kinds")
    answer = dict(TASK_TYPES)
    del answer["machine translation"]
    _wrong("01.4", answer, "no entry")
    _wrong("01.4", ["N→N"], "dict")


def test_task_types_accepts_ascii_arrows():
    answer = {task: kind.replace("→", "->") for task, kind in TASK_TYPES.items()}
    assert check("01.4", answer)


def test_num_frames_reference_matches_frame_signal():
    assert num_frames(60.0) == data.frame_signal(np.zeros(960000)).shape[0] == 5998
