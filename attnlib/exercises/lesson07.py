"""Checkers for the exercises of lesson 07 (sequence to sequence)."""

from __future__ import annotations

import datetime

import numpy as np

from . import exercise, expect


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
        call = f"shift_right(labels of shape {tuple(labels.shape)}, bos_id=1)"
        got = _as_array(shift_right(labels, 1))
        want = shift_right_reference(original, 1)
        expect(torch.equal(labels, original), f"{call} changed labels in place.")
        expect(
            got.shape == want.shape,
            f"{call} returned shape {got.shape}; the decoder reads as many positions as there "
            f"are labels, {want.shape}: <bos> comes in, the last label drops out.",
        )
        if np.array_equal(got, want):
            continue
        expect(
            not np.array_equal(got[:, :-1], original.numpy()[:, 1:]),
            f"{call}: you shifted left. Position i of the decoder's input must hold the token "
            "*before* label i, so that it predicts label i from the past: <bos> first.",
        )
        expect(
            bool(np.all(got[:, 0] == 1)),
            f"{call}: every row of the decoder's input starts with bos_id = 1.",
        )
        expect(False, f"{call} = {got.tolist()}; expected {want.tolist()}.")


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
            f"{call} returned {got}: drop the <bos> you started with from the answer.",
        )
        expect(
            got != [*want, 2],
            f"{call} returned {got}: stop *at* <eos>; the answer does not include it.",
        )
        expect(
            len(got) <= max_len,
            f"{call} returned {len(got)} tokens: stop after max_len tokens even without <eos>.",
        )
        expect(
            all(len(p) > 1 for p in seen[1:]) and seen[:1] == [[1]],
            f"{call}: call next_logits with the whole prefix so far, starting with [bos_id]: "
            f"it was called with {seen[:3]} …",
        )
        expect(False, f"{call} returned {got}; expected {want}.")


# --------------------------------------------------------------------------- 07.3


def match_scores_reference(predictions, targets) -> tuple[float, float]:
    """(share of exactly right strings, share of right characters, position by position)."""
    exact = np.mean([p == t for p, t in zip(predictions, targets)])
    right = sum(sum(a == b for a, b in zip(p, t)) for p, t in zip(predictions, targets))
    return float(exact), right / sum(len(t) for t in targets)


@exercise("07.3", "exact match and character accuracy")
def _check_match_scores(match_scores) -> None:
    cases = [
        (["2001-12-22", "1990-06-27"], ["2001-12-22", "1990-06-27"]),
        (["2010-12-22", "1990-05-27"], ["2001-12-22", "1990-06-27"]),
        (["2046-09-2", "1981-06-11", "2046-0"], ["2046-09-02", "1981-06-11", "2046-01-03"]),
        (["", "1999-01-01x"], ["1999-01-01", "1999-01-01"]),
    ]
    for predictions, targets in cases:
        call = f"match_scores({predictions}, {targets})"
        got = match_scores(predictions, targets)
        expect(
            isinstance(got, tuple) and len(got) == 2,
            f"{call} returned {got!r}; return the pair (exact match, character accuracy).",
        )
        want = match_scores_reference(predictions, targets)
        expect(
            np.isclose(float(got[0]), want[0]),
            f"{call}: exact match {got[0]}, expected {want[0]}: the share of predictions equal to "
            "their target as whole strings.",
        )
        expect(
            np.isclose(float(got[1]), want[1]),
            f"{call}: character accuracy {got[1]}, expected {want[1]:.4f}. Compare position by "
            "position; a missing character counts as wrong, so divide by the total length of "
            "the *targets*.",
        )


# --------------------------------------------------------------------------- 07.4

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
    """``written`` ("a/b/yy") read as month/day (``order="md"``) or day/month, in ISO form."""
    first, second, year = (int(part) for part in written.split("/"))
    month, day = (first, second) if order == "md" else (second, first)
    full_year = year + (1900 if year >= 69 else 2000)  # the POSIX rule of lesson 07's data
    return datetime.date(full_year, month, day).isoformat()


@exercise("07.4", "swap the locale tag")
def _check_read_both_ways(read_both_ways) -> None:
    readings = []
    for date in AMBIGUOUS_DATES:
        written = written_us(date)
        got = read_both_ways(written)
        expect(
            isinstance(got, tuple) and len(got) == 2 and all(isinstance(r, str) for r in got),
            f'read_both_ways("{written}") returned {got!r}; return two strings: the model\'s '
            'reading of "en_US|…" and of "es|…".',
        )
        readings.append((written, *got))
    us_right = sum(us == read_as(w, "md") for w, us, _ in readings)
    es_right = sum(es == read_as(w, "dm") for w, _, es in readings)
    differ = sum(us != es for _, us, es in readings)
    shown = "; ".join(f"{w} → {us}, {es}" for w, us, es in readings[:3])
    expect(
        differ >= 4,
        f"The two readings agree for {len(readings) - differ} of {len(readings)} dates "
        f"({shown} …). Does your function put the tag in front of the date, "
        '"en_US|" + written and "es|" + written, and decode each with the trained model?',
    )
    expect(
        us_right >= 4 and es_right >= 4,
        f"Only {us_right} en_US readings (month first) and {es_right} es readings (day first) "
        f"of {len(readings)} are right ({shown} …). Is the first string the en_US reading?",
    )
