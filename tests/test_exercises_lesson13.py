"""The checkers of lesson 13: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
import torch

from attnlib import data
from attnlib.exercises.lesson13 import (
    MODELS,
    PAIRS,
    can_tag_reference,
    conflict,
    majority_baseline_reference,
)

# ---------------------------------------------------------------- reference solutions


def window_features(x, lengths, w):
    batch, length, dim = x.shape
    real = torch.arange(length)[None, :] < torch.as_tensor(lengths)[:, None]  # (B, L)
    x = x * real[..., None]  # the padding becomes zeros
    padded = torch.cat([x.new_zeros(batch, w, dim), x, x.new_zeros(batch, w, dim)], dim=1)
    return torch.cat([padded[:, k : k + length] for k in range(2 * w + 1)], dim=-1)


CAN_TAG = {
    "A": {"per-token FC", "window FC", "attention without positions", "attention with positions"},
    "B": {"window FC", "attention with positions"},
    "C": {"window FC", "attention with positions"},
    "D": {"window FC", "attention without positions", "attention with positions"},
}


def majority_baseline(train, test):
    counts = defaultdict(Counter)
    for words, tags in train:
        for word, tag in zip(words, tags):
            counts[word][tag] += 1
    hits = [
        counts[word].most_common(1)[0][0] == tag
        for words, tags in test
        for word, tag in zip(words, tags)
        if word in data.AMBIGUOUS_WORDS
    ]
    return sum(hits) / len(hits)


# ---------------------------------------------------------------- plausible mistakes


def window_ignoring_lengths(x, lengths, w):
    return window_features(x, [x.shape[1]] * x.shape[0], w)


def window_reversed(x, lengths, w):
    out = window_features(x, lengths, w)
    blocks = out.reshape(*out.shape[:2], 2 * w + 1, -1)
    return blocks.flip(2).reshape(out.shape)


def window_wraps_around(x, lengths, w):
    real = torch.arange(x.shape[1])[None, :] < torch.as_tensor(lengths)[:, None]
    x = x * real[..., None]
    return torch.cat([torch.roll(x, w - k, dims=1) for k in range(2 * w + 1)], dim=-1)


def window_in_place(x, lengths, w):
    for b, n in enumerate(lengths):
        x[b, int(n) :] = 0.0
    return window_features(x, lengths, w)


def baseline_in_sample(train, test):
    return majority_baseline(test, test)


def baseline_all_words(train, test):
    counts = defaultdict(Counter)
    for words, tags in train:
        for word, tag in zip(words, tags):
            counts[word][tag] += 1
    hits = [counts[w].most_common(1)[0][0] == t for ws, ts in test for w, t in zip(ws, ts)]
    return sum(hits) / len(hits)


def baseline_always_noun(train, test):
    tags = [t for ws, ts in test for w, t in zip(ws, ts) if w in data.AMBIGUOUS_WORDS]
    return tags.count("NOUN") / len(tags)


CORRECT = {
    "13.1": window_features,
    "13.2": CAN_TAG,
    "13.3": majority_baseline,
    "13.4": lambda num_sentences, seed=0: 0.72,
}

WRONG = [
    ("13.1", window_ignoring_lengths, "padding leaks in"),
    ("13.1", window_reversed, "wrong order"),
    ("13.1", window_wraps_around, "no wrapping"),
    ("13.1", window_in_place, "in place"),
    ("13.1", lambda x, lengths, w: x, "shape"),
    ("13.2", {**CAN_TAG, "B": set(MODELS)}, "one input, one output"),
    (
        "13.2",
        {**CAN_TAG, "C": {"window FC", "attention without positions", "attention with positions"}},
        "attention without positions",
    ),
    ("13.2", {**CAN_TAG, "D": {"window FC", "attention with positions"}}, "can: it sees"),
    ("13.2", {**CAN_TAG, "A": {"FC"}}, "unknown models"),
    ("13.2", {"A": set()}, "keys"),
    ("13.3", baseline_in_sample, "test set"),
    ("13.3", baseline_all_words, "all words"),
    ("13.3", baseline_always_noun, "always answering NOUN"),
    ("13.3", lambda train, test: "0.5", "a number between 0 and 1"),
    ("13.4", lambda num_sentences, seed=0: 1.0, "sees the word order"),
    ("13.4", lambda num_sentences, seed=0: 0.4, "majority-tag baseline"),
    ("13.4", lambda num_sentences, seed=0: [0.7], "one accuracy"),
]


def test_can_tag_reference_is_the_hand_written_answer():
    assert can_tag_reference() == CAN_TAG
    assert conflict("per-token FC", PAIRS["C"]) is not None
    assert conflict("attention with positions", PAIRS["B"]) is None


def test_majority_reference_on_the_lesson_split():
    train, test = data.tagging_corpus(2000, seed=0), data.tagging_corpus(500, seed=1000)
    assert majority_baseline_reference(train, test) == pytest.approx(majority_baseline(train, test))
