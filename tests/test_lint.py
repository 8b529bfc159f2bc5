"""ruff, configured in pyproject.toml, finds nothing in the package, the tests, the tools
or the lessons (ruff reads notebooks natively)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUFF = Path(sys.executable).parent / "ruff"
PATHS = ["attnlib", "tests", "tools", "lessons", "book"]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_is_clean(command):
    result = subprocess.run(
        [str(RUFF), *command, *PATHS], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
