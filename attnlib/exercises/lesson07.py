"""Checkers for the exercises of lesson 07 (sequence to sequence)."""

from __future__ import annotations

import datetime
import functools

import numpy as np

from .. import data
from . import exercise, expect, phrase


def _as_array(x) -> np.ndarray:
    """A NumPy array from an array, a list or a tensor (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


# --------------------------------------------------------------------------- 07.1


def shift_right_reference(labels, bos_id: int) -> np.ndarray:
    """The decoder's input for teacher forcing: ``<bos>``, then the labels minus the last."""
    labels = _as_array(labels)
    bos = np.full((labels.shape[0], 1), bos_id, dtype=labels.dtype)
    return np.concatenate([bos, labels[:, :-1]], axis=1)


@exercise("07.1", "the decoder's input under teacher forcing")
def _check_shift_right(shift_right) -> None:
    import torch  # the lesson works on tensors

    rng = np.random.default_rng(701)
    cases = [torch.tensor([[5, 6, 7, 2]]), torch.tensor([[9, 2], [4, 2]])]
    cases.append(torch.from_numpy(rng.integers(3, 14, size=(3, 11))))
    for labels in cases:
        original = labels.clone()
        call = phrase("shift_right(labels of shape {shape}, bos_id=1)", shape=tuple(labels.shape))
        got = _as_array(shift_right(labels, 1))
        want = shift_right_reference(original, 1)
        expect(torch.equal(labels, original), "{call} changed labels in place.", call=call)
        expect(
            got.shape == want.shape,
            "{call} returned shape {got_shape}; the decoder reads as many positions as there "
            "are labels, {want_shape}: <bos> comes in, the last label drops out.",
            call=call,
            got_shape=got.shape,
            want_shape=want.shape,
        )
        if np.array_equal(got, want):
            continue
        expect(
            not np.array_equal(got[:, :-1], original.numpy()[:, 1:]),
            "{call}: you shifted left. Position i of the decoder's input must hold the token "
            "*before* label i, so that it predicts label i from the past: <bos> first.",
            call=call,
        )
        expect(
            bool(np.all(got[:, 0] == 1)),
            "{call}: every row of the decoder's input starts with bos_id = 1.",
            call=call,
        )
        expect(
            False,
            "{call} = {got}; expected {want}.",
            call=call,
            got=got.tolist(),
            want=want.tolist(),
        )


# --------------------------------------------------------------------------- 07.2


def greedy_reference(next_logits, bos_id: int, eos_id: int, max_len: int) -> list[int]:
    """Feed the model its own argmax until it says ``eos_id`` or ``max_len`` tokens are out."""
    prefix = [bos_id]
    while len(prefix) - 1 < max_len:
        token = int(np.argmax(next_logits(prefix)))
        if token == eos_id:
            break
        prefix.append(token)
    return prefix[1:]


def _counting_model(vocab: int, stop_after: int):
    """Scores that favour (sum of the prefix) mod (vocab - 3) + 3, and <eos> once the prefix is
    ``stop_after`` long: the next token depends on the *whole* prefix, not only the last one."""

    def next_logits(prefix):
        scores = np.zeros(vocab)
        if len(prefix) > stop_after:
            scores[2] = 1.0
        else:
            scores[3 + sum(prefix) % (vocab - 3)] = 1.0
        return scores

    return next_logits


@exercise("07.2", "greedy decoding")
def _check_greedy(greedy_decode) -> None:
    cases = [
        (_counting_model(12, 5), 20),
        (_counting_model(9, 3), 20),
        (_counting_model(14, 50), 7),
    ]
    cases.append((_counting_model(10, 0), 5))
    for next_logits, max_len in cases:
        seen = []

        def recording(prefix, next_logits=next_logits, seen=seen):
            seen.append(list(prefix))
            return next_logits(list(prefix))

        call = f"greedy_decode(next_logits, bos_id=1, eos_id=2, max_len={max_len})"
        got = [int(t) for t in greedy_decode(recording, 1, 2, max_len)]
        want = greedy_reference(next_logits, 1, 2, max_len)
        if got == want:
            continue
        expect(
            not (got[:1] == [1] and got[1:] == want),
            "{call} returned {got}: drop the <bos> you started with from the answer.",
            call=call,
            got=got,
        )
        expect(
            got != [*want, 2],
            "{call} returned {got}: stop *at* <eos>; the answer does not include it.",
            call=call,
            got=got,
        )
        expect(
            len(got) <= max_len,
            "{call} returned {count} tokens: stop after max_len tokens even without <eos>.",
            call=call,
            count=len(got),
        )
        expect(
            all(len(p) > 1 for p in seen[1:]) and seen[:1] == [[1]],
            "{call}: call next_logits with the whole prefix so far, starting with [bos_id]: "
            "it was called with {first_prefixes} …",
            call=call,
            first_prefixes=seen[:3],
        )
        expect(False, "{call} returned {got}; expected {want}.", call=call, got=got, want=want)


# --------------------------------------------------------------------------- 07.3


def edit_distance_reference(a: str, b: str) -> int:
    """The Levenshtein distance: the fewest insertions, deletions and substitutions of one
    character each that turn ``a`` into ``b`` (dynamic programming over prefixes).

    >>> edit_distance_reference("4 March 2026", "14 March 2026")
    1
    """
    previous = list(range(len(b) + 1))  # distances from "" to every prefix of b
    for i, char_a in enumerate(a, start=1):
        current = [i]  # from a[:i] to "": i deletions
        for j, char_b in enumerate(b, start=1):
            substitute = previous[j - 1] + (char_a != char_b)
            current.append(min(substitute, previous[j] + 1, current[j - 1] + 1))
        previous = current
    return previous[-1]


def _position_by_position(a: str, b: str) -> int:
    """The mistake to recognise: characters compared at the same index, plus the length gap."""
    return sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))


@exercise("07.3", "edit distance")
def _check_edit_distance(edit_distance) -> None:
    cases = [
        ("19 March 1978", "19 March 1978"),
        ("19 March 1987", "19 March 1978"),
        ("14 March 2026", "4 March 2026"),
        ("4 March 2026", "14 March 2026"),
        ("1 May 1969", "1 June 1969"),
        ("kitten", "sitting"),
        ("", "1 May 1969"),
        ("ab", ""),
        ("ab", "ba"),
        ("2 April 2061", "20 April 2016"),
    ]
    for a, b in cases:
        call = f'edit_distance("{a}", "{b}")'
        got = edit_distance(a, b)
        want = edit_distance_reference(a, b)
        expect(
            isinstance(got, (int, np.integer)),
            "{call} returned {got!r}; return the number of edits, an integer.",
            call=call,
            got=got,
        )
        if got == want:
            continue
        expect(
            got != _position_by_position(a, b),
            "{call} = {got}, expected {want}. You compared the strings position by position: "
            "one missing character then shifts every later one. Allow insertions and deletions "
            "too: d(i, j), the distance between the first i characters of a and the first j of "
            "b, is the smallest of d(i-1, j) + 1, d(i, j-1) + 1 and d(i-1, j-1) + (a[i-1] != "
            "b[j-1]).",
            call=call,
            got=got,
            want=want,
        )
        expect(
            not (a and b) or got <= max(len(a), len(b)),
            "{call} = {got}, more than the length of the longer string ({longest}):"
            " substituting every character and inserting the rest is always enough.",
            call=call,
            got=got,
            longest=max(len(a), len(b)),
        )
        expect(
            bool(a and b),
            "{call} = {got}, expected {want}: from the empty string, every character of the "
            "other must be inserted (or deleted), so d(i, 0) = i and d(0, j) = j.",
            call=call,
            got=got,
            want=want,
        )
        expect(
            (a, b) != ("ab", "ba"),
            "{call} = {got}, expected {want}: here a swap of two neighbours is two "
            "substitutions, not one edit.",
            call=call,
            got=got,
            want=want,
        )
        expect(False, "{call} = {got}, expected {want}.", call=call, got=got, want=want)


# --------------------------------------------------------------------------- 07.4

#: The lesson's special tokens; their ids are 0, 1, 2 and 3.
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD, BOS, EOS, UNK = range(len(SPECIALS))
#: How many dates the checker draws to measure a learner's model on (its own, not the lesson's).
MEASURED_DATES = 200


@functools.cache
def date_vocabularies() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The lesson's source and target vocabularies, built as the lesson builds them: the four
    special tokens, then every character of the training sources (targets), sorted, the
    training set being ``data.date_examples(20_000, seed=0)``."""
    examples = data.date_examples(20_000, seed=0)
    sources = SPECIALS + tuple(sorted({char for source, _ in examples for char in source}))
    targets = SPECIALS + tuple(sorted({char for _, target in examples for char in target}))
    return sources, targets


def date_tensors(examples):
    """``(source ids (B, S), source lengths (B,), target ids (B, T))`` as the lesson's
    ``to_tensors`` makes them: unknown source characters as ``<unk>``; a target row is
    ``<bos>``, its characters and ``<eos>``; every row padded on the right with ``<pad>``."""
    import torch  # the lesson's models take tensors

    source_vocab, target_vocab = date_vocabularies()
    source_index = {char: i for i, char in enumerate(source_vocab)}
    target_index = {char: i for i, char in enumerate(target_vocab)}
    rows = (
        [[source_index.get(char, UNK) for char in source] for source, _ in examples],
        [[BOS, *(target_index[char] for char in target), EOS] for _, target in examples],
    )
    sources, targets = (
        torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(row) for row in side], batch_first=True, padding_value=PAD
        )
        for side in rows
    )
    return sources, torch.tensor([len(source) for source, _ in examples]), targets


def future_leak(model, example) -> float:
    """How far the logits at positions 0 … k move when the decoder's input k + 1 (target
    character k) changes: 0 for a causal decoder, which cannot see it."""
    import torch

    sources, lengths, targets = date_tensors([example])
    prefix = targets[:, :-1]
    k = len(example[1]) // 2
    changed = prefix.clone()
    changed[0, k + 1] = BOS if int(prefix[0, k + 1]) != BOS else EOS  # any other token
    with torch.no_grad():
        change = model(sources, lengths, changed) - model(sources, lengths, prefix)
    return float(change[0, : k + 1].abs().max())


def measure_without_mask(model, examples, max_len: int = 20) -> tuple[float, float]:
    """``(teacher-forced loss, exact match)`` of ``model`` on ``examples``, measured as the
    lesson measures them, through ``model(sources, lengths, prefix)`` only: the mean
    cross-entropy of every real next character with the decoder reading the true prefix, and
    the share of sources that greedy decoding (to ``<eos>``, at most ``max_len`` tokens)
    writes exactly as their target."""
    import torch
    import torch.nn.functional as F

    sources, lengths, targets = date_tensors(examples)
    with torch.no_grad():
        logits = model(sources, lengths, targets[:, :-1])
        labels = targets[:, 1:].flatten()
        loss = F.cross_entropy(logits.flatten(0, 1), labels, ignore_index=PAD).item()
        prefix = torch.full((len(examples), 1), BOS)
        for _ in range(max_len):
            next_token = model(sources, lengths, prefix)[:, -1].argmax(dim=-1)
            prefix = torch.cat([prefix, next_token[:, None]], dim=1)
    target_vocab = date_vocabularies()[1]
    outputs = []
    for row in prefix[:, 1:].tolist():
        written = row[: row.index(EOS)] if EOS in row else row
        outputs.append("".join(target_vocab[i] for i in written))
    exact = float(np.mean([out == target for out, (_, target) in zip(outputs, examples)]))
    return loss, exact


@exercise("07.4", "train without the causal mask")
def _check_no_mask(no_mask) -> None:
    expect(
        isinstance(no_mask, (tuple, list)) and len(no_mask) == 2,
        "no_mask = {no_mask!r}; set it to the pair (no_mask_model, no_mask_scores): the model "
        "you trained and the two numbers you measured.",
        no_mask=no_mask,
    )
    model, scores = no_mask
    if model is None and scores is None:
        raise NotImplementedError  # not attempted yet
    expect(
        callable(model),
        "no_mask_model = {model!r}; set it to the model you trained, built with "
        "DateTranslator(causal=False).",
        model=model,
    )
    expect(
        isinstance(scores, (tuple, list)) and len(scores) == 2,
        "no_mask_scores = {no_mask_scores!r}; set it to the pair (teacher-forced loss on the "
        "validation set, greedy exact match on the validation set).",
        no_mask_scores=scores,
    )
    loss, exact = (float(value) for value in scores)
    expect(
        0.0 <= exact <= 1.0 and loss >= 0.0,
        "no_mask_scores = ({loss}, {exact}): a loss is at least 0 and an exact match is a "
        "share, between 0 and 1. Is the pair in the right order?",
        loss=loss,
        exact=exact,
    )
    examples = data.date_examples(MEASURED_DATES, seed=704)  # the checker's own dates
    expect(
        future_leak(model, examples[0]) > 1e-6,
        "Changing one character of the target moved no logit before it: your model's decoder "
        "is causal. Build the model without the mask, DateTranslator(causal=False), and "
        "train that one.",
    )
    measured_loss, measured_exact = measure_without_mask(model, examples)
    expect(
        measured_loss < 0.25,
        "On {count} dates of its own the checker measures your model's teacher-forced loss "
        "at {measured:.3f}: it has not learned yet. Train it: train(no_mask_model, "
        "train_examples, steps=200).",
        count=MEASURED_DATES,
        measured=measured_loss,
    )
    expect(
        measured_loss / 2 < loss < 2 * measured_loss,
        "You report a teacher-forced loss of {loss:.4f}, but on {count} dates of its own the "
        "checker measures {measured:.4f} for your model. Measure the model itself: "
        "teacher_forced_loss(no_mask_model, validation_examples).",
        loss=loss,
        count=MEASURED_DATES,
        measured=measured_loss,
    )
    expect(
        abs(exact - measured_exact) < 0.1,
        "You report an exact match of {exact:.3f}, but greedy decoding of your model writes "
        "{measured:.3f} of {count} other dates exactly. Measure the model itself: "
        'exact_match(decode_all(no_mask_model, validation_by_format))["all"].',
        exact=exact,
        measured=measured_exact,
        count=MEASURED_DATES,
    )


# --------------------------------------------------------------------------- 07.5

#: Dates whose short form is ambiguous: day and month are both at most 12 and differ.
AMBIGUOUS_DATES = [
    datetime.date(2021, 4, 3),
    datetime.date(1999, 11, 2),
    datetime.date(2005, 1, 12),
    datetime.date(2048, 7, 10),
    datetime.date(1970, 12, 6),
    datetime.date(2033, 3, 9),
]


def written_us(date: datetime.date) -> str:
    """The date as en_US writes it in the short format, M/d/yy (e.g. "4/3/21")."""
    return f"{date.month}/{date.day}/{date.year % 100:02d}"


def read_as(written: str, order: str) -> str:
    """``written`` ("a/b/yy") read as month/day (``order="md"``) or day/month, written out
    as the lesson's targets are ("3 April 2021"); "?" for a month above 12."""
    first, second, year = (int(part) for part in written.split("/"))
    month, day = (first, second) if order == "md" else (second, first)
    full_year = year + (1900 if year >= 69 else 2000)  # the POSIX rule of lesson 07's data
    try:
        return data.date_written_out(datetime.date(full_year, month, day))
    except ValueError:  # no such date, e.g. a month of 20
        return "?"


def perfect_decode(sources: list[str]) -> list[str]:
    """A stand-in for the trained model: reads each "en_US|…" or "es|…" source by its rule."""
    orders = {"en_US": "md", "es": "dm"}
    outputs = []
    for source in sources:
        tag, _, written = source.partition("|")
        outputs.append(read_as(written, orders[tag]) if tag in orders else "?")
    return outputs


@exercise("07.5", "does the model read the locale?")
def _check_read_both_ways(read_both_ways) -> None:
    for date in AMBIGUOUS_DATES:
        written = written_us(date)
        sent = []

        def decode(sources, sent=sent):
            sent.extend(sources)
            return perfect_decode(list(sources))

        call = f'read_both_ways("{written}", decode)'
        got = read_both_ways(written, decode)
        expect(
            isinstance(got, tuple) and len(got) == 2 and all(isinstance(r, str) for r in got),
            "{call} returned {got!r}; return two strings: the reading of "
            '"en_US|…" and the reading of "es|…".',
            call=call,
            got=got,
        )
        want = (read_as(written, "md"), read_as(written, "dm"))
        if got == want:
            continue
        expect(
            {f"en_US|{written}", f"es|{written}"} <= set(sent),
            "{call} sent decode {sent}; send it the sources with their tags, "
            '"en_US|{written}" and "es|{written}".',
            call=call,
            sent=sent,
            written=written,
        )
        expect(
            got != want[::-1],
            "{call} returned {got}: the pair is swapped. The first string is the en_US "
            "reading (month first), the second the es reading (day first).",
            call=call,
            got=got,
        )
        expect(
            False,
            "{call} returned {got}; with a perfect reader it should be {want}.",
            call=call,
            got=got,
            want=want,
        )
