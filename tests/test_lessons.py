"""The lessons run, and every output they show is what the code gives today, on any computer.

This is the test that runs the lessons. Each lesson is executed once, top to bottom, on a
simulated other computer (``tools/run_notebooks.other_machine_env``: PyTorch's portable
kernels, MKL's compatible code path, OpenBLAS's kernels without FMA, NumPy without AVX2, one
thread, another hash seed), with `make notebooks`' own code. That one run checks three things:

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
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import run_notebooks

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs_and_its_outputs_hold_on_another_computer(lesson):
    changed = run_notebooks.check(lesson, run_notebooks.other_machine_env())
    assert not changed, "\n".join(changed)


#: A short lesson whose training loops show progress bars (widgets in Jupyter).
READER_LESSON = ROOT / "lessons" / "03_queries_keys_values.ipynb"


def test_nbval_passes_on_a_lesson_with_progress_bars_run_as_a_reader_would():
    """``pytest --nbval lessons/03_….ipynb`` from the repository root, with no setting of
    ours in the environment: the bars stay out of every compared output."""
    nb = nbformat.read(READER_LESSON, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert sum("progress(" in cell.source for cell in code) >= 2, "the lesson shows bars"
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ATTNLIB_", "PYTEST_"))  # nothing of ours, nor the outer run's
    }
    command = [sys.executable, "-m", "pytest", "--nbval", str(READER_LESSON.relative_to(ROOT))]
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
