"""The PyTorch backend: the same API as ``attnlib.numpy``, on tensors, on any device.

Everything is differentiable and runs wherever its input tensors live (CPU, CUDA, MPS).
``attention(..., need_weights=False)`` takes the fast path through PyTorch's fused
``scaled_dot_product_attention``. The tests check this module against ``attnlib.numpy``
(float64, 1e-10) and against ``torch.nn.functional.scaled_dot_product_attention``. The tiled
kernel behind ``tiled_attention`` and ``truncated_attention`` is ``attnlib._torch_tiled``.

>>> import torch
>>> from attnlib import torch as attn
>>> x = torch.eye(3)
>>> out, w = attn.attention(x, x, x, scale=1.0)
>>> w[0]
tensor([0.5761, 0.2119, 0.2119])
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks, _tiles, _torch_tiled
from ._convert import (
    activation_name,
    block_sizes,
    kv_heads_repr,
    linear_from_torch,
    multihead_weights_from_torch,
)

__all__ = [
    "default_device",
    "softmax",
    "dot_product_scores",
    "additive_scores",
    "attention",
    "tiled_attention",
    "truncated_attention",
    "elu_feature_map",
    "linear_attention",
    "linear_attention_recurrent",
    "low_rank_attention",
    "segment_means",
    "LowRankSelfAttention",
    "causal_mask",
    "padding_mask",
    "window_mask",
    "graph_mask",
    "sinusoidal_positional_encoding",
    "LearnedPositionalEmbedding",
    "SelfAttention",
    "split_heads",
    "merge_heads",
    "MultiHeadAttention",
    "LayerNorm",
    "FeedForward",
    "TransformerEncoderBlock",
    "TransformerDecoderBlock",
]


def default_device() -> torch.device:
    """The best device available: CUDA, then Apple's MPS, then the CPU.

    >>> default_device().type in {"cuda", "mps", "cpu"}
    True
    """
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _require_tensors(fn: str, **named) -> None:
    """Refuse arguments that are not tensors (None is allowed), or that live on different
    devices, naming the arguments."""
    tensors = {name: x for name, x in named.items() if x is not None}
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"{fn}: {name} must be a torch.Tensor; got {type(x).__name__}. "
                f"Wrap it with torch.as_tensor({name}) (or use attnlib.numpy for arrays)."
            )
    devices = {name: x.device for name, x in tensors.items()}
    if len(set(devices.values())) > 1:
        where = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"{fn}: all tensors must be on one device; got {where}. Use .to(device).")


# --------------------------------------------------------------------------- softmax, scores


def softmax(x: torch.Tensor, axis: int = -1, mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""Softmax along ``axis``, stable for large inputs, with an optional boolean mask.

    .. math:: \operatorname{softmax}(x)_j = \frac{e^{x_j - m}}{\sum_{j'} e^{x_{j'} - m}},
              \quad m = \max_j x_j

    Entries where ``mask`` is False get weight 0; a slice with no True entry gets all zeros
    (and zero gradient), never NaN. Shapes: ``x`` any float tensor; ``mask`` broadcasts to it.

    >>> softmax(torch.tensor([1.0, 2.0, 3.0]), mask=torch.tensor([True, True, False]))
    tensor([0.2689, 0.7311, 0.0000])
    """
    _require_tensors("softmax", x=x, mask=mask)
    _checks.require_float("softmax", "x", x)
    _checks.check_axis("softmax", axis, x)
    _checks.require_finite("softmax", "x", x, allow_negative_inf=True)
    if mask is not None:
        _checks.check_mask("softmax", mask, x.shape)
    return _masked_softmax(x, axis, mask)


def _masked_softmax(x: torch.Tensor, axis: int, mask) -> torch.Tensor:
    """``softmax`` without the input checks (for callers that have checked already)."""
    if mask is None:
        return torch.softmax(x, dim=axis)  # PyTorch's fused kernel subtracts the maximum too
    mask = mask.expand_as(x)  # a view: now ``axis`` means the same axis in both
    attends = mask.any(dim=axis, keepdim=True)
    # A fully masked slice would be all -inf (NaN after the softmax, and NaN gradients):
    # give it finite scores, then zero its weights.
    x = x.masked_fill(~mask, -math.inf).masked_fill(~attends, 0.0)
    return torch.softmax(x, dim=axis) * attends


def dot_product_scores(q: torch.Tensor, k: torch.Tensor, scale=None) -> torch.Tensor:
    r"""Dot-product relevance of every query to every key.

    .. math:: S_{ij} = s \, q_i \cdot k_j, \qquad s = 1/\sqrt{d_k} \text{ by default}

    Pass ``scale=1.0`` for the plain dot product.
    Shapes: ``q`` ``(..., L_q, d_k)``, ``k`` ``(..., L_k, d_k)`` → ``(..., L_q, L_k)``.

    >>> dot_product_scores(torch.ones(1, 4), torch.ones(2, 4))
    tensor([[2., 2.]])
    """
    _require_tensors("dot_product_scores", q=q, k=k)
    _checks.check_query_key("dot_product_scores", q, k)
    return _scaled_scores(q, k, _checks.scale_or_default("dot_product_scores", scale, q.shape[-1]))


def _scaled_scores(q: torch.Tensor, k: torch.Tensor, scale: float | None) -> torch.Tensor:
    """``dot_product_scores`` without the input checks (``scale`` None: 1/sqrt(d_k))."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    # Scaling q costs L_q·d multiplications, scaling the scores L_q·L_k.
    return (q * scale) @ k.transpose(-1, -2)


def additive_scores(q, k, w_q, w_k, w) -> torch.Tensor:
    r"""Additive (Bahdanau) relevance: a one-hidden-layer network scores each pair.

    .. math:: S_{ij} = w \cdot \tanh(q_i W_q + k_j W_k)

    Shapes: ``q`` ``(..., L_q, d_q)``, ``k`` ``(..., L_k, d_k)``, ``w_q`` ``(d_q, h)``,
    ``w_k`` ``(d_k, h)``, ``w`` ``(h,)`` → ``(..., L_q, L_k)``.

    >>> additive_scores(torch.ones(1, 2), torch.zeros(3, 2), torch.eye(2), torch.eye(2),
    ...                 torch.tensor([1.0, 0.0]))
    tensor([[0.7616, 0.7616, 0.7616]])
    """
    _require_tensors("additive_scores", q=q, k=k, w_q=w_q, w_k=w_k, w=w)
    _checks.check_additive("additive_scores", q, k, w_q, w_k, w)
    hidden = torch.tanh((q @ w_q)[..., :, None, :] + (k @ w_k)[..., None, :, :])
    return hidden @ w


# --------------------------------------------------------------------------- attention


def attention(q, k, v, mask=None, scale=None, need_weights: bool = True):
    r"""Scaled dot-product attention: scores, softmax, weighted sum of the values.

    .. math:: \operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(s\,QK^\top\right) V,
              \qquad s = 1/\sqrt{d_k} \text{ unless } \texttt{scale} \text{ is given}

    ``mask`` (boolean, True = may attend) broadcasts to ``(..., L_q, L_k)``; a query whose
    mask row is all False gets zero weights and a zero output.

    With ``need_weights=False`` the weights are not materialised: the call goes to PyTorch's
    fused ``scaled_dot_product_attention`` (same result, less memory, faster) and returns
    ``(output, None)``.

    Shapes: ``q`` ``(..., L_q, d_k)``, ``k`` ``(..., L_k, d_k)``, ``v`` ``(..., L_k, d_v)``
    → ``(output (..., L_q, d_v), weights (..., L_q, L_k))``.

    >>> x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> attention(x, x, x, scale=1.0)[1]
    tensor([[0.7311, 0.2689],
            [0.2689, 0.7311]])
    """
    _require_tensors("attention", q=q, k=k, v=v, mask=mask)
    _checks.check_attention("attention", q, k, v, mask)
    _checks.require_flag("attention", "need_weights", need_weights)
    scale = _checks.scale_or_default("attention", scale, q.shape[-1])
    return _attention(q, k, v, mask, scale, need_weights)


def _attention(q, k, v, mask, scale, need_weights):
    """``attention`` without the input checks (for callers that have checked already)."""
    if not need_weights:
        return _fused_attention(q, k, v, mask, scale), None
    weights = _masked_softmax(_scaled_scores(q, k, scale), -1, mask)
    return weights @ v, weights


def _fused_attention(q, k, v, mask, scale) -> torch.Tensor:
    """``attention``'s output through ``F.scaled_dot_product_attention``.

    The fused kernels want q, k and v with the same batch shape, so they are broadcast first;
    rows with nothing to attend to are set to zero explicitly (the kernels' own treatment of
    such rows has changed between PyTorch versions).
    """
    batch = _checks.batch_shape_unchecked(q, k, v)
    q = q.expand(*batch, *q.shape[-2:])
    k = k.expand(*batch, *k.shape[-2:])
    v = v.expand(*batch, *v.shape[-2:])
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    if mask is not None:
        attends_somewhere = mask.any(dim=-1, keepdim=True)
        output = output.masked_fill(~attends_somewhere, 0.0)
    return output


def tiled_attention(q, k, v, mask=None, scale=None, *, causal=False, block_q=None, block_k=None):
    r"""Exact attention computed tile by tile, never holding an ``L_q × L_k`` array:
    FlashAttention (Dao et al., 2022) in the loop order of FlashAttention-2 (Dao, 2023), in
    PyTorch operations.

    .. math:: m \leftarrow \max(m, \max_j s_j), \quad
              \ell \leftarrow e^{m_{\text{old}} - m}\,\ell + \textstyle\sum_j e^{s_j - m}, \quad
              y \leftarrow e^{m_{\text{old}} - m}\,y + \textstyle\sum_j e^{s_j - m} v_j,
              \qquad \text{output} = y / \ell

    Blocks of ``block_q`` queries (the outer loop) meet tiles of ``block_k`` keys (the inner
    loop); each query row keeps a running maximum ``m``, a running sum ``ℓ`` and an
    unnormalised output ``y`` (the online softmax), divided by ``ℓ`` once, after its last
    tile. With ``causal=True`` query ``i`` sees keys ``j <= i`` (as ``causal_mask``, and
    ``is_causal=True`` of ``F.scaled_dot_product_attention`` when ``L_q ≠ L_k``), on top of
    ``mask`` if one is given, and the tiles wholly above the diagonal are skipped, forward and
    backward: about half of them. By default the blocks are 256 × 256 on the CPU; on a GPU
    they are larger (1024 keys, and as many queries as keep a tile within 2**24 scores),
    because there every operation costs a launch of several microseconds however small it is
    (``attnlib._tiles.default_blocks``).
    The result equals ``attention(q, k, v, mask, scale)[0]`` (float64: to 1e-10), fully masked
    rows included (zeros). The backward pass recomputes the tiles instead of storing the
    weights, so training memory is linear in the length too. float16 and bfloat16 inputs are
    computed in float32 tile by tile (running state, log-sum-exp and gradient sums included);
    the output and gradients keep the inputs' dtype. The kernel is ``attnlib._torch_tiled``.

    Shapes: ``q`` ``(..., L_q, d_k)``, ``k`` ``(..., L_k, d_k)``, ``v`` ``(..., L_k, d_v)``,
    ``mask`` broadcasting to ``(..., L_q, L_k)`` → output ``(..., L_q, d_v)``.

    >>> x = torch.eye(4)
    >>> out = tiled_attention(x, x, x, causal=True, block_q=2, block_k=3)
    >>> torch.allclose(out, attention(x, x, x, causal_mask(4))[0])
    True
    """
    fn = "tiled_attention"
    _require_tensors(fn, q=q, k=k, v=v, mask=mask)
    _checks.check_tiled(fn, q, k, v, mask, block_q, block_k)
    _checks.require_flag(fn, "causal", causal)
    scale = _checks.scale_or_default(fn, scale, q.shape[-1])
    if k.shape[-2] == 0:  # no keys, no tiles: every query has nothing to attend to (zeros)
        return _attention(q, k, v, mask, scale, need_weights=True)[0]
    if block_q is None or block_k is None:
        sequences = math.prod(_checks.batch_shape_unchecked(q, k, v))
        on_cpu = _checks.in_main_memory(q)
        default_q, default_k = _tiles.default_blocks(q.shape[-2], k.shape[-2], sequences, on_cpu)
        block_q, block_k = block_q or default_q, block_k or default_k
    plan = _tiles.FullPlan(q.shape[-2], k.shape[-2], block_q, block_k, causal)
    return _torch_tiled.tiled(q, k, v, mask, scale, plan)


def truncated_attention(q, k, v, window: int, causal: bool = False, scale=None) -> torch.Tensor:
    r"""Attention restricted to a band, ``|i - j| <= window`` (and ``j <= i`` if ``causal``),
    in O(L·window) time and memory; as ``attnlib.numpy.truncated_attention``.

    Equal to ``attention(q, k, v, mask=window_mask(L, window))[0]`` without ever building an
    ``L × L`` matrix: it is ``tiled_attention``'s kernel visiting only the tiles that touch the
    band (blocks of 32 queries, each against its own key block and the ``⌈window / 32⌉``
    blocks on either side; at each end, the blocks that reach past the sequence as one), with
    the same backward pass that recomputes the tiles. On the CPU one sequence at a time, so
    that the overlapping key windows stay views of its rows (but many at once at the two
    ends, whose keys are copied with zero padding anyway, and for sequences of up to 32
    tokens); on a GPU all of them at once, in large groups, with the windows copied. float16
    and bfloat16 are computed in float32, as in ``tiled_attention``.

    Shapes: ``q``, ``k`` ``(..., L, d_k)``, ``v`` ``(..., L, d_v)`` → output ``(..., L, d_v)``.

    >>> x = torch.eye(4)
    >>> out = truncated_attention(x, x, x, window=1, scale=1.0)
    >>> torch.allclose(out, attention(x, x, x, window_mask(4, 1), scale=1.0)[0])
    True
    """
    _require_tensors("truncated_attention", q=q, k=k, v=v)
    _checks.check_truncated("truncated_attention", q, k, v, window)
    _checks.require_flag("truncated_attention", "causal", causal)
    scale = _checks.scale_or_default("truncated_attention", scale, q.shape[-1])
    if _checks.in_main_memory(q):  # the CPU: one sequence at a time (mostly), groups in cache
        training = _torch_tiled.needs_gradients(q, k, v)
        scores = _tiles.GROUP_SCORES if training else _tiles.CPU_BAND_GROUP_SCORES
        plan = _tiles.band_plan(q.shape[-2], window, causal, sequences=1, group_scores=scores)
    else:  # a GPU: all sequences at once, in large groups (fewer launches)
        batch = _checks.batch_shape_unchecked(q, k, v)
        sequences, scores = math.prod(batch), _tiles.GPU_BAND_GROUP_SCORES
        plan = _tiles.band_plan(q.shape[-2], window, causal, sequences, group_scores=scores)
    return _torch_tiled.tiled(q, k, v, None, scale, plan)


# ------------------------------------------------------------ approximations: linear, low-rank


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    r"""The feature map of linear attention, :math:`\phi(x) = \operatorname{elu}(x) + 1`.

    >>> elu_feature_map(torch.tensor([-1.0, 0.0, 2.0]))
    tensor([0.3679, 1.0000, 3.0000])
    """
    _require_tensors("elu_feature_map", x=x)
    _checks.require_float("elu_feature_map", "x", x)
    return F.elu(x) + 1.0


def linear_attention(q, k, v, causal: bool = False) -> torch.Tensor:
    r"""Linear attention, the parallel form; as ``attnlib.numpy.linear_attention``.

    .. math:: y_i = \frac{\phi(q_i)^\top \sum_j \phi(k_j) v_j^\top}
                         {\phi(q_i)^\top \sum_j \phi(k_j)}

    with ``j`` over all keys, or ``j <= i`` when ``causal`` (prefix sums, computed at once).

    >>> x = torch.ones(3, 2)
    >>> linear_attention(x, x, torch.arange(3.0)[:, None], causal=True).ravel()
    tensor([0.0000, 0.5000, 1.0000])
    """
    _require_tensors("linear_attention", q=q, k=k, v=v)
    _checks.check_attention("linear_attention", q, k, v, None)
    _checks.require_flag("linear_attention", "causal", causal)
    if causal:
        _checks.check_same_length("linear_attention", q, k)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    if not causal:
        state = phi_k.transpose(-1, -2) @ v  # (..., d_k, d_v): Σ_j φ(k_j) v_jᵀ
        normaliser = phi_k.sum(dim=-2)  # (..., d_k): Σ_j φ(k_j)
        # No keys at all: a zero state and normaliser, and a zero output rather than 0 / 0.
        smallest = torch.finfo(state.dtype).tiny
        return (phi_q @ state) / (phi_q @ normaliser[..., None]).clamp_min(smallest)
    states = torch.cumsum(phi_k[..., :, None] * v[..., None, :], dim=-3)  # (..., L, d_k, d_v)
    normalisers = torch.cumsum(phi_k, dim=-2)  # (..., L, d_k)
    numerator = (phi_q[..., None, :] @ states)[..., 0, :]
    return numerator / (phi_q * normalisers).sum(dim=-1, keepdim=True)


def linear_attention_recurrent(q, k, v) -> torch.Tensor:
    r"""Causal linear attention as a recurrent network, one step per token; as
    ``attnlib.numpy.linear_attention_recurrent``.

    .. math:: S_i = S_{i-1} + \phi(k_i) v_i^\top, \quad z_i = z_{i-1} + \phi(k_i), \quad
              y_i = \frac{\phi(q_i)^\top S_i}{\phi(q_i)^\top z_i}

    >>> x = torch.ones(3, 2)
    >>> linear_attention_recurrent(x, x, torch.arange(3.0)[:, None]).ravel()
    tensor([0.0000, 0.5000, 1.0000])
    """
    _require_tensors("linear_attention_recurrent", q=q, k=k, v=v)
    _checks.check_attention("linear_attention_recurrent", q, k, v, None)
    _checks.check_same_length("linear_attention_recurrent", q, k)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    batch = _checks.batch_shape_unchecked(q, k, v)
    state = q.new_zeros(*batch, k.shape[-1], v.shape[-1])
    normaliser = q.new_zeros(*batch, k.shape[-1])
    out = q.new_empty(*batch, q.shape[-2], v.shape[-1])
    for i in range(q.shape[-2]):
        state = state + phi_k[..., i, :, None] * v[..., i, None, :]
        normaliser = normaliser + phi_k[..., i, :]
        numerator = (phi_q[..., i, None, :] @ state)[..., 0, :]
        out[..., i, :] = numerator / (phi_q[..., i, :] * normaliser).sum(dim=-1, keepdim=True)
    return out


def low_rank_attention(q, k, v, projection_k, projection_v=None, scale=None):
    r"""Low-rank (Linformer-style) attention; as ``attnlib.numpy.low_rank_attention``.

    .. math:: \operatorname{softmax}\!\left(s\,Q (E K)^\top\right) (F V), \qquad
              E, F \in \mathbb{R}^{\text{rank} \times L_k}

    >>> x = torch.eye(4)
    >>> out, w = low_rank_attention(x, x, x, torch.eye(4))
    >>> torch.allclose(out, attention(x, x, x)[0])
    True
    """
    projection_v = projection_k if projection_v is None else projection_v
    _require_tensors(
        "low_rank_attention", q=q, k=k, v=v, projection_k=projection_k, projection_v=projection_v
    )
    _checks.check_attention("low_rank_attention", q, k, v, None)
    _checks.check_projection("low_rank_attention", "projection_k", projection_k, k.shape[-2])
    _checks.check_projection("low_rank_attention", "projection_v", projection_v, k.shape[-2])
    projections = {"k": k, "projection_k": projection_k, "projection_v": projection_v}
    _checks.require_same_dtype("low_rank_attention", projections)
    scale = _checks.scale_or_default("low_rank_attention", scale, q.shape[-1])
    weights = _masked_softmax(_scaled_scores(q, projection_k @ k, scale), -1, None)
    return weights @ (projection_v @ v), weights


def segment_means(length: int, rank: int, dtype=None, device=None) -> torch.Tensor:
    """The fixed projection that averages ``length`` tokens in ``rank`` segments, ``(rank,
    length)``; as ``attnlib.numpy.segment_means``.

    >>> segment_means(4, 2)
    tensor([[0.5000, 0.5000, 0.0000, 0.0000],
            [0.0000, 0.0000, 0.5000, 0.5000]])
    """
    _checks.check_rank("segment_means", "length", length, rank)
    segment = torch.arange(length, device=device) * rank // length
    member = (segment[None, :] == torch.arange(rank, device=device)[:, None]).to(
        dtype or torch.get_default_dtype()
    )
    return member / member.sum(dim=1, keepdim=True)


class LowRankSelfAttention(nn.Module):
    r"""Self-attention with learned low-rank projections of the keys and values (Linformer);
    as ``attnlib.numpy.LowRankSelfAttention``, with every weight a trainable parameter.

    .. math:: Y = \operatorname{softmax}\!\left(XW_q\, (E\,XW_k)^\top / \sqrt{d_k}\right)
              (F\,XW_v)

    ``projection_k`` (E) and ``projection_v`` (F) are ``(rank, max_len)`` parameters that
    start as ``segment_means(max_len, rank)`` and are trained with the rest, as in Linformer;
    a sequence of ``L <= max_len`` tokens uses their first ``L`` columns. ``forward(x)``
    returns ``(output (..., L, d_v), weights (..., L, rank))``.

    >>> layer = LowRankSelfAttention(d_model=4, max_len=8, rank=2, seed=0)
    >>> [tuple(t.shape) for t in layer(torch.ones(8, 4))]
    [(8, 4), (8, 2)]
    """

    def __init__(
        self, d_model, max_len, rank, d_k=None, d_v=None, seed=None, dtype=None, device=None
    ):
        super().__init__()
        d_k, d_v = _checks.check_layer_dims("LowRankSelfAttention", d_model, d_k, d_v)
        _checks.check_rank("LowRankSelfAttention", "max_len", max_len, rank)
        self.d_model, self.d_k, self.d_v, self.max_len = d_model, d_k, d_v, max_len
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        std = d_model**-0.5

        def weight(d_out: int) -> nn.Parameter:
            w = torch.randn(d_model, d_out, generator=generator, dtype=dtype) * std
            return nn.Parameter(w.to(device))

        self.w_q, self.w_k, self.w_v = weight(d_k), weight(d_k), weight(d_v)
        start = segment_means(max_len, rank, dtype=dtype, device=device)
        self.projection_k = nn.Parameter(start.clone())
        self.projection_v = nn.Parameter(start.clone())

    def forward(self, x: torch.Tensor):
        """Attend from every token of ``x`` to ``rank`` mixtures of its tokens."""
        _require_tensors("LowRankSelfAttention", x=x)
        _checks.check_layer_input("LowRankSelfAttention", x, self.d_model)
        _checks.require_layer_dtype("LowRankSelfAttention", "x", x, self.w_q.dtype)
        _checks.check_positions("LowRankSelfAttention", x.shape[-2], self.max_len)
        length = x.shape[-2]
        projections = self.projection_k[:, :length], self.projection_v[:, :length]
        return low_rank_attention(x @ self.w_q, x @ self.w_k, x @ self.w_v, *projections)

    def extra_repr(self) -> str:
        rank = self.projection_k.shape[0]
        return (
            f"d_model={self.d_model}, max_len={self.max_len}, rank={rank}, "
            f"d_k={self.d_k}, d_v={self.d_v}"
        )


# --------------------------------------------------------------------------- masks


def causal_mask(length: int, device=None) -> torch.Tensor:
    """Query ``i`` may attend to keys ``j <= i``. Shape ``(length, length)``, boolean.

    >>> causal_mask(3).int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    """
    _checks.require_positive_int("causal_mask", "length", length)
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def padding_mask(lengths, max_len: int | None = None, device=None) -> torch.Tensor:
    """True where key ``j < lengths[b]``: ``lengths`` ``(B,)`` → ``(B, 1, max_len)``.

    The middle axis broadcasts over queries; a multi-head layer applies it to every head. The mask
    lands on ``device``, or on ``lengths``' device when ``lengths`` is a tensor.

    >>> padding_mask([3, 1], max_len=4).int()
    tensor([[[1, 1, 1, 0]],
    <BLANKLINE>
            [[1, 0, 0, 0]]], dtype=torch.int32)
    """
    lengths = torch.as_tensor(lengths, device=device)
    max_len = _checks.check_lengths("padding_mask", lengths, max_len)
    positions = torch.arange(max_len, device=lengths.device)
    return (positions < lengths[:, None])[:, None, :]


def window_mask(length: int, window: int, device=None) -> torch.Tensor:
    """Query ``i`` may attend to keys ``j`` with ``|i - j| <= window``. Shape ``(length, length)``.

    >>> window_mask(3, 0).int()
    tensor([[1, 0, 0],
            [0, 1, 0],
            [0, 0, 1]], dtype=torch.int32)
    """
    _checks.require_positive_int("window_mask", "length", length)
    _checks.require_positive_int("window_mask", "window", window, allow_zero=True)
    positions = torch.arange(length, device=device)
    return (positions[:, None] - positions[None, :]).abs() <= window


def graph_mask(edges, num_nodes: int, directed: bool = False, self_loops: bool = True, device=None):
    """Node ``i`` may attend to node ``j`` only along an edge. Shape ``(num_nodes, num_nodes)``.

    ``edges``: ``(i, j)`` pairs or an int tensor ``(E, 2)``; undirected edges open both ways.

    >>> graph_mask([(0, 1)], 3).int()
    tensor([[1, 1, 0],
            [1, 1, 0],
            [0, 0, 1]], dtype=torch.int32)
    """
    _checks.require_integer_edges("graph_mask", edges)
    _checks.require_flag("graph_mask", "directed", directed)
    _checks.require_flag("graph_mask", "self_loops", self_loops)
    edges = torch.as_tensor(edges, dtype=torch.long, device=device)
    edges = _checks.check_edges("graph_mask", edges, num_nodes)
    eye = torch.eye(num_nodes, dtype=torch.bool, device=edges.device)
    mask = eye if self_loops else torch.zeros_like(eye)
    mask[edges[:, 0], edges[:, 1]] = True
    if not directed:
        mask[edges[:, 1], edges[:, 0]] = True
    return mask


# --------------------------------------------------------------------------- positions


def sinusoidal_positional_encoding(
    length: int, d_model: int, base: float = 10000.0, dtype=None, device=None
) -> torch.Tensor:
    r"""The Transformer's fixed positional encoding, sine and cosine interleaved.

    .. math:: PE_{p,\,2i} = \sin\!\left(p / \text{base}^{2i/d}\right), \qquad
              PE_{p,\,2i+1} = \cos\!\left(p / \text{base}^{2i/d}\right)

    Shape ``(length, d_model)``; computed in float64 and returned in ``dtype`` (default:
    PyTorch's default dtype).

    >>> sinusoidal_positional_encoding(2, 2)
    tensor([[0.0000, 1.0000],
            [0.8415, 0.5403]])
    """
    _checks.require_positive_int("sinusoidal_positional_encoding", "length", length)
    _checks.require_positive_int("sinusoidal_positional_encoding", "d_model", d_model)
    base = _checks.require_positive_real("sinusoidal_positional_encoding", "base", base)
    f64 = {"dtype": torch.float64, "device": device}
    positions = torch.arange(length, **f64)[:, None]
    frequencies = base ** (-torch.arange(0, d_model, 2, **f64) / d_model)
    angles = positions * frequencies
    encoding = torch.empty(length, d_model, **f64)
    encoding[:, 0::2] = torch.sin(angles)
    encoding[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return encoding.to(dtype or torch.get_default_dtype())


class LearnedPositionalEmbedding(nn.Module):
    """One learned vector per position, ``0 … max_len − 1``: a lookup table trained with the model.

    ``forward(length)`` returns the first ``length`` rows, ``(length, d_model)``, to be added to
    the token embeddings, like ``sinusoidal_positional_encoding(length, d_model)``. Unlike the
    sinusoids, the table ends at ``max_len``: a longer input has positions that were never
    trained, and asking for them is an error.

    >>> LearnedPositionalEmbedding(max_len=128, d_model=16, seed=0)(10).shape
    torch.Size([10, 16])
    """

    def __init__(self, max_len: int, d_model: int, seed=None, dtype=None, device=None):
        super().__init__()
        _checks.require_positive_int("LearnedPositionalEmbedding", "max_len", max_len)
        _checks.require_positive_int("LearnedPositionalEmbedding", "d_model", d_model)
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        weight = torch.randn(max_len, d_model, generator=generator, dtype=dtype) * 0.02
        self.weight = nn.Parameter(weight.to(device))

    def forward(self, length: int) -> torch.Tensor:
        """The position vectors of positions ``0 … length − 1``, ``(length, d_model)``."""
        _checks.check_positions("LearnedPositionalEmbedding", length, self.weight.shape[0])
        return self.weight[:length]


# --------------------------------------------------------------------------- layers


class SelfAttention(nn.Module):
    r"""Single-head self-attention with learned projections ``W_q``, ``W_k``, ``W_v``.

    .. math:: Q = XW_q,\; K = XW_k,\; V = XW_v, \qquad
              Y = \operatorname{softmax}\!\left(QK^\top / \sqrt{d_k}\right) V

    Parameters ``w_q``, ``w_k`` ``(d_model, d_k)`` and ``w_v`` ``(d_model, d_v)``, drawn from
    ``N(0, 1/d_model)`` (from ``seed`` if given, else from PyTorch's global generator).
    ``forward(x)`` with ``x`` ``(..., L, d_model)`` returns
    ``(output (..., L, d_v), weights (..., L, L))``.

    >>> layer = SelfAttention(d_model=4, d_k=2, seed=0)
    >>> [tuple(t.shape) for t in layer(torch.ones(3, 4))]
    [(3, 4), (3, 3)]
    """

    def __init__(self, d_model: int, d_k=None, d_v=None, seed=None, dtype=None, device=None):
        super().__init__()
        d_k, d_v = _checks.check_layer_dims("SelfAttention", d_model, d_k, d_v)
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        std = d_model**-0.5

        def weight(d_out: int) -> nn.Parameter:
            w = torch.randn(d_model, d_out, generator=generator, dtype=dtype) * std
            return nn.Parameter(w.to(device))

        self.w_q, self.w_k, self.w_v = weight(d_k), weight(d_k), weight(d_v)

    def forward(self, x: torch.Tensor, mask=None, need_weights: bool = True):
        """Attend from every token of ``x`` to every token of ``x``; see the class docstring."""
        _require_tensors("SelfAttention", x=x, mask=mask)
        _checks.check_layer_input("SelfAttention", x, self.d_model)
        _checks.require_layer_dtype("SelfAttention", "x", x, self.w_q.dtype)
        _checks.require_flag("SelfAttention", "need_weights", need_weights)
        if mask is not None:
            _checks.check_mask("SelfAttention", mask, (*x.shape[:-2], x.shape[-2], x.shape[-2]))
        return _attention(x @ self.w_q, x @ self.w_k, x @ self.w_v, mask, None, need_weights)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_k={self.d_k}, d_v={self.d_v}"


# --------------------------------------------------------------------------- multi-head


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Cut the feature axis into ``num_heads`` slices: ``(..., L, H·d)`` → ``(..., H, L, d)``.

    >>> split_heads(torch.arange(8.0).reshape(2, 4), 2)[1]
    tensor([[2., 3.],
            [6., 7.]])
    """
    _require_tensors("split_heads", x=x)
    _checks.check_split_heads("split_heads", x, num_heads)
    return _split_heads(x, num_heads)


def _split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``split_heads`` without the input checks."""
    *batch, length, width = x.shape
    return x.reshape(*batch, length, num_heads, width // num_heads).transpose(-2, -3)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads again: ``(..., H, L, d)`` → ``(..., L, H·d)``.

    >>> x = torch.arange(8.0).reshape(2, 4)
    >>> torch.equal(merge_heads(split_heads(x, 2)), x)
    True
    """
    _require_tensors("merge_heads", x=x)
    _checks.check_merge_heads("merge_heads", x)
    return _merge_heads(x)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``merge_heads`` without the input checks."""
    x = x.transpose(-2, -3)
    return x.reshape(*x.shape[:-2], -1)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention: ``H`` attention heads side by side, concatenated, then mixed.

    .. math:: \text{head}_h = \operatorname{Attention}(X_q W_q^{(h)}, X_k W_k^{(h)}, X_v W_v^{(h)}),
              \qquad Y = [\text{head}_1, \dots, \text{head}_H]\, W_o

    Parameters ``w_q``, ``w_k`` ``(d_model, H·d_k)``, ``w_v`` ``(d_model, H·d_v)``, ``w_o``
    ``(H·d_v, d_model)`` and, with ``bias=True``, ``b_q``, ``b_k``, ``b_v``, ``b_o``; the same
    layout as ``attnlib.numpy.MultiHeadAttention``. ``forward(query, key=None, value=None,
    mask=None, need_weights=True)`` returns ``(output (..., L_q, d_model),
    weights (..., H, L_q, L_k))``; with ``need_weights=False`` the heads run through the fused
    kernel and ``weights`` is None. ``mask`` (True = may attend) is read as in
    ``attnlib.numpy.MultiHeadAttention``: ``(L_q, L_k)`` or ``(B, L_q, L_k)`` (what
    ``causal_mask`` and ``padding_mask`` return) applies to every head, ``(B, H, L_q, L_k)``
    gives each head its own. ``num_kv_heads`` (dividing ``num_heads``): grouped-query
    attention, as in ``attnlib.numpy.MultiHeadAttention``.

    >>> layer = MultiHeadAttention(d_model=8, num_heads=2, seed=0)
    >>> [tuple(t.shape) for t in layer(torch.ones(5, 8))]
    [(5, 8), (2, 5, 5)]
    """

    def __init__(
        self, d_model, num_heads, d_k=None, d_v=None, bias=False, seed=None, dtype=None,
        device=None, *, num_kv_heads=None,
    ):  # fmt: skip
        super().__init__()
        fn = "MultiHeadAttention"
        d_k, d_v = _checks.check_multihead_dims(fn, d_model, num_heads, d_k, d_v)
        _checks.require_flag(fn, "bias", bias)
        kv_heads = _checks.check_kv_heads(fn, num_heads, num_kv_heads)
        self.d_model, self.num_heads, self.d_k, self.d_v = d_model, num_heads, d_k, d_v
        self.num_kv_heads = kv_heads
        generator = None if seed is None else torch.Generator().manual_seed(seed)

        def parameter(*shape: int, std: float | None = None) -> nn.Parameter:
            values = torch.zeros(shape, dtype=dtype)
            if std is not None:
                values = torch.randn(shape, generator=generator, dtype=dtype) * std
            return nn.Parameter(values.to(device))

        self.w_q = parameter(d_model, num_heads * d_k, std=d_model**-0.5)
        self.w_k = parameter(d_model, kv_heads * d_k, std=d_model**-0.5)
        self.w_v = parameter(d_model, kv_heads * d_v, std=d_model**-0.5)
        self.w_o = parameter(num_heads * d_v, d_model, std=(num_heads * d_v) ** -0.5)
        self.b_q = self.b_k = self.b_v = self.b_o = None
        if bias:
            self.b_q, self.b_k = parameter(num_heads * d_k), parameter(kv_heads * d_k)
            self.b_v, self.b_o = parameter(kv_heads * d_v), parameter(d_model)

    @classmethod
    def from_torch(cls, module: nn.Module) -> MultiHeadAttention:
        """A copy of a ``torch.nn.MultiheadAttention`` (same numbers, attnlib's layout).

        Mind the masks: ``nn.MultiheadAttention`` takes True = *blocked*; attnlib takes
        True = may attend, so pass ``~attn_mask`` (and ``~key_padding_mask[:, None, None]``).
        """
        weights = multihead_weights_from_torch(module)
        has_bias = weights["b_q"] is not None
        reference = module.out_proj.weight
        layer = cls(
            module.embed_dim,
            weights["num_heads"],
            bias=has_bias,
            dtype=reference.dtype,
            device=reference.device,
        )
        with torch.no_grad():
            for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
                if weights[name] is not None:
                    getattr(layer, name).copy_(weights[name])
        return layer

    def forward(self, query, key=None, value=None, mask=None, need_weights: bool = True):
        """Attend from every query to every key, in every head; see the class docstring."""
        key = query if key is None else key
        value = key if value is None else value
        _require_tensors("MultiHeadAttention", query=query, key=key, value=value, mask=mask)
        _checks.check_multihead_input("MultiHeadAttention", query, key, value, self.d_model)
        _checks.require_layer_dtype("MultiHeadAttention", "query", query, self.w_q.dtype)
        _checks.require_flag("MultiHeadAttention", "need_weights", need_weights)
        mask = _checks.mask_for_heads("MultiHeadAttention", mask, query, key, self.num_heads)
        return self._forward(query, key, value, mask, need_weights)

    def _forward(self, query, key, value, head_mask, need_weights: bool):
        """``forward`` without the input checks; ``head_mask`` has its head axis already
        (``_checks.mask_for_heads``)."""
        group = self.num_heads // self.num_kv_heads  # query heads per key-value head
        q = _split_heads(_project(query, self.w_q, self.b_q), self.num_heads)
        k = _split_heads(_project(key, self.w_k, self.b_k), self.num_kv_heads)
        v = _split_heads(_project(value, self.w_v, self.b_v), self.num_kv_heads)
        if group > 1:  # query head h reads key-value head h // group
            k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
        per_head, weights = _attention(q, k, v, head_mask, None, need_weights)
        return _project(_merge_heads(per_head), self.w_o, self.b_o), weights

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}, "
            f"d_v={self.d_v}, bias={self.b_q is not None}{kv_heads_repr(self)}"
        )


def _project(x: torch.Tensor, w: torch.Tensor, b) -> torch.Tensor:
    """``x W + b`` (or ``x W`` when there is no bias)."""
    return x @ w if b is None else x @ w + b


# --------------------------------------------------------------------------- the Transformer block


class LayerNorm(nn.LayerNorm):
    r"""``torch.nn.LayerNorm`` over the last axis, built as ``LayerNorm(d_model, eps)``.

    .. math:: \operatorname{LN}(x) = \gamma \odot (x - \mu) / \sqrt{\sigma^2 + \varepsilon} + \beta

    The same computation as ``attnlib.numpy.LayerNorm``.

    >>> norm = LayerNorm(4)  # gamma = 1, beta = 0 to start
    >>> y = norm(torch.tensor([[1.0, 2.0, 3.0, 4.0]])).detach()
    >>> [round(v, 4) for v in y[0].tolist()], abs(float(y.mean())) < 1e-6
    ([-1.3416, -0.4472, 0.4472, 1.3416], True)
    """

    def __init__(self, d_model: int, eps: float = 1e-5, dtype=None, device=None):
        _checks.require_positive_int("LayerNorm", "d_model", d_model)
        eps = _checks.require_positive_real("LayerNorm", "eps", eps)
        super().__init__(d_model, eps=eps, dtype=dtype, device=device)

    @classmethod
    def from_torch(cls, module: nn.LayerNorm) -> LayerNorm:
        """A copy of a ``torch.nn.LayerNorm``."""
        weight = module.weight
        norm = cls(
            module.normalized_shape[-1], module.eps, dtype=weight.dtype, device=weight.device
        )
        norm.load_state_dict(module.state_dict())
        return norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise each token of ``x`` ``(..., L, d_model)`` over its features."""
        _require_tensors("LayerNorm", x=x)
        _checks.check_layer_input("LayerNorm", x, self.normalized_shape[-1])
        _checks.require_layer_dtype("LayerNorm", "x", x, self.weight.dtype)
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        """``forward`` without the input checks."""
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class FeedForward(nn.Module):
    r"""The position-wise feed-forward network, :math:`\operatorname{act}(xW_1 + b_1)W_2 + b_2`.

    Parameters ``w_1`` ``(d_model, d_ff)``, ``b_1``, ``w_2`` ``(d_ff, d_model)``, ``b_2``, the
    layout of ``attnlib.numpy.FeedForward``; ``activation`` is "relu" or "gelu".

    >>> FeedForward(4, 16, seed=0)(torch.ones(3, 4)).shape
    torch.Size([3, 4])
    """

    def __init__(self, d_model, d_ff, activation="relu", seed=None, dtype=None, device=None):
        super().__init__()
        for name, value in (("d_model", d_model), ("d_ff", d_ff)):
            _checks.require_positive_int("FeedForward", name, value)
        _checks.check_choice("FeedForward", "activation", activation, ("relu", "gelu"))
        self.activation = activation
        generator = None if seed is None else torch.Generator().manual_seed(seed)

        def weight(d_in: int, d_out: int) -> nn.Parameter:
            values = torch.randn(d_in, d_out, generator=generator, dtype=dtype) * d_in**-0.5
            return nn.Parameter(values.to(device))

        self.w_1, self.b_1 = (
            weight(d_model, d_ff),
            nn.Parameter(torch.zeros(d_ff, dtype=dtype, device=device)),
        )
        self.w_2, self.b_2 = (
            weight(d_ff, d_model),
            nn.Parameter(torch.zeros(d_model, dtype=dtype, device=device)),
        )

    @classmethod
    def from_torch(cls, linear_1: nn.Linear, linear_2: nn.Linear, activation="relu") -> FeedForward:
        """A copy of two ``torch.nn.Linear`` layers with ``activation`` between them."""
        (w_1, b_1), (w_2, b_2) = linear_from_torch(linear_1), linear_from_torch(linear_2)
        ffn = cls(*w_1.shape, activation, dtype=w_1.dtype, device=w_1.device)
        with torch.no_grad():
            for parameter, value in zip((ffn.w_1, ffn.b_1, ffn.w_2, ffn.b_2), (w_1, b_1, w_2, b_2)):
                parameter.copy_(value)
        return ffn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The same two-layer network for every token of ``x`` ``(..., L, d_model)``."""
        _require_tensors("FeedForward", x=x)
        _checks.check_layer_input("FeedForward", x, self.w_1.shape[0])
        _checks.require_layer_dtype("FeedForward", "x", x, self.w_1.dtype)
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        """``forward`` without the input checks."""
        act = F.relu if self.activation == "relu" else F.gelu
        return act(x @ self.w_1 + self.b_1) @ self.w_2 + self.b_2


class TransformerEncoderBlock(nn.Module):
    """One Transformer encoder layer: self-attention and feed-forward, each with Add & Norm.

    Post-norm (``norm_first=False``, the paper) or pre-norm (``norm_first=True``); the same
    computation and layout as ``attnlib.numpy.TransformerEncoderBlock``. ``forward(x, mask,
    need_weights=True)`` returns ``(y (..., L, d_model), weights (..., H, L, L))``; with
    ``need_weights=False`` the attention runs through the fused kernel and weights is None.

    >>> block = TransformerEncoderBlock(d_model=8, num_heads=2, d_ff=32, seed=0)
    >>> [tuple(t.shape) for t in block(torch.ones(5, 8))]
    [(5, 8), (2, 5, 5)]
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        norm_first=False,
        activation="relu",
        seed=None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        factory_kwargs = {"dtype": dtype, "device": device}  # PyTorch's name
        seeds = (None, None) if seed is None else (seed, seed + 1)
        _checks.require_flag("TransformerEncoderBlock", "norm_first", norm_first)
        self.norm_first = norm_first
        self.self_attention = MultiHeadAttention(
            d_model, num_heads, bias=True, seed=seeds[0], **factory_kwargs
        )
        self.feed_forward = FeedForward(d_model, d_ff, activation, seed=seeds[1], **factory_kwargs)
        self.norm1, self.norm2 = (
            LayerNorm(d_model, **factory_kwargs),
            LayerNorm(d_model, **factory_kwargs),
        )

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> TransformerEncoderBlock:
        """A copy of a ``torch.nn.TransformerEncoderLayer`` (its dropout is not copied)."""
        # a block of the layer's sizes, whose parts are then replaced by copies of the layer's
        weight = layer.linear1.weight
        sizes = (*block_sizes(layer), layer.norm_first, activation_name(layer))
        block = cls(*sizes, dtype=weight.dtype, device=weight.device)
        block.self_attention = MultiHeadAttention.from_torch(layer.self_attn)
        block.feed_forward = FeedForward.from_torch(
            layer.linear1, layer.linear2, activation_name(layer)
        )
        block.norm1, block.norm2 = (
            LayerNorm.from_torch(layer.norm1),
            LayerNorm.from_torch(layer.norm2),
        )
        return block

    def forward(self, x: torch.Tensor, mask=None, need_weights: bool = True):
        """Self-attention, then feed-forward, each with Add & Norm; see the class docstring."""
        fn, heads = "TransformerEncoderBlock", self.self_attention.num_heads
        _require_tensors(fn, x=x, mask=mask)
        _checks.check_multihead_input(fn, x, x, x, self.self_attention.d_model)  # x is the query
        _checks.require_layer_dtype(fn, "x", x, self.self_attention.w_q.dtype)
        _checks.require_flag(fn, "need_weights", need_weights)
        head_mask = _checks.mask_for_heads(fn, mask, x, x, heads)
        attend, norm1, norm2 = (
            self.self_attention._forward,
            self.norm1._forward,
            self.norm2._forward,
        )
        if self.norm_first:
            h = norm1(x)
            attended, weights = attend(h, h, h, head_mask, need_weights)
            x = x + attended
            return x + self.feed_forward._forward(norm2(x)), weights
        attended, weights = attend(x, x, x, head_mask, need_weights)
        x = norm1(x + attended)
        return norm2(x + self.feed_forward._forward(x)), weights


class TransformerDecoderBlock(nn.Module):
    """One Transformer decoder layer: causal self-attention, cross-attention to ``memory``,
    feed-forward, each with Add & Norm; as ``attnlib.numpy.TransformerDecoderBlock``.

    ``forward(x, memory, mask=None, memory_mask=None, causal=True, need_weights=True)``
    returns ``(y, self_weights (..., H, L, L), cross_weights (..., H, L, S))``; with
    ``need_weights=False`` both attentions run through the fused kernel, and both weights are
    None.

    >>> block = TransformerDecoderBlock(d_model=8, num_heads=2, d_ff=32, seed=0)
    >>> [tuple(t.shape) for t in block(torch.ones(4, 8), torch.ones(6, 8))]
    [(4, 8), (2, 4, 4), (2, 4, 6)]
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        norm_first=False,
        activation="relu",
        seed=None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        factory_kwargs = {"dtype": dtype, "device": device}  # PyTorch's name
        seeds = (None,) * 3 if seed is None else (seed, seed + 1, seed + 2)
        _checks.require_flag("TransformerDecoderBlock", "norm_first", norm_first)
        self.norm_first = norm_first
        self.self_attention = MultiHeadAttention(
            d_model, num_heads, bias=True, seed=seeds[0], **factory_kwargs
        )
        self.cross_attention = MultiHeadAttention(
            d_model, num_heads, bias=True, seed=seeds[1], **factory_kwargs
        )
        self.feed_forward = FeedForward(d_model, d_ff, activation, seed=seeds[2], **factory_kwargs)
        self.norm1, self.norm2, self.norm3 = (
            LayerNorm(d_model, **factory_kwargs) for _ in range(3)
        )

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> TransformerDecoderBlock:
        """A copy of a ``torch.nn.TransformerDecoderLayer`` (its dropout is not copied)."""
        # a block of the layer's sizes, whose parts are then replaced by copies of the layer's
        weight = layer.linear1.weight
        sizes = (*block_sizes(layer), layer.norm_first, activation_name(layer))
        block = cls(*sizes, dtype=weight.dtype, device=weight.device)
        block.self_attention = MultiHeadAttention.from_torch(layer.self_attn)
        block.cross_attention = MultiHeadAttention.from_torch(layer.multihead_attn)
        block.feed_forward = FeedForward.from_torch(
            layer.linear1, layer.linear2, activation_name(layer)
        )
        block.norm1, block.norm2, block.norm3 = (
            LayerNorm.from_torch(n) for n in (layer.norm1, layer.norm2, layer.norm3)
        )
        return block

    def forward(
        self, x, memory, mask=None, memory_mask=None, causal: bool = True, need_weights: bool = True
    ):
        """Causal self-attention, cross-attention, feed-forward; see the class docstring."""
        fn, heads = "TransformerDecoderBlock", self.self_attention.num_heads
        _require_tensors(fn, x=x, memory=memory, mask=mask, memory_mask=memory_mask)
        _checks.check_multihead_input(fn, x, memory, memory, self.self_attention.d_model)
        _checks.require_layer_dtype(fn, "x", x, self.self_attention.w_q.dtype)
        _checks.require_flag(fn, "causal", causal)
        _checks.require_flag(fn, "need_weights", need_weights)
        if causal:
            if mask is not None:  # checked before it meets the causal mask in mask & future
                _checks.require_bool_mask(fn, mask)
            future = causal_mask(x.shape[-2], device=x.device)
            mask = future if mask is None else mask & future
        self_mask = _checks.mask_for_heads(fn, mask, x, x, heads)
        cross_mask = _checks.mask_for_heads(fn, memory_mask, x, memory, heads)
        norm1, norm2, norm3 = self.norm1._forward, self.norm2._forward, self.norm3._forward
        attend_self, attend_memory = self.self_attention._forward, self.cross_attention._forward
        if self.norm_first:
            h = norm1(x)
            attended, self_weights = attend_self(h, h, h, self_mask, need_weights)
            x = x + attended
            attended, cross_weights = attend_memory(
                norm2(x), memory, memory, cross_mask, need_weights
            )
            x = x + attended
            return x + self.feed_forward._forward(norm3(x)), self_weights, cross_weights
        attended, self_weights = attend_self(x, x, x, self_mask, need_weights)
        x = norm1(x + attended)
        attended, cross_weights = attend_memory(x, memory, memory, cross_mask, need_weights)
        x = norm2(x + attended)
        return norm3(x + self.feed_forward._forward(x)), self_weights, cross_weights
