"""``make gpu-check``: on a machine with a CUDA GPU, everything that needs one, in one run of a
few minutes, with its figures written to ``docs/gpu-check.md`` for the performance notes.

1. the tests marked ``cuda`` (the PyTorch backend on the GPU against the CPU and PyTorch's own
   kernels, and attnlib.triton's kernels compiled and launched: float16 at 4,096 keys, the
   causal alignment, the gradients);
2. ``python -m attnlib.bench --quick``, on the GPU (its best device): the speed and memory
   tables, the Triton rows among them (time against ``F.scaled_dot_product_attention``);
3. ``tools/gpu_ready.py``: what each compiled kernel asks of the GPU (shared memory,
   registers, local memory), for the three GPUs it checks.

Without a CUDA GPU it says so and writes nothing. Each step has a time limit, so a hang is a
failure with a message, not a lost session.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "gpu-check.md"
TESTS = [
    "tests/test_cuda.py",
    "tests/test_parity.py",
    "tests/test_triton.py",
    "tests/test_triton_decoding.py",
]
#: pytest without the project's addopts (doctests, nbval's option): the GPU tests need neither,
#: and a GPU machine with only the library and pytest has no nbval
PYTEST = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider"]
STEPS = [  # (title, command, seconds allowed)
    ("tests marked cuda", [*PYTEST, "-m", "cuda", "-q", *TESTS], 240),
    ("bench, quick, on the GPU", [sys.executable, "-m", "attnlib.bench", "--quick"], 180),
    ("compiled kernels' resources", [sys.executable, "tools/gpu_ready.py"], 120),
]


def gpu_name() -> str | None:
    """The CUDA GPU's name and PyTorch's CUDA version, or None without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}, torch {torch.__version__})"


def main() -> int:
    name = gpu_name()
    if name is None:
        print("make gpu-check needs a CUDA GPU; none is visible here (torch.cuda.is_available()).")
        return 2
    sections, failed = [], 0
    for title, command, limit in STEPS:
        start = time.perf_counter()
        try:
            run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=limit)
            output, code = run.stdout + run.stderr, run.returncode
        except subprocess.TimeoutExpired as expired:
            output, code = f"{expired.stdout or ''}\nstopped after {limit} s", "timeout"
        seconds = time.perf_counter() - start
        failed += code != 0
        print(f"{title}: exit {code} in {seconds:.0f} s", flush=True)
        sections.append(f"## {title}\n\n`{' '.join(command[1:])}`: exit {code}, "
                        f"{seconds:.0f} s\n\n```\n{output.strip()[-6000:]}\n```\n")  # fmt: skip
    today = datetime.date.today().isoformat()
    REPORT.write_text(
        f"# GPU check, {today}\n\nWritten by `make gpu-check` on {name}.\n\n" + "\n".join(sections),
        encoding="utf-8",
    )
    print(f"wrote {REPORT.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
