"""``python -m attnlib.bench``: attnlib's speed and memory as ratios measured in one run.

Absolute times depend on the machine and on what else it is doing; ratios between
implementations timed side by side, on the same inputs, in the same process, in interleaved
rounds, travel much better. Nothing here asserts a speed: the numbers are for reading.

Seven tables:

1. **Dense attention** (B=1, H=8, L=1024, d=64, float32): attnlib's fast path against
   ``F.scaled_dot_product_attention``; attnlib's explicit path (which returns the weights) and
   the NumPy path against an unfused PyTorch reference, ``softmax(QKᵀ/√d) V``; and the fused
   kernel's rate as a fraction of the float32 matrix-product rate.
2. **Truncated vs dense** (H=4, d=64, window 64, L = 4096 … 32768): time of
   ``truncated_attention`` against ``F.scaled_dot_product_attention`` with a window mask, the
   speed-up as a share of its bound ``L/(2w+1)`` (the ratio of the scores each computes), the
   exponent of time against L fitted over the lengths (for the band, all lengths timed in the
   same rounds), and the peak memory of each call, measured in a fresh process (CPU: growth
   of the resident set; CUDA: the allocator's peak).
3. **Tiled exact attention** (``tiled_attention``, the FlashAttention algorithm, with its
   default blocks: 256 × 256 on the CPU, larger on a GPU): its time against
   ``F.scaled_dot_product_attention`` (B=1, H=4, L=8192, d=64), and its peak memory
   for one head at L = 32768, forward and forward+backward, as a share of one L×L float32
   matrix.
4. **Encoder block**: ``attnlib.torch.TransformerEncoderBlock`` against
   ``torch.nn.TransformerEncoderLayer`` with the same weights (B=8, L=512, d=256, 8 heads,
   d_ff=1024, no dropout): forward (evaluation mode, no gradients: PyTorch takes its fused
   fast path) and forward+backward (training mode).
5. **Triton FlashAttention on a GPU** (CUDA only; a line saying why it is skipped elsewhere):
   ``attnlib.triton.flash_attention`` against ``F.scaled_dot_product_attention`` (B=1, H=8,
   d=64, float16, L = 1024 … 16384): forward and forward+backward times and their ratios,
   and the peak memory of forward+backward (the allocator's peak).
6. **Decoding one token** (``attnlib.decoder.DecoderLM``: 4 layers, d=256, 8 query heads
   sharing 2 key-value heads, untrained, float32; positions 128, 1024 and 4096): the token
   run alone against a KV cache, against the whole sequence recomputed, and their ratio.
7. **Flash-Decoding on a GPU** (CUDA only): ``attnlib.triton.flash_decode`` with its
   default number of key chunks against one chunk per key-value head (B=1, 32 query heads
   sharing 8 key-value heads, d=128, float16, cache lengths 4096 … 131072).

Run it from a shell::

    python -m attnlib.bench            # the full run, about two minutes on 2 cores
    python -m attnlib.bench --quick    # small sizes, a few seconds
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import _tiles
from . import numpy as attn_np
from . import torch as attn_torch

__all__ = [
    "REPEATS_AT_MOST",
    "peak_of",
    "seconds_of",
    "timed_rounds",
    "spread",
    "medians",
    "cpu_cores",
    "load_average",
    "band_call",
    "one_head_call",
    "peak_bytes",
    "peak_bytes_by_length",
    "fitted_exponent",
    "dense_table",
    "band_table",
    "tiled_table",
    "encoder_table",
    "triton_skip_reason",
    "triton_calls",
    "triton_table",
    "decode_calls",
    "decode_table",
    "split_k_table",
]

FULL = {
    "dense_length": 1024,
    "band_lengths": (4096, 8192, 16384, 32768),
    "tiled_length": 8192,
    "tiled_memory_length": 32768,
    "encoder": (8, 512, 256),  # B, L, d
    "triton_lengths": (1024, 2048, 4096, 8192, 16384),  # CUDA only
    "decode_positions": (128, 1024, 4096),
    "split_k_lengths": (4096, 32768, 131072),  # CUDA only
    "repeats": 10,
    "least_seconds": 0.2,  # the shortest measurement (``timed_rounds``)
}
QUICK = {
    "dense_length": 256,
    "band_lengths": (512, 1024, 2048),
    "tiled_length": 1024,
    "tiled_memory_length": 2048,
    "encoder": (2, 64, 64),
    "triton_lengths": (1024, 2048),
    "decode_positions": (64, 256),
    "split_k_lengths": (4096,),
    "repeats": 3,
    "least_seconds": 0.0,
}
WINDOW, BAND_HEADS, HEAD_DIM, DENSE_HEADS = 64, 4, 64, 8
MATMUL_SIZE = 1024  # the float32 matrix-product rate is measured on 1024 × 1024 matrices
#: Set to a number, the most rounds ``timed_rounds`` times (the test suite's simulated other
#: computer sets 1: its kernels are not this machine's, so its timings only need to run).
REPEATS_AT_MOST = "ATTNLIB_BENCH_REPEATS"
#: Where ``REPEATS_AT_MOST`` caps the rounds, the shortest measurement (``timed_rounds``) ...
CAPPED_LEAST = 0.1
#: ... and how many interleaved passes each kept time is the fastest of.
CAPPED_PASSES = 3
#: Seconds a fresh process that measures peak memory (``peak_bytes_by_length``) may run.
PEAK_TIMEOUT = 600


# --------------------------------------------------------------------------- timing


def seconds_of(
    fn: Callable[[], object], device: torch.device, least: float = 0.0, calls: int = 1
) -> float:
    """Wall time of one call of ``fn()``, waiting for the GPU where there is one: the fastest of
    as many back-to-back calls as last ``least`` seconds, and of ``calls`` calls at least.

    The fastest, not the median: another program on the machine can only slow a call down,
    and on a 2-core machine that runs tests in parallel it can do so for several calls in a
    row (a truncated-attention call measured 5 times its usual time in one CI run); the
    fastest call is the one least disturbed (so says ``timeit``'s documentation too).

    >>> seconds_of(lambda: sum(range(1000)), torch.device("cpu"), least=0.01) > 0
    True
    """
    first = time.perf_counter()
    times = []
    while len(times) < calls or time.perf_counter() - first < least:
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def timed_rounds(
    candidates: dict,
    repeats: int,
    device: torch.device,
    pause: float = 0.05,
    least: float = 0.0,
    warm_up: bool = True,
    calls: int = 1,
) -> dict[object, np.ndarray]:
    """Seconds of each candidate in each of ``repeats`` interleaved rounds: ``candidates``
    ``{name: fn}`` (functions of no arguments) → ``{name: array of seconds, one per round}``.

    Interleaving (A, B, C, A, B, C, ...) exposes every candidate to the same slow and fast
    moments of a busy machine, so a ratio taken round by round (``rounds["A"] / rounds["B"]``,
    element by element) is steadier than either time; print it with :func:`spread`. A first
    round, not kept, warms up every candidate (``warm_up=False`` when the calls just before have
    done so). After each call the timer waits ``pause`` seconds (not counted): NumPy's BLAS
    threads keep spinning for a moment after a call, and on a 2-core machine they would slow
    down whichever candidate runs next. With ``least`` > 0 each measurement repeats the call
    back to back for at least that long and keeps the fastest call (``seconds_of``): on a
    virtual machine the first call after a pause can take milliseconds longer (the processors
    wake up), which would swamp a short call. ``calls`` > 1 makes every measurement at least
    that many calls, for a call longer than ``least`` that another program could stall alone.
    ``ATTNLIB_BENCH_REPEATS`` caps ``repeats``; where
    it does (the test suite's simulated other computer: one round), each kept time is the
    fastest of ``CAPPED_PASSES`` interleaved passes (the first of them also warms up), and each
    measurement lasts at least ``CAPPED_LEAST`` seconds and two calls: a single call slowed by
    another program would otherwise decide the round, and with it an assert (measured in CI: a
    truncated-attention call at 23 ms between calls of 14 ms at half and 36 ms at twice its
    length; a 3 ms call at 217 ms, longer than ``CAPPED_LEAST`` by itself; one of lesson 16's
    training steps slowed more than 4 times for all of its ``CAPPED_LEAST``).

    >>> calls = {"sum": lambda: sum(range(1000)), "max": lambda: max(range(1000))}
    >>> rounds = timed_rounds(calls, repeats=3, device=torch.device("cpu"), pause=0.0)
    >>> sorted(rounds), rounds["sum"].shape
    (['max', 'sum'], (3,))
    """
    if REPEATS_AT_MOST in os.environ:
        repeats = max(1, min(repeats, int(os.environ[REPEATS_AT_MOST])))
        passes = [
            _one_pass(candidates, device, pause, max(least, CAPPED_LEAST), max(calls, 2))
            for _ in range(repeats * CAPPED_PASSES)
        ]  # round r keeps the fastest of passes r, r + repeats, r + 2 * repeats, ...
        return {
            name: np.array([min(p[name] for p in passes[r::repeats]) for r in range(repeats)])
            for name in candidates
        }
    passes = [_one_pass(candidates, device, pause, least, calls) for _ in range(repeats + warm_up)]
    kept = passes[1:] if warm_up else passes  # a warm-up pass is not kept
    return {name: np.array([p[name] for p in kept]) for name in candidates}


def _one_pass(
    candidates: dict, device: torch.device, pause: float, least: float, calls: int = 1
) -> dict:
    """One round of ``timed_rounds``: each candidate's ``seconds_of``, in order, each followed
    by a ``pause`` (not counted)."""
    seconds = {}
    for name, fn in candidates.items():
        seconds[name] = seconds_of(fn, device, least, calls)
        time.sleep(pause)
    return seconds


def spread(values, digits: int = 2, scale: float = 1.0) -> str:
    """A set of measurements (seconds, or ratios taken round by round) as
    ``"median [smallest–largest]"``, each multiplied by ``scale`` (1e3 for milliseconds) and
    printed with ``digits`` decimals.

    >>> spread(np.array([2.0, 2.5, 2.25]))
    '2.25 [2.00–2.50]'
    >>> spread(np.array([0.0012, 0.0011, 0.0013]), digits=1, scale=1e3)
    '1.2 [1.1–1.3]'
    """
    values = np.asarray(values, dtype=float) * scale
    return f"{np.median(values):.{digits}f} [{values.min():.{digits}f}–{values.max():.{digits}f}]"


def medians(rounds: dict) -> dict:
    """The median of each candidate's rounds (``timed_rounds``' result): ``{name: seconds}``.

    >>> medians({"a": np.array([1.0, 3.0, 2.0])})
    {'a': 2.0}
    """
    return {name: float(np.median(values)) for name, values in rounds.items()}


def cpu_cores() -> str:
    """This machine's logical CPUs and, on Linux, its physical cores (the sets of logical CPUs
    that share a core), in words: a speed-up from a second thread means little without it.

    >>> "logical CPUs" in cpu_cores()
    True
    """
    shared = glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list")
    cores = len({Path(path).read_text().strip() for path in shared}) if shared else "unknown"
    return f"{os.cpu_count()} logical CPUs on {cores} cores"


def load_average() -> float | None:
    """Programs ready to run, averaged over the last minute (the caller included); None where
    the system does not say. On a 2-core machine, below about 1.3 means the second core is
    nearly always free, so a measurement of what two threads gain can be trusted.

    >>> load_average() is None or load_average() >= 0
    True
    """
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def random_qkv(shape: tuple[int, ...], device: torch.device):
    """Three random float32 tensors of ``shape`` on ``device``, q, k and v: the same ones on
    every call (seed 0)."""
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(shape, generator=generator).to(device) for _ in range(3))


# --------------------------------------------------------------------------- dense attention


def unfused_reference(q, k, v):
    """Plain PyTorch attention that materialises the weights: the baseline for explicit code."""
    weights = torch.softmax((q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5, dim=-1)
    return weights @ v, weights


def dense_table(length: int, repeats: int, device: torch.device, least: float = 0.0) -> list[str]:
    """Table 1, dense attention at B=1, H=8, ``length`` tokens: each implementation against
    its reference, and the fused kernel's rate. Returns the lines of the table."""
    q, k, v = random_qkv((1, DENSE_HEADS, length, HEAD_DIM), device)
    q_np, k_np, v_np = (t.cpu().numpy() for t in (q, k, v))
    square = torch.randn(MATMUL_SIZE, MATMUL_SIZE, generator=torch.Generator().manual_seed(1))
    square = square.to(device)
    # Each ratio is timed as its own interleaved pair, and NumPy on its own: on 2 cores a
    # candidate disturbs the timing of whatever runs next (NumPy's BLAS threads keep spinning
    # after a call), so mixing all of them in one rotation would blur the comparisons.
    groups = [
        {
            "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
            "fast": lambda: attn_torch.attention(q, k, v, need_weights=False),
        },
        {
            "unfused": lambda: unfused_reference(q, k, v),
            "explicit": lambda: attn_torch.attention(q, k, v),
        },
        {"numpy": lambda: attn_np.attention(q_np, k_np, v_np)},
        {"matmul": lambda: square @ square},
    ]
    rounds = {}
    for group in groups:
        # NumPy one call at a time, after the pause: back to back, the BLAS threads still
        # spinning from one call would slow the next one's single-threaded parts.
        group_least = 0.0 if "numpy" in group else least
        rounds.update(timed_rounds(group, repeats, device, least=group_least))
    times = medians(rounds)
    flops = 4 * DENSE_HEADS * length * length * HEAD_DIM
    rows = [
        (
            "attnlib fast path (need_weights=False)",
            "F.scaled_dot_product_attention",
            "fast",
            "sdpa",
            1.05,
        ),
        (
            "attnlib explicit (returns weights)",
            "unfused PyTorch softmax(QKᵀ)V",
            "explicit",
            "unfused",
            1.2,
        ),
        (
            "attnlib NumPy, float32",
            "unfused PyTorch softmax(QKᵀ)V",
            "numpy",
            "unfused",
            1.3,
        ),
    ]
    lines = [f"Dense attention: B=1, H={DENSE_HEADS}, L={length}, d={HEAD_DIM}, float32"]
    lines.append(
        f"  {'implementation':<40}{'ms':>9}  {'reference':<32}{'ms':>9}"
        f"{'ratio [min–max]':>19}{'target':>8}"
    )
    for name, ref_name, key, ref, target in rows:
        lines.append(
            f"  {name:<40}{times[key] * 1e3:>9.2f}  {ref_name:<32}{times[ref] * 1e3:>9.2f}"
            f"{spread(rounds[key] / rounds[ref]):>19}{'≤ ' + str(target):>8}"
        )
    rate = flops / times["sdpa"] / 1e9
    matmul_rate = 2 * MATMUL_SIZE**3 / times["matmul"] / 1e9
    lines.append(
        f"  F.scaled_dot_product_attention runs at {rate:.0f} GFLOP/s, "
        f"{rate / matmul_rate:.0%} of the float32 matmul rate "
        f"({matmul_rate:.0f} GFLOP/s, {MATMUL_SIZE}×{MATMUL_SIZE} matrices)"
    )
    return lines


# --------------------------------------------------------------------------- truncated attention


def band_call(kind: str, length: int, device: torch.device) -> Callable[[], object]:
    """The call to time: a function of no arguments that runs ``truncated_attention`` (``kind``
    "truncated") or ``F.scaled_dot_product_attention`` with a ``window_mask`` ("dense") on
    random float32 q, k and v ``(1, 4, length, 64)``, window 64, made once on ``device``.

    >>> band_call("truncated", 256, torch.device("cpu"))().shape
    torch.Size([1, 4, 256, 64])
    """
    q, k, v = random_qkv((1, BAND_HEADS, length, HEAD_DIM), device)
    if kind == "truncated":
        return lambda: attn_torch.truncated_attention(q, k, v, WINDOW)
    mask = attn_torch.window_mask(length, WINDOW, device=device)
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


#: One head of attention, four ways, for memory measurements (``one_head_call``).
ONE_HEAD = {
    "explicit": lambda q, k, v: attn_torch.attention(q, k, v)[0],  # keeps the L×L weights
    "sdpa": F.scaled_dot_product_attention,  # PyTorch's fused kernel
    "tiled": attn_torch.tiled_attention,  # exact, tile by tile
    "band": lambda q, k, v: attn_torch.truncated_attention(q, k, v, WINDOW),  # truncated
}


def one_head_call(kind: str, length: int, device: torch.device) -> Callable[[], object]:
    """A function of no arguments that runs one head of attention on random float32 q, k and v
    ``(1, 1, length, 64)``, one of four ways (``ONE_HEAD``): "explicit" (``attention``, which
    keeps the L×L weights), "sdpa" (PyTorch's fused kernel), "tiled" (``tiled_attention``) or
    "band" (``truncated_attention``, window 64). ``kind + "+backward"`` (e.g.
    "tiled+backward") runs the backward pass too (gradients of q, k and v).

    >>> one_head_call("tiled", 128, torch.device("cpu"))().shape
    torch.Size([1, 1, 128, 64])
    """
    name, _, backward = kind.partition("+")
    q, k, v = (
        x.requires_grad_(bool(backward)) for x in random_qkv((1, 1, length, HEAD_DIM), device)
    )
    if backward:
        return lambda: ONE_HEAD[name](q, k, v).sum().backward()
    return lambda: ONE_HEAD[name](q, k, v)


def peak_bytes(kind: str, length: int, device: torch.device) -> int:
    """Bytes that one call adds at its peak, measured in a fresh Python process: the call of
    ``band_call(kind, length, device)`` for ``kind`` "dense" or "truncated", else of
    ``one_head_call(kind, length, device)``. On CUDA the allocator's peak; on the CPU (Linux)
    the growth of the resident set (``peak_bytes_by_length`` says how)."""
    return peak_bytes_by_length(kind, [length], device)[0]


def peak_bytes_by_length(kind: str, lengths, device: torch.device) -> list[int]:
    """``peak_bytes`` at each length of ``lengths``, measured shortest first in one fresh
    Python process.

    The C library is told to hand every block of 64 KiB or more back to the system as soon as
    it is freed (``MALLOC_MMAP_THRESHOLD_``, glibc), so a call cannot quietly reuse memory the
    previous one released, and each peak is the call's own.
    """
    sizes = ",".join(str(length) for length in sorted(lengths))
    command = [sys.executable, "-m", "attnlib.bench", "--_peak", kind, sizes, str(device)]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    what = (
        f"peak_bytes_by_length: measuring {kind} at lengths {sizes} on {device} in a fresh process"
    )
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, check=True, env=env, timeout=PEAK_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what} ran past {PEAK_TIMEOUT} s") from None
    except subprocess.CalledProcessError as error:
        said = "\n".join(error.stderr.strip().splitlines()[-5:])  # the end of its traceback
        raise RuntimeError(f"{what} failed (exit status {error.returncode}):\n{said}") from None
    peaks = dict(zip(sorted(lengths), json.loads(result.stdout)["peak_bytes"]))
    return [peaks[length] for length in lengths]


def _measure_peak(kind: str, length: int, device: torch.device) -> int:
    """Bytes the call adds at its peak (``peak_of``), after a warm-up on a short sequence:
    one-time set-up (thread pools, kernels) is not the call's, but buffers of the measured size
    must not be cached and reused either."""
    make_call = band_call if kind in ("dense", "truncated") else one_head_call
    make_call(kind, min(length, 128), device)()
    return peak_of(make_call(kind, length, device), device)[1]


def peak_of(call: Callable[[], object], device: torch.device) -> tuple[object, int]:
    """``(call(), bytes)``: what ``call`` returns and the memory it adds at its peak. On CUDA
    the allocator's peak; on the CPU (Linux) the resident set's high-water mark, reset just
    before the call, minus the size before it (so inputs made before are not counted).

    >>> result, added = peak_of(lambda: torch.ones(1), torch.device("cpu"))
    >>> result.tolist(), added >= 0
    ([1.0], True)
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        result = call()
        torch.cuda.synchronize(device)
        return result, torch.cuda.max_memory_allocated(device) - base
    if not os.path.exists("/proc/self/clear_refs"):
        raise RuntimeError(
            f"peak_of: a CPU call's peak memory is read from Linux's /proc/self (resident set "
            f"and its high-water mark), which this system ({sys.platform}) does not have; "
            f"run this cell on Linux (Colab is), or on a CUDA GPU"
        )
    base = _status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # reset the high-water mark (VmHWM) to the current size
    result = call()
    return result, _status_bytes("VmHWM") - base


def _status_bytes(field: str) -> int:
    """A size from ``/proc/self/status`` (Linux), in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def dense_fits(length: int, device: torch.device) -> bool:
    """Whether dense attention could hold H·L² float32 scores and the L² mask in free memory
    (PyTorch's CPU kernel needs far less: it works block by block; the mask is L² bytes)."""
    needed = BAND_HEADS * length * length * 4 + length * length
    if device.type == "cuda":
        free = torch.cuda.mem_get_info()[0]
    else:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        free = int(fields["MemAvailable"].split()[0]) * 1024
    return needed < free


def fitted_exponent(lengths, seconds) -> float:
    r"""The slope of log(time) against log(L): 1 for linear cost, 2 for quadratic.

    .. math:: \log t \approx p \log L + c, \quad \text{that is} \quad t \approx e^{c} L^{p}

    ``p`` fitted by least squares; ``lengths`` and ``seconds`` hold one entry per length.

    >>> round(fitted_exponent([1024, 2048, 4096], [0.01, 0.04, 0.16]), 6)
    2.0
    """
    return float(np.polyfit(np.log(lengths), np.log(seconds), 1)[0])


def band_table(lengths, repeats: int, device: torch.device, least: float = 0.0) -> list[str]:
    """Table 2, truncated vs dense-with-window-mask attention over ``lengths``: time, speed-up,
    peak memory and the exponent of time against L. Returns the lines of the table."""
    lines = [
        f"Truncated vs dense attention: B=1, H={BAND_HEADS}, d={HEAD_DIM}, "
        f"window {WINDOW}, float32",
        f"  {'L':>6}{'dense ms':>11}{'truncated ms':>14}{'speed-up [min–max]':>22}"
        f"{'of bound':>10}"
        f"{'dense MiB':>11}{'trunc. MiB':>12}{'trunc. / one L×L':>18}",
    ]
    dense_lengths, dense_seconds = [], []  # for the exponent of dense attention
    for length in lengths:
        kinds = ["truncated"] + (["dense"] if dense_fits(length, device) else [])
        calls = {kind: band_call(kind, length, device) for kind in kinds}
        long_run = length >= 16384  # one round is enough for calls of seconds
        rounds = timed_rounds(calls, 1 if long_run else repeats, device, least=least)
        times = medians(rounds)
        peaks = {kind: peak_bytes(kind, length, device) for kind in kinds}
        if "dense" in times:
            dense_lengths.append(length)
            dense_seconds.append(times["dense"])
        one_matrix = length * length * 4
        dense_ms = f"{times['dense'] * 1e3:>11.1f}" if "dense" in times else f"{'(skipped)':>11}"
        speed_up, of_bound = f"{'':>22}", f"{'':>10}"
        if "dense" in times:
            ratios = rounds["dense"] / rounds["truncated"]
            bound = length / (2 * WINDOW + 1)  # the share of scores the band computes
            speed_up = f"{spread(ratios, digits=1):>22}"
            of_bound = f"{np.median(ratios) / bound:>10.0%}"
        dense_mib = f"{peaks['dense'] / 2**20:>11.0f}" if "dense" in peaks else f"{'':>11}"
        lines.append(
            f"  {length:>6}{dense_ms}{times['truncated'] * 1e3:>14.1f}{speed_up}{of_bound}"
            f"{dense_mib}"
            f"{peaks['truncated'] / 2**20:>12.1f}{peaks['truncated'] / one_matrix:>18.1%}"
        )
    lines.append(
        f"  of bound: the speed-up as a share of L/(2·{WINDOW}+1), the ratio of the scores each "
        "computes"
    )
    if len(lengths) >= 2:
        seconds = band_seconds(lengths, repeats, device, least)
        lines.append(
            f"  time ∝ L^{fitted_exponent(lengths, seconds):.2f} for truncated attention "
            f"(fitted over {list(lengths)}, all lengths timed in the same rounds)"
        )
    if len(dense_lengths) >= 2:
        lines.append(
            f"  time ∝ L^{fitted_exponent(dense_lengths, dense_seconds):.2f} for dense attention "
            f"(fitted over {dense_lengths}, the times above)"
        )
    return lines


def band_seconds(lengths, repeats: int, device: torch.device, least: float = 0.0) -> list[float]:
    """``truncated_attention``'s time at each length, all lengths timed in the same interleaved
    rounds: an exponent fitted to times taken minutes apart (as the table's are, between calls
    of dense attention) measures the machine's drift as well as the band's growth."""
    calls = {length: band_call("truncated", length, device) for length in lengths}
    times = medians(timed_rounds(calls, repeats, device, least=least))
    return [times[length] for length in lengths]


# --------------------------------------------------------------------------- tiled attention


def tiled_table(
    length: int, memory_length: int, repeats: int, device: torch.device, least: float = 0.0
) -> list[str]:
    """Table 3, tiled exact attention: time against the fused kernel at ``length``, peak memory
    of one head at ``memory_length`` against one L×L matrix. Returns the lines of the table."""
    q, k, v = random_qkv((1, BAND_HEADS, length, HEAD_DIM), device)
    calls = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        "tiled": lambda: attn_torch.tiled_attention(q, k, v),
    }
    rounds = timed_rounds(calls, max(1, repeats // 3), device, least=least)
    times = medians(rounds)
    ratio = spread(rounds["tiled"] / rounds["sdpa"])
    on_cpu = device.type == "cpu"
    block_q, block_k = _tiles.default_blocks(length, length, BAND_HEADS, on_cpu)  # those used
    one_head = _tiles.default_blocks(memory_length, memory_length, 1, on_cpu)
    lines = [
        "Tiled exact attention (tiled_attention with its default blocks), float32",
        f"  time, B=1, H={BAND_HEADS}, L={length}, d={HEAD_DIM}, blocks {block_q}×{block_k}: "
        f"tiled {times['tiled'] * 1e3:.1f} ms, "
        f"F.scaled_dot_product_attention {times['sdpa'] * 1e3:.1f} ms, "
        f"ratio {ratio} (target ≤ 2)",
    ]
    one_matrix = memory_length * memory_length * 4
    for kind in ("tiled", "tiled+backward"):
        peak = peak_bytes(kind, memory_length, device)  # one head
        what = "forward" if kind == "tiled" else "forward+backward"
        lines.append(
            f"  peak memory, one head, L={memory_length}, blocks {one_head[0]}×{one_head[1]}, "
            f"{what:<16}: {peak / 2**20:7.1f} MiB "
            f"= {peak / one_matrix:.2%} of one L×L float32 matrix (target ≤ 5%)"
        )
    return lines


# --------------------------------------------------------------------------- encoder block


def encoder_table(
    batch: int, length: int, d_model: int, repeats: int, device, least: float = 0.0
) -> list[str]:
    """Table 4, attnlib's encoder block against ``nn.TransformerEncoderLayer`` with the same
    weights, forward and forward+backward. Returns the lines of the table."""
    torch.manual_seed(0)
    heads, d_ff = 8 if d_model >= 64 else 2, 4 * d_model
    reference = torch.nn.TransformerEncoderLayer(
        d_model, heads, d_ff, dropout=0.0, batch_first=True
    ).to(device)
    ours = attn_torch.TransformerEncoderBlock.from_torch(reference)
    x = torch.randn(batch, length, d_model, device=device)
    x_grad = x.clone().requires_grad_()

    def forward(layer, train: bool, **kwargs):
        def call():
            layer.train(train)
            with torch.no_grad():
                layer(x, **kwargs)

        return call

    def forward_backward(layer, **kwargs):
        def call():
            layer.train(True)
            output = layer(x_grad, **kwargs)
            (output[0] if isinstance(output, tuple) else output).sum().backward()

        return call

    groups = {
        "forward (eval, no grad)": {
            "torch": forward(reference, False),
            "attnlib": forward(ours, False, need_weights=False),
        },
        "forward+backward (train)": {
            "torch": forward_backward(reference),
            "attnlib": forward_backward(ours, need_weights=False),
        },
    }
    lines = [
        f"Encoder block: attnlib TransformerEncoderBlock vs nn.TransformerEncoderLayer, same "
        f"weights, B={batch}, L={length}, d={d_model}, {heads} heads, d_ff={d_ff}, float32"
    ]
    for name, calls in groups.items():
        rounds = timed_rounds(calls, repeats, device, least=least)
        times = medians(rounds)
        ratio = spread(rounds["attnlib"] / rounds["torch"])
        lines.append(
            f"  {name:<26} attnlib {times['attnlib'] * 1e3:8.1f} ms, torch "
            f"{times['torch'] * 1e3:8.1f} ms, ratio {ratio} (target ≤ 1.2)"
        )
    return lines


# --------------------------------------------------------------------------- Triton on a GPU

TRITON_HEADS = 8


def triton_skip_reason(device: torch.device) -> str | None:
    """Why the Triton rows cannot run on ``device`` (None where they can): they time the
    compiled kernels, so they need a CUDA device, triton, and a process that does not run
    Triton in its interpreter.

    >>> triton_skip_reason(torch.device("cpu"))
    'needs a CUDA GPU; this run is on cpu'
    """
    if device.type != "cuda":
        return f"needs a CUDA GPU; this run is on {device}"
    try:
        from . import triton as attn_triton  # here, not at the top: see ``triton_calls``

        interpreting = attn_triton.interpreting()
    except ImportError:
        return "needs the triton package"
    return "TRITON_INTERPRET=1: the interpreter is not timed" if interpreting else None


def triton_calls(length: int, device: torch.device) -> dict[str, Callable[[], object]]:
    """The four calls that the Triton rows time, each a function of no arguments on random
    float16 q, k and v ``(1, 8, length, 64)`` made once on ``device``: "triton" and "sdpa"
    (``flash_attention`` and ``F.scaled_dot_product_attention``), forward only, and
    "triton+backward" and "sdpa+backward", which also compute the gradients of q, k and v.

    >>> sorted(triton_calls(16, torch.device("cpu")))
    ['sdpa', 'sdpa+backward', 'triton', 'triton+backward']
    """
    # Imported here: attnlib.triton switches Triton to its interpreter where there is no GPU,
    # which importing bench (as attnlib.distributed does) must not do.
    from . import triton as attn_triton

    q, k, v = (x.half() for x in random_qkv((1, TRITON_HEADS, length, HEAD_DIM), device))
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    upstream = torch.randn_like(q)
    kernels = {"triton": attn_triton.flash_attention, "sdpa": F.scaled_dot_product_attention}
    calls = {}
    for name, kernel in kernels.items():
        calls[name] = functools.partial(kernel, q, k, v)
        calls[f"{name}+backward"] = functools.partial(_gradients, kernel, leaves, upstream)
    return calls


def _gradients(kernel, leaves, upstream):
    """The gradients of ``leaves`` (q, k, v) through ``kernel(*leaves)`` for ``upstream``."""
    return torch.autograd.grad(kernel(*leaves), leaves, upstream)


def triton_table(lengths, repeats: int, device: torch.device, least: float = 0.0) -> list[str]:
    """Table 5, on a CUDA GPU: ``attnlib.triton.flash_attention`` against
    ``F.scaled_dot_product_attention`` in float16 (B=1, H=8, d=64) at each of ``lengths``:
    forward and forward+backward times, their ratios, and the peak memory of
    forward+backward. Elsewhere one line that says why it is skipped."""
    title = (
        f"Triton FlashAttention (attnlib.triton.flash_attention) vs "
        f"F.scaled_dot_product_attention: B=1, H={TRITON_HEADS}, d={HEAD_DIM}, float16"
    )
    reason = triton_skip_reason(device)
    if reason is not None:
        return [f"{title}: skipped ({reason})"]
    lines = [
        title,
        f"  {'L':>6}{'fwd ms':>10}{'SDPA ms':>10}{'ratio [min–max]':>19}{'fwd+bwd ms':>12}"
        f"{'SDPA ms':>10}{'ratio [min–max]':>19}{'peak MiB':>10}{'SDPA MiB':>10}",
    ]
    for length in lengths:
        calls = triton_calls(length, device)
        forward = {name: calls[name] for name in ("triton", "sdpa")}
        training = {name: calls[f"{name}+backward"] for name in ("triton", "sdpa")}
        fwd_rounds = timed_rounds(forward, repeats, device, least=least)
        both_rounds = timed_rounds(training, repeats, device, least=least)
        fwd, both = medians(fwd_rounds), medians(both_rounds)
        peaks = {name: peak_of(call, device)[1] for name, call in training.items()}
        lines.append(
            f"  {length:>6}{fwd['triton'] * 1e3:>10.2f}{fwd['sdpa'] * 1e3:>10.2f}"
            f"{spread(fwd_rounds['triton'] / fwd_rounds['sdpa']):>19}"
            f"{both['triton'] * 1e3:>12.2f}{both['sdpa'] * 1e3:>10.2f}"
            f"{spread(both_rounds['triton'] / both_rounds['sdpa']):>19}"
            f"{peaks['triton'] / 2**20:>10.1f}{peaks['sdpa'] / 2**20:>10.1f}"
        )
    lines.append(
        "  ratio: Triton's time / SDPA's; peak: what forward+backward adds to the inputs, the "
        "gradients included"
    )
    return lines


# --------------------------------------------------------------------------- decoding

#: The decoder the decoding rows time: 4 layers of width 256, 8 heads sharing 2 key-value heads.
DECODER = {"vocab_size": 256, "d_model": 256, "num_heads": 8, "num_layers": 4, "num_kv_heads": 2}


def decode_calls(
    position: int, device: torch.device, model=None, tokens=None
) -> dict[str, Callable[[], object]]:
    """The two ways to get the next token's logits at ``position``, each a function of no
    arguments: "cached" runs token ``position`` alone against a KV cache that holds the
    tokens before it (reset after every call), "recomputed" runs all ``position + 1`` tokens.
    ``model``: an ``attnlib.decoder.DecoderLM`` (default: an untrained one of ``DECODER``,
    float32, on ``device``); ``tokens`` ``(1, ≥ position + 1)`` (default: random ones).

    >>> sorted(decode_calls(8, torch.device("cpu")))
    ['cached', 'recomputed']
    """
    from .decoder import DecoderLM  # here: the other tables do not need it

    if model is None:
        model = DecoderLM(**DECODER, seed=0).to(device).eval()
    if tokens is None:
        generator = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, model.vocab_size, (1, position + 1), generator=generator)
    tokens = tokens[:, : position + 1].to(device)
    cache = model.new_cache(batch=1, capacity=position + 1)
    with torch.no_grad():
        model(tokens[:, :position], cache)

    @torch.no_grad()
    def cached():
        cache.crop(position)  # forget the token of the previous call
        return model(tokens[:, position:], cache)

    @torch.no_grad()
    def recomputed():
        return model(tokens)

    return {"cached": cached, "recomputed": recomputed}


def decode_table(positions, repeats: int, device: torch.device, least: float = 0.0) -> list[str]:
    """Table 6: the time of one generated token at each of ``positions``, decoded against a
    KV cache and recomputed from scratch, and their ratio (``decode_calls``)."""
    config = ", ".join(f"{name}={value}" for name, value in DECODER.items())
    lines = [
        f"Decoding one token (attnlib.decoder.DecoderLM, {config}, float32): KV cache vs recompute",
        f"  {'position':>8}{'cached ms':>11}{'recomputed ms':>15}{'recomputed / cached':>22}",
    ]
    for position in positions:
        rounds = timed_rounds(decode_calls(position, device), repeats, device, least=least)
        times = medians(rounds)
        lines.append(
            f"  {position:>8}{times['cached'] * 1e3:>11.2f}{times['recomputed'] * 1e3:>15.2f}"
            f"{spread(rounds['recomputed'] / rounds['cached'], 1):>22}"
        )
    return lines


def split_k_table(lengths, repeats: int, device: torch.device, least: float = 0.0) -> list[str]:
    """Table 7, on a CUDA GPU: ``attnlib.triton.flash_decode`` with its default number of
    key chunks (split-K, Flash-Decoding) against one chunk (one program per key-value head,
    as FlashAttention-2 would run it), one query per sequence, B=1, 32 query heads sharing 8
    key-value heads, d=128, float16, at each cache length of ``lengths``. Elsewhere one line
    that says why it is skipped."""
    title = "Flash-Decoding (attnlib.triton.flash_decode): split-K vs one chunk, B=1, H=32/8, d=128"
    reason = triton_skip_reason(device)
    if reason is not None:
        return [f"{title}: skipped ({reason})"]
    from . import triton as attn_triton

    lines = [title, f"  {'L_k':>7}{'split ms':>10}{'one chunk ms':>14}{'one / split':>20}"]
    for length in lengths:
        q = torch.randn(1, 32, 1, 128, device=device, dtype=torch.float16)
        k, v = (torch.randn(1, 8, length, 128, device=device, dtype=torch.float16) for _ in "kv")
        calls = {
            "split": functools.partial(attn_triton.flash_decode, q, k, v),
            "one": functools.partial(attn_triton.flash_decode, q, k, v, splits=1),
        }
        rounds = timed_rounds(calls, repeats, device, least=least)
        times = medians(rounds)
        lines.append(
            f"  {length:>7}{times['split'] * 1e3:>10.3f}{times['one'] * 1e3:>14.3f}"
            f"{spread(rounds['one'] / rounds['split'], 1):>20}"
        )
    return lines


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    """The command line, ``python -m attnlib.bench [--quick] [--device DEVICE]``: prints the
    seven tables."""
    parser = argparse.ArgumentParser(
        prog="python -m attnlib.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument("--device", default=None, help="cpu, cuda or mps (default: the best)")
    parser.add_argument("--_peak", nargs=3, help=argparse.SUPPRESS)  # internal: one measurement
    args = parser.parse_args(argv)
    if args._peak:
        kind, lengths, device = args._peak
        peaks = [_measure_peak(kind, int(n), torch.device(device)) for n in lengths.split(",")]
        print(json.dumps({"peak_bytes": peaks}))
        return
    device = torch.device(args.device) if args.device else attn_torch.default_device()
    sizes = QUICK if args.quick else FULL
    print(
        f"attnlib.bench: device={device}, torch {torch.__version__}, numpy {np.__version__}, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs"
    )
    repeats, least = sizes["repeats"], sizes["least_seconds"]
    print("\n".join(dense_table(sizes["dense_length"], repeats, device, least)))
    print("\n".join(band_table(sizes["band_lengths"], repeats, device, least)))
    lengths = sizes["tiled_length"], sizes["tiled_memory_length"]
    print("\n".join(tiled_table(*lengths, repeats, device, least)))
    print("\n".join(encoder_table(*sizes["encoder"], repeats, device, least)))
    print("\n".join(triton_table(sizes["triton_lengths"], repeats, device, least)))
    print("\n".join(decode_table(sizes["decode_positions"], repeats, device, least)))
    print("\n".join(split_k_table(sizes["split_k_lengths"], repeats, device, least)))
    print(
        "Times: medians of interleaved rounds, each measurement the fastest of back-to-back calls "
        f"lasting {least} s or more; ratios: the median [smallest–largest] of the ratios taken "
        "round by round. Memory: one call in a fresh process."
    )


if __name__ == "__main__":
    main()
