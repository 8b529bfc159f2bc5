"""``python -m attnlib.bench``: how fast is attention here, as ratios measured in one run.

Absolute times depend on the machine; ratios between implementations timed side by side,
on the same inputs, in the same process, travel much better. For one length ``L`` and head
size ``d`` this times

* the float32 matrix products that attention is made of (``QKᵀ`` and ``AV``, ``4·L²·d``
  floating-point operations): the reference rate,
* ``attnlib.torch.attention(..., need_weights=False)``: PyTorch's fused kernel,
* ``attnlib.torch.attention``: the unfused path that materialises the ``L×L`` weights,
* ``attnlib.numpy.attention`` in float32,

and prints each one's median time, its rate in GFLOP/s and how many times slower it is
than the fused kernel. Nothing here asserts a speed: the numbers are for reading.

    python -m attnlib.bench --length 1024 --dim 64
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from . import numpy as attn_np
from . import torch as attn_torch


def seconds_of(fn: Callable[[], object], device: torch.device) -> float:
    """Wall time of one call of ``fn()``, waiting for the GPU where there is one."""
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def median_seconds(candidates: dict, repeats: int, device: torch.device) -> dict[str, float]:
    """Median time of each candidate, timed in interleaved rounds after one warm-up round.

    Interleaving (A, B, C, A, B, C, ...) exposes every candidate to the same slow and fast
    moments of a busy machine, which keeps the ratios steady even when the times are not.
    """
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for round_number in range(repeats + 1):
        for name, fn in candidates.items():
            elapsed = seconds_of(fn, device)
            if round_number:  # round 0 is the warm-up
                times[name].append(elapsed)
    return {name: statistics.median(values) for name, values in times.items()}


def run(length: int, dim: int, repeats: int, device: torch.device) -> list[tuple[str, float]]:
    """``[(name, seconds), ...]`` for the four implementations, on the same random inputs."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(length, dim, generator=generator).to(device) for _ in range(3))
    weights = torch.softmax(q @ k.T, dim=-1)
    q_np, k_np, v_np = (t.cpu().numpy() for t in (q, k, v))
    candidates = {
        "matmuls only (QKᵀ, AV)": lambda: (q @ k.T, weights @ v),
        "fused (SDPA)": lambda: attn_torch.attention(q, k, v, need_weights=False),
        "attnlib.torch, unfused": lambda: attn_torch.attention(q, k, v),
        "attnlib.numpy, float32": lambda: attn_np.attention(q_np, k_np, v_np),
    }
    return list(median_seconds(candidates, repeats, device).items())


def report(results: list[tuple[str, float]], length: int, dim: int) -> str:
    """A table of time, GFLOP/s and the ratio to the fused kernel."""
    flops = 4 * length * length * dim
    fused = dict(results)["fused (SDPA)"]
    lines = [f"{'implementation':<26}{'median ms':>11}{'GFLOP/s':>10}{'× fused':>9}"]
    for name, seconds in results:
        lines.append(
            f"{name:<26}{seconds * 1e3:>11.3f}{flops / seconds / 1e9:>10.1f}{seconds / fused:>9.2f}"
        )
    matmul = dict(results)["matmuls only (QKᵀ, AV)"]
    lines.append(f"fused attention runs at {matmul / fused:.0%} of the float32 matmul rate")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m attnlib.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--length", type=int, default=1024, help="sequence length L")
    parser.add_argument("--dim", type=int, default=64, help="head size d")
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per implementation")
    parser.add_argument("--device", default=None, help="cpu, cuda or mps (default: the best)")
    args = parser.parse_args(argv)
    device = torch.device(args.device) if args.device else attn_torch.default_device()
    print(
        f"L={args.length}, d={args.dim}, float32, device={device}, "
        f"torch {torch.__version__}, numpy {np.__version__}, {torch.get_num_threads()} threads"
    )
    print(report(run(args.length, args.dim, args.repeats, device), args.length, args.dim))


if __name__ == "__main__":
    main()
