"""The capstone's tasks (lesson 16): card sequences and the images drawn for them."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib import data


def cards_and_labels(task, n=200, length=20, seed=0, pairs=8):
    cards, labels = data.card_sequences(task, n, length, rng=seed, pairs=pairs)
    assert cards.shape == (n, length, 2) and labels.shape == (n, length)
    assert np.issubdtype(cards.dtype, np.integer) and np.issubdtype(labels.dtype, np.integer)
    scored = labels != data.UNSCORED
    assert labels[scored].min() >= 0 and labels[scored].max() <= 9
    return cards, labels


def test_reach_reports_the_value_on_the_first_card():
    cards, labels = cards_and_labels("reach")
    assert (labels[:, 0] == data.UNSCORED).all()
    assert (labels[:, 1:] == cards[:, :1, 1]).all()
    assert (cards >= 0).all()  # no empty slot
    assert len(np.unique(cards[:, 0, 0])) == 10  # the first card's key is as random as any


def test_content_reports_the_value_on_the_only_card_with_key_0():
    cards, labels = cards_and_labels("content")
    keys, values = cards[..., 0], cards[..., 1]
    assert ((keys == 0).sum(axis=1) == 1).all()
    where = (keys == 0).argmax(axis=1)
    rows = np.arange(len(cards))
    assert (labels[rows, where] == data.UNSCORED).all()
    assert ((labels == data.UNSCORED).sum(axis=1) == 1).all()
    answers = values[rows, where]
    assert (labels[labels != data.UNSCORED] == np.repeat(answers, cards.shape[1] - 1)).all()
    assert len(np.unique(where)) == cards.shape[1]  # anywhere in the sequence


@pytest.mark.parametrize("pairs", [1, 2, 8, 9])
def test_recall_questions_report_the_value_on_the_card_with_their_key(pairs):
    cards, labels = cards_and_labels("recall", pairs=pairs)
    keys, values = cards[..., 0], cards[..., 1]
    is_card = values != data.EMPTY
    assert (is_card.sum(axis=1) == pairs).all()
    assert ((labels == data.UNSCORED) == is_card).all()
    for sequence_keys, sequence_values, sequence_labels, card in zip(keys, values, labels, is_card):
        table = dict(zip(sequence_keys[card], sequence_values[card]))
        assert len(table) == pairs  # distinct keys
        asked = sequence_keys[~card]
        assert set(asked) <= set(table)
        assert [table[k] for k in asked] == list(sequence_labels[~card])


def test_the_same_seed_gives_the_same_sequences():
    for task in data.CARD_TASKS:
        first, again = (data.card_sequences(task, 5, 16, rng=7) for _ in range(2))
        assert all(np.array_equal(a, b) for a, b in zip(first, again))
        other = data.card_sequences(task, 5, 16, rng=8)
        assert not np.array_equal(first[0], other[0])
    generator = np.random.default_rng(3)
    one = data.card_sequences("recall", 4, 12, rng=generator)[0]
    two = data.card_sequences("recall", 4, 12, rng=generator)[0]
    assert not np.array_equal(one, two)  # a generator moves on


@pytest.mark.parametrize(
    ("arguments", "error", "fragment"),
    [
        (("nearby", 2, 8), ValueError, "task must be one of"),
        (("reach", 0, 8), ValueError, "num_sequences"),
        (("reach", 2, 1), ValueError, "length must be >= 2"),
        (("recall", 2, 8, 0, 8), ValueError, "pairs must be < 8"),
        (("recall", 2, 32, 0, 11), ValueError, "pairs must be < 11"),
        (("reach", 2.0, 8), TypeError, "num_sequences must be an int"),
    ],
)
def test_bad_arguments_are_named(arguments, error, fragment):
    task, n, length, *rest = arguments
    seed, pairs = rest if rest else (0, 8)
    with pytest.raises(error, match=fragment):
        data.card_sequences(task, n, length, rng=seed, pairs=pairs)


def test_drawn_images_show_their_digit_and_come_from_the_pool():
    _, image_digits = data.digit_images()
    pool = np.arange(0, len(image_digits), 2)  # every other image
    cards, _ = data.card_sequences("recall", 50, 12, rng=0)
    drawn = data.draw_digit_images(cards, image_digits, pool, rng=1)
    assert drawn.shape == cards.shape
    empty = cards == data.EMPTY
    assert (drawn[empty] == data.EMPTY).all()
    assert np.isin(drawn[~empty], pool).all()
    assert (image_digits[drawn[~empty]] == cards[~empty]).all()
    again = data.draw_digit_images(cards, image_digits, pool, rng=1)
    assert np.array_equal(drawn, again)


def test_a_digit_missing_from_the_pool_is_named():
    with pytest.raises(ValueError, match="no image of the digit 3"):
        data.draw_digit_images([[3]], np.array([1, 2, 3]), pool=[0, 1])


@pytest.mark.parametrize("task", data.CARD_TASKS)
def test_answer_positions_point_at_the_card_that_holds_each_answer(task):
    cards, labels = cards_and_labels(task, pairs=5)
    where = data.answer_positions(task, cards)
    assert where.shape == labels.shape and np.issubdtype(where.dtype, np.integer)
    rows = np.arange(len(cards))[:, None]
    scored = labels != data.UNSCORED
    assert (cards[rows, where, 1][scored] == labels[scored]).all()  # the card shows the answer
    held = cards[rows, where]  # (N, L, 2): the card each position points at
    if task == "reach":
        assert (where == 0).all()
    elif task == "content":
        assert (held[..., 0] == 0).all()  # the card with key 0
    else:
        assert (held[..., 0] == cards[..., 0]).all()  # the card with the question's key
        assert (held[..., 1] != data.EMPTY).all()  # a card, not a question
    # a card that holds an answer (unscored) points at itself
    assert (where[~scored] == np.nonzero(~scored)[1]).all()


def test_answer_positions_names_its_arguments():
    with pytest.raises(ValueError, match="task must be one of"):
        data.answer_positions("nearby", np.zeros((1, 4, 2), dtype=int))
    with pytest.raises(ValueError, match=r"cards must have shape \(N, L, 2\)"):
        data.answer_positions("reach", np.zeros((4, 2), dtype=int))
