"""Run lessons with every random seed shifted, and report the asserts that fail.

Usage: python tools/seed_sweep.py [--shifts 1 2 3] [--other-machine] [NOTEBOOK ...]

A lesson's claims about trained models must not hold only for the seeds it happens to use.
This tool executes each lesson again (in memory: nothing is written) with a prelude that
shifts every seed the lesson or ``attnlib`` asks for: ``np.random.default_rng(s)``,
``torch.manual_seed(s)`` and ``torch.Generator().manual_seed(s)`` all get a different but
fixed stream for each shift. Data, initial weights and training batches change; the code
does not. It lists every cell that raised, with the first line of its error, so an assert
that only held for the committed seeds shows up by name. ``--other-machine`` adds the
environment of ``run_notebooks.other_machine_env`` (other floating-point kernels).

Exit status: 0 when every cell of every run passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_notebooks import LESSONS, ROOT, execute, other_machine_env  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;]*m")
RAISING_LINE = re.compile(r"^-+> *\d+ (.*)$", re.MULTILINE)
PRELUDE = """\
import numpy as _np
import torch as _torch

_SHIFT = {shift}
_numpy_default_rng = _np.random.default_rng
_torch_manual_seed = _torch.manual_seed


def _shifted(seed):
    return int(seed) + 1_000_003 * _SHIFT


def _default_rng(seed=None):
    if isinstance(seed, (int, _np.integer)):
        return _numpy_default_rng([int(seed) % 2**32, _SHIFT])
    return _numpy_default_rng(seed)


class _Generator(_torch.Generator):
    def manual_seed(self, seed):
        return super().manual_seed(_shifted(seed))


_np.random.default_rng = _default_rng
_torch.manual_seed = _torch.random.manual_seed = lambda seed: _torch_manual_seed(_shifted(seed))
_torch.Generator = _Generator
_ = _torch.manual_seed(0)
"""


def failures(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """(code cell index as nbval counts it, first line of the error) for each cell that raised."""
    found = []
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    for index, cell in enumerate(code_cells[1:]):  # [0] is the prelude
        for output in cell.get("outputs", []):
            if output["output_type"] == "error":
                found.append((index, describe(output)))
    return found


def describe(error: dict) -> str:
    """The error's type and message, and the line of the cell that raised it."""
    message = f"{error['ename']}: {error['evalue']}".splitlines()[0]
    for frame in error.get("traceback", []):
        raising = RAISING_LINE.search(ANSI.sub("", frame))  # IPython marks it "----> 12 code"
        if raising:
            return f"{message} at: {raising.group(1).strip()}"
    return message


def sweep(path: Path, shift: int, env: dict[str, str] | None) -> list[tuple[int, str]]:
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PRELUDE.format(shift=shift)))
    execute(nb, env=env, allow_errors=True)
    return failures(nb)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--shifts", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--other-machine", action="store_true")
    args = parser.parse_args(argv)
    env = other_machine_env() if args.other_machine else None
    paths = [p.resolve() for p in args.notebooks] or sorted(LESSONS.glob("*.ipynb"))
    failed = False
    for path in paths:
        for shift in args.shifts:
            found = sweep(path, shift, env)
            name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            print(f"{name} shift {shift}: {'ok' if not found else f'{len(found)} cell(s) raised'}")
            for index, error in found:
                print(f"    Cell {index}: {error[:160]}")
            failed = failed or bool(found)
            sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
