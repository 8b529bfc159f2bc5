"""Fixtures and scheduling shared by the test modules.

What `make test` runs, and where (``pytest -n auto``: one worker per core):

- ``tests/test_lessons.py`` runs every lesson once, on a simulated other computer, and
  compares every output with the committed one (and runs nbval on one lesson as a reader
  would);
- ``tests/test_fresh_learner.py`` runs two lessons in a brand-new environment, as a learner
  on Colab would;
- ``tests/test_book.py`` and ``tests/test_browser.py`` build both editions once
  (``book_html``) and open every page in Chromium;
- ``tests/test_translations.py`` extracts the English messages once and checks the catalogs;
- everything else (not marked ``slow``; `make test-fast` runs only these) checks ``attnlib``,
  the exercises and the lessons' conventions without running a lesson.

Each worker runs one thread per process, so that two workers on two cores do not fight; the
longest jobs start first (``pytest_collection_modifyitems``), so that the run does not end
with one worker still in a long lesson while the other waits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

ROOT = Path(__file__).resolve().parent.parent

if os.environ.get("PYTEST_XDIST_WORKER"):  # one thread per process, the kernels' included
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(variable, "1")

JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"


def build_book(source: Path, out: Path) -> Path:
    """Build one edition with warnings as errors; return its HTML directory."""
    cmd = [str(JUPYTER_BOOK), "build", str(source), "--path-output", str(out), "-W", "-n"]
    proc = subprocess.run(
        [*cmd, "--keep-going"], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, (
        f"{source.name or 'book'} build failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    )
    return out / "_build" / "html"


@pytest.fixture(scope="session")
def book_html(tmp_path_factory) -> Path:
    """Build the book as `make book` does, once per test run, into a temporary folder: the
    English edition, and the Chinese one (from ``zh/``) in its ``zh/`` subfolder. Return
    the HTML directory."""
    out = tmp_path_factory.mktemp("book")
    html = build_book(ROOT, out)
    shutil.copytree(build_book(ROOT / "zh", out / "zh"), html / "zh")
    return html


class KeepTogetherScheduling(LoadScopeScheduling):
    """pytest-xdist scheduling for `make test` (``-n auto``): every test goes to whichever
    worker is free, in the order of ``pytest_collection_modifyitems``, except what must share a
    process: the tests of the built book (they share one build), the fresh learner's lessons
    (they share one new environment) and the translation tests (they share one extraction)."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        config.option.loadscopereorder = False  # keep our order: the longest first

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


def scope_of(nodeid: str) -> str:
    """The tests that must run in one process: a module for these, else the test itself."""
    path = nodeid.split("::", 1)[0]
    if path.endswith(("test_book.py", "test_browser.py")):
        return "the built book"
    if path.endswith(("test_fresh_learner.py", "test_translations.py")):
        return path
    return nodeid


def pytest_xdist_make_scheduler(config, log):
    return KeepTogetherScheduling(config, log)


#: Roughly how long each long job takes on a 2-core machine, in seconds (the lessons on the
#: simulated other computer; `make test` prints the slowest tests). Only the order of the run
#: depends on these numbers: the longest first, then everything else as collected.
EXPECTED_SECONDS = {
    "the built book": 150,
    "tests/test_fresh_learner.py": 90,
    "tests/test_translations.py": 20,
    "test_nbval_passes_on_a_lesson_with_progress_bars": 15,
    "[03_queries_keys_values]": 10,
    "[04_multi_head_attention]": 28,
    "[05_positional_encoding]": 82,
    "[07_sequence_to_sequence]": 111,
    "[08_truncated_self_attention]": 73,
}


def expected_seconds(scope: str) -> float:
    return max((s for key, s in EXPECTED_SECONDS.items() if key in scope), default=0)


def pytest_collection_modifyitems(session, config, items):
    """The longest jobs first (a stable sort: the rest stays in collection order)."""
    cost = {}
    for item in items:
        scope = scope_of(item.nodeid)
        cost[scope] = cost.get(scope) or expected_seconds(scope)
    items.sort(key=lambda item: -cost[scope_of(item.nodeid)])
