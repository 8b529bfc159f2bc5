"""Fixtures shared by the test modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

ROOT = Path(__file__).resolve().parent.parent

# No progress bars in the kernels that nbval starts (they inherit this environment): a bar
# prints timings, which would differ from the committed outputs on every run.
os.environ["ATTNLIB_PROGRESS"] = "0"
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
    worker is free, except what must share a process: the cells of one notebook (they share
    nbval's kernel), the tests of the built book (they share one build) and the fresh
    learner's lessons (they share one new environment)."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        if path.endswith(".ipynb"):
            return path
        if path.endswith(("test_book.py", "test_browser.py")):
            return "the built book"
        if path.endswith("test_fresh_learner.py"):
            return path  # one learner environment for both lessons
        return nodeid


def pytest_xdist_make_scheduler(config, log):
    return KeepTogetherScheduling(config, log)
