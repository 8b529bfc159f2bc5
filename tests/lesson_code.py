"""The lessons' code, read without running it: shared by the tests that scan it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))


def without_magics(source: str) -> str:
    """A code cell's source with its IPython lines (``%magic``, ``!shell``) left out."""
    return "\n".join(
        line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))
    )


def imported_modules(source: str) -> set[str]:
    """Top-level names of the modules that ``source`` imports (IPython magics skipped)."""
    found = set()
    for node in ast.walk(ast.parse(without_magics(source))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def modules_the_lessons_import() -> set[str]:
    """The top-level modules imported by any lesson's code, outside the standard library."""
    found = set()
    for path in LESSONS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                found |= imported_modules(cell.source)
    return found - set(sys.stdlib_module_names)
