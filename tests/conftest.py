"""Fixtures shared by the test modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"


@pytest.fixture(scope="session")
def book_html(tmp_path_factory) -> Path:
    """Build the book once per test run, warnings as errors, into a temporary folder;
    return its HTML directory."""
    out = tmp_path_factory.mktemp("book")
    cmd = [str(JUPYTER_BOOK), "build", str(ROOT), "--path-output", str(out), "-W", "-n"]
    proc = subprocess.run(
        [*cmd, "--keep-going"], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, f"book build failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    return out / "_build" / "html"
