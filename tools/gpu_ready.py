"""Compile attnlib's Triton kernels for the GPUs a learner meets, on any machine, and check
what each compiled kernel asks of the GPU against that GPU's limits. Nothing is launched.

Triton compiles for a target it is given (``triton.compile`` with a ``GPUTarget``), through
the LLVM and ``ptxas`` that its wheel ships, so a CPU-only Linux machine can build the
kernels for a T4 (sm_75, Colab's free GPU), an A100 (sm_80) or an H100 (sm_90). What only
compilation decides, and the interpreter never sees, is checked here: that the kernel
compiles at all for that architecture, the shared memory one program uses (at most the
GPU's opt-in maximum per block, else the launch fails), the registers per thread (at most
255), and the local memory per thread (registers spilled and the stack frame, in the GPU's
slow memory: slow, not wrong)::

    python tools/gpu_ready.py          # the block settings where the limits bind: 21 compiles
    python tools/gpu_ready.py --all    # every head size 16-128 in float16, bfloat16, float32

It runs in a process of its own: Triton chooses compiled or interpreted when it is first
imported, and a test process runs the interpreter. ``tests/test_gpu_ready.py`` runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # before triton is imported: compile, do not interpret

import torch  # noqa: E402

#: The GPUs: compute capability → (a GPU of that kind, the most shared memory one program may
#: ask for in bytes, the opt-in maximum that Triton's ``max_shared_mem`` reports there).
GPUS = {75: ("T4", 65536), 80: ("A100", 166912), 90: ("H100", 232448)}
MAX_REGISTERS = 255  # per thread, on every NVIDIA GPU since Kepler
HEAD_DIMS = (16, 32, 64, 128)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
CONSTANTS = ("CAUSAL", "HEAD_DIM", "BLOCK_Q", "BLOCK_K", "PRECISION")


@dataclass(frozen=True)
class Compiled:
    """One kernel compiled for one GPU: what it asks of that GPU."""

    kernel: str
    arch: int
    head_dim: int
    dtype: str
    blocks: tuple[int, int]
    shared: int  # bytes of shared memory per program
    registers: int  # per thread
    local: int  # bytes of local memory per thread: spilled registers and the stack frame

    def problems(self) -> list[str]:
        """What would stop a launch on this GPU (an empty list: nothing)."""
        gpu, shared_limit = GPUS[self.arch]
        found = []
        if self.shared > shared_limit:
            found.append(f"{self.shared} bytes of shared memory, {gpu} allows {shared_limit}")
        if self.registers > MAX_REGISTERS:
            found.append(f"{self.registers} registers per thread, at most {MAX_REGISTERS}")
        return found


def settings(all_settings: bool) -> list[tuple[int, int, str]]:
    """``(arch, head_dim, dtype)`` to compile. All of them, or for each GPU and each block
    setting that ``default_blocks`` chooses there, the head size and dtype with the widest
    rows (the most bytes of shared memory for those blocks)."""
    from attnlib.triton import default_blocks

    every = [(a, d, t) for a in GPUS for d in HEAD_DIMS for t in DTYPES]
    if all_settings:
        return every
    widest = {}
    for arch, head_dim, dtype in every:
        blocks = default_blocks(head_dim, DTYPES[dtype], GPUS[arch][1])
        row_bytes = head_dim * DTYPES[dtype].itemsize
        key = (arch, blocks)
        if key not in widest or row_bytes > widest[key][0]:
            widest[key] = (row_bytes, (arch, head_dim, dtype))
    return sorted(choice for _, choice in widest.values())


def compile_kernel(name: str, arch: int, head_dim: int, dtype: str) -> Compiled:
    """Compile kernel ``name`` of ``attnlib.triton.KERNELS`` for sm_``arch``, causal (its
    longest code), with the launch settings ``flash_attention`` would use there."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from attnlib import triton as attn_triton

    attn_triton._triton()  # binds ``tl``, which the kernels' annotations name
    torch_dtype = DTYPES[dtype]
    blocks = attn_triton.default_blocks(head_dim, torch_dtype, GPUS[arch][1])
    kernel = triton.jit(attn_triton.KERNELS[name])
    element = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32"}[dtype]
    scalars = {"qk_scale": "fp32", "scale": "fp32", "LENGTHS": "*i32"}
    scalars |= dict.fromkeys(("L_q", "L_k", "H_Q", "GROUP", "OFFSET", "CHUNK", "SPLITS"), "i32")
    float32 = ("LSE", "DELTA") + (("OUT",) if name == "decode" else ())  # decode's partials
    signature = {
        arg: "constexpr"
        if arg in CONSTANTS
        else scalars.get(arg, "*fp32" if arg in float32 else element)
        for arg in kernel.arg_names
    }
    constants = {
        "CAUSAL": True,
        "HEAD_DIM": head_dim,
        # decoding: one tile of the queries of a group (up to 16 query heads per key head)
        "BLOCK_Q": 16 if name == "decode" else blocks[0],
        "BLOCK_K": blocks[1],
        "PRECISION": "ieee" if torch_dtype == torch.float32 else None,
    }
    constants = {arg: value for arg, value in constants.items() if arg in kernel.arg_names}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constants)
    compiled = triton.compile(
        source, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4, "num_stages": 2}
    )
    registers, local = resource_usage(compiled.asm["cubin"])
    return Compiled(name, arch, head_dim, dtype, blocks, compiled.metadata.shared, registers, local)


def resource_usage(cubin: bytes) -> tuple[int, int]:
    """Registers per thread, and bytes of local memory per thread (spilled registers plus the
    stack frame: both live in the GPU's slow memory), as ``cuobjdump`` (shipped with triton)
    reads them from the compiled binary."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as binary:
        binary.write(cubin)
        binary.flush()
        report = subprocess.run(
            [str(tool), "--dump-resource-usage", binary.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    fields = dict(
        part.split(":", 1)
        for line in report.splitlines()
        if "REG:" in line
        for part in line.split()
    )
    return int(fields["REG"]), int(fields["LOCAL"]) + int(fields["STACK"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every head size and dtype")
    parser.add_argument("--json", action="store_true", help="one JSON object per kernel")
    args = parser.parse_args(argv)
    from attnlib.triton import KERNELS

    failures = 0
    if not args.json:
        print(f"{'GPU':<10}{'d':>4} {'dtype':<9}{'blocks':>9}  {'kernel':<15}"
              f"{'shared B':>9}{'regs':>6}{'local B':>8}")  # fmt: skip
    for arch, head_dim, dtype in settings(args.all):
        for name in KERNELS:
            result = compile_kernel(name, arch, head_dim, dtype)
            problems = result.problems()
            failures += bool(problems)
            if args.json:
                print(json.dumps({**asdict(result), "problems": problems}), flush=True)
                continue
            gpu = f"{GPUS[arch][0]} sm_{arch}"
            blocks = f"{result.blocks[0]}×{result.blocks[1]}"
            print(
                f"{gpu:<10}{head_dim:>4} {dtype:<9}{blocks:>9}  {name:<15}{result.shared:>9}"
                f"{result.registers:>6}{result.local:>8}  {'; '.join(problems) or 'fits'}",
                flush=True,
            )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
