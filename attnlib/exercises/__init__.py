"""Answer checkers for the lessons' exercises.

A lesson's exercise cell asks for a function or a value and ends with a check::

    def one_hot(word, vocabulary):
        raise NotImplementedError  # your code here

    check("01.1", one_hot)

``check`` returns an ``ExerciseResult`` that shows itself as one line: "not attempted yet"
while the answer is still ``None`` or raises ``NotImplementedError``, "correct" when every
test passes, or the first failed test as a hint. It never raises, so a notebook with
unfinished exercises still runs top to bottom. The result is truthy only when correct, so
the hidden solution cells say ``assert check("01.1", one_hot)``, and running the lesson as
a test proves that every solution passes its checker.

Each lesson's checkers live in ``attnlib/exercises/lessonNN.py``, registered with
``@exercise("NN.k", "title")``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class ExerciseFailed(AssertionError):
    """Raised by a checker with a hint for the learner."""


@dataclass(frozen=True)
class Exercise:
    """One exercise: its id (``"01.1"``), a title and a checker that raises ExerciseFailed."""

    id: str
    title: str
    checker: Callable[[object], None]


REGISTRY: dict[str, Exercise] = {}


def exercise(exercise_id: str, title: str):
    """Register the decorated function as the checker of ``exercise_id``."""

    def register(checker):
        if exercise_id in REGISTRY:
            raise ValueError(f"exercise {exercise_id} is registered twice")
        REGISTRY[exercise_id] = Exercise(exercise_id, title, checker)
        return checker

    return register


@dataclass(frozen=True)
class ExerciseResult:
    """What ``check`` found: status is "correct", "wrong" or "not attempted"."""

    exercise: Exercise
    status: str
    message: str = ""

    def __bool__(self) -> bool:
        return self.status == "correct"

    def __repr__(self) -> str:
        mark = {"correct": "✓", "wrong": "✗", "not attempted": "·"}[self.status]
        head = f"{mark} Exercise {self.exercise.id} ({self.exercise.title}): {self.status}"
        return f"{head}. {self.message}" if self.message else head

    __str__ = __repr__


def check(exercise_id: str, answer) -> ExerciseResult:
    """Check ``answer`` for exercise ``exercise_id``; see the module docstring."""
    if exercise_id not in REGISTRY:
        known = ", ".join(sorted(REGISTRY))
        raise KeyError(f"no exercise {exercise_id!r}; known exercises: {known}")
    ex = REGISTRY[exercise_id]
    if answer is None:
        return ExerciseResult(ex, "not attempted", "Fill in the cell above and run it again.")
    try:
        ex.checker(answer)
    except NotImplementedError:
        return ExerciseResult(ex, "not attempted", "Fill in the cell above and run it again.")
    except ExerciseFailed as failure:
        return ExerciseResult(ex, "wrong", str(failure))
    except Exception as error:  # the learner's code raised: report it, don't crash the lesson
        return ExerciseResult(ex, "wrong", f"Your code raised {type(error).__name__}: {error}")
    return ExerciseResult(ex, "correct")


def expect(condition: bool, hint: str) -> None:
    """Inside a checker: fail with ``hint`` unless ``condition`` holds."""
    if not condition:
        raise ExerciseFailed(hint)


# The lessons' checkers register themselves on import.
from . import (  # noqa: E402, F401
    lesson01,
    lesson02,
    lesson03,
    lesson04,
    lesson05,
    lesson06,
    lesson07,
    lesson08,
    lesson09,
    lesson10,
    lesson11,
    lesson12,
    lesson13,
    lesson14,
    lesson15,
)
