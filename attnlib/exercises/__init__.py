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
``@exercise("NN.k", "title")``. Their hints are templates with named values,
``expect(ok, "got shape {shape}.", shape=got.shape)``, so that each can be shown in English
or in Chinese: ``set_language("zh_CN")`` switches the feedback to Chinese, from the gettext
catalog ``attnlib/locale/zh_CN/LC_MESSAGES/attnlib.mo`` (written by
``tools/translations.py`` from ``locale/zh_CN/LC_MESSAGES/exercises/*.po``).
"""

from __future__ import annotations

import gettext
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

#: The languages of the checkers' feedback: English (the messages as written) and Chinese.
LANGUAGES = ("en", "zh_CN")
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
_settings = {"language": "en"}


def set_language(language: str) -> None:
    """Show the checkers' feedback in ``language``: ``"en"`` (the default) or ``"zh_CN"``.

    >>> set_language("zh_CN")  # 练习反馈用中文
    """
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}; got {language!r}")
    _settings["language"] = language


@cache
def _catalog(language: str) -> gettext.NullTranslations:
    """The compiled catalog of ``language`` (English: the messages as written)."""
    if language == "en":
        return gettext.NullTranslations()
    return gettext.translation("attnlib", LOCALE_DIR, languages=[language], fallback=True)


def translate(text: str, language: str | None = None) -> str:
    """``text`` (an English message as written in a checker) in ``language``.

    >>> translate("correct", "zh_CN")
    '正确'
    """
    return _catalog(language or _settings["language"]).gettext(text)


@dataclass(frozen=True)
class Message:
    """A checker's message: an English template with named values, shown in any language.

    The template is the catalog's key; the values fill it after translation, and a value
    that is itself a ``Message`` (a case's label) is translated too::

        Message("got shape {shape}.", {"shape": (2, 3)}).render("zh_CN")  # '得到的形状是 (2, 3)。'
    """

    template: str
    values: dict = field(default_factory=dict)

    def render(self, language: str | None = None) -> str:
        values = {
            name: value.render(language) if isinstance(value, Message) else value
            for name, value in self.values.items()
        }
        return translate(self.template, language).format(**values)

    def __str__(self) -> str:
        return self.render()


def phrase(text: str, **values) -> Message:
    """Mark a phrase for translation where it is written (a case's label that a hint shows)."""
    return Message(text, values)


class ExerciseFailed(AssertionError):
    """Raised by a checker with a hint for the learner (a ``Message`` or plain text)."""

    def __init__(self, hint: Message | str):
        self.hint = hint if isinstance(hint, Message) else Message("{text}", {"text": hint})
        super().__init__(self.hint.render("en"))


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


#: Each status's mark and its words, shown in the chosen language.
STATUS_LINE = {
    "correct": ("✓", phrase("correct")),
    "wrong": ("✗", phrase("wrong")),
    "not attempted": ("·", phrase("not attempted")),
}
NOT_ATTEMPTED = Message("Fill in the cell above and run it again.")


@dataclass(frozen=True)
class ExerciseResult:
    """What ``check`` found: status is "correct", "wrong" or "not attempted".

    It shows itself in the language of ``set_language``; ``render(language)`` gives any.
    """

    exercise: Exercise
    status: str
    hint: Message | None = None

    def __bool__(self) -> bool:
        return self.status == "correct"

    @property
    def message(self) -> str:
        """The hint in the chosen language ("" when correct)."""
        return self.hint.render() if self.hint else ""

    def render(self, language: str | None = None) -> str:
        """One line: ``✗ Exercise 02.1 (attend_one with loops): wrong. <the hint>``."""
        ex = self.exercise
        mark, status = STATUS_LINE[self.status]
        values = {"id": ex.id, "title": phrase(ex.title), "status": status}
        head = f"{mark} " + Message("Exercise {id} ({title}): {status}", values).render(language)
        if self.hint is None:
            return head
        return Message("{head}. {hint}", {"head": head, "hint": self.hint}).render(language)

    def __repr__(self) -> str:
        return self.render()

    __str__ = __repr__


def check(exercise_id: str, answer) -> ExerciseResult:
    """Check ``answer`` for exercise ``exercise_id``; see the module docstring."""
    if exercise_id not in REGISTRY:
        known = ", ".join(sorted(REGISTRY))
        raise KeyError(f"no exercise {exercise_id!r}; known exercises: {known}")
    ex = REGISTRY[exercise_id]
    if answer is None:
        return ExerciseResult(ex, "not attempted", NOT_ATTEMPTED)
    try:
        ex.checker(answer)
    except NotImplementedError:
        return ExerciseResult(ex, "not attempted", NOT_ATTEMPTED)
    except ExerciseFailed as failure:
        return ExerciseResult(ex, "wrong", failure.hint)
    except Exception as error:  # the learner's code raised: report it, don't crash the lesson
        raised = {"error": type(error).__name__, "text": str(error)}
        return ExerciseResult(ex, "wrong", Message("Your code raised {error}: {text}", raised))
    return ExerciseResult(ex, "correct")


def expect(condition: bool, hint: str, /, **values) -> None:
    """Inside a checker: fail with ``hint`` unless ``condition`` holds.

    ``hint`` is an English template, written out where it is used so that the catalog holds
    it; ``values`` fill its ``{names}`` after translation::

        expect(got.shape == (3,), "should be 3 weights; got shape {shape}.", shape=got.shape)
    """
    if not condition:
        raise ExerciseFailed(Message(hint, values))


def expect_shape(got, want, call: Message | str) -> None:
    """Inside a checker: fail unless array ``got`` has the shape of array ``want``; ``call``
    says what was called (``phrase("layer_norm(x of shape {shape}, ...)", shape=...)``)."""
    expect(
        got.shape == want.shape,
        "{call} has shape {got_shape}; expected {want_shape}.",
        call=call,
        got_shape=got.shape,
        want_shape=want.shape,
    )


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
    lesson16,
)
