"""Checkers for the exercises of lesson 13."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from .. import data
from . import exercise, expect


def _as_array(x) -> np.ndarray:
    """A NumPy array from an array or a tensor (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


# --------------------------------------------------------------------------- 12.1


def window_features_reference(x, lengths, w: int) -> np.ndarray:
    """Row i of sentence b: x[b, i-w], …, x[b, i+w] side by side, zeros outside 0 … lengths[b]-1."""
    x = _as_array(x)
    batch, length, dim = x.shape
    out = np.zeros((batch, length, (2 * w + 1) * dim))
    for b in range(batch):
        for i in range(length):
            for k in range(2 * w + 1):
                j = i - w + k
                if 0 <= j < int(lengths[b]):
                    out[b, i, k * dim : (k + 1) * dim] = x[b, j]
    return out


def _window_ignoring_lengths(x, w: int) -> np.ndarray:
    """The mistake: zeros only beyond the array, the padding's numbers taken as neighbours."""
    x = _as_array(x)
    return window_features_reference(x, [x.shape[1]] * x.shape[0], w)


@exercise("13.1", "window features of a padded batch")
def _check_window_features(window_features) -> None:
    import torch  # the exercise works on tensors, as the lesson's models do

    rng = np.random.default_rng(1201)
    cases = [(1, 4, 3, 1, [4]), (3, 6, 2, 1, [6, 4, 2]), (2, 7, 4, 2, [5, 7]), (4, 5, 3, 0, None)]
    cases += [(3, 5, 2, 3, [5, 1, 3]), (2, 7, 5, 1, None)]
    for batch, length, dim, w, lengths in cases:
        if lengths is None:
            lengths = rng.integers(1, length + 1, size=batch).tolist()
        x = torch.tensor(rng.normal(0.0, 1.0, (batch, length, dim)))
        for b, n in enumerate(lengths):
            x[b, n:] = torch.tensor(rng.normal(5.0, 1.0, (length - n, dim)))  # junk padding
        original = x.clone()
        call = f"window_features(x of shape {tuple(x.shape)}, lengths={lengths}, w={w})"
        got = _as_array(window_features(x, torch.tensor(lengths), w))
        want = window_features_reference(original, lengths, w)
        expect(
            torch.equal(x, original),
            f"{call} changed x in place; build a new tensor instead.",
        )
        expect(
            got.shape == want.shape,
            f"{call} returned shape {got.shape}; expected (B, L, (2w+1)·d) = {want.shape}.",
        )
        if np.allclose(got, want, atol=1e-12):
            continue
        reversed_blocks = want.reshape(batch, length, 2 * w + 1, dim)[:, :, ::-1]
        expect(
            w == 0 or not np.allclose(got, reversed_blocks.reshape(want.shape)),
            f"{call}: the blocks are in the wrong order. Block k of row i holds x[b, i - w + k]: "
            "the left neighbours first, then the word itself, then the right neighbours.",
        )
        expect(
            not np.allclose(got, _window_ignoring_lengths(original, w), atol=1e-12),
            f"{call}: the padding leaks in. Positions j >= lengths[b] are padding: x holds "
            "numbers there, but a neighbour past the end of the sentence must be a zero vector "
            "(and so must every block of a padded row's own position).",
        )
        expect(
            False,
            f"{call} gives the wrong numbers. Block k of row i of sentence b is x[b, i - w + k] "
            "when 0 <= i - w + k < lengths[b], else zeros; no wrapping around the ends.",
        )


# --------------------------------------------------------------------------- 12.2

MODELS = (
    "per-token FC",
    "window FC",
    "attention without positions",
    "attention with positions",
)

#: The tagged sentences of exercise 13.2, grouped in sets that one model must tag together.
PAIRS = {
    "A": (("i saw a dog", "PRON VERB DET NOUN"), ("we saw the cat", "PRON VERB DET NOUN")),
    "B": (("i saw a saw", "PRON VERB DET NOUN"),),
    "C": (("we saw the duck", "PRON VERB DET NOUN"), ("we duck the saw", "PRON VERB DET NOUN")),
    "D": (("i saw a dog", "PRON VERB DET NOUN"), ("you like the saw", "PRON VERB DET NOUN")),
}


def _view(model: str, words: list[str], i: int):
    """What ``model`` knows about word i of ``words``: tokens with equal views get equal tags."""
    if model == "per-token FC":
        return words[i]
    if model == "window FC":
        padded = ["<s>", *words, "</s>"]
        return tuple(padded[i : i + 3])
    if model == "attention without positions":
        return words[i], tuple(sorted(words))
    return tuple(words), i


def conflict(model: str, sentences) -> tuple | None:
    """Two tokens that ``model`` sees alike but that need different tags, or None if it can tag
    every word of ``sentences`` (pairs of strings: words and tags) correctly."""
    seen = {}
    for sentence, tag_line in sentences:
        words, tags = sentence.split(), tag_line.split()
        for i, (word, tag) in enumerate(zip(words, tags)):
            key = _view(model, words, i)
            if key in seen and seen[key][2] != tag:
                return seen[key], (sentence, word, tag)
            seen.setdefault(key, (sentence, word, tag))
    return None


def can_tag_reference() -> dict[str, set[str]]:
    """For every set of sentences, the models that can tag all of its words correctly."""
    return {
        name: {m for m in MODELS if conflict(m, sentences) is None}
        for name, sentences in PAIRS.items()
    }


_WHY = {
    "per-token FC": "it sees only the word itself",
    "window FC": "it sees the word with one neighbour on each side",
    "attention without positions": "it sees the word and the set of words of its sentence, "
    "not their order",
    "attention with positions": "it sees the whole sentence and where each word is",
}


@exercise("13.2", "which model can tag these sentences?")
def _check_can_tag(answer) -> None:
    expect(
        isinstance(answer, dict) and set(answer) == set(PAIRS),
        f"Give a dict with the keys {sorted(PAIRS)}, each mapped to a set of model names.",
    )
    for name, chosen in answer.items():
        expect(
            isinstance(chosen, (set, frozenset, list, tuple))
            and all(isinstance(m, str) for m in chosen),
            f"answer[{name!r}] should be a set of model names, e.g. {{'window FC'}}.",
        )
        unknown = sorted(set(chosen) - set(MODELS))
        expect(not unknown, f"answer[{name!r}] names unknown models {unknown}; use {MODELS}.")
    for name, sentences in PAIRS.items():
        listed = " / ".join(f'"{s}"' for s, _ in sentences)
        for model in MODELS:
            clash = conflict(model, sentences)
            if model in answer[name] and clash is not None:
                (s1, w1, t1), (s2, w2, t2) = clash
                expect(
                    False,
                    f"{name} ({listed}): the {model} cannot: {_WHY[model]}, and it sees "
                    f"'{w1}' in \"{s1}\" (a {t1}) exactly as '{w2}' in \"{s2}\" (a {t2}); one "
                    "input, one output, so one of them is wrong.",
                )
            if model not in answer[name] and clash is None:
                expect(
                    False,
                    f"{name} ({listed}): the {model} can: {_WHY[model]}, and no two words "
                    "that look the same to it need different tags here.",
                )


# --------------------------------------------------------------------------- 12.3


def majority_baseline_reference(train, test) -> float:
    """Accuracy on the ambiguous words of ``test`` when each word gets its commonest tag in
    ``train``."""
    commonest = _commonest_tags(train)
    hits = [
        commonest.get(word) == tag
        for words, tags in test
        for word, tag in zip(words, tags)
        if word in data.AMBIGUOUS_WORDS
    ]
    return float(np.mean(hits))


def _commonest_tags(corpus) -> dict[str, str]:
    """Each word's most frequent tag in ``corpus``."""
    counts = defaultdict(Counter)
    for words, tags in corpus:
        for word, tag in zip(words, tags):
            counts[word][tag] += 1
    return {word: c.most_common(1)[0][0] for word, c in counts.items()}


def _tagged(*lines: str):
    """Hand-made sentences, "word/TAG word/TAG ..." → (words, tags) pairs."""
    pairs = [[tuple(token.split("/")) for token in line.split()] for line in lines]
    return [([w for w, _ in p], [t for _, t in p]) for p in pairs]


def _baseline_cases():
    # "saw" is mostly a verb here, "duck" mostly a noun: a fixed guess of NOUN is not the
    # per-word majority; the test set disagrees with the training set on purpose.
    train = _tagged(
        "i/PRON saw/VERB a/DET dog/NOUN",
        "we/PRON saw/VERB the/DET cat/NOUN",
        "the/DET duck/NOUN saw/VERB a/DET man/NOUN",
        "you/PRON like/VERB the/DET duck/NOUN",
        "they/PRON cut/VERB a/DET saw/NOUN",
    )
    test = _tagged(
        "i/PRON saw/VERB a/DET saw/NOUN",
        "the/DET saw/NOUN duck/VERB a/DET cat/NOUN",
        "we/PRON duck/VERB the/DET duck/NOUN",
    )
    cases = [("a hand-made corpus", train, test), ("the same corpus, swapped", test + train, train)]
    for seed in (3, 12, 40):
        big = data.tagging_corpus(400, seed=seed)
        cases.append((f"tagging_corpus(400, seed={seed}) split 300/100", big[:300], big[300:]))
    return cases


@exercise("13.3", "the majority-tag baseline")
def _check_majority_baseline(majority_baseline) -> None:
    for name, train, test in _baseline_cases():
        call = f"majority_baseline on {name}"
        got = majority_baseline(train, test)
        expect(
            isinstance(got, (float, int, np.floating)) and 0.0 <= float(got) <= 1.0,
            f"{call} returned {got!r}; return the accuracy, a number between 0 and 1.",
        )
        got, want = float(got), majority_baseline_reference(train, test)
        if np.isclose(got, want, atol=1e-9):
            continue
        expect(
            not np.isclose(got, majority_baseline_reference(test, test), atol=1e-9),
            f"{call}: {got:.3f} counts the tags in the test set. A baseline may only learn from "
            "the training set: take each word's commonest tag in train.",
        )
        commonest = _commonest_tags(train)
        everything = [commonest.get(w) == t for words, tags in test for w, t in zip(words, tags)]
        expect(
            not np.isclose(got, float(np.mean(everything)), atol=1e-9),
            f"{call}: {got:.3f} is the accuracy on all words. Score only the ambiguous words "
            f"(data.AMBIGUOUS_WORDS = {data.AMBIGUOUS_WORDS}).",
        )
        nouns = [
            tag == "NOUN"
            for words, tags in test
            for w, tag in zip(words, tags)
            if w in data.AMBIGUOUS_WORDS
        ]
        expect(
            not np.isclose(got, float(np.mean(nouns)), atol=1e-9),
            f"{call}: {got:.3f} is what always answering NOUN scores. The baseline picks each "
            "word's own commonest tag: here 'saw' is mostly a VERB in the training set.",
        )
        expect(False, f"{call} gave {got:.4f}; expected {want:.4f}.")


# --------------------------------------------------------------------------- 12.4


@exercise("13.4", "more data for attention without positions")
def _check_no_positions_accuracy(no_positions_accuracy) -> None:
    got = no_positions_accuracy(250)
    expect(np.ndim(got) == 0, f"no_positions_accuracy(250) returned {got!r}; return one accuracy.")
    got = float(got)
    expect(
        got < 0.9,
        f"no_positions_accuracy(250) = {got:.2f}: that is a model that sees the word order. "
        'Train the model without positions, train("attention", *encode(corpus), ...).',
    )
    expect(
        got > 0.55,
        f"no_positions_accuracy(250) = {got:.2f}: below the majority-tag baseline. Measure the "
        "trained model on the test set's ambiguous words, the second number of "
        "accuracies(predicted, *test_data[:2]).",
    )
