"""The lessons' progress bars: on for a learner, off where outputs are saved or compared.

(``tests/test_lessons.py`` runs nbval on a lesson with bars the way a reader would.)"""

from __future__ import annotations

import io

import pytest

from attnlib import progress as progress_module
from attnlib.progress import progress


def test_off_under_the_switch(monkeypatch):
    monkeypatch.setenv("ATTNLIB_PROGRESS", "0")
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    steps = range(5)
    assert progress(steps, desc="training") is steps  # nothing added, nothing printed


def test_on_for_a_learner_and_counts_every_step(monkeypatch):
    monkeypatch.delenv("ATTNLIB_PROGRESS", raising=False)
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    assert progress_module.enabled()
    bar = progress(range(7), desc="training")
    bar.fp = io.StringIO()  # where tqdm's text bar writes, outside a notebook
    assert list(bar) == list(range(7)) and bar.n == 7


@pytest.mark.parametrize(("setting", "shown"), [(None, False), ("0", False), ("1", True)])
def test_inside_a_test_run_off_unless_the_switch_says_on(monkeypatch, setting, shown):
    """pytest sets PYTEST_CURRENT_TEST (here too); the kernels nbval starts inherit it."""
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "lessons/03.ipynb::Cell 0 (setup)")
    if setting is None:
        monkeypatch.delenv("ATTNLIB_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("ATTNLIB_PROGRESS", setting)
    assert progress_module.enabled() is shown
