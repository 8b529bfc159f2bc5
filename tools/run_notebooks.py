"""Re-execute the lesson notebooks in place and normalise them for a clean diff.

Usage: python tools/run_notebooks.py [NOTEBOOK ...]   (default: lessons/*.ipynb)

Each notebook runs top to bottom in a fresh ``python3`` kernel of the current
environment, with ``lessons/`` as the working directory. Execution metadata
(timings) is dropped, execution counts are made sequential, and the kernel and
language metadata are fixed, so that re-running an unchanged notebook on another
machine gives the same file. Exits non-zero if any cell raises.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "lessons"
CELL_TIMEOUT = 600  # seconds per cell
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def normalise(nb: nbformat.NotebookNode) -> None:
    """Strip run-specific metadata in place."""
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    count = 0
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        count += 1
        cell.execution_count = count
        cell.outputs = merged_streams(cell.outputs)
        for output in cell.outputs:
            if "execution_count" in output:
                output["execution_count"] = count


def merged_streams(outputs: list) -> list:
    """Join consecutive stdout (or stderr) pieces into one output: how the kernel happens to
    flush a cell's prints varies from run to run, and should not show up as a diff."""
    merged: list = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            output["output_type"] == "stream"
            and previous is not None
            and previous["output_type"] == "stream"
            and previous["name"] == output["name"]
        ):
            previous["text"] = "".join(previous["text"]) + "".join(output["text"])
        else:
            merged.append(output)
    return merged


def run(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(LESSONS)}},
        # Hide the kernel's start-up chatter; errors are still reported.
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    normalise(nb)
    nbformat.validate(nb)
    text = nbformat.writes(nb, version=4, indent=1, ensure_ascii=False)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return elapsed


def main(argv: list[str]) -> int:
    # Fixed hash seed for the kernels, which inherit this environment.
    os.environ["PYTHONHASHSEED"] = "0"
    paths = [Path(a).resolve() for a in argv] or sorted(LESSONS.glob("*.ipynb"))
    if not paths:
        print(f"no notebooks found in {LESSONS}", file=sys.stderr)
        return 1
    failed = []
    for path in paths:
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        try:
            elapsed = run(path)
        except CellExecutionError as err:
            failed.append(path)
            print(f"FAILED {name}\n{err}", file=sys.stderr)
            continue
        print(f"{elapsed:7.1f} s  {name}", flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) failed; they were not rewritten", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
