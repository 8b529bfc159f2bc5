"""Every lesson runs a second time on a simulated other computer, and its compared outputs
do not move.

The environment of this second run (``tools/run_notebooks.other_machine_env``) changes the
floating-point rounding the way another machine would: PyTorch's portable kernels, MKL's
compatible code path, OpenBLAS's kernels without FMA, NumPy without AVX2, one thread.

- A lesson that trains a model is regenerated there with `make notebooks`' own code
  (``tools/run_notebooks.py --check --other-machine``), and every output that nbval compares
  (cells not tagged ``nbval-ignore-output``, figures' pixels aside) must be byte for byte the
  committed one: regenerating on another machine changes nothing that is compared. This is
  nbval's comparison and more (no sanitizers, every output field), and it fails on any error.
- Every other lesson runs under nbval itself, in a subprocess with that environment.

A cell whose printed digits depend on the machine must be tagged ``nbval-ignore-output`` and
carry its claims in asserts, which run here too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import run_notebooks  # noqa: E402

LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))
TRAINING = [p for p in LESSONS if ".backward()" in p.read_text(encoding="utf-8")]
OTHERS = [p for p in LESSONS if p not in TRAINING]


def test_the_lessons_that_train_are_found():
    assert len(TRAINING) >= 5 and OTHERS


@pytest.mark.parametrize("lesson", TRAINING, ids=[p.stem[:2] for p in TRAINING])
def test_regenerating_on_another_machine_changes_no_compared_output(lesson):
    changed = run_notebooks.check(lesson, run_notebooks.other_machine_env())
    assert not changed, "\n".join(changed)


@pytest.mark.parametrize("lesson", OTHERS, ids=[p.stem[:2] for p in OTHERS])
def test_nbval_passes_on_another_machine(lesson):
    command = [sys.executable, "-m", "pytest", str(lesson.relative_to(ROOT)), "-q", "--tb=short"]
    env = run_notebooks.other_machine_env()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"nbval on another machine:\n{proc.stdout[-8000:]}"
