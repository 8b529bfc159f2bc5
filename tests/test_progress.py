"""The lessons' progress bars: on for a learner, off where outputs are saved or compared."""

from __future__ import annotations

import io

from attnlib import progress as progress_module
from attnlib.progress import progress


def test_off_under_the_switch(monkeypatch):
    monkeypatch.setenv("ATTNLIB_PROGRESS", "0")
    steps = range(5)
    assert progress(steps, desc="training") is steps  # nothing added, nothing printed


def test_on_by_default_and_counts_every_step(monkeypatch):
    monkeypatch.delenv("ATTNLIB_PROGRESS", raising=False)
    assert progress_module.enabled()
    bar = progress(range(7), desc="training")
    bar.fp = io.StringIO()  # where tqdm's text bar writes, outside a notebook
    assert list(bar) == list(range(7)) and bar.n == 7
