"""attnlib.data, attnlib.plot and the exercise-checking mechanism."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from attnlib import data, plot
from attnlib.exercises import REGISTRY, ExerciseFailed, check, exercise

ROOT = Path(__file__).resolve().parent.parent


def test_royal_embeddings_give_the_seed_numbers():
    e = data.royal_embeddings()
    assert round(float(e["king"] @ e["queen"]), 4) == 0.961
    assert round(float(e["king"] @ e["dog"]), 4) == 0.0105


def test_tagging_corpus_is_reproducible_and_ambiguous():
    corpus = data.tagging_corpus(300, seed=1)
    assert corpus == data.tagging_corpus(300, seed=1)
    assert corpus[0] == (["i", "saw", "a", "saw"], ["PRON", "VERB", "DET", "NOUN"])
    assert all(len(words) == len(tags) and set(tags) <= set(data.TAGS) for words, tags in corpus)
    tags_of = {}
    for words, tags in corpus:
        for w, t in zip(words, tags):
            tags_of.setdefault(w, set()).add(t)
    for word in data.AMBIGUOUS_WORDS:
        assert tags_of[word] == {"VERB", "NOUN"}


@pytest.mark.parametrize("seconds, frames", [(1.0, 98), (60.0, 5998), (0.025, 1)])
def test_frames_are_25ms_every_10ms(seconds, frames):
    signal = np.zeros(int(seconds * 16000))
    cut = data.frame_signal(signal, 16000)
    assert cut.shape == (frames, 400)


def test_frame_rows_are_the_signal_shifted_by_the_hop():
    signal = np.arange(1000.0)
    cut = data.frame_signal(signal, sample_rate=1000, window_ms=25, hop_ms=10)
    assert cut[3, 0] == 30 and cut[3, -1] == 54


def test_speech_signal_and_features():
    signal, bounds = data.speech_like_signal(1.0, seed=2)
    assert signal.shape == (16000,) and len(bounds) >= 2
    features = data.frame_features(data.frame_signal(signal), num_bands=8)
    assert features.shape == (98, 8) and np.isfinite(features).all()


def test_ethanol_is_a_valid_molecule():
    mol = data.ethanol()
    assert mol.features.sum(axis=1).tolist() == [1.0] * 9  # one-hot rows
    valence = np.zeros(9, int)
    for i, j in mol.edges:
        valence[i] += 1
        valence[j] += 1
    expected = {"C": 4, "O": 2, "H": 1}
    assert [expected[name[0]] for name in mol.node_names] == valence.tolist()


def test_attention_heatmap_accepts_tensors_and_labels_axes():
    weights = torch.softmax(torch.randn(3, 3), dim=-1)
    ax = plot.attention_heatmap(weights, ["a", "b", "c"], title="t")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert ax.get_xlabel().startswith("key") and ax.get_ylabel().startswith("query")
    assert len(ax.texts) == 9


# --------------------------------------------------------------------------- exercises


@pytest.fixture
def toy_exercise():
    @exercise("99.1", "double a number")
    def _check(double):
        for x in (0, 1, 5):
            if double(x) != 2 * x:
                raise ExerciseFailed(f"double({x}) should be {2 * x}")

    yield "99.1"
    del REGISTRY["99.1"]


def test_check_reports_the_three_outcomes(toy_exercise):
    def stub(x):
        raise NotImplementedError

    assert check(toy_exercise, None).status == "not attempted"
    assert check(toy_exercise, stub).status == "not attempted"
    wrong = check(toy_exercise, lambda x: x + 2)
    assert not wrong and "double(0) should be 0" in repr(wrong)
    crashed = check(toy_exercise, lambda x: 1 / 0)
    assert crashed.status == "wrong" and "ZeroDivisionError" in repr(crashed)
    right = check(toy_exercise, lambda x: 2 * x)
    assert right and repr(right).startswith("✓ Exercise 99.1 (double a number): correct")


def test_check_unknown_exercise_names_the_known_ones():
    with pytest.raises(KeyError, match="known exercises"):
        check("00.0", 1)


def test_every_lesson_has_registered_exercises():
    """Every lesson notebook has checkers, and every checker a lesson."""
    notebooks = {path.name[:2] for path in (ROOT / "lessons").glob("[0-9][0-9]_*.ipynb")}
    lessons = {exercise_id.split(".")[0] for exercise_id in REGISTRY}
    assert len(notebooks) >= 15 and lessons == notebooks
