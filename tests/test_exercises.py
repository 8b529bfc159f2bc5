"""Every exercise's checker behaves the way the lessons promise.

Each ``tests/test_exercises_lessonNN.py`` provides ``CORRECT`` (exercise id → a reference
answer) and ``WRONG`` (``(exercise id, plausible mistake, a fragment of the expected hint)``);
this module runs the same four checks on all of them. The lesson
modules add the checks particular to their exercises.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from attnlib.exercises import REGISTRY, check

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
