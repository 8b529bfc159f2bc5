"""Re-execute the lesson notebooks in place and normalise them for a clean diff.

Usage: python tools/run_notebooks.py [--check] [--other-machine] [NOTEBOOK ...]
       (default: every lessons/*.ipynb)

Each notebook runs top to bottom in a fresh ``python3`` kernel of the current
environment, with ``lessons/`` as the working directory. Execution metadata
(timings) is dropped, execution counts are made sequential, and the kernel and
language metadata are fixed, so that re-running an unchanged notebook on another
machine gives the same file. Exits non-zero if any cell raises.

``--check`` writes nothing: it executes each notebook as above and reports every compared
output (any output of a cell not tagged ``nbval-ignore-output``, figures aside) that is not
byte for byte the committed one. ``--other-machine`` runs the kernels under
:func:`other_machine_env` (other floating-point kernels, one thread); with ``--check`` it
answers "would another computer regenerate the same book?".
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import platform
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conventions import IGNORE_OUTPUT_TAG  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "lessons"
CELL_TIMEOUT = 600  # seconds per cell
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def _cpu_info() -> str:
    """Linux's /proc/cpuinfo ("" where it cannot be read)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def mkl_code_path() -> str | None:
    """``MKL_CBWR`` for the simulated other computer: MKL's code path for the Intel CPU one
    generation below this one (AVX2 under AVX-512, AVX without fused multiply-add under AVX2);
    None (MKL's own path) on another vendor's CPU.

    There MKL honours one other setting only, its fully portable path ``COMPATIBLE`` (measured
    on an AMD EPYC, Zen 4, 2026-11-28: with AVX2, AVX, SSE4_2 or AVX512 every digit of
    PyTorch's float32 matrix products stayed as it was; with COMPATIBLE 71-90 % of them
    changed), and that path is slow: a float32 product of 256×512 by 512×512 took 3.3 ms
    instead of 1.3, and the lessons' run took 950 s instead of 725 (lesson 07: 148 s instead
    of 91), which `make test` cannot afford. So on such a CPU PyTorch's matrix products are
    the one path the simulated computer leaves as it is; everything that follows them there
    (ATen's loops, oneDNN, OpenBLAS, NumPy, one thread) is still swapped, and on an Intel CPU
    the matrix products are swapped too."""
    info = _cpu_info()
    if "GenuineIntel" not in info:
        return None
    return "AVX2" if " avx512f" in info else "AVX"


def other_machine_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a simulated other computer: same code, other floating-point rounding.

    Each setting swaps the kernels that a library picks for this CPU for others, as a
    different CPU, thread count or library build would, on x86 the kernels for the CPU one
    generation below this one: PyTorch's AVX2 kernels on an AVX-512 CPU and its portable ones
    on an AVX2 CPU (``ATEN_CPU_CAPABILITY``), on an Intel CPU another code path of MKL
    (``MKL_CBWR``, PyTorch's matrix products: ``mkl_code_path``), oneDNN limited to AVX on an
    AVX-512 CPU and to SSE4.1 on an AVX2 one (PyTorch's convolutions), OpenBLAS's Sandy
    Bridge kernels without fused multiply-add (NumPy's matrix products), NumPy's own loops
    without AVX2/AVX-512, and one thread everywhere (threads that wait sleep:
    ``OMP_WAIT_POLICY``); and another hash seed (``PYTHONHASHSEED``), so that an output printed
    from a set or a dict in hash order shows up too. An output that survives all of this is not
    an accident of one machine. The lessons' timings, whose
    outputs are never compared, keep one round each there (``ATTNLIB_BENCH_REPEATS``; each
    time the fastest of a few passes, ``bench.timed_rounds``): on these kernels they measure
    nothing of interest, but their asserts still run.

    ``tests/test_lessons.py`` measures that each of these paths gives other digits than the
    host's. On an AVX-512 CPU the level below changes as many digits as the portable code
    and costs less (measured on an AMD EPYC, Zen 4, 2026-11-28: PyTorch's AVX2 kernels
    changed 29 % of a float32 softmax's digits, the portable ones 40 %, and trained 10 %
    faster; oneDNN's AVX convolutions changed 71 % of a convolution's outputs, as SSE4.1 did,
    and trained a small CNN 1.2 times as fast; its AVX2 ones changed none of that
    convolution's). On an Intel CPU, MKL's fully portable path
    (``MKL_CBWR=COMPATIBLE``) would perturb no more (it changed 93 % of the elements of a
    float32 product on an AVX-512 machine, the AVX2 path 92 %) but made training 3.2 times
    slower than native, against 2.1 times; on other CPUs MKL is left on its own path
    (``mkl_code_path`` says why).
    """
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "PYTHONHASHSEED": "1",  # `make notebooks` runs with 0
            "ATTNLIB_BENCH_REPEATS": "1",  # timings here need only run (their asserts do)
            "ATEN_CPU_CAPABILITY": "default",
            "OMP_NUM_THREADS": "1",
            # a thread that waits sleeps instead of spinning: the one lesson that times two
            # threads (13) then runs in 3 s instead of 18 where another job holds a core
            # (measured on the AMD EPYC, 2026-11-28); no digit changes
            "OMP_WAIT_POLICY": "PASSIVE",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
        }
    )
    if platform.machine().lower() in ("x86_64", "amd64"):
        avx512 = " avx512f" in _cpu_info()
        env.update(
            {
                "ATEN_CPU_CAPABILITY": "avx2" if avx512 else "default",
                "ONEDNN_MAX_CPU_ISA": "AVX" if avx512 else "SSE41",
                "OPENBLAS_CORETYPE": "Sandybridge",
                "NPY_DISABLE_CPU_FEATURES": "X86_V4 X86_V3 AVX512_ICL AVX512_SPR",
            }
        )
        mkl = mkl_code_path()
        if mkl is not None:
            env["MKL_CBWR"] = mkl
    return env


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


def execute(
    nb: nbformat.NotebookNode, env: dict[str, str] | None = None, allow_errors: bool = False
) -> float:
    """Run every cell of ``nb`` in place in a fresh kernel (``env``: its environment);
    return the seconds it took. Raises ``CellExecutionError`` unless ``allow_errors``."""
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        allow_errors=allow_errors,
        resources={"metadata": {"path": str(LESSONS)}},
        # Hide the kernel's start-up chatter; errors are still reported.
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    kernel_env = dict(os.environ if env is None else env)
    kernel_env.setdefault("PYTHONHASHSEED", "0")  # the same set and dict order on every run
    kernel_env["ATTNLIB_PROGRESS"] = "0"  # no progress bars (timings) in committed outputs
    start = time.perf_counter()
    client.execute(env=kernel_env)
    return time.perf_counter() - start


def write(nb: nbformat.NotebookNode, path: Path) -> None:
    """Normalise ``nb`` and write it to ``path`` as ``make notebooks`` does."""
    normalise(nb)
    nbformat.validate(nb)
    text = nbformat.writes(nb, version=4, indent=1, ensure_ascii=False)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def run(path: Path, out: Path | None = None, env: dict[str, str] | None = None) -> float:
    """Execute the notebook at ``path`` and write it to ``out`` (default: in place)."""
    nb = nbformat.read(path, as_version=4)
    elapsed = execute(nb, env)
    write(nb, out or path)
    return elapsed


def compared_outputs(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """``(code cell index, outputs as JSON)`` for each cell whose outputs nbval compares:
    every code cell not tagged ``nbval-ignore-output``, with figures' pixels left out (nbval
    compares a figure's text, ``<Figure size ...>``, not its PNG)."""
    compared = []
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    for index, cell in enumerate(code_cells):
        if IGNORE_OUTPUT_TAG in cell.metadata.get("tags", []):
            continue
        outputs = []
        for output in merged_streams(cell.outputs):
            kept = {k: v for k, v in output.items() if k not in ("execution_count", "metadata")}
            if "data" in kept:
                kept["data"] = {k: v for k, v in kept["data"].items() if not k.startswith("image/")}
            outputs.append(kept)
        compared.append((index, json.dumps(outputs, indent=1, ensure_ascii=False, sort_keys=True)))
    return compared


def differences(committed: nbformat.NotebookNode, fresh: nbformat.NotebookNode) -> list[str]:
    """A unified diff for each compared output of ``fresh`` that differs from ``committed``."""
    found = []
    for (index, old), (_, new) in zip(compared_outputs(committed), compared_outputs(fresh)):
        if old != new:
            diff = difflib.unified_diff(
                old.splitlines(), new.splitlines(), "committed", "regenerated", lineterm=""
            )
            found.append(f"Cell {index}:\n" + "\n".join(diff))
    return found


def check(path: Path, env: dict[str, str] | None = None) -> list[str]:
    """Execute the notebook at ``path`` without writing it; return its compared outputs that
    would change (see :func:`differences`)."""
    committed = nbformat.read(path, as_version=4)
    fresh = nbformat.read(path, as_version=4)
    execute(fresh, env)
    normalise(fresh)
    return differences(committed, fresh)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; report changes")
    parser.add_argument("--other-machine", action="store_true", help="other_machine_env()")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every lesson")
    args = parser.parse_args(argv)
    env = other_machine_env() if args.other_machine else None
    checking = args.check
    paths = [p.resolve() for p in args.notebooks] or sorted(LESSONS.glob("*.ipynb"))
    if not paths:
        print(f"no notebooks found in {LESSONS}", file=sys.stderr)
        return 1
    failed = []
    for path in paths:
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        start = time.perf_counter()
        try:
            if checking:
                changed = check(path, env)
                if changed:
                    failed.append(path)
                    print(f"CHANGED {name}\n" + "\n".join(changed), file=sys.stderr)
            else:
                run(path, env=env)
        except CellExecutionError as err:
            failed.append(path)
            print(f"FAILED {name}\n{err}", file=sys.stderr)
            continue
        print(f"{time.perf_counter() - start:7.1f} s  {name}", flush=True)
    if failed:
        verdict = "have changed compared outputs" if checking else "failed; not rewritten"
        print(f"{len(failed)} notebook(s) {verdict}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
