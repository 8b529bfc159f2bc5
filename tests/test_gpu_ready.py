"""attnlib's Triton kernels are ready for the GPUs a learner meets, checked without a GPU:
``tools/gpu_ready.py`` compiles the three kernels for a T4 (sm_75), an A100 (sm_80) and an
H100 (sm_90), with each block setting that ``default_blocks`` chooses there, and reads what
each compiled kernel asks of the GPU. A kernel that does not compile for one of them, or needs
more shared memory or registers than it has, fails here, on any Linux machine; what only a
launch can show (speed, the driver) is left to ``make gpu-check`` on a GPU.

The compiles take about 35 s of CPU with an empty Triton cache (a fresh clone), so a pass is
kept, like a lesson's, until ``attnlib/triton.py``, the tool or the installed Triton change.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import files_digest
from test_lessons import run_unless_passed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton (Linux)"),
]

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "gpu_ready.py"


def inputs_digest() -> str:
    """The kernels, the tool, this test and the installed Triton."""
    files = [ROOT / "attnlib" / "triton.py", TOOL, Path(__file__)]
    return files_digest(files, importlib.metadata.version("triton"))


def test_every_kernel_compiles_for_a_t4_an_a100_and_an_h100_within_their_limits(cache, tmp_path):
    def check():
        env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path)}  # compile, not a cached copy
        run = subprocess.run(
            [sys.executable, str(TOOL), "--json"],
            capture_output=True,
            text=True,
            timeout=540,
            env=env,
            cwd=ROOT,
        )
        assert run.returncode in (0, 1), run.stderr[-3000:]
        results = [json.loads(line) for line in run.stdout.splitlines()]
        compiled = {(r["arch"], tuple(r["blocks"]), r["kernel"]) for r in results}
        blocks = {75: {(64, 64), (32, 32), (16, 16)}, 80: {(64, 64), (32, 32)}}
        blocks[90] = blocks[80]
        kernels = {"forward", "backward_dq", "backward_dk_dv", "decode"}
        expected = {(a, b, k) for a, settings in blocks.items() for b in settings for k in kernels}
        assert compiled == expected
        for r in results:
            assert not r["problems"], r
            row_bytes = r["head_dim"] * {"float16": 2, "bfloat16": 2, "float32": 4}[r["dtype"]]
            if r["head_dim"] >= 64:  # default_blocks's rule: 9 · block · d · bytes, with margin
                assert r["shared"] <= 8 * r["blocks"][0] * row_bytes, r

    run_unless_passed(cache, "gpu_ready", inputs_digest(), check)
