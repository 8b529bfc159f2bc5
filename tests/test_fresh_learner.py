"""A learner's first run, for real.

A brand-new virtual environment starts with what Colab has before a lesson's first cell runs:
Python, a Jupyter kernel, and PyTorch (linked from the book's environment, so that the test
downloads nothing big). Two lessons are copied out of the repository and executed top to
bottom in a kernel of that environment: 01, the first a learner opens, and the Chinese edition
of 03, a short lesson that trains (its progress bars must show as widgets, and its checkers
must answer in Chinese from the catalog installed with the package). Their own setup cell installs
`attnlib[lessons]`, pointed at this checkout with `ATTNLIB_SOURCE` (the way a fork or a mirror
would be), so a lesson that reaches outside the package fails here; and the kernel then
imports every module that any lesson imports, so a dependency missing from the extra fails
here too. (Every lesson runs in full in ``tests/test_lessons.py``.)

The exercise cells are filled with deliberately wrong attempts first. "Run all" runs the
hidden solutions too (each asserts that it passes its checker); afterwards every checker must
still report the learner's own attempt as wrong: the solutions never replace it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conventions import SETUP_MESSAGES
from lesson_code import modules_the_lessons_import

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

#: Lesson 01 in English, lesson 03 in Chinese (its checkers must answer in Chinese).
LESSONS = ["lessons/01_sequences_of_vectors", "zh/lessons/03_queries_keys_values"]
CHECK = re.compile(r'^check\("(\d\d\.\d+)", (\w+)\)$', re.MULTILINE)


def run(*command, timeout=600, **kwargs):
    """Run a command; fail the test, with what it wrote, if it fails or runs past timeout."""
    proc = subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=timeout, **kwargs
    )
    assert proc.returncode == 0, f"{' '.join(map(str, command))}:\n{proc.stdout}\n{proc.stderr}"
    return proc


#: Large packages a learner's machine (Colab) already has: linked in, not installed again.
PREINSTALLED = ("torch", "triton")


def link_preinstalled(venv_python: Path, folder: Path) -> None:
    """Make the book environment's PyTorch (and Triton, where installed) visible to the new
    environment, and nothing else: a folder with links to their own packages and metadata,
    named in a .pth file."""
    folder.mkdir()
    for name in PREINSTALLED:
        try:
            package = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # triton ships for Linux only
        site = Path(str(package.locate_file("")))
        for top in {f.parts[0] for f in package.files} - {".."}:
            (folder / top).symlink_to(site / top)
    purelib = run(venv_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
    (Path(purelib.stdout.strip()) / "preinstalled.pth").write_text(f"{folder}\n")


@pytest.fixture(scope="module")
def learner_kernel(tmp_path_factory):
    """A new virtual environment with ipykernel, PyTorch and Triton only; returns the kernel's name,
    the JUPYTER_PATH that holds its kernelspec, and the environment for the kernel."""
    root = tmp_path_factory.mktemp("learner")
    run(sys.executable, "-m", "venv", root / "venv")
    python = root / "venv" / "bin" / "python"
    link_preinstalled(python, root / "preinstalled")
    constraints = ROOT / "requirements.txt"  # the book's pins, as a learner's make would use
    run(python, "-m", "pip", "install", "--quiet", "-c", constraints, "ipykernel")
    spec = root / "jupyter" / "kernels" / "learner"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.joinpath("kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "A learner", "language": "python"})
    )
    env = dict(os.environ)
    env.update({"ATTNLIB_SOURCE": str(ROOT), "PIP_CONSTRAINT": str(constraints)})
    env["ATTNLIB_PROGRESS"] = "1"  # a learner sees the progress bars
    env.pop("PYTHONPATH", None)
    return "learner", root / "jupyter", env, python


def with_wrong_attempts(nb: nbformat.NotebookNode) -> dict[str, str]:
    """Replace every exercise cell by a deliberately wrong attempt; return {id: name}."""
    attempts = {}
    for cell in nb.cells:
        if "exercise" in cell.metadata.get("tags", []):
            exercise_id, name = CHECK.search(cell.source).groups()
            cell.source = (
                f"def {name}(*args, **kwargs):  # a deliberately wrong attempt\n"
                f"    return None\n\n\ncheck({exercise_id!r}, {name})"
            )
            attempts[exercise_id] = name
    return attempts


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_lesson_runs_where_a_learner_opens_it(lesson, learner_kernel, tmp_path, monkeypatch):
    kernel_name, jupyter_path, env, python = learner_kernel
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_path))
    nb = nbformat.read(ROOT / f"{lesson}.ipynb", as_version=4)
    attempts = with_wrong_attempts(nb)
    assert attempts, "every lesson has exercises"
    statuses = ", ".join(f"{i!r}: check({i!r}, {name}).status" for i, name in attempts.items())
    imports = "\n".join(f"import {module}" for module in sorted(modules_the_lessons_import()))
    first_id, first_name = next(iter(attempts.items()))
    final = f"{imports}\n\nprint({{{statuses}}})\nprint(attnlib.__file__)\n"
    final += f"print(check({first_id!r}, {first_name}))"
    nb.cells.append(nbformat.v4.new_code_cell(final))
    client = NotebookClient(
        nb, timeout=600, kernel_name=kernel_name, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute(env=env)

    chinese = lesson.startswith("zh/")
    setup = next(c for c in nb.cells if c.cell_type == "code")
    printed = "".join(o.get("text", "") for o in setup.outputs)
    installed = SETUP_MESSAGES["zh_CN" if chinese else "en"]["installed"]  # in its language
    assert installed.format(source=ROOT) in printed, printed
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs).splitlines()
    statuses, where, feedback = printed[0], printed[1], "\n".join(printed[2:])
    assert statuses == str({i: "wrong" for i in attempts}), statuses
    # The checkers answer in the notebook's language, from the catalog installed with attnlib.
    expected = f"✗ 练习 {first_id}（" if chinese else f"✗ Exercise {first_id} ("
    assert feedback.startswith(expected) and ("：有误。" in feedback) == chinese, feedback
    # The lesson imported the package installed in the learner's environment, not this checkout.
    assert where.startswith(str(python.parent.parent / "lib")), where
    if any(".backward()" in c.source for c in nb.cells):  # a lesson that trains shows its bars
        widgets = [
            o
            for c in nb.cells
            for o in c.get("outputs", [])
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        ]
        assert widgets, "the training loops show progress bars (tqdm widgets) in Jupyter"
