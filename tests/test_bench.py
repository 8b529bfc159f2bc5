"""`python -m attnlib.bench` runs and reports every comparison (it asserts no speed)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from attnlib import bench

pytestmark = pytest.mark.slow  # it times code and measures memory in fresh processes


def test_quick_bench_reports_every_row():
    result = subprocess.run(
        [sys.executable, "-m", "attnlib.bench", "--quick", "--device", "cpu"],
        env={**os.environ, "ATTNLIB_BENCH_REPEATS": "1"},  # every row, not its precision
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    out = result.stdout
    for row in (
        "attnlib fast path (need_weights=False)",
        "attnlib explicit (returns weights)",
        "attnlib NumPy, float32",
        "of the float32 matmul rate",
        "time ∝ L^",
        "threads",
        "Tiled exact attention",
        "of one L×L float32 matrix",
        "forward+backward:",
        "forward (eval, no grad)",
        "ratio [min–max]",
        "forward+backward (train)",
        "KV cache vs recompute",
        "recomputed / cached",
        "Flash-Decoding (attnlib.triton.flash_decode): split-K vs one chunk",
    ):
        assert row in out, out
    band_rows = [
        line for line in out.splitlines() if line.strip().split(" ")[0] in {"512", "1024", "2048"}
    ]
    assert len(band_rows) == 3


def test_peak_memory_of_a_call_is_positive_and_grows_with_length():
    small = bench.peak_bytes("truncated", 2048, torch.device("cpu"))
    large = bench.peak_bytes("truncated", 8192, torch.device("cpu"))
    assert 0 < small < large


def test_peak_memory_of_tiled_attention_is_far_below_one_square_matrix():
    """Forward and backward hold O(L·d), not one L×L float32 matrix (64 MiB at L = 4096)."""
    for kind in ("tiled", "tiled+backward"):
        peak = bench.peak_bytes(kind, 4096, torch.device("cpu"))
        assert 0 < peak < 0.25 * 4096 * 4096 * 4, (kind, peak)


def test_fitted_exponent():
    lengths = np.array([1000, 2000, 4000])
    assert abs(bench.fitted_exponent(lengths, 3e-6 * lengths**1.5) - 1.5) < 1e-9


def test_the_bands_exponent_times_every_length_in_the_same_rounds(monkeypatch):
    """All lengths are candidates of one interleaved measurement, so that a machine that slows
    down halfway does not bend the fitted exponent."""
    measured = []
    real = bench.timed_rounds

    def spy(candidates, *args, **kwargs):
        measured.append(list(candidates))
        return real(candidates, *args, **kwargs)

    monkeypatch.setattr(bench, "timed_rounds", spy)
    seconds = bench.band_seconds((256, 512, 1024), repeats=1, device=torch.device("cpu"))
    assert measured == [[256, 512, 1024]]
    assert len(seconds) == 3 and all(s > 0 for s in seconds)


def test_repeats_are_capped_by_the_environment(monkeypatch):
    """The simulated other computer of tests/test_lessons.py keeps one round:
    ATTNLIB_BENCH_REPEATS=1; its time is the fastest of CAPPED_PASSES passes, and each
    measurement lasts CAPPED_LEAST seconds at least (a short call is timed several times, the
    fastest kept)."""
    calls = []
    candidates = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    monkeypatch.setenv("ATTNLIB_BENCH_REPEATS", "1")
    monkeypatch.setattr(bench, "CAPPED_LEAST", 0.0)  # two calls per measurement, to count them
    rounds = bench.timed_rounds(candidates, repeats=5, device=torch.device("cpu"), pause=0.0)
    assert calls == ["a", "a", "b", "b"] * bench.CAPPED_PASSES  # interleaved passes
    assert [len(seconds) for seconds in rounds.values()] == [1, 1]
    monkeypatch.delenv("ATTNLIB_BENCH_REPEATS")
    calls.clear()
    rounds = bench.timed_rounds(candidates, repeats=5, device=torch.device("cpu"), pause=0.0)
    assert calls == ["a", "b"] * 6
    assert [len(seconds) for seconds in rounds.values()] == [5, 5]


def test_timed_rounds_keep_every_round_in_order_and_can_skip_the_warm_up(monkeypatch):
    """Each candidate's seconds, one per round, in the order they were timed: a ratio taken
    round by round pairs calls made moments apart."""
    clock = itertools.count(1.0)  # the n-th measurement takes n seconds: a, b, a, b, ...
    monkeypatch.setattr(bench, "seconds_of", lambda fn, device, least, calls=1: fn() or next(clock))
    calls = []
    candidates = {name: (lambda name=name: calls.append(name)) for name in "ab"}
    cpu = torch.device("cpu")
    rounds = bench.timed_rounds(candidates, repeats=3, device=cpu, pause=0.0, warm_up=False)
    assert calls == ["a", "b"] * 3
    assert rounds["a"].tolist() == [1.0, 3.0, 5.0] and rounds["b"].tolist() == [2.0, 4.0, 6.0]
    rounds = bench.timed_rounds(candidates, repeats=2, device=cpu, pause=0.0)
    assert calls == ["a", "b"] * 6  # a warm-up round, then two rounds ...
    assert rounds["a"].tolist() == [9.0, 11.0] and rounds["b"].tolist() == [10.0, 12.0]  # kept


def test_a_capped_round_keeps_the_fastest_of_its_passes(monkeypatch):
    """Where the rounds are capped, a program that slows one candidate through a whole
    measurement does not decide the round: each candidate keeps its fastest pass."""
    slow = {("a", 0), ("b", 1)}  # a is slowed in the first pass, b in the second
    seen = []

    def seconds_of(fn, device, least, calls=1):
        name = fn()
        seen.append(name)
        number = (len(seen) - 1) // 2  # two candidates a pass
        return 5.0 if (name, number) in slow else 1.0 + number / 10

    monkeypatch.setattr(bench, "seconds_of", seconds_of)
    monkeypatch.setenv("ATTNLIB_BENCH_REPEATS", "1")
    monkeypatch.setattr(bench, "CAPPED_PASSES", 3)
    rounds = bench.timed_rounds({"a": lambda: "a", "b": lambda: "b"}, 4, torch.device("cpu"), 0.0)
    assert seen == ["a", "b"] * 3
    assert rounds["a"].tolist() == [1.1] and rounds["b"].tolist() == [1.0]


def test_spread_prints_the_median_and_the_range():
    assert bench.spread(np.array([3.0, 1.0, 2.0])) == "2.00 [1.00–3.00]"
    assert bench.spread([0.5], digits=1, scale=10) == "5.0 [5.0–5.0]"


def test_a_capped_run_times_short_calls_several_times(monkeypatch):
    """With the rounds capped, a measurement lasts CAPPED_LEAST seconds: a call of 1 ms is timed
    many times; without the cap, once."""
    calls = []
    candidates = {"a": lambda: calls.append(time.sleep(0.001))}
    monkeypatch.setenv("ATTNLIB_BENCH_REPEATS", "1")
    bench.timed_rounds(candidates, repeats=1, device=torch.device("cpu"), pause=0.0, warm_up=False)
    assert len(calls) >= 10  # 0.1 s of 1 ms calls
    monkeypatch.delenv("ATTNLIB_BENCH_REPEATS")
    calls.clear()
    bench.timed_rounds(candidates, repeats=1, device=torch.device("cpu"), pause=0.0, warm_up=False)
    assert len(calls) == 1


def test_seconds_of_keeps_the_fastest_of_at_least_calls_calls():
    """A slow first call does not decide the measurement when two calls are asked for."""
    durations = iter([0.03, 0.01, 0.05])

    def call():
        time.sleep(next(durations))

    assert 0.01 <= bench.seconds_of(call, torch.device("cpu"), calls=2) < 0.03
    assert next(durations) == 0.05  # the third call never ran


def test_a_failed_peak_measurement_says_why(monkeypatch):
    """The fresh process that measures peak memory: its own error comes back, and a hang ends."""
    failed = r"(?s)measuring nonsense .*exit status 1.*KeyError: 'nonsense'"  # its traceback
    with pytest.raises(RuntimeError, match=failed):
        bench.peak_bytes_by_length("nonsense", [64], torch.device("cpu"))
    monkeypatch.setattr(bench, "PEAK_TIMEOUT", 0.01)
    with pytest.raises(RuntimeError, match=r"ran past 0.01 s"):
        bench.peak_bytes_by_length("dense", [64], torch.device("cpu"))


def test_peak_memory_on_a_cpu_without_proc_is_a_clear_error(monkeypatch):
    real_exists = os.path.exists
    monkeypatch.setattr(
        os.path, "exists", lambda p: p != "/proc/self/clear_refs" and real_exists(p)
    )
    with pytest.raises(RuntimeError, match=r"peak_of: .*Linux's /proc/self.*on a CUDA GPU"):
        bench.peak_of(lambda: None, torch.device("cpu"))


def test_a_measurement_can_take_several_calls(monkeypatch):
    """``calls=2``: a call that another program stalls alone does not decide the measurement."""
    monkeypatch.delenv("ATTNLIB_BENCH_REPEATS", raising=False)
    durations = iter([0.3, 0.0, 0.0, 0.0])  # the first call stalls
    made = []

    def call():
        made.append(1)
        time.sleep(next(durations))

    rounds = bench.timed_rounds({"a": call}, 2, torch.device("cpu"), 0.0, warm_up=False, calls=2)
    assert len(made) == 4 and rounds["a"].max() < 0.15  # two calls a round, the fastest kept
