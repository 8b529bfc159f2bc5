"""The checkers of lesson 08: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlib import numpy as attn
from attnlib.exercises import check
from attnlib.exercises.lesson08 import (
    best_local_accuracy,
    keys_seen_reference,
    score_bytes_reference,
)

# ---------------------------------------------------------------- reference solutions


def keys_seen(length, window, i, causal=False):
    first = max(i - window, 0)
    last = i if causal else min(i + window, length - 1)
    return last - first + 1


def score_bytes(length, num_heads, window, dtype):
    size = np.dtype(dtype).itemsize
    band = sum(keys_seen(length, window, i) for i in range(length))
    return num_heads * length * length * size, num_heads * band * size


def attend_one_truncated(q, k, v, i, window):
    keys = [j for j in range(len(k)) if abs(i - j) <= window]
    scores = [float(q[i] @ k[j]) / math.sqrt(q.shape[1]) for j in keys]
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    return sum(e / sum(exps) * v[j] for e, j in zip(exps, keys))


# ---------------------------------------------------------------- plausible mistakes


def keys_no_edges(length, window, i, causal=False):
    return window + 1 if causal else 2 * window + 1


def keys_exclusive(length, window, i, causal=False):
    return keys_seen(length, window, i, causal) - 1


def keys_ignore_causal(length, window, i, causal=False):
    return keys_seen(length, window, i)


def bytes_in_bits(length, num_heads, window, dtype):
    dense, truncated = score_bytes(length, num_heads, window, dtype)
    return 8 * dense, 8 * truncated


def bytes_one_head(length, num_heads, window, dtype):
    return score_bytes(length, 1, window, dtype)


def bytes_no_edges(length, num_heads, window, dtype):
    size = np.dtype(dtype).itemsize
    return num_heads * length**2 * size, num_heads * length * (2 * window + 1) * size


def attend_all_keys(q, k, v, i, window):
    return attn.attention(q, k, v)[0][i]


def attend_unscaled(q, k, v, i, window):
    return attn.attention(q, k, v, attn.window_mask(len(q), window), scale=1.0)[0][i]


def attend_exclusive(q, k, v, i, window):
    keys = [j for j in range(len(k)) if abs(i - j) < window] or [i]
    scores = np.array([q[i] @ k[j] for j in keys]) / math.sqrt(q.shape[1])
    weights = np.exp(scores - scores.max())
    return (weights / weights.sum()) @ v[keys]


def attend_without_max(q, k, v, i, window):
    """The softmax without subtracting the largest score: fine for small scores only."""
    keys = [j for j in range(len(k)) if abs(i - j) <= window]
    exps = [math.exp(float(q[i] @ k[j]) / math.sqrt(q.shape[1])) for j in keys]
    return sum(e / sum(exps) * v[j] for e, j in zip(exps, keys))


def attend_without_max_numpy(q, k, v, i, window):
    """The same mistake with np.exp, which overflows to inf (and inf / inf is nan)."""
    keys = [j for j in range(len(k)) if abs(i - j) <= window]
    weights = np.exp(q[i] @ k[keys].T / math.sqrt(q.shape[1]))
    return (weights / weights.sum()) @ v[keys]


def local_accuracy(near, window):
    """Stands in for the lesson's training, which reaches the best possible accuracy (the
    notebook's solution trains the real layer)."""
    return best_local_accuracy(near, window) + 0.004


#: 08.4's answer: the function, the smallest window that solves the ±5 task, and the reason.
WIDE_TASK = (local_accuracy, 5, "b")


CORRECT = {
    "08.1": keys_seen,
    "08.2": score_bytes,
    "08.3": attend_one_truncated,
    "08.4": WIDE_TASK,
}

WRONG = [
    ("08.1", keys_no_edges, "edges"),
    ("08.1", keys_exclusive, "inclusive"),
    ("08.1", keys_ignore_causal, "causal=True"),
    ("08.2", bytes_in_bits, "bits"),
    ("08.2", bytes_one_head, "one head"),
    ("08.2", bytes_no_edges, "near the edges"),
    ("08.2", lambda *args: 42, "tuple of two"),
    ("08.3", attend_all_keys, "every key"),
    ("08.3", attend_unscaled, "1/sqrt(d)"),
    ("08.3", attend_exclusive, "inclusive"),
    ("08.3", attend_without_max, "Subtract each row's largest score"),
    ("08.3", attend_without_max_numpy, "Subtract each row's largest score"),
    ("08.4", (lambda near, window: best_local_accuracy(3, window), 5, "b"), "the ±3 task"),
    ("08.4", (lambda near, window: 0.5, 5, "b"), "best possible"),
    ("08.4", (lambda near, window: [0.9], 5, "b"), "one accuracy"),
    ("08.4", local_accuracy, "three answers together"),
    ("08.4", (local_accuracy, None, None), "Now read its results"),
    ("08.4", (local_accuracy, 3, "b"), "smallest window"),
    ("08.4", (local_accuracy, 5, "d"), "one of the letters"),
    ("08.4", (local_accuracy, 5, "a"), "same parameters whatever the window"),
    ("08.4", (local_accuracy, 5, "c"), "more steps cannot lift it"),
]


@pytest.mark.parametrize(("length", "window"), [(1, 0), (9, 2), (33, 5), (20, 40)])
def test_references_count_what_the_mask_allows(length, window):
    mask = attn.window_mask(length, window)
    causal = mask & attn.causal_mask(length)
    for i in range(length):
        assert keys_seen_reference(length, window, i) == mask[i].sum()
        assert keys_seen_reference(length, window, i, causal=True) == causal[i].sum()
    dense, truncated = score_bytes_reference(length, 3, window, "float32")
    assert dense == 3 * mask.size * 4 and truncated == 3 * mask.sum() * 4


def test_best_local_accuracy_matches_the_lessons_exact_values():
    assert [best_local_accuracy(3, w) for w in (0, 1, 2, 3, 9)] == [
        84 / 128,
        96 / 128,
        108 / 128,
        1.0,
        1.0,
    ]


def test_a_solution_without_the_largest_score_fails_on_large_scores_only():
    """With N(0, 1) inputs its numbers are right; with inputs scaled by 30 they overflow."""
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(0.0, 1.0, (3, 10, 4))
    reference = attn.truncated_attention(q, k, v, 2)[4]
    assert np.allclose(attend_without_max(q, k, v, 4, 2), reference, atol=1e-12)
    assert np.allclose(attend_without_max_numpy(q, k, v, 4, 2), reference, atol=1e-12)
    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.isfinite(attend_without_max_numpy(30 * q, 30 * k, v, 4, 2)).all()
    with pytest.raises(OverflowError):
        attend_without_max(30 * q, 30 * k, v, 4, 2)


def test_an_unfinished_local_accuracy_is_not_attempted():
    def stub(near, window):
        raise NotImplementedError  # your code here

    assert check("08.4", (stub, None, None)).status == "not attempted"


def test_the_answers_may_come_in_a_list_and_the_letter_in_capitals():
    assert check("08.4", [local_accuracy, 5, " B"]).status == "correct"
