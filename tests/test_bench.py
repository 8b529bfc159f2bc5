"""`python -m attnlib.bench` runs and reports every implementation (it asserts no speed)."""

from __future__ import annotations

import subprocess
import sys

from attnlib import bench


def test_bench_reports_ratios_for_every_implementation(capsys):
    bench.main(["--length", "32", "--dim", "8", "--repeats", "2", "--device", "cpu"])
    out = capsys.readouterr().out
    for name in ("matmuls only", "fused (SDPA)", "attnlib.torch, unfused", "attnlib.numpy"):
        assert name in out
    assert "of the float32 matmul rate" in out


def test_bench_runs_as_a_module():
    result = subprocess.run(
        [sys.executable, "-m", "attnlib.bench", "--length", "16", "--dim", "4", "--repeats", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "× fused" in result.stdout
