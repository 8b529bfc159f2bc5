"""Input checks shared by both backends.

They only look at ``.shape`` and ``.dtype``, so the same messages come out of the NumPy and
the PyTorch path. Every message names the function, the argument, the shape it got and the
shape it needed. One rule is the PyTorch path's own: float tensors that meet in one product
must share a dtype (``require_same_dtype``), where NumPy promotes them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np


def shape_str(x) -> str:
    """``(2, 5, 8)`` for an array or tensor of that shape."""
    return str(tuple(x.shape))


def is_floating(x) -> bool:
    """True for a NumPy floating dtype or a floating torch dtype."""
    if hasattr(x, "is_floating_point"):
        return x.is_floating_point()
    return x.dtype.kind == "f"


def is_bool(x) -> bool:
    """True for NumPy ``bool`` and ``torch.bool``."""
    return str(x.dtype) in ("bool", "torch.bool")


def require_float(fn: str, name: str, x) -> None:
    """Raise TypeError unless ``x`` holds floating-point numbers."""
    if not is_floating(x):
        raise TypeError(
            f"{fn}: {name} must be a floating-point array; got dtype {x.dtype} "
            f"(shape {shape_str(x)}). Convert it first, e.g. {name}.astype(float) "
            f"or {name}.float()."
        )


def require_same_dtype(fn: str, named: dict) -> None:
    """Raise TypeError unless the tensors in ``named`` (name: tensor) share one dtype.

    PyTorch does not promote across dtypes in a product: ``q @ k.mT`` with ``q`` float32 and
    ``k`` float64 raises its own RuntimeError, naming neither the function nor the arguments.
    NumPy arrays are let through: NumPy promotes float32 with float64 to float64. Boolean masks
    are not passed here: their dtype is their own.
    """
    tensors = list(named.values())
    dtype = tensors[0].dtype
    if all(x.dtype == dtype for x in tensors[1:]) or isinstance(tensors[0], np.ndarray):
        return
    got = ", ".join(f"{name} {dtype_name(x.dtype)}" for name, x in named.items())
    first, other = next(iter(named)), next(name for name, x in named.items() if x.dtype != dtype)
    raise TypeError(
        f"{fn}: {names_and(named)} must have the same dtype; got {got}. "
        f"Convert them to one first, e.g. {other}.to({first}.dtype)."
    )


def require_layer_dtype(fn: str, name: str, x, dtype) -> None:
    """Raise TypeError unless the tensor ``x`` has ``dtype``, the dtype of a layer's
    parameters (PyTorch would raise its own error inside the first product)."""
    if x.dtype != dtype:
        raise TypeError(
            f"{fn}: {name} is {dtype_name(x.dtype)} but the layer's parameters are "
            f"{dtype_name(dtype)}; convert one of them, e.g. {name}.to(torch.{dtype_name(dtype)})"
            f" or layer.to({name}.dtype)"
        )


def dtype_name(dtype) -> str:
    """``float32`` for ``torch.float32`` (and for NumPy's ``float32``)."""
    return str(dtype).removeprefix("torch.")


def names_and(names) -> str:
    """``q, k and v`` for the names ``q``, ``k``, ``v``."""
    *first, last = names
    return f"{', '.join(first)} and {last}" if first else last


def require_finite(fn: str, name: str, x, allow_negative_inf: bool = False) -> None:
    """Raise ValueError if ``x`` holds NaN or infinite values (``-inf`` may be allowed: in
    scores it means "never attend"). Names the first offending position."""
    require_all_finite(fn, {name: x}, allow_negative_inf)


def require_all_finite(fn: str, named: dict, allow_negative_inf: bool = False) -> None:
    """``require_finite`` for several arrays at the cost of one reduction each and a single
    answer read back. The same array passed under two names is scanned once.

    Only values in the computer's main memory are scanned: NumPy arrays and CPU tensors.
    Tensors on a GPU are not, because reading the answer back makes the host wait for the
    device on every call (on an H100 that took 0.34 ms a call, more than PyTorch's fused
    attention kernel at L = 1024). There, as in PyTorch's own layers, a NaN in the input gives
    NaN in the output."""
    distinct = {id(x): (name, x) for name, x in reversed(named.items()) if in_main_memory(x)}
    arrays = [(name, x.detach() if hasattr(x, "detach") else x) for name, x in distinct.values()]
    if not arrays:
        return
    arrays.reverse()  # in the order given, so the first bad argument is the one named
    is_array = isinstance(arrays[0][1], np.ndarray)
    isfinite = np.isfinite if is_array else type(arrays[0][1]).isfinite
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum is handled below
        sums_finite = [isfinite(values.sum()) for _, values in arrays]  # NaN and ±inf spread
    if bool(sums_finite[0] if len(sums_finite) == 1 else all_of(sums_finite)):
        return  # (finite values whose sum overflows are checked one by one below)
    for name, values in arrays:
        _require_finite_values(fn, name, values, allow_negative_inf, isfinite)


def in_main_memory(x) -> bool:
    """True for a NumPy array or a CPU tensor; False for a tensor on a GPU."""
    device = getattr(x, "device", "cpu")  # NumPy 2 arrays have one too: "cpu"
    return getattr(device, "type", device) == "cpu"


def all_of(flags):
    """The logical AND of boolean scalars (arrays or tensors), still an array or tensor."""
    result = flags[0]
    for flag in flags[1:]:
        result = result & flag
    return result


def _require_finite_values(fn: str, name: str, values, allow_negative_inf: bool, isfinite):
    """The slow, exact check of one array: the first NaN or infinite entry, if any."""
    bad = ~isfinite(values)
    if allow_negative_inf:
        bad &= values != float("-inf")
    if not bool(bad.any()):
        return
    first = np.argwhere(bad)[0] if isinstance(values, np.ndarray) else bad.nonzero()[0]
    where = tuple(int(i) for i in first)
    raise ValueError(
        f"{fn}: {name} contains NaN or infinite values (the first at index {where} of "
        f"{name}.shape={shape_str(values)}); one such value would spread to every output it touches"
    )


def require_ndim(fn: str, name: str, x, at_least: int, layout: str) -> None:
    """Raise ValueError unless ``x`` has at least ``at_least`` dimensions."""
    if x.ndim < at_least:
        raise ValueError(
            f"{fn}: {name} must have shape {layout} (at least {at_least} dimensions); "
            f"got {name}.shape={shape_str(x)}"
        )


def require_positive_int(fn: str, name: str, value, allow_zero: bool = False) -> None:
    """Raise TypeError/ValueError unless ``value`` is a positive (or non-negative) int."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{fn}: {name} must be an int; got {type(value).__name__} {value!r}")
    smallest = 0 if allow_zero else 1
    if value < smallest:
        raise ValueError(f"{fn}: {name} must be >= {smallest}; got {name}={value}")


def require_flag(fn: str, name: str, value) -> None:
    """Raise TypeError unless ``value`` is True or False: ``causal="False"`` is a non-empty
    string, which Python would read as true."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{fn}: {name} must be True or False; got {type(value).__name__} {value!r}")


def require_positive_real(fn: str, name: str, value) -> float:
    """``value`` as a float, if it is a real number, finite and above 0 (a scale, an epsilon);
    else TypeError (not a number, or a bool) or ValueError."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{fn}: {name} must be a positive real number; got {type(value).__name__} {value!r}"
        )
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{fn}: {name} must be finite and above 0; got {name}={value!r}")
    return float(value)


def check_axis(fn: str, axis, x) -> None:
    """Raise TypeError/ValueError unless ``axis`` is an int that names a dimension of ``x``."""
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise TypeError(f"{fn}: axis must be an int; got {type(axis).__name__} {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(
            f"{fn}: axis={axis} is out of range for x.shape={shape_str(x)} ({x.ndim} dimensions)"
        )


def scale_or_default(fn: str, scale, d_k: int) -> float:
    """The scores' scale: ``1/sqrt(d_k)`` when ``scale`` is None (the Transformer's choice),
    else ``scale``, checked (a positive finite real number).

    >>> scale_or_default("attention", None, 4), scale_or_default("attention", 1, 4)
    (0.5, 1.0)
    """
    return d_k**-0.5 if scale is None else require_positive_real(fn, "scale", scale)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The NumPy broadcast of ``shapes``, or None if they do not broadcast."""
    if all(shape == shapes[0] for shape in shapes[1:]):  # the common case, made quick
        return tuple(shapes[0])
    ndim = max(len(s) for s in shapes)
    result = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            return None
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def batch_shape_unchecked(*tensors) -> tuple[int, ...]:
    """``batch_shape`` of ``(..., L, d)`` arrays already checked to broadcast, without the
    check (attnlib's own: ``torch.broadcast_shapes`` costs more than attention of a few
    tokens)."""
    return broadcast_shapes(*(x.shape[:-2] for x in tensors))


def require_bool_mask(fn: str, mask) -> None:
    """A mask holds booleans: True = may attend."""
    if not is_bool(mask):
        raise TypeError(
            f"{fn}: mask must be boolean (True = may attend); got dtype {mask.dtype} "
            f"(shape {shape_str(mask)})"
        )


def check_mask(fn: str, mask, scores_shape: Sequence[int]) -> None:
    """A mask must be boolean and broadcast to the scores' shape ``(..., L_q, L_k)``."""
    require_bool_mask(fn, mask)
    target = tuple(scores_shape)
    if mask.ndim > len(target) or broadcast_shapes(mask.shape, target) != target:
        raise ValueError(
            f"{fn}: mask.shape={shape_str(mask)} does not broadcast to the scores' shape "
            f"{target} = (..., L_q, L_k)"
        )


#: How a multi-head layer reads its mask, for error messages.
HEADS_MASK_HINT = (
    "; a mask for every head is (L_q, L_k) or (B, L_q, L_k), as causal_mask and padding_mask "
    "return it, and a mask per head is (B, H, L_q, L_k), one axis more than the query"
)


def mask_for_heads(fn: str, mask, query, key, num_heads: int):
    """A multi-head layer's ``mask`` with its head axis, checked against the scores
    ``(..., H, L_q, L_k)``.

    A mask with as many axes as ``query`` (or fewer) applies to every head: ``causal_mask``
    ``(L_q, L_k)`` and ``padding_mask`` ``(B, 1, L_k)`` as they come; a head axis of size 1
    is inserted before its last two axes. A mask with one axis more than ``query`` has one
    mask per head, ``(B, H, L_q, L_k)`` (or 1 for H), and is used as it is.
    """
    if mask is None:
        return None
    batch = broadcast_shapes(query.shape[:-2], key.shape[:-2]) or ()
    target = (*batch, num_heads, query.shape[-2], key.shape[-2])
    require_bool_mask(fn, mask)
    shaped = mask[..., None, :, :] if 3 <= mask.ndim <= query.ndim else mask
    if shaped.ndim > len(target) or broadcast_shapes(shaped.shape, target) != target:
        raise ValueError(
            f"{fn}: mask.shape={shape_str(mask)} does not fit the scores' shape {target} "
            f"= (..., H, L_q, L_k){HEADS_MASK_HINT}"
        )
    return shaped


def batch_shape(fn: str, **named) -> tuple[int, ...]:
    """The broadcast of the leading (batch) dimensions of ``(..., L, d)`` arrays, or a
    ValueError naming them all."""
    batch = broadcast_shapes(*(x.shape[:-2] for x in named.values()))
    if batch is None:
        shapes = ", ".join(f"{name}.shape={shape_str(x)}" for name, x in named.items())
        raise ValueError(
            f"{fn}: the batch dimensions of {names_and(named)} do not broadcast; got {shapes}"
        )
    return batch


def check_query_key(fn: str, q, k) -> None:
    """``q (..., L_q, d_k)`` and ``k (..., L_k, d_k)``: same d_k, batch dims that broadcast,
    one dtype (tensors), finite values."""
    _query_key_shapes(fn, q, k)
    named = {"q": q, "k": k}
    require_same_dtype(fn, named)
    require_all_finite(fn, named)


def _query_key_shapes(fn: str, q, k) -> None:
    """``check_query_key`` without the finiteness scan."""
    require_ndim(fn, "q", q, 2, "(..., L_q, d_k)")
    require_ndim(fn, "k", k, 2, "(..., L_k, d_k)")
    require_float(fn, "q", q)
    require_float(fn, "k", k)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"{fn}: q and k must have the same last dimension d_k; "
            f"got q.shape={shape_str(q)} and k.shape={shape_str(k)}"
        )
    batch_shape(fn, q=q, k=k)


def check_attention(fn: str, q, k, v, mask) -> None:
    """All the shape, dtype and value rules of ``attention(q, k, v, mask)``: q, k and v of one
    dtype (tensors), a boolean mask."""
    _query_key_shapes(fn, q, k)
    require_ndim(fn, "v", v, 2, "(..., L_k, d_v)")
    require_float(fn, "v", v)
    named = {"q": q, "k": k, "v": v}
    require_same_dtype(fn, named)
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"{fn}: v must have one row per key (L_k={k.shape[-2]}); "
            f"got k.shape={shape_str(k)} and v.shape={shape_str(v)}"
        )
    batch = batch_shape(fn, q=q, k=k, v=v)
    if mask is not None:
        check_mask(fn, mask, (*batch, q.shape[-2], k.shape[-2]))
    require_all_finite(fn, named)


def check_additive(fn: str, q, k, w_q, w_k, w) -> None:
    """Shapes of additive scoring: ``q (..., L_q, d_q)``, ``k (..., L_k, d_k)``,
    ``w_q (d_q, h)``, ``w_k (d_k, h)``, ``w (h,)``; all of one dtype (tensors)."""
    require_ndim(fn, "q", q, 2, "(..., L_q, d_q)")
    require_ndim(fn, "k", k, 2, "(..., L_k, d_k)")
    named = {"q": q, "k": k, "w_q": w_q, "w_k": w_k, "w": w}
    for name, x in named.items():
        require_float(fn, name, x)
    require_same_dtype(fn, named)
    require_all_finite(fn, named)
    d_q, d_k = q.shape[-1], k.shape[-1]
    hidden = w.shape[0] if w.ndim == 1 else "h"
    expected = {"w_q": (d_q, hidden), "w_k": (d_k, hidden), "w": (hidden,)}
    for name, x in (("w_q", w_q), ("w_k", w_k), ("w", w)):
        if tuple(x.shape) != expected[name]:
            raise ValueError(
                f"{fn}: {name} must have shape {expected[name]} for q.shape={shape_str(q)}, "
                f"k.shape={shape_str(k)} and w.shape={shape_str(w)}; "
                f"got {name}.shape={shape_str(x)}"
            )
    batch_shape(fn, q=q, k=k)


def check_lengths(fn: str, lengths, max_len) -> int:
    """``lengths`` is a 1-D array of ints in ``[0, max_len]``; returns ``max_len``
    (the longest length when ``max_len`` is None)."""
    if is_floating(lengths) or is_bool(lengths) or lengths.ndim != 1:
        raise TypeError(
            f"{fn}: lengths must be a 1-D array of ints, one per sequence (B,); "
            f"got dtype {lengths.dtype} and lengths.shape={shape_str(lengths)}"
        )
    longest = int(lengths.max()) if len(lengths) else 0
    if max_len is None:
        max_len = longest
    require_positive_int(fn, "max_len", max_len)
    if len(lengths) and (int(lengths.min()) < 0 or longest > max_len):
        raise ValueError(
            f"{fn}: every length must lie in [0, max_len={max_len}]; got lengths={lengths.tolist()}"
        )
    return max_len


def require_integer_edges(fn: str, edges) -> None:
    """Raise TypeError unless ``edges`` (pairs, an array or a tensor, as given) holds integers:
    an edge ``(0.5, 1.7)`` would otherwise be truncated to ``(0, 1)`` without a word."""
    given = edges if hasattr(edges, "dtype") else np.asarray(edges)
    dtype = str(given.dtype).removeprefix("torch.")  # "int64", "uint8", "float64", "bool", …
    if math.prod(given.shape) and not dtype.startswith(("int", "uint")):
        raise TypeError(f"{fn}: edges must be integer node indices; got dtype {dtype}")


def check_edges(fn: str, edges, num_nodes: int):
    """``edges`` is ``(E, 2)`` node indices in ``[0, num_nodes)``; returns it as ``(E, 2)``."""
    require_positive_int(fn, "num_nodes", num_nodes)
    size = edges.numel() if hasattr(edges, "numel") else edges.size
    if size == 0:
        return edges.reshape(0, 2)
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise ValueError(
            f"{fn}: edges must be pairs (i, j), shape (E, 2); got shape {shape_str(edges)}"
        )
    if int(edges.min()) < 0 or int(edges.max()) >= num_nodes:
        raise ValueError(
            f"{fn}: edge endpoints must be node indices in [0, {num_nodes}); "
            f"got values from {int(edges.min())} to {int(edges.max())}"
        )
    return edges


def check_layer_dims(fn: str, d_model, d_k, d_v) -> tuple[int, int]:
    """Validate a layer's sizes; ``d_k`` and ``d_v`` default to ``d_model``."""
    d_k = d_model if d_k is None else d_k
    d_v = d_model if d_v is None else d_v
    for name, value in (("d_model", d_model), ("d_k", d_k), ("d_v", d_v)):
        require_positive_int(fn, name, value)
    return d_k, d_v


def check_layer_input(fn: str, x, d_model: int, name: str = "x") -> None:
    """A layer's input is ``(..., L, d_model)`` of finite floats."""
    _layer_input_shape(fn, x, d_model, name)
    require_finite(fn, name, x)


def _layer_input_shape(fn: str, x, d_model: int, name: str) -> None:
    """``check_layer_input`` without the finiteness scan."""
    require_ndim(fn, name, x, 2, f"(..., L, d_model={d_model})")
    require_float(fn, name, x)
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{fn}: {name} must have shape (..., L, d_model={d_model}); "
            f"got {name}.shape={shape_str(x)}"
        )


def check_multihead_dims(fn: str, d_model, num_heads, d_k, d_v) -> tuple[int, int]:
    """Validate multi-head sizes; per-head d_k and d_v default to ``d_model // num_heads``."""
    require_positive_int(fn, "d_model", d_model)
    require_positive_int(fn, "num_heads", num_heads)
    if (d_k is None or d_v is None) and d_model % num_heads:
        raise ValueError(
            f"{fn}: d_model={d_model} is not divisible by num_heads={num_heads}; "
            f"choose another num_heads or give the per-head sizes d_k and d_v"
        )
    head = d_model // num_heads
    d_k, d_v = (head if d_k is None else d_k), (head if d_v is None else d_v)
    for name, value in (("d_k", d_k), ("d_v", d_v)):
        require_positive_int(fn, name, value)
    return d_k, d_v


def check_kv_heads(fn: str, num_heads: int, num_kv_heads) -> int:
    """``num_kv_heads`` (default ``num_heads``): a positive int dividing ``num_heads``, each
    key-value head serving ``num_heads / num_kv_heads`` query heads."""
    if num_kv_heads is None:
        return num_heads
    require_positive_int(fn, "num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(
            f"{fn}: num_kv_heads={num_kv_heads} must divide num_heads={num_heads} (each "
            "key-value head serves the same number of query heads)"
        )
    return num_kv_heads


def check_split_heads(fn: str, x, num_heads: int) -> None:
    """``x`` is ``(..., L, H·d)`` with a last dimension divisible by ``num_heads``."""
    require_positive_int(fn, "num_heads", num_heads)
    require_ndim(fn, "x", x, 2, "(..., L, num_heads * d)")
    if x.shape[-1] % num_heads:
        raise ValueError(
            f"{fn}: the last dimension of x must be divisible by num_heads={num_heads}; "
            f"got x.shape={shape_str(x)}"
        )


def check_merge_heads(fn: str, x) -> None:
    """``x`` is ``(..., H, L, d)``."""
    require_ndim(fn, "x", x, 3, "(..., num_heads, L, d)")


def check_multihead_input(fn: str, query, key, value, d_model: int) -> None:
    """Query ``(..., L_q, d_model)``; key and value ``(..., L_k, d_model)``; one dtype
    (tensors); finite values."""
    named = {"query": query, "key": key, "value": value}
    for name, x in named.items():
        _layer_input_shape(fn, x, d_model, name)
    require_same_dtype(fn, named)
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"{fn}: key and value must have the same length L_k; "
            f"got key.shape={shape_str(key)} and value.shape={shape_str(value)}"
        )
    require_all_finite(fn, named)


def check_choice(fn: str, name: str, value, choices) -> None:
    """Raise ValueError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(
            f"{fn}: {name} must be one of {', '.join(map(repr, choices))}; got {value!r}"
        )


def check_same_length(fn: str, q, k) -> None:
    """Queries and keys are the same sequence: ``L_q == L_k``."""
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"{fn}: q and k must be the same sequence (L_q == L_k); "
            f"got q.shape={shape_str(q)} and k.shape={shape_str(k)}"
        )


def check_truncated(fn: str, q, k, v, window) -> None:
    """``attention``'s rules, plus: one sequence (``L_q == L_k``) and an int ``window >= 0``."""
    check_attention(fn, q, k, v, None)
    check_same_length(fn, q, k)
    require_positive_int(fn, "window", window, allow_zero=True)


def check_projection(fn: str, name: str, projection, length: int) -> None:
    """A low-rank projection is ``(rank, L_k)`` floats: it mixes ``L_k`` keys into ``rank`` rows."""
    require_ndim(fn, name, projection, 2, f"(rank, L_k={length})")
    require_float(fn, name, projection)
    require_finite(fn, name, projection)
    if projection.ndim != 2 or projection.shape[-1] != length:
        raise ValueError(
            f"{fn}: {name} must have shape (rank, L_k={length}); "
            f"got {name}.shape={shape_str(projection)}"
        )


def check_positions(fn: str, length, max_len: int) -> None:
    """``length`` positions fit in a table of ``max_len`` learned rows."""
    require_positive_int(fn, "length", length)
    if length > max_len:
        raise ValueError(
            f"{fn}: length={length} exceeds max_len={max_len}; "
            f"positions {max_len} and beyond have no learned vector"
        )


def check_rank(fn: str, length_name: str, length, rank) -> None:
    """A low-rank projection mixes ``length`` tokens (the caller's ``length_name``) into
    ``1 <= rank <= length`` rows."""
    require_positive_int(fn, length_name, length)
    require_positive_int(fn, "rank", rank)
    if rank > length:
        raise ValueError(f"{fn}: rank={rank} must not exceed the number of tokens, {length}")


def check_tiled(fn: str, q, k, v, mask, block_q, block_k) -> None:
    """``attention``'s rules, plus block sizes that are positive ints (or None: the default)."""
    check_attention(fn, q, k, v, mask)
    for name, block in (("block_q", block_q), ("block_k", block_k)):
        if block is not None:
            require_positive_int(fn, name, block)
