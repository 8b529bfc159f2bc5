"""Checkers for the exercises of the lesson on attention across devices (ring attention)."""

from __future__ import annotations

import inspect
import math
import textwrap
from dataclasses import dataclass

from . import ExerciseFailed, Message, exercise, expect, phrase

# --------------------------------------------------------------------------- in processes

#: Seconds the checkers give their processes: a ring whose processes wait for each other
#: forever fails instead of hanging the notebook.
TIMEOUT = 30.0


@dataclass(frozen=True)
class _FromSource:
    """A learner's function sent to new Python processes as its source text (``spawn``, on
    macOS and Windows, cannot send a function defined in a notebook cell): called, it runs
    the source and calls the function it defines."""

    source: str
    name: str

    def __call__(self, *args, **kwargs):
        import torch
        import torch.distributed as dist

        namespace = {"torch": torch, "dist": dist, "math": math}
        exec(compile(self.source, "<your cell>", "exec"), namespace)
        return namespace[self.name](*args, **kwargs)


def _sendable(fn):
    """``fn`` as the processes can receive it: itself where they are forked (Linux), else its
    source (``_FromSource``)."""
    from ..distributed.launcher import default_start_method

    if default_start_method() == "fork":
        return fn
    return _FromSource(textwrap.dedent(inspect.getsource(fn)), fn.__name__)


def _launch(worker, world_size: int, learners_fn, **kwargs) -> list:
    """``worker(learners_fn, ...)`` in ``world_size`` local processes; a hang, a death or an
    exception becomes a hint."""
    from ..distributed import launch

    try:
        return launch(worker, world_size, _sendable(learners_fn), **kwargs, timeout=TIMEOUT)
    except TimeoutError:
        raise ExerciseFailed(
            Message(
                "the {world_size} processes waited for each other for {timeout:.0f} s and "
                "were stopped: every receive needs a send that matches it in the other "
                "process. Post them together (dist.batch_isend_irecv) and wait for every "
                "request.",
                {"world_size": world_size, "timeout": TIMEOUT},
            )
        ) from None
    except RuntimeError as failure:
        last = str(failure).strip().splitlines()[-1]
        if last.startswith("NotImplementedError"):  # the cell still says "your code here"
            raise NotImplementedError from None
        raise ExerciseFailed(
            Message("your function raised in a process: {error}", {"error": last})
        ) from None


# --------------------------------------------------------------------------- 11.1


def _ring_of(pass_on):
    """``attnlib.distributed``'s ``Ring`` whose exchange is the learner's ``pass_on``."""
    from ..distributed.ring import Ring, Transfer

    class LearnersRing(Ring):
        def start(self, tensors):
            tensors = [t.contiguous() for t in tensors]
            received = pass_on(tensors)
            sent = sum(t.numel() * t.element_size() for t in tensors)
            return Transfer(None if received is None else list(received), [], sent)

    return LearnersRing()


def _pass_on_in_a_process(pass_on) -> dict:
    """In each process: what ``pass_on`` receives of tensors filled with this process's rank,
    then causal ring attention (balanced layout, float64) with ``pass_on`` as the exchange,
    against dense attention."""
    import torch
    import torch.distributed as dist

    from ..distributed.cli import dense_reference
    from ..distributed.ring import RingStats, ring_forward, ring_plan, split_sequence

    rank, world_size = dist.get_rank(), dist.get_world_size()
    mine = [torch.full((2, 3), float(rank)), torch.full((5,), 10.0 + rank)]
    received = pass_on([t.clone() for t in mine])
    if received is None or len(list(received)) != 2:
        return {"received": None if received is None else len(list(received))}
    received = [[float(x) for x in t.flatten().unique()] for t in received]
    shapes = [tuple(t.shape) for t in pass_on([t.clone() for t in mine])]
    length = 8 * world_size
    whole = torch.randn(4, 1, 2, length, 4, generator=torch.Generator().manual_seed(5))
    whole = whole.to(torch.float64)
    expected = split_sequence(dense_reference(*whole, causal=True)[0], world_size, "balanced")
    q, k, v = (split_sequence(x, world_size, "balanced")[rank][0] for x in whole[:3])
    plan = ring_plan(rank, world_size, length, "balanced", causal=True)
    scale = q.shape[-1] ** -0.5  # as dense attention's
    out = ring_forward(q, k, v, plan, scale, _ring_of(pass_on), RingStats())[0]
    error = float((out - expected[rank][0]).abs().max())
    return {"received": received, "shapes": shapes, "error": error}


@exercise("11.1", "pass the keys on")
def _check_pass_on(pass_on) -> None:
    world_size = 3
    results = _launch(_pass_on_in_a_process, world_size, pass_on)
    for rank, result in enumerate(results):
        got = result["received"]
        expect(
            got is not None,
            "pass_on returned None in process {rank}; return the list of received tensors.",
            rank=rank,
        )
        expect(
            not isinstance(got, int),
            "pass_on returned {count} tensors for 2 sent; return one received tensor for each "
            "tensor passed on, in the same order.",
            count=got,
        )
        previous, following = (rank - 1) % world_size, (rank + 1) % world_size
        expect(
            got != [[float(following)], [10.0 + following]],
            "process {rank} received the tensors of process {following}: send to rank + 1 and "
            "receive from rank − 1, so that at step s process r holds the keys of process "
            "(r − s) mod P.",
            rank=rank,
            following=following,
        )
        expect(
            got != [[float(rank)], [10.0 + rank]],
            "process {rank} got its own tensors back: return what arrived from process rank − "
            "1, not what it sent.",
            rank=rank,
        )
        expect(
            got == [[float(previous)], [10.0 + previous]],
            "process {rank} received {got}, expected the tensors of process {previous} ({want}). "
            "Receive into new tensors (torch.empty_like) and wait for every request before "
            "returning them.",
            rank=rank,
            got=got,
            previous=previous,
            want=[[float(previous)], [10.0 + previous]],
        )
        expect(
            result["shapes"] == [(2, 3), (5,)],
            "pass_on returned tensors of shapes {shapes}; each received tensor has the shape "
            "of the one sent, (2, 3) and (5,).",
            shapes=result["shapes"],
        )
        expect(
            result["error"] < 1e-10,
            "with your pass_on, ring attention in process {rank} differs from dense attention "
            "by {error:.3g}.",
            rank=rank,
            error=result["error"],
        )


# --------------------------------------------------------------------------- 11.2


def _to_heads_in_a_process(to_heads, heads: int, length: int) -> dict:
    """In each process: ``to_heads`` of this process's contiguous shard of a sequence whose
    every number says where it came from (``((b·H + h)·L + position)·d + feature``), and
    Ulysses' attention (causal, float64) with ``to_heads`` as its first exchange, against
    dense attention."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from ..distributed.cli import dense_reference
    from ..distributed.ring import split_sequence
    from ..distributed.ulysses import to_tokens

    rank, world_size = dist.get_rank(), dist.get_world_size()
    batch, dim = 2, 3
    labelled = torch.arange(batch * heads * length * dim, dtype=torch.float64)
    labelled = labelled.reshape(batch, heads, length, dim)
    got = to_heads(split_sequence(labelled, world_size)[rank].clone())
    if not isinstance(got, torch.Tensor):
        return {"labelled": None}
    generator = torch.Generator().manual_seed(3)
    whole = torch.randn(4, batch, heads, length, dim, generator=generator, dtype=torch.float64)
    expected = split_sequence(dense_reference(*whole, causal=True)[0], world_size)[rank]
    shards = [to_heads(split_sequence(x, world_size)[rank].clone()) for x in whole[:3]]
    error = float("inf")
    if all(s.shape == (batch, heads // world_size, length, dim) for s in shards):
        out = F.scaled_dot_product_attention(*shards, is_causal=True)
        error = float((to_tokens(out) - expected).abs().max())
    return {"labelled": got, "error": error}


@exercise("11.2", "Ulysses' all-to-all")
def _check_to_heads(to_heads) -> None:
    batch, heads, dim = 2, 4, 3
    for world_size in (2, 4):
        length = 4 * world_size
        results = _launch(_to_heads_in_a_process, world_size, to_heads, heads=heads, length=length)
        mine = heads // world_size
        for rank, result in enumerate(results):
            got = result["labelled"]
            context = phrase("P = {world_size}, process {rank}", world_size=world_size, rank=rank)
            expect(
                got is not None,
                "{context}: to_heads returned no tensor; return the (B, H/P, L, d) tensor of "
                "this process's heads.",
                context=context,
            )
            want_shape = (batch, mine, length, dim)
            expect(
                tuple(got.shape) == want_shape,
                "{context}: to_heads returned shape {shape}, expected (B, H/P, L, d) = {want}: "
                "all L tokens of H/P heads.",
                context=context,
                shape=tuple(got.shape),
                want=want_shape,
            )
            number = got.round().long()
            head = number // (length * dim) % heads
            position = number // dim % length
            want_heads = list(range(rank * mine, (rank + 1) * mine))
            got_heads = sorted(set(head.flatten().tolist()))
            expect(
                got_heads == want_heads,
                "{context}: the result holds heads {got}; process r gets heads r·H/P … "
                "(r+1)·H/P − 1, here {want}.",
                context=context,
                got=got_heads,
                want=want_heads,
            )
            expect(
                bool((position == position.new_tensor(range(length))[:, None]).all()),
                "{context}: row i of each head must be token i of the whole sequence; got "
                "tokens {got} for head {first}. The part received from process j holds tokens "
                "j·n … (j+1)·n − 1 and comes j-th.",
                context=context,
                got=position[0, 0, :, 0].tolist(),
                first=want_heads[0],
            )
            expect(
                result["error"] < 1e-10,
                "{context}: Ulysses with your to_heads differs from dense attention by "
                "{error:.3g}.",
                context=context,
                error=result["error"],
            )


# --------------------------------------------------------------------------- 11.3


def busiest_over_mean_reference(world_size: int, layout: str) -> float:
    """The busiest process's tile products over the mean, causal mask.

    >>> busiest_over_mean_reference(4, "contiguous")
    1.6666666666666667
    """
    from .. import distributed  # PyTorch: imported when a checker of lesson 11 runs, not before

    counts = distributed.tile_counts(world_size, 8 * world_size, layout=layout, causal=True)
    return max(counts) / (sum(counts) / len(counts))


@exercise("11.3", "Change the experiment: other numbers of processes")
def _check_busiest_over_mean(busiest_over_mean) -> None:
    for world_size in (2, 3, 4, 8):
        for layout in ("contiguous", "balanced"):
            call = f"busiest_over_mean({world_size}, {layout!r})"
            got = busiest_over_mean(world_size, layout)
            want = busiest_over_mean_reference(world_size, layout)
            expect(got is not None, "{call} returned None; return a ratio.", call=call)
            expect(
                abs(float(got) - 1 / want) > 1e-9 or want == 1,
                "{call} = {got}: that is the mean over the busiest; take the busiest over "
                "the mean (a number >= 1).",
                call=call,
                got=got,
            )
            expect(
                abs(float(got) - want) < 1e-9,
                "{call} = {float_got:.4f}, expected {want:.4f}. Count each process's tiles "
                "(tile_counts or ring_plan, causal=True) and divide the largest by the mean.",
                call=call,
                float_got=float(got),
                want=want,
            )
