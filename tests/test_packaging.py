"""`attnlib[lessons]`, what every lesson's setup cell installs, brings every third-party
module that a lesson or `attnlib` imports; the NumPy and PyTorch backends expose the same
public names with the same leading arguments, and list them all in ``__all__``; and the API
page (``book/api.md``) documents every name of ``attnlib`` that a lesson uses."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import inspect
import os
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from sphinx.pycode import ModuleAnalyzer

import attnlib.numpy as anp
import attnlib.torch as atorch
from lesson_code import LESSONS, ROOT, imported_modules, modules_the_lessons_import, without_magics

API_PAGE = ROOT / "book" / "api.md"
BACKENDS = [anp, atorch]

#: Public names that only one backend has, each with the reason; every other public name is
#: in both backends, with the same leading arguments.
ONE_BACKEND_ONLY = {
    "attnlib.numpy": {},
    "attnlib.torch": {"default_device": "devices (CPU, CUDA, MPS) exist only in PyTorch"},
}


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
    modules = modules_the_lessons_import()
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


def shared_names(module, names) -> set[str]:
    """``names`` less the ones that ``module`` alone has (``ONE_BACKEND_ONLY``)."""
    return set(names) - set(ONE_BACKEND_ONLY[module.__name__])


def test_both_backends_expose_the_same_public_api():
    numpy_api, torch_api = public_functions(anp), public_functions(atorch)
    assert shared_names(anp, numpy_api) == shared_names(atorch, torch_api)
    torch_only = {"device", "dtype"}  # where the tensors live and their type
    for name in shared_names(anp, numpy_api):
        torch_params = [p for p in leading_parameters(torch_api[name]) if p not in torch_only]
        assert leading_parameters(numpy_api[name]) == torch_params, name


def test_one_backend_only_names_exist_in_that_backend():
    for backend in BACKENDS:
        assert set(ONE_BACKEND_ONLY[backend.__name__]) <= set(public_functions(backend))


def missing_from_all(module) -> tuple[set[str], set[str]]:
    """The public functions and classes of ``module`` that its ``__all__`` leaves out, and the
    names in ``__all__`` that the module does not define."""
    listed = set(module.__all__)
    return set(public_functions(module)) - listed, {n for n in listed if not hasattr(module, n)}


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda m: m.__name__)
def test_all_lists_every_public_name_of_a_backend(backend):
    """``__all__`` is what ``from attnlib.numpy import *`` takes and what the API page shows."""
    left_out, unknown = missing_from_all(backend)
    assert not left_out, f"{backend.__name__}: public but not in __all__: {sorted(left_out)}"
    assert not unknown, f"{backend.__name__}: in __all__ but not defined: {sorted(unknown)}"
    assert len(backend.__all__) == len(set(backend.__all__)), "a name listed twice"


def test_both_backends_list_the_same_names_in_all():
    numpy_all, torch_all = set(anp.__all__), set(atorch.__all__)
    assert shared_names(anp, numpy_all) == shared_names(atorch, torch_all), (
        f"only in attnlib.numpy: {sorted(shared_names(anp, numpy_all - torch_all))}; "
        f"only in attnlib.torch: {sorted(shared_names(atorch, torch_all - numpy_all))}"
    )


# --------------------------------------------------------------------------- the API page


@functools.cache
def is_module(name: str) -> bool:
    """Whether ``name`` (``attnlib.bench``) is a module that can be imported."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return False
    return True


def lesson_trees(path: Path) -> list[ast.Module]:
    """The parsed code cells of a lesson notebook (IPython lines left out)."""
    nb = nbformat.read(path, as_version=4)
    return [ast.parse(without_magics(c.source)) for c in nb.cells if c.cell_type == "code"]


def attnlib_names_used(trees: list[ast.Module], package: str = "") -> set[tuple[str, str]]:
    """``(module, name)`` for every name of an ``attnlib`` module that the code uses: each
    ``from attnlib.X import name``, and each attribute of a name bound to an ``attnlib``
    module (``from attnlib import numpy as attn`` ... ``attn.softmax``; ``import attnlib``
    ... ``attnlib.progress.progress``). Submodules are not names: ``attnlib.numpy`` is left
    out, and the attributes looked up on it are kept. Relative imports (``from .. import
    data``) are read from ``package``, the package of the code."""
    bound, used = {}, set()  # bound: a name in the code -> the attnlib module it stands for
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.ImportFrom) and node.level:  # as if written in full
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            node = ast.ImportFrom(".".join([*parts, *filter(None, [node.module])]), node.names, 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "attnlib":
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound["attnlib"] = "attnlib"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "attnlib":
                continue
            for alias in node.names:
                qualified = f"{node.module}.{alias.name}"
                if is_module(qualified):
                    bound[alias.asname or alias.name] = qualified
                else:
                    used.add((node.module, alias.name))

    def module_of(node) -> str | None:
        """The attnlib module that the expression ``node`` stands for, if any."""
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            parent = module_of(node.value)
            if parent and is_module(f"{parent}.{node.attr}"):
                return f"{parent}.{node.attr}"
        return None

    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.Attribute):
            parent = module_of(node.value)
            if parent and not is_module(f"{parent}.{node.attr}"):
                used.add((parent, node.attr))
    return used


def directive_options(block: str) -> dict[str, str]:
    """The options of a reStructuredText directive (the indented lines after it), each value
    with its continuation lines joined."""
    options, name = {}, None
    for line in block.splitlines():
        option = re.match(r"\s+:([\w-]+):\s*(.*)", line)
        if option:
            name = option.group(1)
            options[name] = option.group(2)
        elif name and line.strip():
            options[name] += " " + line.strip()
    return options


def documented_names(page: Path = API_PAGE) -> dict[str, set[str]]:
    """The names that each ``.. automodule::`` of the API page documents: with a bare
    ``:members:``, the module's ``__all__`` (so such a module must define one, and the page
    cannot drift from it); with a list, that list; without ``:members:``, none."""
    text = page.read_text(encoding="utf-8")
    documented = defaultdict(set)
    for match in re.finditer(r"^\.\. automodule:: (\S+)\n((?:[ \t]+\S.*\n)*)", text, re.M):
        module_name, options = match.group(1), directive_options(match.group(2))
        members = options.get("members")
        if members is None:
            documented[module_name] |= set()
        elif members.strip():
            documented[module_name] |= {m.strip() for m in members.split(",") if m.strip()}
        else:
            module = importlib.import_module(module_name)
            assert hasattr(module, "__all__"), (
                f"{page.name} documents {module_name} with a bare :members:, so it shows "
                f"{module_name}.__all__: define one"
            )
            documented[module_name] |= set(module.__all__)
    return documented


def test_the_api_page_documents_every_attnlib_name_a_lesson_uses():
    documented = documented_names()
    undocumented = defaultdict(list)
    for path in LESSONS:
        for module, name in attnlib_names_used(lesson_trees(path)):
            if name not in documented.get(module, set()):
                undocumented[f"{module}.{name}"].append(path.name[:2])
    assert not undocumented, (
        f"used by a lesson (lessons listed) but not on {API_PAGE.name}: {dict(undocumented)}; "
        "add it to the module's __all__ (or to the page's :members: list)"
    )


def test_the_lessons_use_names_the_scan_can_see():
    """The scan above finds what the lessons use (guards against a scan that finds nothing)."""
    used = set().union(*(attnlib_names_used(lesson_trees(path)) for path in LESSONS))
    assert {("attnlib.numpy", "attention"), ("attnlib.torch", "attention")} <= used
    assert ("attnlib.exercises", "check") in used  # every lesson's `from ... import check`


def test_the_name_scan_follows_imports_and_attributes():
    code = """
import attnlib
import attnlib.bench as timing
from attnlib import numpy as attn, data
from attnlib.exercises import check
from attnlib.progress import progress
attn.softmax(x); data.TAGS; timing.band_call; attnlib.plot.heatmap; attnlib.torch
other.softmax; check(); attnlib.__version__
"""
    assert attnlib_names_used([ast.parse(code)]) == {
        ("attnlib.numpy", "softmax"),
        ("attnlib.data", "TAGS"),
        ("attnlib.bench", "band_call"),
        ("attnlib.plot", "heatmap"),
        ("attnlib.exercises", "check"),
        ("attnlib.progress", "progress"),
        ("attnlib", "__version__"),
    }


def test_documented_names_reads_bare_and_listed_members(tmp_path):
    page = tmp_path / "api.md"
    page.write_text(
        "```{eval-rst}\n.. automodule:: attnlib\n```\n\n"
        "```{eval-rst}\n.. automodule:: attnlib.numpy\n   :members:\n```\n\n"
        "```{eval-rst}\n.. automodule:: attnlib.exercises\n   :members: check, expect,\n"
        "      ExerciseResult\n```\n",
        encoding="utf-8",
    )
    assert documented_names(page) == {
        "attnlib": set(),
        "attnlib.numpy": set(anp.__all__),
        "attnlib.exercises": {"check", "expect", "ExerciseResult"},
    }


def has_documentation(module_name: str, name: str) -> bool:
    """Whether autodoc has something to show for ``module.name``: a docstring for a function or
    class, a ``#:`` comment for a constant (autodoc skips undocumented members)."""
    obj = getattr(importlib.import_module(module_name), name)
    if inspect.isfunction(obj) or inspect.isclass(obj):
        return bool(inspect.getdoc(obj))
    return ("", name) in ModuleAnalyzer.for_module(module_name).find_attr_docs()


def test_every_name_on_the_api_page_exists_and_has_documentation():
    problems = []
    for module_name, names in documented_names().items():
        module = importlib.import_module(module_name)
        for name in sorted(names):
            if not hasattr(module, name):
                problems.append(f"{module_name}.{name} does not exist")
            elif not has_documentation(module_name, name):
                problems.append(f"{module_name}.{name} has no docstring (or #: comment)")
    assert not problems, problems


#: The modules that compute (not measure): each public function and class shows an example.
WITH_EXAMPLES = [
    "attnlib.numpy",
    "attnlib.torch",
    "attnlib.triton",
    "attnlib.decoder",
    "attnlib.plot",
    "attnlib.data",
]
#: Public so that their code can be read; their docstrings say what to call instead.
NOT_CALLED_DIRECTLY = {"attnlib.triton.FlashAttentionFunction"}


def test_every_function_that_computes_shows_a_small_example():
    """The API page's promise: each function of the backends, the kernels, the decoder, the
    figures and the data shows a small example (``>>>``, run as a doctest)."""
    missing = [
        f"{module_name}.{name}"
        for module_name in WITH_EXAMPLES
        for name in importlib.import_module(module_name).__all__
        if callable(obj := getattr(importlib.import_module(module_name), name))
        and ">>>" not in (inspect.getdoc(obj) or "")
        and f"{module_name}.{name}" not in NOT_CALLED_DIRECTLY
    ]
    assert not missing, missing


def module_trees(path: Path) -> tuple[list[ast.Module], str]:
    """A module of attnlib, parsed, and the package its relative imports start from."""
    package = ".".join(path.relative_to(ROOT).parent.parts)
    return [ast.parse(path.read_text(encoding="utf-8"))], package


def test_the_exercises_depend_on_the_core_and_not_the_other_way_round():
    """attnlib/exercises is the course layer: it uses the core's public API only, and nothing
    in the core imports it."""
    for path in (ROOT / "attnlib").glob("*.py"):
        used = attnlib_names_used(*module_trees(path))
        names = {f"{module}.{name}" for module, name in used}
        assert not any("exercises" in name for name in names), f"{path.name} imports exercises"
    for path in (ROOT / "attnlib" / "exercises").glob("lesson*.py"):
        private = {
            f"{module}.{name}"
            for module, name in attnlib_names_used(*module_trees(path))
            if not module.startswith("attnlib.exercises")
            and (name.startswith("_") or any(p.startswith("_") for p in module.split(".")))
        }
        assert not private, f"{path.name} uses private names of the core: {private}"


#: Run in a fresh interpreter where ``import torch`` fails, as after ``pip install attnlib``
#: (NumPy and matplotlib only): what is left of the environment after the imports.
NUMPY_ONLY_IMPORTS = """
import os, sys
sys.modules["torch"] = None  # import torch raises ImportError, as where it is not installed
os.environ.pop("TRITON_INTERPRET", None)
import attnlib, attnlib.numpy, attnlib.data, attnlib.exercises
from attnlib.exercises import check
assert check("02.1", None).status == "not attempted"
print(os.environ.get("TRITON_INTERPRET", "unset"), "torch" in sys.modules and sys.modules["torch"])
"""


def test_the_numpy_path_and_the_checkers_import_without_torch_and_leave_triton_alone():
    """README: plain attnlib needs NumPy and matplotlib only. Importing the checkers must not
    need PyTorch, nor switch Triton to its interpreter for the whole process."""
    result = subprocess.run(
        [sys.executable, "-c", NUMPY_ONLY_IMPORTS], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["unset", "None"]


def test_importing_the_checkers_with_torch_installed_leaves_triton_alone():
    code = "import os; import attnlib.exercises; print(os.environ.get('TRITON_INTERPRET', 'unset'))"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "unset"


def test_the_name_scan_reads_relative_imports():
    used = attnlib_names_used(*module_trees(ROOT / "attnlib" / "exercises" / "lesson05.py"))
    assert ("attnlib.exercises", "exercise") in used and ("attnlib.exercises", "expect") in used
    assert ("attnlib.numpy", "sinusoidal_positional_encoding") in used  # attn.…, from .. import
    assert ("attnlib.torch", "LearnedPositionalEmbedding") in used  # from .. import torch as …


# ---------------------------------------------------------------- the lock

LOCKS = {"cpu": ROOT / "requirements.txt", "gpu": ROOT / "requirements-gpu.txt"}


def pins(lock: Path) -> dict[str, list[Requirement]]:
    """The lock's pins by distribution name (a name can have several, with exclusive markers)."""
    found = defaultdict(list)
    for line in lock.read_text().splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            requirement = Requirement(line)
            found[canonicalize_name(requirement.name)].append(requirement)
    return found


def pinned_version(requirement: Requirement) -> Version:
    (specifier,) = requirement.specifier
    assert specifier.operator == "==", f"{requirement} is not an exact pin"
    return Version(specifier.version)


def test_the_cpu_and_gpu_locks_differ_only_by_the_cuda_libraries():
    cpu, gpu = pins(LOCKS["cpu"]), pins(LOCKS["gpu"])
    only_gpu = set(gpu) - set(cpu)
    assert only_gpu, "the GPU lock pins no CUDA library"
    assert all(name.startswith(("nvidia-", "cuda-")) for name in only_gpu), sorted(only_gpu)
    assert set(cpu) <= set(gpu), sorted(set(cpu) - set(gpu))
    assert {n: list(map(str, r)) for n, r in cpu.items()} == {
        n: list(map(str, gpu[n])) for n in cpu
    }


def direct_requirements() -> list[Requirement]:
    """requirements.in, and pyproject.toml's dependencies and `lessons` extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [line.split("#", 1)[0].strip() for line in (ROOT / "requirements.in").open()]
    lines += project["dependencies"] + project["optional-dependencies"]["lessons"]
    return [Requirement(line) for line in lines if line]


@pytest.mark.parametrize("lock", LOCKS)
def test_the_lock_pins_every_direct_requirement_in_its_range(lock):
    locked = pins(LOCKS[lock])
    for requirement in direct_requirements():
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement} is not in {LOCKS[lock].name}: run make lock"
        for pin in locked[name]:
            assert requirement.specifier.contains(pinned_version(pin), prereleases=True), (
                f"{LOCKS[lock].name} pins {pin}, outside {requirement}: run make lock"
            )


def test_this_environment_has_the_versions_the_lock_pins():
    """A stale .venv (the lock changed, the environment did not) fails here, not in a lesson."""
    wrong = []
    for name, requirements in pins(LOCKS["cpu"]).items():
        for requirement in requirements:
            if requirement.marker is None or requirement.marker.evaluate():
                try:
                    installed = Version(importlib.metadata.version(name))
                except importlib.metadata.PackageNotFoundError:
                    wrong.append(f"{requirement}: not installed")
                    continue
                if Version(installed.public) != pinned_version(requirement):  # 2.13.0+cpu is 2.13.0
                    wrong.append(f"{requirement}: {installed} installed")
    assert not wrong, "run make install (or rm -r .venv): " + "; ".join(wrong)
