"""Overlap, measured: ring attention's forward pass over a link slowed on purpose, with the
schedule that sends the next keys while it computes against the one that waits for them.

On one machine the processes' link (``gloo`` over the loopback) is far faster than any
network between GPUs, so sending would hide behind computing whatever the schedule. A
``SlowLink`` makes the link as slow as we choose: a transfer started at time ``t`` is handed
over no earlier than ``t + bytes / bytes_per_second`` (the real transfer runs too, and ends
long before). A step of the overlapped schedule then takes about ``max(compute, send)``, a
step of the waiting one ``compute + send``: ``time_overlap`` measures both.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .. import _checks
from .ring import Ring, RingStats, ring_forward, ring_plan, split_sequence

__all__ = ["SlowLink", "time_overlap", "OverlapTimes"]


class SlowLink(Ring):
    """A ``Ring`` whose link carries ``bytes_per_second``: ``start(tensors).wait()`` returns
    no earlier than ``bytes / bytes_per_second`` seconds after the transfer started, as if
    the bytes had travelled at that speed, whatever the computer does meanwhile."""

    def __init__(self, bytes_per_second: float, group=None):
        super().__init__(group)
        self.bytes_per_second = bytes_per_second

    def start(self, tensors):
        transfer = super().start(tensors)
        return _Delayed(transfer, time.perf_counter() + transfer.sent_bytes / self.bytes_per_second)


class _Delayed:
    """A transfer that is handed over at ``ready_at`` (``time.perf_counter()``) at the
    earliest."""

    def __init__(self, transfer, ready_at: float):
        self.transfer, self.ready_at = transfer, ready_at
        self.sent_bytes = transfer.sent_bytes

    def wait(self):
        received = self.transfer.wait()
        time.sleep(max(0.0, self.ready_at - time.perf_counter()))
        return received


@dataclass
class OverlapTimes:
    """Seconds of each round of ``time_overlap`` in this process (one entry per round):
    ``compute`` the forward pass on the fast link, ``overlapped`` and ``waiting`` on the slow
    link with each schedule; ``link``: how long the slow link took for one step's keys and
    values in that round, the same in every process."""

    compute: list[float] = field(default_factory=list)
    overlapped: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    link: list[float] = field(default_factory=list)


def time_overlap(
    length: int = 2048,
    heads: int = 4,
    dim: int = 64,
    *,
    link_over_compute: float = 0.8,
    rounds: int = 5,
    group=None,
) -> OverlapTimes:
    """Run in every process of a group: time ring attention's forward pass (no mask,
    contiguous shards of a random ``(1, heads, length, dim)`` float32 sequence) three ways,
    ``rounds`` times each, side by side: on the group's own link; on a ``SlowLink`` with the
    overlapped schedule; and on the same link with the schedule that waits. In each round the
    slow link is set so that sending one step's keys and values takes ``link_over_compute``
    times as long as computing one step took in that round's pass on the fast link (the
    slowest process's), so that the link keeps pace with the computer's speed of the moment.

    By the model, with ``P`` steps of ``C`` seconds and a link of ``T`` seconds a step (``P
    − 1`` transfers): overlapped ``(P − 1)·max(C, T) + C``, waiting ``(P − 1)·(C + T) + C``.

    >>> from attnlib.distributed import launch
    >>> times = launch(time_overlap, 2, length=256, rounds=1)[0]
    >>> len(times.overlapped), times.link[0] > 0
    (1, True)
    """
    fn = "time_overlap"
    _checks.require_positive_int(fn, "rounds", rounds)
    if not link_over_compute > 0:
        raise ValueError(f"{fn}: link_over_compute must be > 0; got {link_over_compute!r}")
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    generator = torch.Generator().manual_seed(0)
    whole = torch.randn(3, heads, length, dim, generator=generator)
    q, k, v = (split_sequence(x, world_size)[rank] for x in whole)
    plan = ring_plan(rank, world_size, length, "contiguous", causal=False)
    scale = dim**-0.5

    def forward(ring, overlap=True):
        dist.barrier(group)  # every process starts the pass together
        began = time.perf_counter()
        ring_forward(q, k, v, plan, scale, ring, RingStats(), overlap=overlap)
        return time.perf_counter() - began

    fast = Ring(group)
    forward(fast)  # the first call sets up connections and buffers
    sent = sum(x.numel() * x.element_size() for x in (k, v))  # one step's keys and values
    times = OverlapTimes()
    for _ in range(rounds):
        times.compute.append(forward(fast))
        step = torch.tensor(times.compute[-1] / world_size)
        dist.all_reduce(step, dist.ReduceOp.MAX, group=group)  # the slowest process's step
        times.link.append(link_over_compute * float(step))
        slow = SlowLink(sent / times.link[-1], group)
        times.overlapped.append(forward(slow))
        times.waiting.append(forward(slow, overlap=False))
    return times
