"""`attnlib[lessons]`, what every lesson's setup cell installs, brings every third-party
module that a lesson or `attnlib` imports; and the NumPy and PyTorch backends expose the same
public names with the same leading arguments."""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import re
import sys
import tomllib
from pathlib import Path

import nbformat

import attnlib.numpy as anp
import attnlib.torch as atorch

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))


def imported_modules(source: str) -> set[str]:
    """Top-level names of the modules that ``source`` imports (IPython magics skipped)."""
    plain = "\n".join(
        line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))
    )
    found = set()
    for node in ast.walk(ast.parse(plain)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def third_party(modules: set[str]) -> set[str]:
    return {m for m in modules if m not in sys.stdlib_module_names and m != "attnlib"}


def distribution_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;@]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_lessons_extra_brings_every_module_the_lessons_and_attnlib_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    installed = {
        distribution_name(r)
        for r in project["dependencies"] + project["optional-dependencies"]["lessons"]
    }
    modules = set()
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                modules |= imported_modules(cell.source)
    for path in (ROOT / "attnlib").rglob("*.py"):
        if path.name != "bench.py":  # a command-line tool, run with the book's own environment
            modules |= imported_modules(path.read_text(encoding="utf-8"))
    providers = importlib.metadata.packages_distributions()
    missing = {
        module: providers.get(module)
        for module in third_party(modules)
        if not {d.lower() for d in providers.get(module, [])} & installed
    }
    assert not missing, f"imported but not in attnlib[lessons]: {missing}"


def public_functions(module) -> dict[str, object]:
    return {
        name: obj
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and getattr(obj, "__module__", "") == module.__name__
    }


def leading_parameters(obj) -> list[str]:
    """The names of the positional parameters (of __init__ for a class), self left out."""
    target = obj.__init__ if inspect.isclass(obj) else obj
    return [
        p.name
        for p in inspect.signature(target).parameters.values()
        if p.name != "self" and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


def test_both_backends_expose_the_same_public_api():
    numpy_api, torch_api = public_functions(anp), public_functions(atorch)
    only_torch = {"default_device"}  # devices exist only in PyTorch
    assert set(numpy_api) == set(torch_api) - only_torch
    torch_only = {"device", "dtype"}  # where the tensors live and their type
    for name, obj in numpy_api.items():
        torch_params = [p for p in leading_parameters(torch_api[name]) if p not in torch_only]
        assert leading_parameters(obj) == torch_params, name
