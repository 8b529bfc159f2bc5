r"""The engineered PyTorch kernel behind ``attnlib.torch.tiled_attention`` and
``truncated_attention``: exact attention computed tile by tile, never holding an ``L × L``
array, forward or backward. ``attnlib.numpy`` holds the plain reference of the same
computation; this is the version tuned for PyTorch (the measurements behind its choices are in
``docs/performance-notes.md``), and ``attnlib._tiles`` says which tiles it visits.

It is FlashAttention (Dao et al., 2022) in FlashAttention-2's loop order (Dao, 2023): query
blocks outside, key tiles inside; each query row keeps a running maximum ``m``, a running sum
``ℓ`` and an unnormalised output accumulator ``y`` (the online softmax, ``OnlineSoftmax``),
divided once at the end. Its backward pass is FlashAttention-2's too: each tile's weights ``P``
are recomputed from the log-sum-exp that the forward pass saved, one number per query row.

Shapes inside the kernel: the inputs' batch axes are flattened, ``(N, L, d)``; a group of query
blocks of ``S`` sequences is ``(S·count, size, d)``, a tile's key windows ``(S·count, d, span)``
and its scores ``(S·count, size, span)`` (``attnlib._tiles``: ``QueryGroup``, ``KeyTile``).

Precision: the kernel computes in ``working_dtype``, the inputs' dtype but at least float32.
float16 and bfloat16 rows are cast to float32 as the tiles are cut from them, so the scores,
the running state, the saved log-sum-exp and the gradient sums are float32, as in
FlashAttention; the output and the gradients come back in the inputs' dtypes. The products are
float32 products too (PyTorch cannot multiply half-precision factors into a float32 result on
every device), which keeps bfloat16 scores from costing accuracy but leaves a GPU's
half-precision matrix units unused.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from . import _checks, _tiles

#: The online softmax works in base 2: its scores are scaled by ``scale · log₂ e`` and ``2^x``
#: replaces ``e^x``. The weights are the same (``2^(s · log₂ e) = e^s``), but ``exp2`` is
#: cheaper to evaluate than ``exp``; FlashAttention's kernels do the same.
LOG2_E = math.log2(math.e)


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernel computes in for inputs of ``dtype``: float32 for float16 and
    bfloat16 (their running sums and log-sum-exp would lose too much), else ``dtype`` itself."""
    return torch.promote_types(dtype, torch.float32)


# --------------------------------------------------------------------------- entry point


def tiled(q, k, v, mask, scale, plan) -> torch.Tensor:
    """Attention of ``(..., L, d)`` q, k, v under a plan (``attnlib._tiles``), differentiable:
    a forward pass, with a backward pass that recomputes the tiles. ``mask`` (or None) must
    broadcast to ``(..., L_q, L_k)``; output ``(..., L_q, d_v)``."""
    batch = _checks.batch_shape_unchecked(q, k, v)
    if mask is not None:
        mask = mask.expand(*batch, q.shape[-2], k.shape[-2])  # a view: tiles cut from it
    if needs_gradients(q, k, v):
        return TiledAttention.apply(q, k, v, mask, scale, plan)
    out = tiled_forward(*as_sequences(batch, q, k, v), mask, scale, plan, keep_logsumexp=False)[0]
    return out.reshape(*batch, *out.shape[-2:])


def needs_gradients(*tensors: torch.Tensor) -> bool:
    """Whether autograd will want gradients of any of ``tensors`` (then the kernel keeps the
    log-sum-exp and a backward pass follows)."""
    return torch.is_grad_enabled() and any(x.requires_grad for x in tensors)


def as_sequences(batch, *tensors) -> list[torch.Tensor]:
    """``(..., L, d)`` tensors as ``(N, L, d)``: the common batch shape flattened, so that
    every product of the kernel is one ``torch.bmm`` (a view when the layout allows it)."""
    count = math.prod(batch)
    return [x.expand(*batch, *x.shape[-2:]).reshape(count, *x.shape[-2:]) for x in tensors]


class TiledAttention(torch.autograd.Function):
    """``tiled_forward`` with a backward pass that recomputes each tile's weights from the
    saved log-sum-exp (FlashAttention-2's backward): memory O(L·d), never O(L²)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, plan):
        batch = _checks.batch_shape_unchecked(q, k, v)
        out, logsumexp = tiled_forward(
            *as_sequences(batch, q, k, v), mask, scale, plan, keep_logsumexp=True
        )
        ctx.save_for_backward(q, k, v, out, logsumexp)
        ctx.mask, ctx.scale, ctx.plan, ctx.batch = mask, scale, plan, batch
        return out.reshape(*batch, *out.shape[-2:])

    @staticmethod
    @once_differentiable  # not itself differentiable: a second derivative is a clear error
    def backward(ctx, grad_out):
        q, k, v, out, logsumexp = ctx.saved_tensors
        if math.prod(ctx.batch) == 0:  # an empty batch: every gradient is a sum of nothing
            return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), None, None, None
        sequences = as_sequences(ctx.batch, q, k, v, grad_out)
        grads = tiled_backward(*sequences, ctx.mask, ctx.scale, ctx.plan, out, logsumexp)
        reduced = [  # back to each input's own shape and dtype, undoing the broadcasts
            g.reshape(*ctx.batch, *g.shape[-2:]).sum_to_size(x.shape).to(x.dtype)
            for g, x in zip(grads, (q, k, v))
        ]
        return (*reduced, None, None, None)


# --------------------------------------------------------------------------- forward pass


def tiled_forward(q, k, v, mask, scale, plan, keep_logsumexp: bool):
    """The online softmax, tile by tile, for ``(N, L, d)`` sequences: the output
    ``(N, L_q, d_v)`` (in q's dtype) and, if ``keep_logsumexp``, each row's log-sum-exp in
    base 2 (``OnlineSoftmax``), ``(N, L_q, 1)`` in the working dtype (-inf for a row with
    nothing to attend to), which the backward pass needs."""
    dtype = working_dtype(q.dtype)
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    logsumexp = q.new_empty(*q.shape[:-1], 1, dtype=dtype) if keep_logsumexp else None
    like = q.new_empty(0, dtype=dtype)  # the dtype and device of every tile
    biases, scratch = TileBiases(plan, mask, like), Scratch(like)
    for group in plan.query_groups():
        tiles = plan.key_tiles(group)
        # One tile, no user mask and no log-sum-exp wanted: softmax alone (every real query
        # row has an allowed key then; a padding row may not, see OnlineSoftmax.fold).
        softmax_only = len(tiles) == 1 and mask is None and not keep_logsumexp
        rows = slice(group.start, group.stop)
        for seqs in sequence_slices(plan, q.shape[0], group):
            q_s, k_s, v_s, out_s = q[seqs], k[seqs], v[seqs], out[seqs]
            q_blocks = query_blocks(q_s, group, dtype)
            into = as_blocks(out_s[:, rows], group, dtype)
            online = OnlineSoftmax(softmax_only, scale, into)
            for tile in tiles:
                bias, k_windows = biases(seqs, group, tile), key_windows(k_s, tile, dtype)
                scores = tile_scores(q_blocks, k_windows, bias, online.scale, scratch)
                online.fold(scores, key_windows(v_s, tile, dtype).mT)
            output, group_logsumexp = online.result()
            if output is not into:  # not written in place
                out_s[:, rows] = drop_padding(output, group)
            if keep_logsumexp:
                logsumexp[seqs, rows] = drop_padding(group_logsumexp, group)
    return out, logsumexp


class OnlineSoftmax:
    r"""The running state of a group of query rows, tile after tile: each row's running
    maximum ``m``, running sum ``ℓ`` and unnormalised output ``y``, in the dtype of the scores
    (``working_dtype``). It is the update of ``attnlib.numpy``'s kernel, in base 2
    (``LOG2_E``): with scores ``s_j`` scaled by ``log₂ e``,

    .. math:: m' = \max(m, \max_j s_j), \quad
              \ell \leftarrow 2^{m - m'}\,\ell + \textstyle\sum_j 2^{s_j - m'}, \quad
              y \leftarrow 2^{m - m'}\,y + \textstyle\sum_j 2^{s_j - m'}\, v_j ,

    and at the end ``output = y / ℓ``; the log-sum-exp kept for the backward pass is in base 2
    too, ``m + log₂ ℓ``.

    With ``softmax_only`` (one tile, no user mask, no log-sum-exp wanted: a band without
    gradients) a row's output is just ``softmax(s) V``, in base e (``torch.softmax`` is one
    fused call), its weights written over the scores (one tile-sized buffer) and its output
    into ``into`` when that is given. ``self.scale`` is what the tile scores must be scaled
    by: the attention ``scale``, times ``log₂ e`` in base 2.
    """

    def __init__(self, softmax_only: bool, scale: float, into: torch.Tensor | None = None):
        self.softmax_only, self.into = softmax_only, into
        self.scale = scale if softmax_only else scale * LOG2_E
        self.maximum = self.total = self.output = None

    def fold(self, scores: torch.Tensor, v_windows: torch.Tensor) -> None:
        """Fold one tile: its scores ``(M, size, span)`` (in base 2, or base e for
        ``softmax_only``; -inf where masked; overwritten) and values ``(M, span, d_v)``."""
        if self.softmax_only:
            # A padding query row of a band's last group (past the end of the sequence) that is
            # further than the window from every real key has only -inf scores: softmax makes
            # it NaN. Harmless: padding rows are dropped (drop_padding), and a group with
            # padding rows is not written in place (as_blocks gives no ``into`` for it).
            weights = torch.softmax(scores, -1, out=scores)
            self.output = torch.bmm(weights, v_windows, out=self.into)
            return
        maximum = scores.amax(-1, keepdim=True)
        if self.maximum is not None:
            maximum = torch.maximum(self.maximum, maximum)
        shift = finite(maximum)  # rows with no allowed key so far: 0, so that 2^-inf = 0
        weights = scores.sub_(shift).exp2_()
        if self.output is None:
            self.total, self.output = weights.sum(-1, keepdim=True), weights @ v_windows
        else:
            rescale = torch.exp2(self.maximum - shift)
            self.total.mul_(rescale).add_(weights.sum(-1, keepdim=True))
            self.output.mul_(rescale).baddbmm_(weights, v_windows)
        self.maximum = maximum

    def result(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each row's output ``y / ℓ`` (zeros for a row with nothing to attend to: its ``y``
        is 0) and log-sum-exp in base 2, ``m + log₂ ℓ`` (-inf for such a row); no
        log-sum-exp after ``softmax_only``."""
        if self.softmax_only:
            return self.output, None
        nothing = self.total == 0
        output = self.output / self.total.masked_fill(nothing, 1.0)
        return output, self.maximum + self.total.log2()


def finite(x: torch.Tensor) -> torch.Tensor:
    """``x`` with -inf (a row with no allowed key so far) replaced by 0, so that subtracting
    it keeps masked scores at -inf instead of making NaN."""
    return x.masked_fill(x == -math.inf, 0.0)


# --------------------------------------------------------------------------- backward pass


def tiled_backward(q, k, v, grad_out, mask, scale, plan, out, logsumexp):
    r"""Gradients for ``(N, L, d)`` q, k and v, tile by tile, in the working dtype (that of
    the saved ``logsumexp``): with scores ``S`` and log-sum-exp in base 2 (as in the forward
    pass) and the scale ``s`` in base e,

    .. math:: P = 2^{S - \text{logsumexp}}, \quad dV \mathrel{+}= P^\top dO, \quad
              dS = P \circ (dO\,V^\top - \operatorname{rowsum}(dO \circ O)), \quad
              dQ \mathrel{+}= s\,dS\,K, \quad dK \mathrel{+}= s\,dS^\top Q .
    """
    dtype = logsumexp.dtype
    grad_q = torch.zeros_like(q, dtype=dtype)
    grad_k, grad_v = padded_zeros(k, plan, dtype), padded_zeros(v, plan, dtype)
    before = plan.key_padding()[0]  # the padding rows in front of key 0
    base_2_scale = scale * LOG2_E  # scores in the base of the forward pass's log-sum-exp
    delta = (grad_out.to(dtype) * out.to(dtype)).sum(-1, keepdim=True)  # rowsum(dO ∘ O)
    like = logsumexp  # the dtype and device of every tile
    biases, scratch = TileBiases(plan, mask, like), Scratch(like)
    for group in plan.query_groups():
        for seqs in sequence_slices(plan, q.shape[0], group):
            q_s, k_s, v_s = q[seqs], k[seqs], v[seqs]
            grad_k_s, grad_v_s = grad_k[seqs], grad_v[seqs]
            q_blocks = query_blocks(q_s, group, dtype)
            d_out = query_blocks(grad_out[seqs], group, dtype)
            shift = finite(query_blocks(logsumexp[seqs], group, dtype))  # nothing to attend to
            row_delta = query_blocks(delta[seqs], group, dtype)
            grad_q_blocks = torch.zeros_like(q_blocks)
            for tile in plan.key_tiles(group):
                k_windows, v_windows = key_windows(k_s, tile, dtype), key_windows(v_s, tile, dtype)
                bias = biases(seqs, group, tile)
                scores = tile_scores(q_blocks, k_windows, bias, base_2_scale, scratch)
                weights = scores.sub_(shift).exp2_()
                tile_gradients(
                    weights, q_blocks, k_windows, v_windows, d_out, row_delta, grad_q_blocks,
                    add_k=functools.partial(add_to_keys, grad_k_s, tile, before=before),
                    add_v=functools.partial(add_to_keys, grad_v_s, tile, before=before),
                    scratch=scratch("grad_scores", scores.shape),
                )  # fmt: skip
            grad_q[seqs, group.start : group.stop] = drop_padding(grad_q_blocks, group)
    length = k.shape[-2]
    return (
        grad_q * scale,
        grad_k[:, before : before + length] * scale,
        grad_v[:, before : before + length],
    )


def tile_gradients(weights, q_rows, k_t, v_t, d_out, row_delta, grad_q, add_k, add_v, scratch=None):
    r"""One tile's share of the backward pass, before the scale ``s``: with the tile's
    weights ``W = 2^{S − lse}`` ``(M, size, span)``, its query rows ``q_rows`` and output
    gradients ``d_out`` ``(M, size, d)``, its keys and values transposed, ``k_t`` and ``v_t``
    ``(M, d, span)``, and ``row_delta`` ``D = rowsum(dO ∘ O)`` ``(M, size, 1)``,

    .. math:: dS = W \circ (dO\,V^\top - D), \quad dQ \mathrel{+}= dS\,K, \quad
              dK_{\text{tile}} = dS^\top Q, \quad dV_{\text{tile}} = W^\top dO .

    ``grad_q`` ``(M, size, d)`` is added to in place; ``add_v(dV_tile)`` and then
    ``add_k(dK_tile)`` (``(M, span, d)`` each) add the tile's key and value gradients to the
    rows its keys came from, one after the other, so that only one of them is held at a time.
    ``scratch``: tile-sized memory to write ``dS`` into (None: allocated). The tiled backward
    pass and each step of ``attnlib.distributed``'s ring share this function."""
    grad_scores = torch.bmm(d_out, v_t, out=scratch)
    grad_scores.sub_(row_delta).mul_(weights)
    grad_q.baddbmm_(grad_scores, k_t.mT)
    add_v(weights.mT @ d_out)
    add_k(grad_scores.mT @ q_rows)


def padded_zeros(x: torch.Tensor, plan, dtype: torch.dtype) -> torch.Tensor:
    """Zeros like ``(N, L, d)`` ``x``, of ``dtype``, with the plan's padding rows around the
    token axis (gradients of tiles at the edges land there and are dropped)."""
    before, after = plan.key_padding()
    return x.new_zeros(x.shape[0], before + x.shape[1] + after, x.shape[2], dtype=dtype)


def add_to_keys(grad: torch.Tensor, tile, tile_grad: torch.Tensor, before: int) -> None:
    """Add a tile's key gradients ``(S·count, span, d)`` to the rows of ``(S, L', d)`` they
    came from. The windows overlap, so they are added ``step`` rows at a time: piece ``p`` of
    every window is a run of ``count·step`` consecutive rows."""
    assert tile.span % tile.step == 0, f"a window must be whole steps: {tile}"
    tile_grad = tile_grad.unflatten(0, (grad.shape[0], -1))
    for piece in range(tile.span // tile.step):
        first = before + tile.start + piece * tile.step
        rows = tile_grad[:, :, piece * tile.step : (piece + 1) * tile.step].flatten(1, 2)
        grad[:, first : first + rows.shape[1]] += rows


# --------------------------------------------------------------------------- tiles


def sequence_slices(plan, count: int, group) -> list[slice]:
    """The sequences the kernel takes at once in ``group``: all of them, unless a band plan
    says how many (``BandPlan.sequences_at_once``: on the CPU one, away from the edges, so that
    a band tile's overlapping key windows stay a view of one sequence's rows; ``torch.bmm``
    over several sequences would need them copied)."""
    if not isinstance(plan, _tiles.BandPlan):
        return [slice(None)]
    step = max(1, plan.sequences_at_once(group))
    return [slice(n, n + step) for n in range(0, count, step)]


def query_blocks(x: torch.Tensor, group, dtype: torch.dtype) -> torch.Tensor:
    """A group's query rows of ``(S, L, d)`` sequences, as ``dtype``, padded to ``count`` full
    blocks: ``(S·count, size, d)``."""
    rows = x[:, group.start : group.stop].to(dtype)
    extra = group.count * group.size - rows.shape[-2]
    if extra:
        rows = F.pad(rows, (0, 0, 0, extra))
    return rows.unflatten(1, (group.count, group.size)).flatten(0, 1)


def key_windows(x: torch.Tensor, tile, dtype: torch.dtype) -> torch.Tensor:
    """A tile's key rows of ``(S, L, d)`` sequences, as ``dtype``, zeros outside
    ``0 … L − 1``, cut into the tile's windows and transposed: ``(S·count, d, span)``. A view
    of ``x`` unless the tile reaches past an edge (then its rows are copied with the zero
    padding) or ``dtype`` is not x's (then its rows are copied once, and the windows are views
    of the copy)."""
    before, after = _tiles.rows_outside(tile, x.shape[-2])
    rows = x[:, max(0, tile.start) : min(x.shape[-2], tile.stop)].to(dtype)
    if before or after:
        rows = F.pad(rows, (0, 0, before, after))
    return rows.unfold(1, tile.span, tile.step).flatten(0, 1)


def as_blocks(x: torch.Tensor, group, dtype: torch.dtype):
    """``(S, stop − start, d)`` rows as a ``(S·count, size, d)`` view, for a product of
    ``dtype`` to write into; None unless the rows fill the group's blocks (no padding rows),
    are contiguous and of ``dtype``."""
    fills = x.shape[1] == group.count * group.size
    if not fills or not x.is_contiguous() or x.dtype != dtype:
        return None
    return x.view(-1, group.size, x.shape[-1])


def drop_padding(x: torch.Tensor, group) -> torch.Tensor:
    """``(S·count, size, d)`` → ``(S, stop − start, d)``: the group's real query rows."""
    return x.unflatten(0, (-1, group.count)).flatten(1, 2)[:, : group.stop - group.start]


class Scratch:
    """Memory for a kernel's tile-sized temporaries, allocated once and reused by every tile,
    so that it stays in the processor's cache."""

    def __init__(self, like: torch.Tensor):
        self.like, self.buffers = like, {}

    def __call__(self, name: str, shape) -> torch.Tensor:
        """An uninitialised tensor of ``shape``, the same memory every time for ``name``."""
        size = math.prod(shape)
        if name not in self.buffers or self.buffers[name].numel() < size:
            self.buffers[name] = self.like.new_empty(size)
        return self.buffers[name][:size].view(shape)


def tile_scores(q_blocks, k_windows, bias, scale, scratch) -> torch.Tensor:
    """One tile's scores, ``scale · Q Kᵀ + bias``, in one call (``torch.baddbmm``) into
    scratch memory: ``(M, size, span)``. ``bias`` is 0 where allowed, -inf where masked, None
    without a mask."""
    shape = (q_blocks.shape[0], q_blocks.shape[1], k_windows.shape[-1])
    scores = scratch("scores", shape)
    if bias is None:  # beta=0: baddbmm ignores its first argument
        return torch.baddbmm(scores, q_blocks, k_windows, beta=0, alpha=scale, out=scores)
    return torch.baddbmm(bias, q_blocks, k_windows, alpha=scale, out=scores)


class TileBiases:
    """Each tile's mask as an additive bias on the device, 0 (may attend) or -inf, for
    ``torch.baddbmm`` to add while it multiplies; of ``like``'s dtype and device. The user's
    mask is cut into tiles; the plan's own patterns (a band, or the diagonal of a causal plan)
    are converted once per plan and kept on it."""

    def __init__(self, plan, mask, like: torch.Tensor):
        self.plan, self.mask, self.like = plan, mask, like

    def __call__(self, seqs: slice, group, tile):
        """The bias of ``tile`` for the ``seqs`` sequences, ``(S·count, size, span)``, or one
        that broadcasts to it; None when every score of the tile is allowed."""
        allowed = self.plan.tile_mask(self.mask, group, tile)
        causal = self.plan.causal_pattern(group, tile)
        if isinstance(allowed, torch.Tensor):  # (..., 1, size, span), cut from the user's mask
            bias = self._bias(allowed.reshape(-1, *allowed.shape[-2:])[seqs])
            return bias if causal is None else bias + self._converted(causal)
        for pattern in (allowed, causal):  # at most one of them is given
            if pattern is not None:
                return self._converted(pattern)
        return None

    def _converted(self, pattern: np.ndarray) -> torch.Tensor:
        """A NumPy pattern of the plan, ``(size, span)`` for every window and sequence, as a
        bias: converted once per device and dtype and kept on the plan, so that a GPU is not
        sent it on every call (``BandPlan.converted``). The plan keeps its patterns alive, so
        their ``id`` names them."""
        key = (id(pattern), self.like.device, self.like.dtype)
        if key not in self.plan.converted:
            self.plan.converted[key] = self._bias(torch.from_numpy(pattern))
        return self.plan.converted[key]

    def _bias(self, allowed: torch.Tensor) -> torch.Tensor:
        allowed = allowed.to(self.like.device)
        return self.like.new_zeros(allowed.shape).masked_fill_(~allowed, -math.inf)
