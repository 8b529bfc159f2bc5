"""The check of ring attention against dense attention, and its command line,
``python -m attnlib.distributed`` (in local processes, or under ``torchrun``)."""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from collections.abc import Callable

import torch
import torch.distributed as dist

from .. import bench
from .. import torch as attn
from .launcher import launch
from .ring import LAYOUTS, RingStats, ring_attention, shard_positions, split_sequence
from .ulysses import UlyssesStats, ulysses_attention

__all__ = [
    "compare_with_dense",
    "compare_ulysses_with_dense",
    "compare_rotary_with_dense",
    "compare_with_pytorch_context_parallel",
    "dense_reference",
    "peak_memory_bytes",
    "main",
]

# --------------------------------------------------------------------------- the check


def compare_with_dense(
    batch: int = 1,
    heads: int = 2,
    length: int = 24,
    dim: int = 8,
    *,
    causal: bool = False,
    layout: str = "contiguous",
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    group=None,
) -> dict:
    """Run in every process of a group: ring attention of a random sequence ``(batch, heads,
    length, dim)`` (the same in every process, drawn from ``seed``) against dense attention
    of the whole sequence, forward and backward. Returns this process's figures: ``rank``,
    ``world_size``, ``errors`` (the largest absolute difference of the output and of the q, k
    and v gradients from dense attention's, on this process's shard), the ``tiles``,
    ``masked_tiles`` and ``scores`` it computed, the bytes it sent at each step
    (``sent_bytes``, ``backward_sent_bytes``) and ``peak_bytes`` (``peak_memory_bytes`` of
    the ring's forward and backward passes, or None where it cannot be measured).

    Uses the GPU of this process under ``nccl``, else the CPU. Every process computes the
    dense reference of the whole sequence itself (then keeps its own shard of it).

    >>> [r["errors"]["out"] < 1e-12 for r in launch(compare_with_dense, 2)]
    [True, True]
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    on_gpu = dist.get_backend(group) == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    _return_freed_blocks()  # before the dense reference, so that the ring's peak is its own
    generator = torch.Generator().manual_seed(seed)
    whole = [  # q, k, v and the gradient of the loss with respect to the output
        torch.randn(batch, heads, length, dim, generator=generator, dtype=dtype).to(device)
        for _ in range(4)
    ]
    expected = [
        split_sequence(x, world_size, layout)[rank] for x in dense_reference(*whole, causal)
    ]
    q, k, v, upstream = (split_sequence(x, world_size, layout)[rank] for x in whole)
    inputs = [x.requires_grad_() for x in (q, k, v)]
    stats = RingStats()

    def forward_and_backward():
        out = ring_attention(*inputs, causal=causal, layout=layout, group=group, stats=stats)
        out.backward(upstream)
        return out.detach()

    _warm_up(dim, dtype, device, group)  # one-time allocations are not the ring's
    out, peak = peak_memory_bytes(forward_and_backward, device)
    got = [out, *(x.grad for x in inputs)]
    errors = {
        name: float((a.double() - b.double()).abs().max())
        for name, a, b in zip(("out", "grad_q", "grad_k", "grad_v"), got, expected)
    }
    return {
        "rank": rank,
        "world_size": world_size,
        "errors": errors,
        "tiles": stats.tiles,
        "masked_tiles": stats.masked_tiles,
        "scores": stats.scores,
        "sent_bytes": stats.sent_bytes,
        "backward_sent_bytes": stats.backward_sent_bytes,
        "peak_bytes": peak,
    }


def compare_ulysses_with_dense(
    batch: int = 1,
    heads: int = 4,
    kv_heads: int = 2,
    length: int = 24,
    dim: int = 8,
    *,
    causal: bool = False,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    group=None,
) -> dict:
    """Run in every process of a group: ``ulysses_attention`` of a random sequence with
    ``heads`` query heads and ``kv_heads`` key-value heads (the same in every process, drawn
    from ``seed``) against dense attention of the whole sequence (each key-value head repeated
    for its group of query heads), forward and backward. Returns this process's ``rank``,
    ``errors`` (as ``compare_with_dense``), ``sent_bytes`` (one entry per all-to-all of the
    forward pass: q, k, v, the output) and ``backward_sent_bytes`` (those of the backward).

    >>> [r["errors"]["grad_k"] < 1e-12 for r in launch(compare_ulysses_with_dense, 2)]
    [True, True]
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    generator = torch.Generator().manual_seed(seed)
    shapes = [(batch, h, length, dim) for h in (heads, kv_heads, kv_heads, heads)]
    whole = [torch.randn(shape, generator=generator, dtype=dtype) for shape in shapes]
    reference = [x.detach().clone().requires_grad_() for x in whole[:3]]
    k_copied, v_copied = (x.repeat_interleave(heads // kv_heads, dim=1) for x in reference[1:])
    mask = attn.causal_mask(length) if causal else None
    dense = attn.attention(reference[0], k_copied, v_copied, mask)[0]
    dense.backward(whole[3])
    expected = [dense.detach(), *(x.grad for x in reference)]
    expected = [split_sequence(x, world_size)[rank] for x in expected]
    inputs = [split_sequence(x, world_size)[rank].requires_grad_() for x in whole[:3]]
    stats = UlyssesStats()
    out = ulysses_attention(*inputs, causal=causal, group=group, stats=stats)
    out.backward(split_sequence(whole[3], world_size)[rank])
    got = [out.detach(), *(x.grad for x in inputs)]
    errors = {
        name: float((a - b).abs().max())
        for name, a, b in zip(("out", "grad_q", "grad_k", "grad_v"), got, expected)
    }
    return {
        "rank": rank,
        "errors": errors,
        "sent_bytes": stats.sent_bytes,
        "backward_sent_bytes": stats.backward_sent_bytes,
    }


def compare_rotary_with_dense(
    heads: int = 2, length: int = 32, dim: int = 8, *, layout: str = "balanced", group=None
) -> dict:
    """Run in every process of a group: causal ring attention of a random float64 sequence
    whose queries and keys are turned by rotary positions (``attnlib.decoder.rotary``), against
    dense attention of the whole sequence with the same positions. Each process turns its
    shard by ``shard_positions`` (its tokens' places in the whole sequence), and again by
    ``0 … n − 1`` (the positions a model would give a shard if nobody told it where its tokens
    lie). Returns this process's ``rank`` and the largest difference of its output rows from
    dense attention's, ``{"whole-sequence positions": …, "shard positions": …}``.

    >>> results = launch(compare_rotary_with_dense, 2)
    >>> [r["errors"]["whole-sequence positions"] < 1e-12 for r in results]
    [True, True]
    """
    from ..decoder import rotary

    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    generator = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 1, heads, length, dim, generator=generator, dtype=torch.float64)
    positions = torch.arange(length)
    dense = attn.attention(rotary(q, positions), rotary(k, positions), v, attn.causal_mask(length))
    expected = split_sequence(dense[0], world_size, layout)[rank]
    q_shard, k_shard, v_shard = (split_sequence(x, world_size, layout)[rank] for x in (q, k, v))
    placed = {
        "whole-sequence positions": shard_positions(rank, world_size, length, layout),
        "shard positions": torch.arange(length // world_size),
    }
    errors = {}
    for name, where in placed.items():
        out = ring_attention(
            rotary(q_shard, where), rotary(k_shard, where), v_shard,
            causal=True, layout=layout, group=group,
        )  # fmt: skip
        errors[name] = float((out - expected).abs().max())
    return {"rank": rank, "errors": errors}


def compare_with_pytorch_context_parallel(length: int = 16) -> dict:
    """Run in every process of the default group: PyTorch's context parallelism
    (``torch.distributed.tensor.experimental.context_parallel``, a prototype) beside ours.
    Its ``buffers`` (here a causal sequence's q, k, v and its positions ``0 … L − 1``) are cut
    with its default load balancing; we check that each process's piece is its shard of our
    balanced layout. Then its ``scaled_dot_product_attention`` runs inside the context, the
    output compared with ``ring_attention``'s; where PyTorch cannot run it (on a CPU in
    torch 2.13: no CPU attention kernel is supported), the error is returned instead.

    Returns ``rank``, ``same_shards`` (bool), ``attention`` (the largest difference from
    ``ring_attention``'s output, or None) and ``error`` (``"Type: message"`` or None).
    """
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    rank, world_size = dist.get_rank(), dist.get_world_size()  # its mesh spans every process
    generator = torch.Generator().manual_seed(0)
    whole = torch.randn(3, 1, 2, length, 8, generator=generator)
    q, k, v = (x.clone() for x in whole)
    positions = torch.arange(length)
    ours = [split_sequence(x, world_size, "balanced")[rank] for x in whole]
    ring_out = ring_attention(*ours, causal=True, layout="balanced")
    mesh = init_device_mesh("cpu", (world_size,))
    result = {"rank": rank, "attention": None, "error": None}
    with context_parallel(mesh, buffers=[q, k, v, positions], buffer_seq_dims=[2, 2, 2, 0]):
        result["same_shards"] = all(torch.equal(a, b) for a, b in zip((q, k, v), ours)) and (
            torch.equal(positions, shard_positions(rank, world_size, length, "balanced"))
        )
        try:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            result["attention"] = float((out - ring_out).abs().max())
        except (NotImplementedError, RuntimeError) as error:
            result["error"] = f"{type(error).__name__}: {error}"
    return result


def _warm_up(dim: int, dtype: torch.dtype, device: torch.device, group) -> None:
    """Ring attention of two tokens a process, forward and backward: what the first call in
    a process sets up once (connections, buffers) is then in place."""
    x = torch.zeros(1, 1, 2, dim, dtype=dtype, device=device, requires_grad=True)
    ring_attention(x, x, x, group=group).sum().backward()


def dense_reference(q, k, v, upstream, causal: bool) -> list[torch.Tensor]:
    """Dense attention of whole sequences (``attnlib.torch.attention``, the plain formula)
    and the gradients of ``sum(output ∘ upstream)`` with respect to q, k and v: ``[output,
    dq, dk, dv]``."""
    inputs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    mask = attn.causal_mask(q.shape[-2], device=q.device) if causal else None
    out = attn.attention(*inputs, mask)[0]
    out.backward(upstream)
    return [out.detach(), *(x.grad for x in inputs)]


def peak_memory_bytes(call: Callable[[], object], device: torch.device):
    """``(call(), bytes)``: what ``call`` returns and the memory it added at its peak
    (``attnlib.bench.peak_of``). On a Linux CPU the C library is first told to return freed
    blocks of 64 KiB or more to the system, so that the figure is the call's own; on a CPU
    where that cannot be done, None."""
    if device.type != "cuda" and not _return_freed_blocks():
        return call(), None
    return bench.peak_of(call, device)


def _return_freed_blocks() -> bool:
    """Tell the C library (glibc, Linux) to give every block of 64 KiB or more back to the
    system as soon as it is freed, so that a resident-set peak measures what a call itself
    needs, not memory freed earlier and reused. False where that cannot be done."""
    if not sys.platform.startswith("linux"):
        return False
    M_MMAP_THRESHOLD = -3  # mallopt's parameter, glibc's malloc.h
    try:
        return bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 65536))
    except (AttributeError, OSError):  # not glibc (musl has no mallopt)
        return False


# --------------------------------------------------------------------------- the command


def main(argv: list[str] | None = None) -> int:
    """``python -m attnlib.distributed``: check ring attention against dense attention,
    without and with the causal mask, in every layout, forward and backward; print each
    process's largest error, tiles, peak memory of the ring (``peak_memory_bytes``) and bytes
    sent; exit 1 if an error is too large (float64: 1e-10; float32: 1e-4). Each process also
    computes dense attention of the whole sequence, the reference, so ``--length`` is limited
    by what one process can hold densely.

    Two ways to run it::

        python -m attnlib.distributed --processes 4       # 4 local gloo processes (CPU)
        torchrun --nproc-per-node 4 -m attnlib.distributed --length 4096 --dtype float32

    Under ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
    ``MASTER_ADDR``), each process joins the group torchrun describes: ``nccl`` on GPU
    ``LOCAL_RANK`` when CUDA is available (one GPU per process), else ``gloo``; process 0
    prints. ``--backend`` chooses another. (The ``nccl`` path has never run: no GPU was
    available to the authors.)
    """
    parser = argparse.ArgumentParser(
        prog="python -m attnlib.distributed", description=main.__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--processes", type=int, default=4, help="local processes (without torchrun)"
    )
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--length", type=int, default=64, help="tokens of the whole sequence")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    options = parser.parse_args(argv)
    sizes = (options.batch, options.heads, options.length, options.dim)
    dtype = getattr(torch, options.dtype)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        return _main_in_group(sizes, dtype, options.backend)
    results = launch(_run_every_check, options.processes, sizes, dtype)
    print(_report(results, dtype))
    return 0 if _passed(results, dtype) else 1


#: The largest error ``main`` accepts, by dtype.
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4}
CHECKS = [(causal, layout) for causal in (False, True) for layout in LAYOUTS]


def _run_every_check(sizes, dtype) -> list[dict]:
    """``compare_with_dense`` for every entry of ``CHECKS``, in this process."""
    return [compare_with_dense(*sizes, causal=c, layout=lay, dtype=dtype) for c, lay in CHECKS]


def _main_in_group(sizes, dtype, backend) -> int:
    """``main`` in a process started by torchrun."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    try:
        mine = _run_every_check(sizes, dtype)
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
    finally:
        dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        print(f"backend {backend}")
        print(_report(everyone, dtype))
    return 0 if _passed(everyone, dtype) else 1


def _report(results: list[list[dict]], dtype) -> str:
    """A table: one line per check and process."""
    lines = [
        f"{'causal':>6} {'layout':>10} {'rank':>4} {'largest error':>13} {'tiles':>5} "
        f"{'peak MiB':>8}  bytes sent per step (forward)"
    ]
    for index, (causal, layout) in enumerate(CHECKS):
        for per_rank in results:
            r = per_rank[index]
            error = max(r["errors"].values())
            peak = "-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.1f}"
            lines.append(
                f"{causal!s:>6} {layout:>10} {r['rank']:>4} {error:>13.2e} {r['tiles']:>5} "
                f"{peak:>8}  {r['sent_bytes']}"
            )
    verdict = "passed" if _passed(results, dtype) else "FAILED"
    lines.append(f"{verdict}: every error below {TOLERANCE[dtype]:g} ({str(dtype)[6:]})")
    return "\n".join(lines)


def _passed(results: list[list[dict]], dtype) -> bool:
    """Whether every error of every check in every process is within ``TOLERANCE``."""
    return all(max(r["errors"].values()) < TOLERANCE[dtype] for rs in results for r in rs)
