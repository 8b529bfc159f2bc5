"""The checkers of the lesson on attention across devices: reference solutions pass,
plausible mistakes get a useful hint."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from attnlib.exercises import check

# ---------------------------------------------------------------- reference solutions


def pass_on(tensors):
    rank, size = dist.get_rank(), dist.get_world_size()
    received = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % size) for t in tensors]
    ops += [dist.P2POp(dist.irecv, t, (rank - 1) % size) for t in received]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return received


def to_heads(x):
    world_size = dist.get_world_size()
    batch, heads, n, dim = x.shape
    parts = x.reshape(batch, world_size, heads // world_size, n, dim).transpose(0, 1)
    received = torch.empty_like(parts.contiguous())
    dist.all_to_all_single(received, parts.contiguous())
    return received.permute(1, 2, 0, 3, 4).reshape(batch, heads // world_size, -1, dim)


def busiest_over_mean(world_size, layout):
    if layout == "contiguous":  # process r computes 4r + 3 tiles: mean 2P + 1
        return (4 * world_size - 1) / (2 * world_size + 1)
    return 1.0  # every process computes 2P + 1


# ---------------------------------------------------------------- plausible mistakes


def pass_on_the_other_way(tensors):
    rank, size = dist.get_rank(), dist.get_world_size()
    received = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, (rank - 1) % size) for t in tensors]
    ops += [dist.P2POp(dist.irecv, t, (rank + 1) % size) for t in received]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return received


def pass_on_what_was_sent(tensors):
    rank, size = dist.get_rank(), dist.get_world_size()
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % size) for t in tensors]
    ops += [dist.P2POp(dist.irecv, torch.empty_like(t), (rank - 1) % size) for t in tensors]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return tensors


def pass_on_without_returning(tensors):
    pass_on(tensors)


def to_heads_tokens_interleaved(x):  # the received parts put after the tokens, not before
    world_size = dist.get_world_size()
    batch, heads, n, dim = x.shape
    parts = x.reshape(batch, world_size, heads // world_size, n, dim).transpose(0, 1)
    received = torch.empty_like(parts.contiguous())
    dist.all_to_all_single(received, parts.contiguous())
    return received.permute(1, 2, 3, 0, 4).reshape(batch, heads // world_size, -1, dim)


def to_heads_all_heads(x):  # every head: gathered instead of exchanged
    gathered = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, x.contiguous())
    return torch.cat(gathered, dim=2)


def mean_over_busiest(world_size, layout):
    return 1 / busiest_over_mean(world_size, layout)


CORRECT = {
    "11.1": pass_on,
    "11.2": to_heads,
    "11.3": busiest_over_mean,
}

WRONG = [
    ("11.1", pass_on_the_other_way, "rank + 1"),
    ("11.1", pass_on_what_was_sent, "its own tensors back"),
    ("11.1", pass_on_without_returning, "returned None"),
    ("11.2", to_heads_tokens_interleaved, "row i of each head"),
    ("11.2", to_heads_all_heads, "shape"),
    ("11.3", mean_over_busiest, "busiest over"),
    ("11.3", lambda world_size, layout: 1.5, "expected"),
]

# tests/test_exercises.py runs the common checks on CORRECT and WRONG; these are particular.


def test_the_reference_agrees_with_the_ring_plan():
    from attnlib.exercises import lesson11

    for world_size in (1, 2, 5, 8):
        for layout in ("contiguous", "balanced"):
            assert busiest_over_mean(world_size, layout) == pytest.approx(
                lesson11.busiest_over_mean_reference(world_size, layout)
            )


@pytest.mark.slow  # it waits for the checker's timeout
def test_a_ring_whose_processes_wait_for_each_other_fails_with_a_hint(monkeypatch):
    from attnlib.exercises import lesson11

    def receive_first(tensors):  # every process receives before it sends: nobody sends
        rank, size = dist.get_rank(), dist.get_world_size()
        received = [torch.empty_like(t) for t in tensors]
        for t in received:
            dist.recv(t, (rank - 1) % size)
        for t in tensors:
            dist.send(t, (rank + 1) % size)
        return received

    monkeypatch.setattr(lesson11, "TIMEOUT", 3.0)
    result = check("11.1", receive_first)
    assert result.status == "wrong" and "waited for each other" in result.message, result


@pytest.mark.slow  # fresh interpreters import torch
def test_a_learners_function_reaches_spawned_processes_as_its_source(monkeypatch):
    """On macOS and Windows the processes are spawned: they receive the function's source."""
    from attnlib.distributed import launcher

    monkeypatch.setattr(launcher, "default_start_method", lambda: "spawn")
    assert "rank + 1" in check("11.1", pass_on_the_other_way).message
