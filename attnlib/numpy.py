"""The NumPy backend: the reference path, plain and explicit.

Every function takes arrays (or anything ``np.asarray`` accepts) with tokens as rows, and
returns NumPy arrays. ``attnlib.torch`` has the same functions with the same arguments;
the tests check that both give the same numbers to 1e-10 in float64.

>>> from attnlib import numpy as attn
>>> x = np.eye(3)                       # three tokens, one-hot
>>> out, w = attn.attention(x, x, x, scale=1.0)
>>> w.round(3)[0]                       # token 0 attends most to itself
array([0.576, 0.212, 0.212])
"""

from __future__ import annotations

import math

import numpy as np

from . import _checks, _tiles
from ._convert import (
    activation_name,
    block_sizes,
    kv_heads_repr,
    linear_from_torch,
    multihead_weights_from_torch,
)

__all__ = [
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


def _array(name: str, x) -> np.ndarray:
    """``np.asarray(x)``, refusing things that are not numbers (a TypeError naming ``name``)."""
    array = np.asarray(x)
    if array.dtype.kind not in "biufc":  # complex gets a clearer error from require_float
        raise TypeError(f"{name} must be an array of numbers; got dtype {array.dtype}")
    return array


# --------------------------------------------------------------------------- softmax, scores


def softmax(x, axis: int = -1, mask=None) -> np.ndarray:
    r"""Softmax along ``axis``, stable for large inputs, with an optional boolean mask.

    .. math:: \operatorname{softmax}(x)_j = \frac{e^{x_j - m}}{\sum_{j'} e^{x_{j'} - m}},
              \quad m = \max_j x_j

    Subtracting the maximum changes nothing mathematically but keeps ``exp`` from
    overflowing (``softmax([1000, 1000])`` is ``[0.5, 0.5]``, not NaN). Entries where
    ``mask`` is False get weight 0; a slice with no True entry gets all zeros.

    Shapes: ``x`` any float array; ``mask`` broadcasts to ``x``. Returns ``x``'s shape.

    >>> softmax(np.array([1.0, 2.0, 3.0])).round(3)
    array([0.09 , 0.245, 0.665])
    >>> softmax(np.array([1.0, 2.0, 3.0]), mask=np.array([True, True, False])).round(3)
    array([0.269, 0.731, 0.   ])
    """
    x = _array("x", x)
    _checks.require_float("softmax", "x", x)
    _checks.check_axis("softmax", axis, x)
    _checks.require_finite("softmax", "x", x, allow_negative_inf=True)
    if mask is not None:
        mask = _array("mask", mask)
        _checks.check_mask("softmax", mask, x.shape)
    return _masked_softmax(x, axis, mask)


def _masked_softmax(x: np.ndarray, axis: int, mask) -> np.ndarray:
    """``softmax`` without the input checks (for callers that have checked already)."""
    if x.shape[axis] == 0:  # nothing to normalise (e.g. no keys at all)
        return np.zeros_like(x)
    if mask is not None:
        x = np.where(mask, x, -np.inf)
    row_max = np.max(x, axis=axis, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)  # a fully masked slice: no shift
    exps = np.exp(x - row_max)
    total = np.sum(exps, axis=axis, keepdims=True)
    # total >= 1 unless the slice is fully masked, where exps is all zeros: 0 / 1 = 0.
    return exps / np.maximum(total, 1.0)


def dot_product_scores(q, k, scale=None) -> np.ndarray:
    r"""Dot-product relevance of every query to every key.

    .. math:: S_{ij} = s \, q_i \cdot k_j, \qquad s = 1/\sqrt{d_k} \text{ by default}

    Pass ``scale=1.0`` for the plain, unscaled dot product.

    Shapes: ``q`` ``(..., L_q, d_k)``, ``k`` ``(..., L_k, d_k)`` → ``(..., L_q, L_k)``.

    >>> king, queen, dog = [0.99, 0.01, 0.02], [0.97, 0.03, 0.02], [0.01, 0.02, 0.02]
    >>> dot_product_scores(np.array([king]), np.array([queen, dog]), scale=1.0).round(4)
    array([[0.961 , 0.0105]])
    """
    q, k = _array("q", q), _array("k", k)
    _checks.check_query_key("dot_product_scores", q, k)
    return _scaled_scores(q, k, _checks.scale_or_default("dot_product_scores", scale, q.shape[-1]))


def _scaled_scores(q: np.ndarray, k: np.ndarray, scale: float | None) -> np.ndarray:
    """``dot_product_scores`` without the input checks (``scale`` None: 1/sqrt(d_k))."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    # Scaling q costs L_q·d multiplications, scaling the scores L_q·L_k.
    return (q * scale) @ np.swapaxes(k, -1, -2)


def additive_scores(q, k, w_q, w_k, w) -> np.ndarray:
    r"""Additive (Bahdanau) relevance: a one-hidden-layer network scores each pair.

    .. math:: S_{ij} = w \cdot \tanh(q_i W_q + k_j W_k)

    Shapes: ``q`` ``(..., L_q, d_q)``, ``k`` ``(..., L_k, d_k)``, ``w_q`` ``(d_q, h)``,
    ``w_k`` ``(d_k, h)``, ``w`` ``(h,)`` → ``(..., L_q, L_k)``. Unlike the dot product,
    ``d_q`` and ``d_k`` may differ.

    >>> q, k = np.ones((1, 2)), np.array([[1.0, 0.0], [-1.0, 0.0]])
    >>> additive_scores(q, k, np.eye(2), np.eye(2), np.array([1.0, 0.0])).round(3)
    array([[0.964, 0.   ]])
    """
    q, k, w_q, w_k, w = (
        _array("q", q),
        _array("k", k),
        _array("w_q", w_q),
        _array("w_k", w_k),
        _array("w", w),
    )
    _checks.check_additive("additive_scores", q, k, w_q, w_k, w)
    hidden = np.tanh((q @ w_q)[..., :, None, :] + (k @ w_k)[..., None, :, :])
    return hidden @ w


# --------------------------------------------------------------------------- attention


def attention(q, k, v, mask=None, scale=None, need_weights: bool = True):
    r"""Scaled dot-product attention: scores, softmax, weighted sum of the values.

    .. math:: \operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(s\,QK^\top\right) V,
              \qquad s = 1/\sqrt{d_k} \text{ unless } \texttt{scale} \text{ is given}

    ``mask`` (boolean, True = may attend) broadcasts to ``(..., L_q, L_k)``. A query whose
    mask row is all False gets zero weights and a zero output.

    Shapes: ``q`` ``(..., L_q, d_k)``, ``k`` ``(..., L_k, d_k)``, ``v`` ``(..., L_k, d_v)``.
    Returns ``(output, weights)``: ``(..., L_q, d_v)`` and ``(..., L_q, L_k)``
    (``weights`` is None when ``need_weights=False``).

    >>> x = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> out, w = attention(x, x, x, scale=1.0)
    >>> w.round(3)
    array([[0.731, 0.269],
           [0.269, 0.731]])
    """
    q, k, v = _array("q", q), _array("k", k), _array("v", v)
    mask = None if mask is None else _array("mask", mask)
    _checks.check_attention("attention", q, k, v, mask)
    _checks.require_flag("attention", "need_weights", need_weights)
    scale = _checks.scale_or_default("attention", scale, q.shape[-1])
    return _attention(q, k, v, mask, scale, need_weights)


def _attention(q, k, v, mask, scale, need_weights):
    """``attention`` without the input checks (for callers that have checked already)."""
    weights = _masked_softmax(_scaled_scores(q, k, scale), -1, mask)
    return weights @ v, (weights if need_weights else None)


def tiled_attention(
    q, k, v, mask=None, scale=None, *, causal=False, block_q=None, block_k=None
) -> np.ndarray:
    r"""Exact attention computed tile by tile, never holding an ``L_q × L_k`` array:
    FlashAttention (Dao et al., 2022) in the loop order of FlashAttention-2 (Dao, 2023), with
    the online softmax. This is the plain loop; ``attnlib.torch.tiled_attention`` is the same
    computation engineered for speed, and ``attnlib.triton.flash_attention`` a GPU kernel.

    .. math:: m \leftarrow \max(m, \max_j s_j), \quad
              \ell \leftarrow e^{m_{\text{old}} - m}\,\ell + \textstyle\sum_j e^{s_j - m}, \quad
              y \leftarrow e^{m_{\text{old}} - m}\,y + \textstyle\sum_j e^{s_j - m} v_j,
              \qquad \text{output} = y / \ell

    Blocks of ``block_q`` queries (the outer loop) meet tiles of ``block_k`` keys (the inner
    loop); each query row keeps a running maximum ``m``, a running sum ``ℓ`` and an
    unnormalised output ``y``, divided by ``ℓ`` once, after its last tile. With
    ``causal=True`` query ``i`` sees keys ``j <= i`` (as ``causal_mask``, and PyTorch's
    ``is_causal=True`` when ``L_q ≠ L_k``), on top of ``mask`` if one is given, and the tiles
    wholly above the diagonal are skipped: about half of them. The result equals
    ``attention(q, k, v, mask, scale)[0]`` (float64: to 1e-10); a fully masked row gives
    zeros. The blocks are 256 × 256 unless given.

    Shapes: ``q`` ``(..., L_q, d_k)``, ``k`` ``(..., L_k, d_k)``, ``v`` ``(..., L_k, d_v)``,
    ``mask`` broadcasting to ``(..., L_q, L_k)`` → output ``(..., L_q, d_v)``.

    >>> x = np.eye(4)
    >>> out = tiled_attention(x, x, x, causal=True, block_q=2, block_k=3)
    >>> np.allclose(out, attention(x, x, x, causal_mask(4))[0])
    True
    """
    q, k, v = _array("q", q), _array("k", k), _array("v", v)
    mask = None if mask is None else _array("mask", mask)
    _checks.check_tiled("tiled_attention", q, k, v, mask, block_q, block_k)
    _checks.require_flag("tiled_attention", "causal", causal)
    scale = _checks.scale_or_default("tiled_attention", scale, q.shape[-1])
    block_q, block_k = block_q or _tiles.DEFAULT_BLOCK, block_k or _tiles.DEFAULT_BLOCK
    length_q, length_k = q.shape[-2], k.shape[-2]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if mask is not None:
        mask = np.broadcast_to(mask, (*batch, length_q, length_k))  # a view
    out = np.zeros((*batch, length_q, v.shape[-1]), dtype=np.result_type(q, k, v))
    k_t = np.swapaxes(k, -1, -2)
    for q_start in range(0, length_q, block_q):
        q_stop = min(length_q, q_start + block_q)
        q_block = q[..., q_start:q_stop, :] * scale
        maximum = np.full((*batch, q_stop - q_start, 1), -np.inf, dtype=out.dtype)  # m
        total = np.zeros_like(maximum)  # ℓ
        output = np.zeros_like(out[..., q_start:q_stop, :])  # y
        # causal: the last query of the block sees keys up to q_stop - 1; later tiles are skipped
        k_end = min(length_k, q_stop) if causal else length_k
        for k_start in range(0, k_end, block_k):
            k_stop = min(length_k, k_start + block_k)
            scores = q_block @ k_t[..., k_start:k_stop]
            allowed = _tile_mask(mask, causal, q_start, q_stop, k_start, k_stop)
            if allowed is not None:
                scores = np.where(allowed, scores, -np.inf)
            new_maximum = np.maximum(maximum, scores.max(axis=-1, keepdims=True))
            shift = np.where(new_maximum == -np.inf, 0.0, new_maximum)  # rows with no key yet
            weights = np.exp(scores - shift)  # 0 where masked
            rescale = np.exp(maximum - shift)  # 0 on a row's first allowed tile
            total = total * rescale + weights.sum(axis=-1, keepdims=True)
            output = output * rescale + weights @ v[..., k_start:k_stop, :]
            maximum = new_maximum
        np.divide(output, total, out=out[..., q_start:q_stop, :], where=total > 0)  # else 0
    return out


def _tile_mask(mask, causal: bool, q_start: int, q_stop: int, k_start: int, k_stop: int):
    """Which scores of the tile (queries ``q_start … q_stop − 1``, keys ``k_start …
    k_stop − 1``) are allowed: ``mask``'s part of it, and ``j <= i`` if ``causal``; None when
    every one is."""
    allowed = None if mask is None else mask[..., q_start:q_stop, k_start:k_stop]
    if causal and k_stop - 1 > q_start:  # the tile reaches above the diagonal
        below = np.arange(k_start, k_stop) <= np.arange(q_start, q_stop)[:, None]
        allowed = below if allowed is None else allowed & below
    return allowed


def truncated_attention(q, k, v, window: int, causal: bool = False, scale=None) -> np.ndarray:
    r"""Attention restricted to a band: query ``i`` sees keys ``j`` with ``|i - j| <= window``
    (and ``j <= i`` if ``causal``), in O(L·window) time and memory.

    The result equals ``attention(q, k, v, mask=window_mask(L, window))[0]`` (with
    ``& causal_mask(L)`` if ``causal``), but no ``L × L`` array is ever built: it is
    ``tiled_attention``'s kernel visiting only the tiles that touch the band (blocks of 32
    queries, each against its own key block and the ``⌈window / 32⌉`` blocks on either side).

    Shapes: ``q``, ``k`` ``(..., L, d_k)``, ``v`` ``(..., L, d_v)`` → output ``(..., L, d_v)``.

    >>> x = np.eye(4)
    >>> out = truncated_attention(x, x, x, window=1, scale=1.0)
    >>> np.allclose(out, attention(x, x, x, window_mask(4, 1), scale=1.0)[0])
    True
    """
    q, k, v = _array("q", q), _array("k", k), _array("v", v)
    _checks.check_truncated("truncated_attention", q, k, v, window)
    _checks.require_flag("truncated_attention", "causal", causal)
    scale = _checks.scale_or_default("truncated_attention", scale, q.shape[-1])
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    plan = _tiles.band_plan(q.shape[-2], window, causal, sequences=math.prod(batch))
    return _banded(q, k, v, scale, plan)


def _banded(q, k, v, scale, plan) -> np.ndarray:
    """``truncated_attention``'s kernel: for each group of query blocks of a band plan
    (``attnlib._tiles.BandPlan``), the one tile of keys that the blocks' band touches, scored,
    masked to the band and turned into weights by a softmax. One tile per block, so no online
    softmax is needed: this is ``tiled_attention``'s loop with a single key tile."""
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = np.empty((*batch, q.shape[-2], v.shape[-1]), dtype=np.result_type(q, k, v))
    if out.size == 0:  # an empty batch, no queries or d_v = 0: nothing to compute
        return out
    for group in plan.query_groups():
        (tile,) = plan.key_tiles(group)
        scores = (_query_rows(q, group) * scale) @ _key_rows(k, tile)
        in_band = np.broadcast_to(plan.tile_mask(None, group, tile), scores.shape)
        scores[..., ~in_band] = -np.inf
        # every real query sees itself; a padding row past the end may see nothing (dropped)
        maximum = scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores - np.where(maximum == -np.inf, 0.0, maximum))
        total = weights.sum(axis=-1, keepdims=True)
        output = weights @ np.swapaxes(_key_rows(v, tile), -1, -2)
        output = np.divide(output, total, out=np.zeros_like(output), where=total > 0)
        rows = output.reshape(*output.shape[:-3], -1, output.shape[-1])
        out[..., group.start : group.stop, :] = rows[..., : group.stop - group.start, :]
    return out


def _query_rows(x: np.ndarray, group) -> np.ndarray:
    """A group's query rows, padded to ``count`` full blocks: ``(..., count, size, d)``."""
    rows = x[..., group.start : group.stop, :]
    extra = group.count * group.size - rows.shape[-2]
    rows = _pad_rows(rows, 0, extra)
    return rows.reshape(*rows.shape[:-2], group.count, group.size, rows.shape[-1])


def _key_rows(x: np.ndarray, tile) -> np.ndarray:
    """Rows ``tile.start … tile.stop − 1`` of ``x``, zeros outside ``0 … L − 1``, cut into
    the tile's windows: ``(..., count, d, span)`` (a strided view where no padding is needed)."""
    before, after = _tiles.rows_outside(tile, x.shape[-2])
    rows = _pad_rows(x[..., max(0, tile.start) : min(x.shape[-2], tile.stop), :], before, after)
    windows = np.lib.stride_tricks.sliding_window_view(rows, tile.span, axis=-2)
    return windows[..., :: tile.step, :, :]


def _pad_rows(x: np.ndarray, before: int, after: int) -> np.ndarray:
    """Zero rows added before and after the token axis (-2); no copy when there are none."""
    if before == after == 0:
        return x
    return np.pad(x, [(0, 0)] * (x.ndim - 2) + [(before, after), (0, 0)])


# ------------------------------------------------------------ approximations: linear, low-rank


def elu_feature_map(x) -> np.ndarray:
    r"""The feature map of linear attention, :math:`\phi(x) = \operatorname{elu}(x) + 1`:
    ``x + 1`` for ``x > 0``, ``exp(x)`` otherwise; always positive (Katharopoulos et al., 2020).

    >>> elu_feature_map(np.array([-1.0, 0.0, 2.0])).round(3)
    array([0.368, 1.   , 3.   ])
    """
    x = _array("x", x)
    _checks.require_float("elu_feature_map", "x", x)
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def linear_attention(q, k, v, causal: bool = False) -> np.ndarray:
    r"""Linear attention, the parallel form: softmax's :math:`e^{q \cdot k}` replaced by
    :math:`\phi(q) \cdot \phi(k)`, so the sum over keys can be done once for all queries.

    .. math:: y_i = \frac{\phi(q_i)^\top \sum_j \phi(k_j) v_j^\top}
                         {\phi(q_i)^\top \sum_j \phi(k_j)}

    Non-causal: the sums run over all ``j``: ``O(L·d_k·d_v)`` time instead of ``O(L²·d)``.
    Causal: over ``j <= i``, as running (prefix) sums of ``φ(k_j) v_jᵀ``, computed all at once
    (memory ``O(L·d_k·d_v)``). ``linear_attention_recurrent`` computes the causal case one step
    at a time, as an RNN. Shapes: ``q``, ``k`` ``(..., L, d_k)``, ``v`` ``(..., L, d_v)`` →
    ``(..., L, d_v)``.

    >>> x = np.ones((3, 2))
    >>> linear_attention(x, x, np.arange(3.0)[:, None], causal=True).ravel()
    array([0. , 0.5, 1. ])
    """
    q, k, v = _array("q", q), _array("k", k), _array("v", v)
    _checks.check_attention("linear_attention", q, k, v, None)
    _checks.require_flag("linear_attention", "causal", causal)
    if causal:
        _checks.check_same_length("linear_attention", q, k)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    if not causal:
        state = np.swapaxes(phi_k, -1, -2) @ v  # (..., d_k, d_v): Σ_j φ(k_j) v_jᵀ
        normaliser = phi_k.sum(axis=-2)  # (..., d_k): Σ_j φ(k_j)
        # No keys at all: a zero state and normaliser, and a zero output rather than 0 / 0.
        smallest = np.finfo(state.dtype).tiny
        return (phi_q @ state) / np.maximum(phi_q @ normaliser[..., None], smallest)
    states = np.cumsum(phi_k[..., :, None] * v[..., None, :], axis=-3)  # (..., L, d_k, d_v)
    normalisers = np.cumsum(phi_k, axis=-2)  # (..., L, d_k)
    numerator = (phi_q[..., None, :] @ states)[..., 0, :]
    return numerator / (phi_q * normalisers).sum(axis=-1, keepdims=True)


def linear_attention_recurrent(q, k, v) -> np.ndarray:
    r"""Causal linear attention as a recurrent network: one step per token, a fixed-size state.

    .. math:: S_i = S_{i-1} + \phi(k_i) v_i^\top, \quad z_i = z_{i-1} + \phi(k_i), \quad
              y_i = \frac{\phi(q_i)^\top S_i}{\phi(q_i)^\top z_i}

    The state ``S`` is ``(d_k, d_v)`` whatever the length: "Transformers are RNNs". Equal to
    ``linear_attention(q, k, v, causal=True)``; ``L`` sequential steps instead of one parallel
    pass. Shapes as for ``linear_attention``.

    >>> x = np.ones((3, 2))
    >>> linear_attention_recurrent(x, x, np.arange(3.0)[:, None]).ravel()
    array([0. , 0.5, 1. ])
    """
    q, k, v = _array("q", q), _array("k", k), _array("v", v)
    _checks.check_attention("linear_attention_recurrent", q, k, v, None)
    _checks.check_same_length("linear_attention_recurrent", q, k)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    dtype = np.result_type(q, k, v)
    state = np.zeros((*batch, k.shape[-1], v.shape[-1]), dtype=dtype)
    normaliser = np.zeros((*batch, k.shape[-1]), dtype=dtype)
    out = np.empty((*batch, q.shape[-2], v.shape[-1]), dtype=dtype)
    for i in range(q.shape[-2]):
        state = state + phi_k[..., i, :, None] * v[..., i, None, :]
        normaliser = normaliser + phi_k[..., i, :]
        numerator = (phi_q[..., i, None, :] @ state)[..., 0, :]
        out[..., i, :] = numerator / (phi_q[..., i, :] * normaliser).sum(axis=-1, keepdims=True)
    return out


def low_rank_attention(q, k, v, projection_k, projection_v=None, scale=None):
    r"""Low-rank (Linformer-style) attention: the ``L_k`` keys and values are first mixed down
    to ``rank`` rows by fixed (or learned) projections, then ordinary attention runs on those.

    .. math:: \operatorname{softmax}\!\left(s\,Q (E K)^\top\right) (F V), \qquad
              E, F \in \mathbb{R}^{\text{rank} \times L_k}

    Cost ``O(L_q·rank·d)`` instead of ``O(L_q·L_k·d)``; an approximation of ``attention`` that
    works when the attention matrix is close to low rank. ``projection_v`` defaults to
    ``projection_k`` (shared, as in Linformer's cheapest variant). Shapes: ``q``
    ``(..., L_q, d_k)``, ``k`` ``(..., L_k, d_k)``, ``v`` ``(..., L_k, d_v)``, projections
    ``(rank, L_k)`` → ``(output (..., L_q, d_v), weights (..., L_q, rank))``.

    >>> x = np.eye(4)
    >>> out, w = low_rank_attention(x, x, x, np.eye(4))   # the identity projection: exact
    >>> np.allclose(out, attention(x, x, x)[0])
    True
    """
    q, k, v = _array("q", q), _array("k", k), _array("v", v)
    projection_k = _array("projection_k", projection_k)
    projection_v = projection_k if projection_v is None else _array("projection_v", projection_v)
    _checks.check_attention("low_rank_attention", q, k, v, None)
    _checks.check_projection("low_rank_attention", "projection_k", projection_k, k.shape[-2])
    _checks.check_projection("low_rank_attention", "projection_v", projection_v, k.shape[-2])
    scale = _checks.scale_or_default("low_rank_attention", scale, q.shape[-1])
    weights = _masked_softmax(_scaled_scores(q, projection_k @ k, scale), -1, None)
    return weights @ (projection_v @ v), weights


def segment_means(length: int, rank: int) -> np.ndarray:
    """The fixed low-rank projection that averages ``length`` tokens in ``rank`` segments.

    Row ``s`` is ``1/n_s`` on the ``n_s`` tokens ``j`` with ``⌊j·rank/length⌋ = s`` and zero
    elsewhere, so ``segment_means(L, r) @ k`` holds the mean key of each segment. Shape
    ``(rank, length)``; ``rank`` must not exceed ``length``.

    >>> segment_means(6, 3)
    array([[0.5, 0.5, 0. , 0. , 0. , 0. ],
           [0. , 0. , 0.5, 0.5, 0. , 0. ],
           [0. , 0. , 0. , 0. , 0.5, 0.5]])
    """
    _checks.check_rank("segment_means", "length", length, rank)
    segment = np.arange(length) * rank // length
    member = (segment[None, :] == np.arange(rank)[:, None]).astype(float)
    return member / member.sum(axis=1, keepdims=True)


class LowRankSelfAttention:
    r"""Self-attention with learned low-rank projections of the keys and values (Linformer).

    .. math:: Y = \operatorname{softmax}\!\left(XW_q\, (E\,XW_k)^\top / \sqrt{d_k}\right)
              (F\,XW_v)

    ``w_q``, ``w_k`` ``(d_model, d_k)`` and ``w_v`` ``(d_model, d_v)`` as in
    ``SelfAttention``; ``projection_k`` (E) and ``projection_v`` (F) are ``(rank, max_len)``,
    both starting as ``segment_means(max_len, rank)``, learned like the other weights in the
    PyTorch backend. A sequence of ``L <= max_len`` tokens uses their first ``L`` columns.
    Calling it on ``x`` ``(..., L, d_model)`` returns ``(output (..., L, d_v), weights (..., L,
    rank))``: every query spreads its weight over ``rank`` mixed keys, not over ``L``.

    >>> layer = LowRankSelfAttention(d_model=4, max_len=8, rank=2, seed=0)
    >>> [a.shape for a in layer(np.ones((8, 4)))]
    [(8, 4), (8, 2)]
    """

    def __init__(self, d_model: int, max_len: int, rank: int, d_k=None, d_v=None, seed=0):
        d_k, d_v = _checks.check_layer_dims("LowRankSelfAttention", d_model, d_k, d_v)
        _checks.check_rank("LowRankSelfAttention", "max_len", max_len, rank)
        self.d_model, self.d_k, self.d_v, self.max_len = d_model, d_k, d_v, max_len
        rng = np.random.default_rng(seed)
        std = d_model**-0.5
        self.w_q = rng.normal(0.0, std, (d_model, d_k))
        self.w_k = rng.normal(0.0, std, (d_model, d_k))
        self.w_v = rng.normal(0.0, std, (d_model, d_v))
        self.projection_k = segment_means(max_len, rank)
        self.projection_v = segment_means(max_len, rank)

    def __call__(self, x):
        """Attend from every token of ``x`` to ``rank`` mixtures of its tokens."""
        x = _array("x", x)
        _checks.check_layer_input("LowRankSelfAttention", x, self.d_model)
        _checks.check_positions("LowRankSelfAttention", x.shape[-2], self.max_len)
        length = x.shape[-2]
        projections = self.projection_k[:, :length], self.projection_v[:, :length]
        return low_rank_attention(x @ self.w_q, x @ self.w_k, x @ self.w_v, *projections)

    def __repr__(self) -> str:
        rank = self.projection_k.shape[0]
        return (
            f"LowRankSelfAttention(d_model={self.d_model}, max_len={self.max_len}, "
            f"rank={rank}, d_k={self.d_k}, d_v={self.d_v})"
        )


# --------------------------------------------------------------------------- masks


def causal_mask(length: int) -> np.ndarray:
    """Query ``i`` may attend to keys ``j <= i`` (no peeking at the future).

    Shape ``(length, length)``, boolean, lower triangular.

    >>> causal_mask(3).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    """
    _checks.require_positive_int("causal_mask", "length", length)
    return np.tril(np.ones((length, length), dtype=bool))


def padding_mask(lengths, max_len: int | None = None) -> np.ndarray:
    """Keys past each sequence's true length are padding: nobody may attend to them.

    ``lengths`` ``(B,)`` of ints → mask ``(B, 1, max_len)``, True where key ``j < lengths[b]``.
    The middle axis broadcasts over the queries; for scores with a head axis,
    ``(B, H, L_q, L_k)``, use ``padding_mask(...)[:, None]``.

    >>> padding_mask([3, 1], max_len=4).astype(int)
    array([[[1, 1, 1, 0]],
    <BLANKLINE>
           [[1, 0, 0, 0]]])
    """
    lengths = _array("lengths", lengths)
    max_len = _checks.check_lengths("padding_mask", lengths, max_len)
    return (np.arange(max_len) < lengths[:, None])[:, None, :]


def window_mask(length: int, window: int) -> np.ndarray:
    """Query ``i`` may attend to keys ``j`` with ``|i - j| <= window``.

    ``window=0`` keeps only the token itself; each row has at most ``2*window + 1`` Trues.
    Shape ``(length, length)``.

    >>> window_mask(4, 1).astype(int)
    array([[1, 1, 0, 0],
           [1, 1, 1, 0],
           [0, 1, 1, 1],
           [0, 0, 1, 1]])
    """
    _checks.require_positive_int("window_mask", "length", length)
    _checks.require_positive_int("window_mask", "window", window, allow_zero=True)
    positions = np.arange(length)
    return np.abs(positions[:, None] - positions[None, :]) <= window


def graph_mask(edges, num_nodes: int, directed: bool = False, self_loops: bool = True):
    """Node ``i`` may attend to node ``j`` only along an edge: attention on a graph.

    ``edges`` is a sequence of ``(i, j)`` pairs (or an int array of shape ``(E, 2)``). An
    undirected edge lets both ends attend to each other; a directed edge ``(i, j)`` lets
    ``i`` attend to ``j``. ``self_loops`` lets every node attend to itself.
    Shape ``(num_nodes, num_nodes)``.

    >>> graph_mask([(0, 1), (1, 2)], 3).astype(int)
    array([[1, 1, 0],
           [1, 1, 1],
           [0, 1, 1]])
    """
    _checks.require_integer_edges("graph_mask", edges)
    _checks.require_flag("graph_mask", "directed", directed)
    _checks.require_flag("graph_mask", "self_loops", self_loops)
    edges = _checks.check_edges("graph_mask", np.asarray(edges, dtype=int), num_nodes)
    mask = np.eye(num_nodes, dtype=bool) if self_loops else np.zeros((num_nodes,) * 2, bool)
    mask[edges[:, 0], edges[:, 1]] = True
    if not directed:
        mask[edges[:, 1], edges[:, 0]] = True
    return mask


# --------------------------------------------------------------------------- positions


def sinusoidal_positional_encoding(length: int, d_model: int, base: float = 10000.0):
    r"""The Transformer's fixed positional encoding, sine and cosine interleaved.

    .. math:: PE_{p,\,2i} = \sin\!\left(p / \text{base}^{2i/d}\right), \qquad
              PE_{p,\,2i+1} = \cos\!\left(p / \text{base}^{2i/d}\right)

    Shape ``(length, d_model)``; row ``p`` is added to the embedding of the token at position
    ``p``. An odd ``d_model`` drops the last cosine column.

    >>> sinusoidal_positional_encoding(2, 4).round(3)
    array([[0.   , 1.   , 0.   , 1.   ],
           [0.841, 0.54 , 0.01 , 1.   ]])
    """
    _checks.require_positive_int("sinusoidal_positional_encoding", "length", length)
    _checks.require_positive_int("sinusoidal_positional_encoding", "d_model", d_model)
    base = _checks.require_positive_real("sinusoidal_positional_encoding", "base", base)
    positions = np.arange(length, dtype=np.float64)[:, None]
    frequencies = base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    angles = positions * frequencies  # (length, ceil(d_model / 2))
    encoding = np.empty((length, d_model))
    encoding[:, 0::2] = np.sin(angles)
    encoding[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return encoding


class LearnedPositionalEmbedding:
    """One learned vector per position, ``0 … max_len − 1``: a lookup table (``weight``,
    ``(max_len, d_model)``, drawn from ``N(0, 0.02²)``) that training would adjust.

    Calling it with ``length`` returns the first ``length`` rows, ``(length, d_model)``, to be
    added to the token embeddings. The table ends at ``max_len``: asking for more positions
    is an error (the PyTorch backend's layer is the trainable version).

    >>> LearnedPositionalEmbedding(max_len=128, d_model=16, seed=0)(10).shape
    (10, 16)
    """

    def __init__(self, max_len: int, d_model: int, seed=0):
        _checks.require_positive_int("LearnedPositionalEmbedding", "max_len", max_len)
        _checks.require_positive_int("LearnedPositionalEmbedding", "d_model", d_model)
        self.weight = np.random.default_rng(seed).normal(0.0, 0.02, (max_len, d_model))

    def __call__(self, length: int) -> np.ndarray:
        """The position vectors of positions ``0 … length − 1``, ``(length, d_model)``."""
        _checks.check_positions("LearnedPositionalEmbedding", length, self.weight.shape[0])
        return self.weight[:length]


# --------------------------------------------------------------------------- layers


class SelfAttention:
    r"""Single-head self-attention with learned projections ``W_q``, ``W_k``, ``W_v``.

    .. math:: Q = XW_q,\; K = XW_k,\; V = XW_v, \qquad
              Y = \operatorname{softmax}\!\left(QK^\top / \sqrt{d_k}\right) V

    The weights are drawn from ``N(0, 1/d_model)`` by a generator seeded with ``seed``, so
    the same seed gives the same layer. Shapes: ``w_q``, ``w_k`` ``(d_model, d_k)``,
    ``w_v`` ``(d_model, d_v)``; calling on ``x`` ``(..., L, d_model)`` returns
    ``(output (..., L, d_v), weights (..., L, L))``.

    >>> layer = SelfAttention(d_model=4, d_k=2, seed=0)
    >>> out, w = layer(np.ones((3, 4)))
    >>> out.shape, w.shape
    ((3, 4), (3, 3))
    """

    def __init__(self, d_model: int, d_k: int | None = None, d_v: int | None = None, seed=0):
        d_k, d_v = _checks.check_layer_dims("SelfAttention", d_model, d_k, d_v)
        rng = np.random.default_rng(seed)
        std = d_model**-0.5
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.w_q = rng.normal(0.0, std, (d_model, d_k))
        self.w_k = rng.normal(0.0, std, (d_model, d_k))
        self.w_v = rng.normal(0.0, std, (d_model, d_v))

    def __call__(self, x, mask=None, need_weights: bool = True):
        """Attend from every token of ``x`` to every token of ``x``; see the class docstring."""
        x = _array("x", x)
        mask = None if mask is None else _array("mask", mask)
        _checks.check_layer_input("SelfAttention", x, self.d_model)
        _checks.require_flag("SelfAttention", "need_weights", need_weights)
        if mask is not None:
            _checks.check_mask("SelfAttention", mask, (*x.shape[:-2], x.shape[-2], x.shape[-2]))
        return _attention(x @ self.w_q, x @ self.w_k, x @ self.w_v, mask, None, need_weights)

    def __repr__(self) -> str:
        return f"SelfAttention(d_model={self.d_model}, d_k={self.d_k}, d_v={self.d_v})"


# --------------------------------------------------------------------------- multi-head


def split_heads(x, num_heads: int) -> np.ndarray:
    """Cut the feature axis into ``num_heads`` equal slices, one per head.

    ``(..., L, H·d)`` → ``(..., H, L, d)``: head ``h`` gets features ``h·d … (h+1)·d − 1``.

    >>> split_heads(np.arange(8.0).reshape(2, 4), 2)[1]   # head 1: features 2 and 3
    array([[2., 3.],
           [6., 7.]])
    """
    x = _array("x", x)
    _checks.check_split_heads("split_heads", x, num_heads)
    return _split_heads(x, num_heads)


def _split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """``split_heads`` without the input checks."""
    *batch, length, width = x.shape
    return np.swapaxes(x.reshape(*batch, length, num_heads, width // num_heads), -2, -3)


def merge_heads(x) -> np.ndarray:
    """Concatenate the heads' features again: ``(..., H, L, d)`` → ``(..., L, H·d)``.

    The inverse of ``split_heads``.

    >>> x = np.arange(8.0).reshape(2, 4)
    >>> np.array_equal(merge_heads(split_heads(x, 2)), x)
    True
    """
    x = _array("x", x)
    _checks.check_merge_heads("merge_heads", x)
    return _merge_heads(x)


def _merge_heads(x: np.ndarray) -> np.ndarray:
    """``merge_heads`` without the input checks."""
    x = np.swapaxes(x, -2, -3)
    return x.reshape(*x.shape[:-2], -1)


class MultiHeadAttention:
    r"""Multi-head attention: ``H`` attention heads side by side, concatenated, then mixed.

    .. math:: \text{head}_h = \operatorname{Attention}(X_q W_q^{(h)}, X_k W_k^{(h)}, X_v W_v^{(h)}),
              \qquad Y = [\text{head}_1, \dots, \text{head}_H]\, W_o

    The heads' projections are stored side by side: ``w_q`` and ``w_k`` are
    ``(d_model, H·d_k)``, ``w_v`` is ``(d_model, H·d_v)`` (head ``h`` owns the ``h``-th block
    of columns), ``w_o`` is ``(H·d_v, d_model)``. ``d_k`` and ``d_v`` default to
    ``d_model // num_heads``, so the layer costs as much as one head of width ``d_model``.
    With ``bias=True`` every projection adds a bias (as ``torch.nn.MultiheadAttention`` does).
    With ``num_kv_heads`` below ``num_heads`` (dividing it), the keys and values have only
    ``num_kv_heads`` heads, each shared by ``num_heads / num_kv_heads`` query heads in turn:
    grouped-query attention (multi-query attention with 1); ``w_k`` is then
    ``(d_model, num_kv_heads·d_k)`` and ``w_v`` ``(d_model, num_kv_heads·d_v)``.

    Calling it with ``query`` ``(..., L_q, d_model)`` attends to ``key``/``value``
    ``(..., L_k, d_model)`` (both default to ``query``: self-attention) and returns
    ``(output (..., L_q, d_model), weights (..., H, L_q, L_k))``. ``mask`` (True = may attend)
    applies to every head when it has at most as many axes as ``query``: ``causal_mask``
    ``(L_q, L_k)``, ``padding_mask`` ``(B, 1, L_k)`` or any ``(B, L_q, L_k)``; a mask with one
    axis more, ``(B, H, L_q, L_k)``, gives each head its own.

    >>> layer = MultiHeadAttention(d_model=8, num_heads=2, seed=0)
    >>> out, weights = layer(np.ones((5, 8)))
    >>> out.shape, weights.shape
    ((5, 8), (2, 5, 5))
    """

    def __init__(
        self, d_model: int, num_heads: int, d_k=None, d_v=None, bias=False, seed=0, *,
        num_kv_heads=None,
    ):  # fmt: skip
        fn = "MultiHeadAttention"
        d_k, d_v = _checks.check_multihead_dims(fn, d_model, num_heads, d_k, d_v)
        _checks.require_flag(fn, "bias", bias)
        kv_heads = _checks.check_kv_heads(fn, num_heads, num_kv_heads)
        self.d_model, self.num_heads, self.d_k, self.d_v = d_model, num_heads, d_k, d_v
        self.num_kv_heads = kv_heads
        rng = np.random.default_rng(seed)
        self.w_q = rng.normal(0.0, d_model**-0.5, (d_model, num_heads * d_k))
        self.w_k = rng.normal(0.0, d_model**-0.5, (d_model, kv_heads * d_k))
        self.w_v = rng.normal(0.0, d_model**-0.5, (d_model, kv_heads * d_v))
        self.w_o = rng.normal(0.0, (num_heads * d_v) ** -0.5, (num_heads * d_v, d_model))
        self.b_q = self.b_k = self.b_v = self.b_o = None
        if bias:
            self.b_q, self.b_k = np.zeros(num_heads * d_k), np.zeros(kv_heads * d_k)
            self.b_v, self.b_o = np.zeros(kv_heads * d_v), np.zeros(d_model)

    @classmethod
    def from_torch(cls, module) -> MultiHeadAttention:
        """The same layer as a ``torch.nn.MultiheadAttention``, with its weights as arrays.

        The arrays keep the module's dtype (float32 or float64).
        """
        weights = multihead_weights_from_torch(module)
        layer = cls(module.embed_dim, weights["num_heads"], bias=weights["b_q"] is not None)
        for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
            value = weights[name]
            setattr(layer, name, None if value is None else value.cpu().numpy().copy())
        return layer

    def __call__(self, query, key=None, value=None, mask=None, need_weights: bool = True):
        """Attend from every query to every key, in every head; see the class docstring."""
        query = _array("query", query)
        key = query if key is None else _array("key", key)
        value = key if value is None else _array("value", value)
        fn = "MultiHeadAttention"
        _checks.check_multihead_input(fn, query, key, value, self.d_model)
        _checks.require_flag(fn, "need_weights", need_weights)
        mask = None if mask is None else _array("mask", mask)
        head_mask = _checks.mask_for_heads(fn, mask, query, key, self.num_heads)
        return self._forward(query, key, value, head_mask, need_weights)

    def _forward(self, query, key, value, head_mask, need_weights: bool):
        """``__call__`` without the input checks; ``head_mask`` has its head axis already
        (``_checks.mask_for_heads``)."""
        group = self.num_heads // self.num_kv_heads  # query heads per key-value head
        q = _split_heads(_project(query, self.w_q, self.b_q), self.num_heads)
        k = _split_heads(_project(key, self.w_k, self.b_k), self.num_kv_heads)
        v = _split_heads(_project(value, self.w_v, self.b_v), self.num_kv_heads)
        if group > 1:  # query head h reads key-value head h // group
            k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
        per_head, weights = _attention(q, k, v, head_mask, None, need_weights)
        return _project(_merge_heads(per_head), self.w_o, self.b_o), weights

    def __repr__(self) -> str:
        return (
            f"MultiHeadAttention(d_model={self.d_model}, num_heads={self.num_heads}, "
            f"d_k={self.d_k}, d_v={self.d_v}, bias={self.b_q is not None}{kv_heads_repr(self)})"
        )


def _project(x: np.ndarray, w: np.ndarray, b) -> np.ndarray:
    """``x W + b`` (or ``x W`` when there is no bias)."""
    return x @ w if b is None else x @ w + b


# --------------------------------------------------------------------------- the Transformer block


def _numpy(tensor):
    """A torch tensor's values as an array (None stays None)."""
    return None if tensor is None else tensor.detach().cpu().numpy().copy()


class LayerNorm:
    r"""Normalise each token's features to mean 0 and variance 1, then scale and shift.

    .. math:: \operatorname{LN}(x) = \gamma \odot (x - \mu) / \sqrt{\sigma^2 + \varepsilon} + \beta

    with ``μ`` and ``σ²`` the mean and (biased) variance of the last axis. ``weight`` (γ) and
    ``bias`` (β) are ``(d_model,)``, starting at 1 and 0. Shape-preserving.

    >>> LayerNorm(3)(np.array([[1.0, 2.0, 3.0]])).round(3)
    array([[-1.225,  0.   ,  1.225]])
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        _checks.require_positive_int("LayerNorm", "d_model", d_model)
        eps = _checks.require_positive_real("LayerNorm", "eps", eps)
        self.weight, self.bias, self.eps = np.ones(d_model), np.zeros(d_model), eps

    @classmethod
    def from_torch(cls, module) -> LayerNorm:
        """A copy of a ``torch.nn.LayerNorm``."""
        norm = cls(module.normalized_shape[-1], module.eps)
        norm.weight, norm.bias = _numpy(module.weight), _numpy(module.bias)
        return norm

    def __call__(self, x):
        """Normalise each token of ``x`` ``(..., L, d_model)`` over its features."""
        x = _array("x", x)
        _checks.check_layer_input("LayerNorm", x, len(self.weight))
        return self._forward(x)

    def _forward(self, x: np.ndarray) -> np.ndarray:
        """``__call__`` without the input checks."""
        centred = x - x.mean(axis=-1, keepdims=True)
        variance = (centred**2).mean(axis=-1, keepdims=True)
        return centred / np.sqrt(variance + self.eps) * self.weight + self.bias


def _activation(name: str, x: np.ndarray) -> np.ndarray:
    """ReLU, or the exact (erf) GELU that PyTorch uses by default."""
    if name == "relu":
        return np.maximum(x, 0.0)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


_erf = np.vectorize(math.erf, otypes=[float])


class FeedForward:
    r"""The position-wise feed-forward network: the same two-layer MLP for every token.

    .. math:: \operatorname{FFN}(x) = \operatorname{act}(x W_1 + b_1)\, W_2 + b_2

    ``w_1`` ``(d_model, d_ff)``, ``w_2`` ``(d_ff, d_model)``; ``activation`` is "relu" (the
    paper's) or "gelu". Tokens never mix here: that is attention's job.

    >>> FeedForward(4, 16, seed=0)(np.ones((3, 4))).shape
    (3, 4)
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", seed=0):
        for name, value in (("d_model", d_model), ("d_ff", d_ff)):
            _checks.require_positive_int("FeedForward", name, value)
        _checks.check_choice("FeedForward", "activation", activation, ("relu", "gelu"))
        rng = np.random.default_rng(seed)
        self.activation = activation
        self.w_1, self.b_1 = rng.normal(0.0, d_model**-0.5, (d_model, d_ff)), np.zeros(d_ff)
        self.w_2, self.b_2 = rng.normal(0.0, d_ff**-0.5, (d_ff, d_model)), np.zeros(d_model)

    @classmethod
    def from_torch(cls, linear_1, linear_2, activation: str = "relu") -> FeedForward:
        """A copy of two ``torch.nn.Linear`` layers with ``activation`` between them."""
        w_1, b_1 = linear_from_torch(linear_1)
        w_2, b_2 = linear_from_torch(linear_2)
        ffn = cls(w_1.shape[0], w_1.shape[1], activation)
        ffn.w_1, ffn.b_1, ffn.w_2, ffn.b_2 = (_numpy(t) for t in (w_1, b_1, w_2, b_2))
        return ffn

    def __call__(self, x):
        """The same two-layer network for every token of ``x`` ``(..., L, d_model)``."""
        x = _array("x", x)
        _checks.check_layer_input("FeedForward", x, self.w_1.shape[0])
        return self._forward(x)

    def _forward(self, x: np.ndarray) -> np.ndarray:
        """``__call__`` without the input checks."""
        return _activation(self.activation, x @ self.w_1 + self.b_1) @ self.w_2 + self.b_2


class TransformerEncoderBlock:
    r"""One encoder layer of the Transformer: self-attention and a feed-forward network,
    each wrapped in a residual connection and layer normalisation ("Add & Norm").

    Post-norm (the original paper, ``norm_first=False``)::

        x = LN1(x + MHA(x, x, x))
        y = LN2(x + FFN(x))

    Pre-norm (``norm_first=True``, common in deep models because it trains more easily)::

        x = x + MHA(LN1(x))
        y = x + FFN(LN2(x))

    Calling it on ``x`` ``(..., L, d_model)`` returns ``(y (..., L, d_model),
    weights (..., H, L, L))``; ``mask`` is as for ``MultiHeadAttention`` (True = may attend);
    with ``need_weights=False`` the weights are not kept and come back as None.

    >>> block = TransformerEncoderBlock(d_model=8, num_heads=2, d_ff=32, seed=0)
    >>> [a.shape for a in block(np.ones((5, 8)))]
    [(5, 8), (2, 5, 5)]
    """

    def __init__(self, d_model, num_heads, d_ff, norm_first=False, activation="relu", seed=0):
        _checks.require_flag("TransformerEncoderBlock", "norm_first", norm_first)
        self.norm_first = norm_first
        self.self_attention = MultiHeadAttention(d_model, num_heads, bias=True, seed=seed)
        self.feed_forward = FeedForward(d_model, d_ff, activation, seed=seed + 1)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)

    @classmethod
    def from_torch(cls, layer) -> TransformerEncoderBlock:
        """A copy of a ``torch.nn.TransformerEncoderLayer`` (its dropout is not copied)."""
        # a block of the layer's sizes, whose parts are then replaced by copies of the layer's
        block = cls(*block_sizes(layer), layer.norm_first, activation_name(layer))
        block.self_attention = MultiHeadAttention.from_torch(layer.self_attn)
        block.feed_forward = FeedForward.from_torch(
            layer.linear1, layer.linear2, activation_name(layer)
        )
        block.norm1, block.norm2 = (
            LayerNorm.from_torch(layer.norm1),
            LayerNorm.from_torch(layer.norm2),
        )
        return block

    def __call__(self, x, mask=None, need_weights: bool = True):
        """Self-attention, then feed-forward, each with Add & Norm; see the class docstring."""
        fn, attention_layer = "TransformerEncoderBlock", self.self_attention
        x = _array("x", x)
        mask = None if mask is None else _array("mask", mask)
        _checks.check_multihead_input(fn, x, x, x, attention_layer.d_model)  # x is the query
        _checks.require_flag(fn, "need_weights", need_weights)
        head_mask = _checks.mask_for_heads(fn, mask, x, x, attention_layer.num_heads)
        attend, norm1, norm2 = attention_layer._forward, self.norm1._forward, self.norm2._forward
        if self.norm_first:
            h = norm1(x)
            attended, weights = attend(h, h, h, head_mask, need_weights)
            x = x + attended
            return x + self.feed_forward._forward(norm2(x)), weights
        attended, weights = attend(x, x, x, head_mask, need_weights)
        x = norm1(x + attended)
        return norm2(x + self.feed_forward._forward(x)), weights


class TransformerDecoderBlock:
    r"""One decoder layer: causal self-attention, cross-attention to the encoder's output
    (``memory``), and a feed-forward network, each with Add & Norm.

    In cross-attention the queries come from the decoder and the keys and values from the
    encoder: every output position can look at the whole source. Post-norm::

        x = LN1(x + MHA_self(x, x, x, causal))
        x = LN2(x + MHA_cross(x, memory, memory))
        y = LN3(x + FFN(x))

    (pre-norm with ``norm_first=True``, as in the encoder block). Calling it on ``x``
    ``(..., L, d_model)`` and ``memory`` ``(..., S, d_model)`` returns ``(y, self_weights
    (..., H, L, L), cross_weights (..., H, L, S))``. ``causal=True`` adds the causal mask to
    ``mask``; ``memory_mask`` (True = may attend) is read as a ``MultiHeadAttention`` mask over
    ``(..., H, L, S)``; with ``need_weights=False`` both weights come back as None.

    >>> block = TransformerDecoderBlock(d_model=8, num_heads=2, d_ff=32, seed=0)
    >>> [a.shape for a in block(np.ones((4, 8)), np.ones((6, 8)))]
    [(4, 8), (2, 4, 4), (2, 4, 6)]
    """

    def __init__(self, d_model, num_heads, d_ff, norm_first=False, activation="relu", seed=0):
        _checks.require_flag("TransformerDecoderBlock", "norm_first", norm_first)
        self.norm_first = norm_first
        self.self_attention = MultiHeadAttention(d_model, num_heads, bias=True, seed=seed)
        self.cross_attention = MultiHeadAttention(d_model, num_heads, bias=True, seed=seed + 1)
        self.feed_forward = FeedForward(d_model, d_ff, activation, seed=seed + 2)
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model) for _ in range(3))

    @classmethod
    def from_torch(cls, layer) -> TransformerDecoderBlock:
        """A copy of a ``torch.nn.TransformerDecoderLayer`` (its dropout is not copied)."""
        # a block of the layer's sizes, whose parts are then replaced by copies of the layer's
        block = cls(*block_sizes(layer), layer.norm_first, activation_name(layer))
        block.self_attention = MultiHeadAttention.from_torch(layer.self_attn)
        block.cross_attention = MultiHeadAttention.from_torch(layer.multihead_attn)
        block.feed_forward = FeedForward.from_torch(
            layer.linear1, layer.linear2, activation_name(layer)
        )
        block.norm1, block.norm2, block.norm3 = (
            LayerNorm.from_torch(n) for n in (layer.norm1, layer.norm2, layer.norm3)
        )
        return block

    def __call__(
        self, x, memory, mask=None, memory_mask=None, causal: bool = True, need_weights: bool = True
    ):
        """Causal self-attention, cross-attention, feed-forward; see the class docstring."""
        fn, heads = "TransformerDecoderBlock", self.self_attention.num_heads
        x, memory = _array("x", x), _array("memory", memory)
        mask = None if mask is None else _array("mask", mask)
        memory_mask = None if memory_mask is None else _array("memory_mask", memory_mask)
        _checks.check_multihead_input(fn, x, memory, memory, self.self_attention.d_model)
        _checks.require_flag(fn, "causal", causal)
        _checks.require_flag(fn, "need_weights", need_weights)
        if causal:
            if mask is not None:  # checked before it meets the causal mask in mask & future
                _checks.require_bool_mask(fn, mask)
            future = causal_mask(x.shape[-2])
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
