"""The lessons run, and every output they show is what the code gives today, on any computer.

This is the test that runs the lessons. Each lesson is executed once, top to bottom, on a
simulated other computer (``tools/run_notebooks.other_machine_env``: PyTorch's portable
kernels, another code path of MKL on an Intel CPU, OpenBLAS's kernels without FMA, NumPy
without AVX2, one thread, another hash seed), with `make notebooks`' own code. That one run
checks three things:

- **every assert** of the lesson holds (a cell that raises fails the test);
- **nothing is stale**: every output that nbval would compare (cells not tagged
  ``nbval-ignore-output``; figures' pixels aside) is byte for byte the committed one, so a
  change to ``attnlib`` or to a lesson without ``make notebooks`` fails here;
- **nothing depends on this computer**: the rounding there is not this machine's, so an output
  that holds only on one CPU, thread count or BLAS fails here too.

The comparison is nbval's and more (no sanitizers, every output field and its order, stderr
included); ``python tools/run_notebooks.py --check --other-machine lessons/NN_*.ipynb`` shows
a failure as a diff. A cell whose printed digits depend on the machine is tagged
``nbval-ignore-output`` and carries its claims in asserts, which run here too.

Readers use nbval itself (``pytest --nbval lessons/NN_*.ipynb``, as its documentation says);
the last test runs it that way, on a lesson that shows progress bars.

A lesson that passed is not run again while nothing it depends on has changed: the notebook's
code cells (code, tags, committed outputs), ``attnlib``, ``tools/``, this test, the installed
distributions and their versions, and the settings of the run, on the same kind of machine and
Python (``inputs_digest``). The digest of each pass
is kept in pytest's cache (``.pytest_cache``), so a commit that touches only prose, the
translations or the tests runs no lesson; a fresh clone (CI) runs them all, and so does
``pytest --cache-clear``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from conftest import files_digest, installed_distributions

import run_notebooks

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))


def inputs_digest(notebook: Path, settings: dict[str, str]) -> str:
    """A digest of everything a lesson's run depends on: the notebook's code cells (their
    code, tags and committed outputs; not its prose), ``attnlib``, the tools that run it, this
    test, the installed distributions, the ``settings`` of the run, this kind of machine and
    Python."""
    cells = nbformat.read(notebook, as_version=4).cells
    code = [
        (c.source, c.metadata.get("tags", []), c.outputs) for c in cells if c.cell_type == "code"
    ]
    files = [Path(__file__), *sorted((ROOT / "attnlib").rglob("*.py"))]
    files += sorted((ROOT / "tools").glob("*.py"))
    machine = [installed_distributions(), platform.machine(), sys.version]
    return files_digest(files, code, settings, machine)


def run_unless_passed(cache, name: str, digest: str, test) -> None:
    """Run ``test()`` unless it passed before with the same ``digest`` (kept in ``cache``)."""
    key = f"attnlib/passed/{name}"
    if cache.get(key, None) == digest:
        pytest.skip(f"passed before with the same inputs ({digest[:12]}); --cache-clear reruns")
    test()
    cache.set(key, digest)


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs_and_its_outputs_hold_on_another_computer(lesson, cache):
    def check():
        changed = run_notebooks.check(lesson, run_notebooks.other_machine_env())
        assert not changed, "\n".join(changed)

    settings = run_notebooks.other_machine_env({})  # its own settings only
    run_unless_passed(cache, lesson.stem, inputs_digest(lesson, settings), check)


#: The floating-point paths the lessons take, each computed in float32 (``digits.npz``).
FLOATING_POINT_PATHS = """
import sys
import numpy as np
import torch
rng = np.random.default_rng(0)
a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
x = rng.standard_normal(100_003).astype(np.float32)
images = torch.from_numpy(rng.standard_normal((16, 8, 28, 28)).astype(np.float32))
filters = torch.from_numpy(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
ta, tb = map(torch.from_numpy, (a, b))
np.savez(
    sys.argv[1],
    numpy_matmul=a @ b,  # OpenBLAS
    numpy_exp=np.exp(x),  # NumPy's own SIMD loops
    torch_matmul=(ta @ tb).numpy(),  # MKL
    torch_softmax=torch.softmax(ta, -1).numpy(),  # ATen's vectorised kernels
    torch_conv2d=torch.nn.functional.conv2d(images, filters, padding=1).numpy(),  # oneDNN
)
"""


def test_the_simulated_computer_changes_the_digits_of_every_path(tmp_path):
    """Each floating-point path a lesson takes (matrix products by OpenBLAS and MKL, NumPy's and
    ATen's loops, oneDNN's convolutions) gives other float32 digits on the simulated other
    computer than on this one: in at least 10 % of the elements. (On a CPU that is not x86, only
    PyTorch's own kernels are swapped: its other paths are not checked there. On an x86 CPU
    that is not Intel's, MKL's products are left as they are: ``run_notebooks.mkl_code_path``
    says why.)"""
    digits = {}
    for name, env in (("host", dict(os.environ)), ("other", run_notebooks.other_machine_env())):
        path = tmp_path / f"{name}.npz"
        command = [sys.executable, "-c", FLOATING_POINT_PATHS, str(path)]
        subprocess.run(command, env=env, check=True, timeout=120)
        digits[name] = dict(np.load(path))
    paths = list(digits["host"])
    if platform.machine().lower() not in ("x86_64", "amd64"):
        paths = ["torch_softmax"]
    elif run_notebooks.mkl_code_path() is None:
        paths.remove("torch_matmul")
    changed = {p: float(np.mean(digits["host"][p] != digits["other"][p])) for p in paths}
    unchanged = {p: f"{share:.0%}" for p, share in changed.items() if share < 0.1}
    assert not unchanged, f"the simulated computer changes too few digits of {unchanged}"


def test_the_digest_follows_code_and_outputs_not_prose(tmp_path):
    lesson = LESSONS[0]
    nb = nbformat.read(lesson, as_version=4)
    copy = tmp_path / "lesson.ipynb"

    def digest_after(change) -> str:
        edited = nbformat.from_dict(json.loads(json.dumps(nb)))
        change(edited)
        nbformat.write(edited, copy)
        return inputs_digest(copy, {})

    same = digest_after(lambda nb: None)
    markdown = next(c for c in nb.cells if c.cell_type == "markdown")
    index = nb.cells.index(markdown)
    code_index = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.outputs)
    assert digest_after(lambda nb: nb.cells[index].update(source="Other prose.")) == same
    assert digest_after(lambda nb: nb.cells[code_index].update(source="x = 1")) != same
    assert digest_after(lambda nb: nb.cells[code_index].update(outputs=[])) != same
    assert inputs_digest(copy, {"OMP_NUM_THREADS": "2"}) != inputs_digest(copy, {})


def test_the_digest_follows_what_is_installed(tmp_path, monkeypatch):
    """Another version of any installed package (numpy, say, where the pins let it move, or
    a package installed by hand) means the lessons run again."""
    before = inputs_digest(LESSONS[0], {})
    installed = installed_distributions()
    assert any(entry.startswith("numpy==") for entry in installed)
    changed = [e if not e.startswith("numpy==") else "numpy==0.0" for e in installed]
    monkeypatch.setattr(sys.modules[__name__], "installed_distributions", lambda: changed)
    assert inputs_digest(LESSONS[0], {}) != before


#: A short lesson whose training loops show progress bars (widgets in Jupyter).
READER_LESSON = ROOT / "lessons" / "03_queries_keys_values.ipynb"


def test_nbval_passes_on_a_lesson_with_progress_bars_run_as_a_reader_would(cache):
    """``pytest --nbval lessons/03_….ipynb`` from the repository root, with no setting of
    ours in the environment: the bars stay out of every compared output."""
    nb = nbformat.read(READER_LESSON, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert any("progress(" in cell.source for cell in code), "the lesson shows bars"
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ATTNLIB_", "PYTEST_"))  # nothing of ours, nor the outer run's
    }
    command = [sys.executable, "-m", "pytest", "--nbval", str(READER_LESSON.relative_to(ROOT))]

    def run_nbval():
        proc = subprocess.run(
            [*command, "-p", "no:cacheprovider", "-q"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, f"nbval, run as a reader would:\n{proc.stdout[-8000:]}"
        assert re.search(rf"\b{len(code)} passed\b", proc.stdout), proc.stdout[-2000:]

    digest = inputs_digest(READER_LESSON, {"run": "pytest --nbval"})
    run_unless_passed(cache, f"nbval {READER_LESSON.stem}", digest, run_nbval)
