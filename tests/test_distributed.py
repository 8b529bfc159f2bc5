"""Ring attention (attnlib.distributed) in 1 to 4 local processes joined by gloo on the CPU:
outputs and gradients equal dense attention's, causal and not, in both layouts; the balanced
layout balances the causal tiles; bytes sent per step; the errors; and launch itself (a
process that raises, dies or hangs fails the call instead of blocking it).

Every test starts its processes with ``launch`` (fork on Linux: a fraction of a second each),
with a timeout, so a hang fails the test. Functions defined here can run in the processes
because fork copies them; only the test of spawn needs functions of attnlib's own modules.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from attnlib import distributed as ad
from attnlib import torch as attn
from attnlib.distributed import launcher
from attnlib.distributed import ring as ring_module

TIMEOUT = 60.0  # seconds: a hang fails the test instead of blocking the run
BATCH, HEADS, LENGTH, DIM = 1, 2, 24, 8  # L = 24 divides into 2P chunks for P = 2, 3 and 4


def run_every_check(dtype):
    """``compare_with_dense`` without and with the causal mask, in both layouts."""
    return {
        (causal, layout): ad.compare_with_dense(
            BATCH, HEADS, LENGTH, DIM, causal=causal, layout=layout, dtype=dtype, seed=7
        )
        for causal in (False, True)
        for layout in ad.LAYOUTS
    }


@pytest.fixture(scope="module")
def float64_runs():
    """Every check in 1, 2, 3 and 4 processes, float64: one launch per number of processes."""
    return {p: ad.launch(run_every_check, p, torch.float64, timeout=TIMEOUT) for p in (1, 2, 3, 4)}


@pytest.mark.parametrize("processes", [1, 2, 3, 4])
def test_outputs_and_gradients_equal_dense_attention_float64(float64_runs, processes):
    for rank, checks in enumerate(float64_runs[processes]):
        for (causal, layout), result in checks.items():
            assert result["rank"] == rank and result["world_size"] == processes
            for name, error in result["errors"].items():
                assert error < 1e-10, (processes, rank, causal, layout, name, error)


def test_outputs_and_gradients_equal_dense_attention_float32():
    for checks in ad.launch(run_every_check, 3, timeout=TIMEOUT, dtype=torch.float32):
        for key, result in checks.items():
            assert max(result["errors"].values()) < 1e-5, (key, result["errors"])


def test_balanced_layout_balances_the_causal_tiles(float64_runs):
    """At P = 4, counted while computing: contiguous causal shards give process r 4r + 3 tiles
    (process 3 five times as many as process 0); balanced shards give every process 9."""
    runs = float64_runs[4]
    tiles = {
        (causal, layout): [checks[causal, layout]["tiles"] for checks in runs]
        for causal in (False, True)
        for layout in ad.LAYOUTS
    }
    assert tiles[True, "contiguous"] == [3, 7, 11, 15]
    assert tiles[True, "balanced"] == [9, 9, 9, 9]
    assert tiles[True, "striped"] == tiles[False, "striped"] == [4, 4, 4, 4]  # one chunk a shard
    assert tiles[False, "contiguous"] == tiles[False, "balanced"] == [16, 16, 16, 16]
    assert sum(tiles[True, "contiguous"]) == sum(tiles[True, "balanced"])  # the same work
    for key, counted in tiles.items():  # what ran is what the plan says
        assert counted == ad.tile_counts(4, LENGTH, layout=key[1], causal=key[0])
    scores = {layout: [checks[True, layout]["scores"] for checks in runs] for layout in ad.LAYOUTS}
    assert scores["balanced"] == [81] * 4  # 9 tiles of 3 queries × 3 keys
    assert scores["contiguous"] == [27, 63, 99, 135]
    assert scores["striped"] == [144] * 4  # 4 tiles of 6 × 6, each cut by the mask: computed whole
    masked = [checks[True, "balanced"]["masked_tiles"] for checks in runs]
    assert masked == [2] * 4  # each of its two chunks against itself
    assert [checks[True, "striped"]["masked_tiles"] for checks in runs] == [4] * 4


def test_counts_without_running():
    for p in (1, 2, 3, 4, 8):
        assert ad.tile_counts(p, 4 * p, layout="contiguous", causal=True) == [
            4 * r + 3 for r in range(p)
        ]
        assert ad.tile_counts(p, 4 * p, layout="balanced", causal=True) == [2 * p + 1] * p
        assert ad.tile_counts(p, 4 * p, layout="balanced", causal=False) == [4 * p] * p
    # one token per chunk: a tile of a token with itself needs no mask
    assert ad.tile_counts(2, 4, layout="balanced", causal=True) == [5, 5]
    assert ad.score_counts(4, 8, layout="balanced", causal=True) == [9] * 4


def test_the_striped_layout_balances_the_scores_a_kernel_must_compute():
    """Striped shards: every process computes P tiles; in blocks of one score (a kernel that
    skips every masked score), process r computes P·n(n − 1)/2 + n(r + 1) scores, the balanced
    layout's count give or take n·P/2; in blocks of 256 (ours) a tile shorter than a block is
    computed whole, twice the useful work."""
    for p, n in ((2, 4), (4, 6), (4, 64)):
        assert ad.tile_counts(p, p * n, layout="striped", causal=True) == [p] * p
        useful = ad.score_counts(p, p * n, layout="striped", causal=True, block=1)
        assert useful == [p * n * (n - 1) // 2 + n * (r + 1) for r in range(p)]
        balanced = ad.score_counts(p, p * n, layout="balanced", causal=True, block=1)
        assert max(abs(a - b) for a, b in zip(useful, balanced)) <= n * p / 2
        assert sum(useful) == sum(balanced) == p * n * (p * n + 1) // 2  # the causal triangle
        assert ad.score_counts(p, p * n, layout="striped", causal=True) == [p * n * n] * p
    # long shards: in blocks of 256 the waste is the diagonal blocks only
    p, n = 2, 4096
    blocks = ad.score_counts(p, p * n, layout="striped", causal=True)
    useful = [p * n * (n - 1) // 2 + n * (r + 1) for r in range(p)]  # the formula above
    assert all(1 < b / u < 1.1 for b, u in zip(blocks, useful))


def test_bytes_sent_per_step(float64_runs):
    """Forward: the key and value shards, at every step but the last; backward: those, and
    their gradients at every step (the last hop takes them home)."""
    shard = BATCH * HEADS * (LENGTH // 4) * DIM * 8  # bytes of one float64 shard at P = 4
    for checks in float64_runs[4]:
        for result in checks.values():
            assert result["sent_bytes"] == [2 * shard] * 3 + [0]
            assert result["backward_sent_bytes"] == [4 * shard] * 3 + [2 * shard]
    one = float64_runs[1][0][True, "balanced"]
    assert one["sent_bytes"] == [0] and one["backward_sent_bytes"] == [0]


def other_shapes():
    """d_v ≠ d_k, two leading axes, float16 inputs, and a forward pass without gradients."""
    rank, size = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 3, 12, 4, generator=generator, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 3, 12, 5, generator=generator, dtype=torch.float64)
    dense = attn.attention(q, k, v, attn.causal_mask(12))[0]
    expected = ad.split_sequence(dense, size, "balanced")[rank]
    shards = [ad.split_sequence(x, size, "balanced")[rank] for x in (q, k, v)]
    with torch.no_grad():
        out = ad.ring_attention(*shards, causal=True, layout="balanced")
    half = ad.ring_attention(*(x.half() for x in shards), causal=True, layout="balanced")
    scale = ad.ring_attention(*shards, scale=0.5)
    dense_scale = ad.split_sequence(attn.attention(q, k, v, scale=0.5)[0], size, "balanced")[rank]
    return (
        tuple(out.shape),
        float((out - expected).abs().max()),
        half.dtype,
        float((half.double() - expected).abs().max()),
        float((scale - dense_scale).abs().max()),
    )


def test_other_shapes_and_dtypes():
    for shape, error, half_dtype, half_error, scale_error in ad.launch(other_shapes, 3):
        assert shape == (2, 3, 4, 5)
        assert error < 1e-12 and scale_error < 1e-12
        assert half_dtype == torch.float16 and half_error < 3e-3  # float32 state, rounded once


def ring_in_a_subgroup():
    """Processes 1 and 2 of 3 run the ring in a group of their own."""
    group = dist.new_group([1, 2])  # every process takes part in making it
    if dist.get_rank() == 0:
        return None
    return ad.compare_with_dense(causal=True, layout="balanced", group=group)


def test_a_ring_in_a_subgroup():
    nobody, *results = ad.launch(ring_in_a_subgroup, 3, timeout=TIMEOUT)
    assert nobody is None
    assert [(r["rank"], r["world_size"]) for r in results] == [(0, 2), (1, 2)]
    assert all(max(r["errors"].values()) < 1e-10 for r in results)


def error_of(call) -> str:
    """The message of the ValueError or TypeError ``call`` raises ("" if none)."""
    try:
        call()
    except (ValueError, TypeError) as error:
        return f"{type(error).__name__}: {error}"
    return ""


def bad_inputs():
    """Every process makes the same calls; the wrong ones raise in every process, and the
    group still works afterwards."""
    rank = dist.get_rank()
    x = torch.randn(1, 2, 3, 4)  # 3 tokens a shard: no balanced layout at P = 2
    longer = torch.randn(1, 2, 3 + rank, 4)  # process 1 holds one token more
    return {
        "odd shards, balanced": error_of(lambda: ad.ring_attention(x, x, x, layout="balanced")),
        "different shapes": error_of(lambda: ad.ring_attention(longer, longer, longer)),
        "different causal": error_of(lambda: ad.ring_attention(x, x, x, causal=rank == 0)),
        "different lengths of q and k": error_of(
            lambda: ad.ring_attention(x, x[..., :2, :], x[..., :2, :])
        ),
        "d_k mismatch": error_of(lambda: ad.ring_attention(x, x[..., :3], x)),
        "integer input": error_of(lambda: ad.ring_attention(x.long(), x.long(), x.long())),
        "unknown layout": error_of(lambda: ad.ring_attention(x, x, x, layout="zigzag")),
        "still works": float(ad.ring_attention(x, x, x).sum().isfinite()),
    }


def test_bad_input_gives_a_clear_error_in_every_process():
    for rank, errors in enumerate(ad.launch(bad_inputs, 2, timeout=TIMEOUT)):
        assert (
            "layout='balanced' needs a sequence length L divisible by 2P"
            in (errors["odd shards, balanced"])
        )
        assert errors["different shapes"].startswith("ValueError: ring_attention: every process")
        assert "process 0: q (1, 2, 3, 4)" in errors["different shapes"]
        assert "process 1: q (1, 2, 4, 4)" in errors["different shapes"]
        assert (
            "process 0: q (1, 2, 3, 4), k (1, 2, 3, 4), v (1, 2, 3, 4), float32, causal=True"
            in (errors["different causal"])
        )
        assert "shards of one sequence" in errors["different lengths of q and k"]
        assert "same last dimension d_k" in errors["d_k mismatch"]
        assert errors["integer input"].startswith("TypeError: ring_attention: q must be a float")
        assert "layout must be one of 'contiguous', 'balanced'" in errors["unknown layout"]
        assert errors["still works"] == 1.0, rank


def test_no_process_group_is_a_clear_error():
    assert not dist.is_initialized()
    x = torch.randn(1, 4, 2)
    with pytest.raises(RuntimeError, match="no torch.distributed process group is initialised"):
        ad.ring_attention(x, x, x)


def test_split_and_join():
    x = torch.arange(24.0).reshape(1, 12, 2)
    for p in (1, 2, 3):
        for layout in ad.LAYOUTS:
            shards = ad.split_sequence(x, p, layout)
            assert [s.shape for s in shards] == [(1, 12 // p, 2)] * p
            assert torch.equal(ad.join_shards(shards, layout), x)
    balanced = ad.split_sequence(torch.arange(12.0)[:, None], 3, "balanced")
    assert [s.flatten().tolist() for s in balanced] == [[0, 1, 10, 11], [2, 3, 8, 9], [4, 5, 6, 7]]
    with pytest.raises(
        ValueError, match="split_sequence: .* divisible by P = 5, .*; got L=12 for P=5"
    ):
        ad.split_sequence(x, 5)
    with pytest.raises(ValueError, match=r"divisible by 2P \(two chunks per process\) = 8"):
        ad.split_sequence(x, 4, "balanced")
    with pytest.raises(ValueError, match="every shard must have the same shape"):
        ad.join_shards([x[:, :6], x[:, :4]])


def raise_in_process_1():
    if dist.get_rank() == 1:
        raise KeyError("only in process 1")
    dist.barrier()  # process 0 waits for process 1, which never comes


def test_launch_reports_an_exception_and_stops_the_others():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"process 1 of 2 failed:\n(.|\n)*KeyError"):
        ad.launch(raise_in_process_1, 2, timeout=TIMEOUT)
    assert time.monotonic() - start < 20  # not the timeout: process 0 was stopped


def die_in_process_0():
    if dist.get_rank() == 0:
        os._exit(3)
    time.sleep(TIMEOUT)


def test_launch_reports_a_process_that_dies():
    with pytest.raises(RuntimeError, match=r"process 0 of 2 died \(exit code 3\)"):
        ad.launch(die_in_process_0, 2, timeout=TIMEOUT)


def test_launch_times_out_on_a_hang():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"processes \[0, 1\] of 2 did not answer within 1.5 s"):
        ad.launch(time.sleep, 2, 30.0, timeout=1.5)
    assert time.monotonic() - start < 10


def refuse_broken_files(path, world_size):
    """``open_rendezvous`` as it fails in a process that cannot join its group."""
    if "broken" in path:
        raise ConnectionError(f"cannot join through {path}")
    return dist.FileStore(path, world_size)


def test_launch_starts_again_when_the_processes_cannot_form_a_group(monkeypatch):
    """The processes fail to join their group: launch starts them again with a new
    rendezvous file, three times at most."""
    monkeypatch.setattr(launcher, "open_rendezvous", refuse_broken_files)
    real = launcher.rendezvous_file
    # broken once, then fine: the second attempt forms the group (or, where a loaded machine
    # makes that one fail too, as it did once on CI, the third)
    names, used = itertools.chain(["broken"], itertools.repeat("fine")), []

    def rendezvous_file(folder):
        used.append(next(names))
        return real(folder) + used[-1]

    monkeypatch.setattr(launcher, "rendezvous_file", rendezvous_file)
    assert ad.launch(dist.get_rank, 2, timeout=TIMEOUT) == [0, 1]
    assert used[0] == "broken" and 2 <= len(used) <= 3
    monkeypatch.setattr(launcher, "rendezvous_file", lambda folder: real(folder) + "broken")
    with pytest.raises(
        RuntimeError, match=r"could not form a group \(3 attempts\)(.|\n)*cannot join through"
    ):
        ad.launch(dist.get_rank, 2, timeout=TIMEOUT)


def listening_addresses():
    """The local addresses of the TCP sockets on which this process listens (Linux)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor that listed the folder, closed since
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = []
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                host = bytes.fromhex(fields[1].split(":")[0])
                addresses.append(socket.inet_ntop(
                    socket.AF_INET if size == 4 else socket.AF_INET6,
                    host[::-1] if size == 4 else b"".join(
                        host[i : i + 4][::-1] for i in range(0, 16, 4)
                    ),
                ))  # fmt: skip
    dist.barrier()  # every process's sockets are open while the others look
    return addresses


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_the_processes_listen_on_the_loopback_interface_only():
    """No store listens for the rendezvous (a file does), and gloo's own connections listen
    on 127.0.0.1: nothing of a launch can be reached from another computer."""
    for addresses in ad.launch(listening_addresses, 2, timeout=TIMEOUT):
        assert addresses and all(a in ("127.0.0.1", "::1") for a in addresses), addresses


def bad_input_in_process_1_only():
    x = torch.randn(1, 4, 2)
    if dist.get_rank() == 1:
        x[0, 0, 0] = math.nan
    try:
        ad.ring_attention(x, x, x)
    except ValueError as error:
        return str(error)
    return "no error"


def test_a_check_that_fails_in_one_process_raises_in_every_process():
    """Process 1's input holds a NaN: it raises, and process 0, whose input is fine, raises
    too (naming process 1) instead of waiting for it in the ring until the timeout."""
    start = time.monotonic()
    errors = ad.launch(bad_input_in_process_1_only, 2, timeout=TIMEOUT)
    assert "NaN" in errors[1] and errors[1].startswith("ring_attention:")
    assert errors[0].startswith("ring_attention: process 1 could not start, so no process can")
    assert "NaN" in errors[0]
    assert time.monotonic() - start < 20


def test_nccl_needs_a_gpu_per_process():
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(ValueError, match=rf"one GPU per process; got world_size={gpus + 1}"):
        ad.launch(dist.get_rank, gpus + 1, backend="nccl")


PARENT = """
import os, sys, time
import torch.distributed as dist
from attnlib.distributed import launch

def report_and_wait(folder):
    open(os.path.join(folder, str(os.getpid())), "w").close()
    time.sleep(120)

launch(report_and_wait, 2, sys.argv[1], timeout=300)
"""


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie, ended but not yet
    collected by its new parent, counts as ended)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl: Linux only")
def test_the_processes_die_with_the_process_that_launched_them(tmp_path):
    """Kill the launching process outright (SIGKILL: no cleanup runs in it): its processes
    end too, instead of living on as orphans."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)])
    deadline = time.monotonic() + TIMEOUT
    while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    children = [int(p.name) for p in tmp_path.iterdir()]
    assert len(children) == 2
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in children):
        assert time.monotonic() < deadline, "a process outlived its parent"
        time.sleep(0.1)


def test_spawn_needs_a_function_it_can_import():
    with pytest.raises(RuntimeError, match="Define it at the top level of a module"):
        ad.launch(lambda: 0, 2, start_method="spawn", timeout=TIMEOUT)


@pytest.mark.slow  # fresh interpreters import torch: about 10 s on the 2-core machine
def test_spawn_runs_a_function_of_a_module():
    results = ad.launch(ad.compare_with_dense, 2, start_method="spawn", timeout=TIMEOUT)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(max(r["errors"].values()) < 1e-10 for r in results)


def test_command_line_check(capsys):
    assert ad.main(["--processes", "2", "--length", "8", "--dim", "4"]) == 0
    out = capsys.readouterr().out
    assert "passed: every error below 1e-10 (float64)" in out
    assert out.count("\n") == 1 + 6 * 2 + 1  # a header, 6 checks × 2 processes, the verdict


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ad.LAYOUTS)
def test_each_step_runs_in_blocks_and_still_equals_dense_attention(monkeypatch, causal, layout):
    """With blocks of 5 (FlashAttention inside each ring step, blocks that do not divide the
    chunks of 12), outputs and gradients still equal dense attention's, in float64."""
    monkeypatch.setattr(ring_module, "BLOCK", 5)  # the forked processes inherit it
    results = ad.launch(
        ad.compare_with_dense, 2, length=48, causal=causal, layout=layout, timeout=TIMEOUT
    )
    assert all(max(r["errors"].values()) < 1e-10 for r in results)


def test_tile_blocks_cover_the_tile_and_skip_what_the_mask_hides():
    contiguous = ad.Tile(range(10, 23), range(4, 30), slice(3, 16), slice(0, 26), masked=True)
    striped = ad.Tile(range(1, 40, 3), range(2, 80, 3), slice(3, 16), slice(0, 26), masked=True)
    for tile in (contiguous, striped):
        covered = torch.zeros(13, 26, dtype=torch.bool)
        for block in ring_module.tile_blocks(tile, size=4):
            assert len(block.query) <= 4 and len(block.key) <= 4
            rows = slice(block.query_rows.start - 3, block.query_rows.stop - 3)
            assert not covered[rows, block.key_rows].any()  # no score twice
            covered[rows, block.key_rows] = True
            if not block.masked:  # a block without a mask: every key at or before every query
                assert block.key[-1] <= block.query[0]
            first = tile.query.index(block.query[0]), tile.key.index(block.key[0])
            assert torch.equal(  # the block's mask is its part of the tile's
                block.allowed(),
                tile.allowed()[first[0] : first[0] + 4, first[1] : first[1] + 4],
            )
        assert covered[tile.allowed()].all()  # every allowed score is computed


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("processes", "heads", "kv_heads"), [(2, 4, 4), (2, 4, 2), (4, 8, 4)])
def test_ulysses_equals_dense_attention(processes, heads, kv_heads, causal):
    """Ulysses (heads split by all-to-all, GQA included): outputs and the gradients of q, k
    and v equal dense attention's, float64."""
    results = ad.launch(
        ad.compare_ulysses_with_dense, processes, heads=heads, kv_heads=kv_heads, length=32,
        causal=causal, timeout=TIMEOUT,
    )  # fmt: skip
    assert all(max(r["errors"].values()) < 1e-10 for r in results), results


def test_ulysses_sends_what_its_formula_says():
    """Each of the four all-to-alls of the forward pass (q, k, v, the output) sends all but
    this process's 1/P of the tensor: (P − 1)/P · n · (2H_q + 2H_kv) · d numbers in all."""
    processes, heads, kv_heads, length, dim = 4, 8, 4, 32, 8
    results = ad.launch(
        ad.compare_ulysses_with_dense, processes, heads=heads, kv_heads=kv_heads, length=length,
        dim=dim, timeout=TIMEOUT,
    )  # fmt: skip
    n = length // processes
    numbers = (processes - 1) * n * (2 * heads + 2 * kv_heads) * dim // processes
    assert all(sum(r["sent_bytes"]) == 8 * numbers for r in results)  # float64: 8 bytes
    assert all(len(r["sent_bytes"]) == 4 for r in results)
    # the backward pass: the same four exchanges in reverse, for the gradients
    assert all(sorted(r["backward_sent_bytes"]) == sorted(r["sent_bytes"]) for r in results)


def ulysses_with_too_few_heads():
    x = torch.randn(1, 4, 3, 2)
    try:
        ad.ulysses_attention(x, x[:, :2], x[:, :2])
    except ValueError as error:
        return str(error)
    return "no error"


def bad_ulysses_inputs():
    """Every process makes the same calls (and one that only process 1 gets wrong); each wrong
    call raises in every process, and the group still works afterwards."""
    rank = dist.get_rank()
    x = torch.randn(1, 2, 3, 4)  # (B, H, n, d)
    poisoned = x.clone()
    poisoned[0, 0, 0, 0] = float("nan") if rank == 1 else 0.0
    call = ad.ulysses_attention
    return {
        "not a tensor": error_of(lambda: call(x.tolist(), x, x)),
        "three dimensions": error_of(lambda: call(x[0], x[0], x[0])),
        "integer input": error_of(lambda: call(x.long(), x.long(), x.long())),
        "mixed dtypes": error_of(lambda: call(x, x.double(), x)),
        "scale as text": error_of(lambda: call(x, x, x, scale="2")),
        "scale NaN": error_of(lambda: call(x, x, x, scale=float("nan"))),
        "causal as text": error_of(lambda: call(x, x, x, causal="False")),
        "d_k mismatch": error_of(lambda: call(x, x[..., :3], x)),
        "different n of k": error_of(lambda: call(x, x[..., :2, :], x[..., :2, :])),
        "heads not grouped": error_of(lambda: call(torch.randn(1, 3, 3, 4), x, x)),
        "NaN in process 1": error_of(lambda: call(poisoned, x, x)),
        "still works": float(call(x, x, x).sum().isfinite()),
    }


def test_ulysses_bad_input_gives_a_clear_error_in_every_process():
    start = time.monotonic()
    results = ad.launch(bad_ulysses_inputs, 2, timeout=TIMEOUT)
    assert time.monotonic() - start < 30  # nobody waited in an exchange for its timeout
    for rank, errors in enumerate(results):
        assert errors["not a tensor"] == (
            "TypeError: ulysses_attention: q must be a torch.Tensor; got list"
        )
        assert (
            "q must be a (B, H, n, d) tensor, 4 dimensions; got q.shape=(2, 3, 4)"
            in (errors["three dimensions"])
        )
        assert errors["integer input"].startswith("TypeError: ulysses_attention: q must be a float")
        assert "must have the same dtype" in errors["mixed dtypes"]
        assert "scale must be" in errors["scale as text"]
        assert "scale must be finite and above 0" in errors["scale NaN"]
        assert "causal must be True or False" in errors["causal as text"]
        assert "q and k the same d" in errors["d_k mismatch"]
        assert "the same B and n" in errors["different n of k"]
        assert (
            "heads of q (3) must be a multiple of those of k and v (2"
            in (errors["heads not grouped"])
        )
        nan = errors["NaN in process 1"]
        assert "NaN" in nan, rank
        if rank == 0:
            assert nan.startswith("ValueError: ulysses_attention: process 1 could not start")
        assert errors["still works"] == 1.0, rank


def test_ulysses_needs_as_many_key_value_heads_as_processes():
    for message in ad.launch(ulysses_with_too_few_heads, 4, timeout=TIMEOUT):
        assert (
            "heads of k (2" in message and "divisible by the number of processes P = 4" in message
        )


@pytest.mark.parametrize(
    ("processes", "layout"), [(2, "balanced"), (4, "balanced"), (2, "striped")]
)
def test_rotary_positions_follow_the_tokens_of_the_balanced_layout(processes, layout):
    """A model with rotary positions gives dense attention's output under the balanced (and
    striped) layout when each process turns its tokens by their places in the whole sequence
    (``shard_positions``); by 0 … n − 1 it does not."""
    results = ad.launch(ad.compare_rotary_with_dense, processes, layout=layout, timeout=TIMEOUT)
    for r in results:
        assert r["errors"]["whole-sequence positions"] < 1e-12, r
        assert r["errors"]["shard positions"] > 0.1, r


def test_shard_positions_are_where_split_sequence_takes_the_tokens():
    for layout in ad.LAYOUTS:
        positions = torch.arange(24.0)[:, None]
        shards = ad.split_sequence(positions, 3, layout)
        for rank, shard in enumerate(shards):
            assert ad.shard_positions(rank, 3, 24, layout).tolist() == shard.flatten().tolist()


@pytest.mark.slow  # PyTorch's DTensor machinery: about 3 s
def test_pytorch_context_parallel_cuts_the_sequence_as_our_balanced_layout():
    """PyTorch's context_parallel shards its buffers (q, k, v, the positions) exactly as our
    balanced layout; its attention, where it runs, equals ring_attention's. On a CPU torch
    2.13 has no sharding rule for its CPU attention kernel: the lesson says so, and this test
    will tell us when that changes."""
    results = ad.launch(ad.compare_with_pytorch_context_parallel, 2, timeout=TIMEOUT)
    for r in results:
        assert r["same_shards"], r
        if r["error"] is None:
            assert r["attention"] < 1e-5, r
        else:
            assert r["error"].startswith("NotImplementedError") and "_for_cpu" in r["error"], r


def test_a_transfer_can_be_waited_for_twice():
    """gloo would wait forever for a request's second completion: Transfer.wait returns at
    once the second time."""

    def exchange_and_wait_twice():
        transfer = ring_module.Ring().start([torch.full((3,), float(dist.get_rank()))])
        first = transfer.wait()[0].tolist()
        return first, transfer.wait()[0].tolist()

    results = ad.launch(exchange_and_wait_twice, 2, timeout=20)
    assert results == [([1.0] * 3, [1.0] * 3), ([0.0] * 3, [0.0] * 3)]


def test_the_slow_link_hands_a_transfer_over_no_earlier_than_its_bandwidth_allows():
    def timed_exchange():
        link = ad.SlowLink(bytes_per_second=4000 / 0.2)  # 4000 bytes in 0.2 s
        began = time.perf_counter()
        link.start([torch.zeros(1000)]).wait()  # 1000 float32: 4000 bytes
        return time.perf_counter() - began

    assert all(0.2 <= t < 2 for t in ad.launch(timed_exchange, 2, timeout=TIMEOUT))


@pytest.mark.slow  # it times 33 forward passes: about 4 s
def test_overlap_hides_the_slow_link_and_waiting_pays_for_it():
    """The overlapped schedule takes about as long as computing alone when the link is faster
    than a step (model: no longer); the schedule that waits pays the link at each step (model:
    T more per transfer). Medians of differences taken round by round, in units of that
    round's T (T follows the speed of the moment), with margins for a loaded machine. A
    round's two passes on the slow link run between its pass on the fast link and the next
    round's: the two are averaged, so that a load that grows or fades during the round (a run
    failed when it faded from 108 to 51 ms a pass) weighs on both sides alike."""
    rounds = 11
    results = ad.launch(ad.time_overlap, 2, length=2048, rounds=rounds, timeout=TIMEOUT)
    compute, overlapped, waiting = (
        torch.tensor([max(getattr(r, name)[i] for r in results) for i in range(rounds)])
        for name in ("compute", "overlapped", "waiting")
    )
    link = torch.tensor(results[0].link)[:-1]
    around = (compute[:-1] + compute[1:]) / 2  # the fast-link passes before and after
    hidden = ((overlapped[:-1] - around) / link).median()
    paid = ((waiting[:-1] - overlapped[:-1]) / link).median()
    assert hidden < 0.5 < paid, (compute, overlapped, waiting, link)
