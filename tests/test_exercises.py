"""Every exercise's checker behaves the way the lessons promise, in English and in Chinese.

Each ``tests/test_exercises_lessonNN.py`` provides ``CORRECT`` (exercise id → a reference
answer) and ``WRONG`` (``(exercise id, plausible mistake, a fragment of the expected hint)``);
this module runs the same four checks on all of them. The lesson
modules add the checks particular to their exercises.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from attnlib.exercises import REGISTRY, check, set_language, translate

LESSON_MODULES = [
    importlib.import_module(path.stem)
    for path in sorted(Path(__file__).parent.glob("test_exercises_lesson*.py"))
]
CORRECT = {eid: answer for m in LESSON_MODULES for eid, answer in m.CORRECT.items()}
WRONG = [case for m in LESSON_MODULES for case in m.WRONG]


def test_every_registered_exercise_has_a_reference_answer():
    assert set(CORRECT) == set(REGISTRY)


@pytest.mark.parametrize("exercise_id", sorted(CORRECT))
def test_reference_solution_passes(exercise_id):
    result = check(exercise_id, CORRECT[exercise_id])
    assert bool(result), result


@pytest.mark.parametrize("exercise_id", sorted(CORRECT))
def test_none_is_not_attempted(exercise_id):
    result = check(exercise_id, None)
    assert result.status == "not attempted" and "not attempted" in repr(result)


@pytest.mark.parametrize("exercise_id", sorted(e for e, a in CORRECT.items() if callable(a)))
def test_unfinished_function_is_not_attempted(exercise_id):
    def stub(*args, **kwargs):
        raise NotImplementedError  # your code here

    assert check(exercise_id, stub).status == "not attempted"


@pytest.mark.parametrize(("exercise_id", "answer", "hint"), WRONG)
def test_plausible_mistake_is_wrong_with_a_hint(exercise_id, answer, hint):
    result = check(exercise_id, answer)
    assert result.status == "wrong", result
    assert hint in result.message, result


# The same feedback in Chinese (attnlib.exercises.set_language; catalogs exercises/*.po).

CJK = re.compile(r"[\u4e00-\u9fff]")
#: Four English words in a row: a sentence left untranslated (code such as `axis=1`, names
#: such as attend_one and shapes are not words of this kind).
ENGLISH_PHRASE = re.compile(r"(?<![\w.`'\"(])[A-Za-z]{2,}(?: [a-z]{2,}){3}(?![\w(])")


def test_every_exercise_has_a_plausible_mistake():
    assert {exercise_id for exercise_id, *_ in WRONG} == set(REGISTRY)


@pytest.mark.parametrize(("exercise_id", "answer", "hint"), WRONG)
def test_plausible_mistake_is_explained_in_both_languages(exercise_id, answer, hint):
    result = check(exercise_id, answer)
    english, chinese = result.render("en"), result.render("zh_CN")
    assert hint in english
    assert english.startswith(f"✗ Exercise {exercise_id} (")
    assert chinese.startswith(f"✗ 练习 {exercise_id}（") and "：有误。" in chinese
    hint_in_chinese = chinese.split("：有误。", 1)[1]
    assert CJK.search(hint_in_chinese), chinese
    assert not ENGLISH_PHRASE.search(hint_in_chinese), chinese


@pytest.mark.parametrize("exercise_id", sorted(REGISTRY))
def test_not_attempted_and_correct_in_chinese(exercise_id):
    title = REGISTRY[exercise_id].title
    chinese_title = translate(title, "zh_CN")
    assert chinese_title != title or not re.search(r"[a-z]{3,} [a-z]{3,}", title)
    head = f"· Exercise {exercise_id} ({title}): not attempted."
    assert repr(check(exercise_id, None)) == f"{head} Fill in the cell above and run it again."
    set_language("zh_CN")
    try:
        assert repr(check(exercise_id, None)) == (
            f"· 练习 {exercise_id}（{chinese_title}）：尚未作答。请先完成上面的单元格，再运行一次。"
        )
        assert repr(check(exercise_id, CORRECT[exercise_id])) == (
            f"✓ 练习 {exercise_id}（{chinese_title}）：正确"
        )
    finally:
        set_language("en")


def test_set_language_names_the_languages_it_knows():
    with pytest.raises(ValueError, match="zh_CN"):
        set_language("fr")
