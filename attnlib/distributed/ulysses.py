r"""DeepSpeed-Ulysses (Jacobs et al., 2023): attention of a sequence sharded across processes,
by heads instead of by tokens.

Each process holds a contiguous shard of ``n = L/P`` tokens of every head. One all-to-all
exchange turns "my ``n`` tokens, all ``H`` heads" into "all ``L`` tokens, ``H/P`` heads"; each
process runs ordinary attention (here PyTorch's fused ``scaled_dot_product_attention``, with
the causal mask and grouped-query attention it supports) on whole sequences of its heads, and
a second all-to-all sends the outputs back to token shards. The backward pass is the same two
exchanges in reverse (an all-to-all with equal parts is its own transpose).

Per layer and process, the forward pass sends ``(P − 1)/P`` of each of q, k, v and the output
shards, ``(P − 1)/P · n · (2H_q + 2H_kv) · d`` numbers (``UlyssesStats``), and the backward
pass as much again (their gradients). It needs ``H_kv`` (and ``H_q``) divisible by ``P``: at
most as many processes as key-value heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import _checks
from .ring import _check_same_everywhere, _require_group, _require_tensors

__all__ = ["ulysses_attention", "UlyssesStats", "to_heads", "to_tokens"]


@dataclass
class UlyssesStats:
    """What ``ulysses_attention`` sent, in bytes, one entry per all-to-all: ``sent_bytes`` of
    the forward pass (q, k, v, then the output), ``backward_sent_bytes`` of the backward pass
    (the output's gradient, then those of q, k and v; in the order autograd runs them): the
    ``(P − 1)/P`` of each tensor that leaves the process."""

    sent_bytes: list[int] = field(default_factory=list)
    backward_sent_bytes: list[int] = field(default_factory=list)


class AllToAll(torch.autograd.Function):
    """``dist.all_to_all_single`` with equal parts along dim 0, differentiable: part ``j`` of
    the input goes to process ``j``, and part ``i`` of the output came from process ``i``. The
    gradient goes back by the same exchange."""

    @staticmethod
    def forward(ctx, x, group, stats):
        ctx.group, ctx.stats = group, stats
        _count(x, group, stats, "sent_bytes")
        x = x.contiguous()
        out = torch.empty_like(x)  # contiguous too: the parts are read and written as blocks
        dist.all_to_all_single(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        grad_out = grad_out.contiguous()
        _count(grad_out, ctx.group, ctx.stats, "backward_sent_bytes")
        grad_in = torch.empty_like(grad_out)
        dist.all_to_all_single(grad_in, grad_out, group=ctx.group)
        return grad_in, None, None


def _count(x: torch.Tensor, group, stats: UlyssesStats | None, entry: str) -> None:
    """Add the bytes of ``x`` that leave this process in an all-to-all to ``stats.<entry>``."""
    if stats is not None:
        world_size = dist.get_world_size(group)
        sent = x.numel() * x.element_size() * (world_size - 1) // world_size
        getattr(stats, entry).append(sent)


def _exchange(x: torch.Tensor, group, stats: UlyssesStats | None) -> torch.Tensor:
    """One all-to-all of ``x`` ``(P, ...)`` (part ``j`` to process ``j``), counted."""
    return AllToAll.apply(x, group, stats)


def to_heads(x: torch.Tensor, group=None, stats: UlyssesStats | None = None) -> torch.Tensor:
    """Ulysses' first all-to-all, called in every process of ``group``: ``(B, H, n, d)``, my
    tokens of every head → ``(B, H/P, L, d)``, every token of my heads (process ``j`` gets
    heads ``j·H/P … (j+1)·H/P − 1``; the tokens of process ``i`` come ``i``-th)."""
    world_size = dist.get_world_size(group)
    batch, heads, n, dim = x.shape
    parts = x.reshape(batch, world_size, heads // world_size, n, dim).transpose(0, 1)
    received = _exchange(parts, group, stats)  # received[i]: my heads, the tokens of shard i
    return received.permute(1, 2, 0, 3, 4).reshape(batch, heads // world_size, -1, dim)


def to_tokens(x: torch.Tensor, group=None, stats: UlyssesStats | None = None) -> torch.Tensor:
    """The inverse of ``to_heads``, Ulysses' second all-to-all: ``(B, H/P, L, d)`` →
    ``(B, H, n, d)``."""
    world_size = dist.get_world_size(group)
    batch, my_heads, length, dim = x.shape
    parts = x.reshape(batch, my_heads, world_size, length // world_size, dim).permute(2, 0, 1, 3, 4)
    received = _exchange(parts, group, stats)  # received[j]: heads of process j, my tokens
    return received.transpose(0, 1).reshape(batch, my_heads * world_size, -1, dim)


def ulysses_attention(q, k, v, *, causal=False, scale=None, group=None, stats=None):
    r"""This process's shard of exact attention, computed by heads (DeepSpeed-Ulysses).

    Called in every process of ``group`` (the default group if None) with its contiguous
    shard of every head: ``q`` ``(B, H_q, n, d)``, ``k`` and ``v`` ``(B, H_kv, n, d)``, the
    tokens ``r·n … (r+1)·n − 1`` of process ``r`` (``split_sequence(x, P)[r]``); returns the
    output rows of the same tokens ``(B, H_q, n, d)``. ``H_q`` and ``H_kv`` must be divisible
    by the number of processes ``P``; ``H_kv`` dividing ``H_q`` is grouped-query attention.
    ``causal``: key ``j`` hidden from query ``i`` when ``j > i`` (positions in the whole
    sequence). ``scale`` is ``1/√d`` by default. Differentiable. ``stats``: a ``UlyssesStats``
    to count the bytes sent. Every process checks its own input, then that all hold shards of
    one shape and dtype and ask for the same ``causal`` and ``scale``: an error in all of them
    if one fails (as ``ring_attention``), never a process left waiting in an exchange.

    >>> from attnlib.distributed import launch, split_sequence, join_shards
    >>> def shard_of_attention():  # in each of 2 processes
    ...     x = torch.eye(4).expand(1, 2, 4, 4)  # (B=1, H=2, L=4, d=4), the same everywhere
    ...     shard = split_sequence(x, 2)[dist.get_rank()]  # (1, 2, 2, 4)
    ...     return ulysses_attention(shard, shard, shard, causal=True)
    >>> whole = join_shards(launch(shard_of_attention, 2))
    >>> eye = torch.eye(4).expand(1, 2, 4, 4)
    >>> torch.allclose(whole, F.scaled_dot_product_attention(eye, eye, eye, is_causal=True))
    True
    """
    fn = "ulysses_attention"
    _require_group(fn, group)
    try:  # this process's own checks; their outcome is shared, so that all raise or none
        _check_ulysses_input(fn, q, k, v, dist.get_world_size(group))
        _checks.require_flag(fn, "causal", causal)
        scale = _checks.scale_or_default(fn, scale, q.shape[-1])
        failure = None
    except (TypeError, ValueError) as error:
        failure = (type(error).__name__, str(error))
    _check_same_everywhere(fn, q, k, v, causal, "contiguous", scale, group, failure)
    heads = [to_heads(x, group, stats) for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*heads, is_causal=causal, scale=scale, enable_gqa=True)
    return to_tokens(out, group, stats)


def _check_ulysses_input(fn: str, q, k, v, world_size: int) -> None:
    """This process's own checks: ``(B, H, n, d)`` tensors of one floating dtype, shards that
    fit together (grouped-query heads included), heads divisible by ``P``, finite values."""
    named = {"q": q, "k": k, "v": v}
    _require_tensors(fn, named)
    for name, x in named.items():
        if x.dim() != 4:
            raise ValueError(
                f"{fn}: {name} must be a (B, H, n, d) tensor, 4 dimensions; "
                f"got {name}.shape={_checks.shape_str(x)}"
            )
        _checks.require_float(fn, name, x)
    _checks.require_same_dtype(fn, named)
    (batch, heads, n, dim), (_, kv_heads, _, _) = q.shape, k.shape
    if (k.shape[0], k.shape[2], k.shape[3]) != (batch, n, dim) or v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"{fn}: q, k and v must be shards of one sequence, (B, H, n, d) with the same B "
            f"and n, k and v the same heads and q and k the same d; got "
            f"q.shape={_checks.shape_str(q)}, k.shape={_checks.shape_str(k)}, "
            f"v.shape={_checks.shape_str(v)}"
        )
    if heads % kv_heads:
        raise ValueError(
            f"{fn}: the heads of q ({heads}) must be a multiple of those of k and v "
            f"({kv_heads}; grouped-query attention); got q.shape={_checks.shape_str(q)} and "
            f"k.shape={_checks.shape_str(k)}"
        )
    for name, x in (("q", q), ("k", k)):
        if x.shape[1] % world_size:
            raise ValueError(
                f"{fn}: the heads of {name} ({x.shape[1]}, in {name}.shape="
                f"{_checks.shape_str(x)}) must be divisible by the number of processes "
                f"P = {world_size}: Ulysses gives each process H/P whole heads"
            )
    _checks.require_all_finite(fn, named)
