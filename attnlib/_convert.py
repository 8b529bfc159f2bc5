"""Read the weights of a ``torch.nn.MultiheadAttention`` in attnlib's conventions.

PyTorch stores a projection as ``weight`` of shape ``(out, in)`` and computes ``x Wᵀ + b``;
attnlib stores ``W`` of shape ``(in, out)`` and computes ``x W + b`` (tokens are rows). Both
split the projected width into heads the same way: head ``h`` owns columns
``h·d_head … (h+1)·d_head − 1``. So loading is a transpose and a slice, nothing more.
"""

from __future__ import annotations


def multihead_weights_from_torch(module) -> dict:
    """``{"num_heads", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"}`` of ``module``.

    The weights are detached tensors of shape ``(d_model, d_model)`` in attnlib's ``(in, out)``
    layout; the biases are ``(d_model,)`` tensors, or None when the module has none. Refuses
    the features attnlib's layer does not have (``add_bias_kv``, ``add_zero_attn``, key and
    value sizes other than ``embed_dim``), naming them.
    """
    unsupported = {
        "add_bias_kv=True": getattr(module, "bias_k", None) is not None,
        "add_zero_attn=True": getattr(module, "add_zero_attn", False),
        "kdim or vdim different from embed_dim": not module._qkv_same_embed_dim,
    }
    found = [name for name, present in unsupported.items() if present]
    if found:
        missing = ", ".join(found)
        raise ValueError(f"MultiHeadAttention.from_torch: attnlib has no equivalent of {missing}")
    d_model = module.embed_dim
    w_q, w_k, w_v = module.in_proj_weight.detach().split(d_model, dim=0)
    has_bias = module.in_proj_bias is not None
    b_q, b_k, b_v = module.in_proj_bias.detach().split(d_model) if has_bias else (None,) * 3
    out_bias = module.out_proj.bias
    return {
        "num_heads": module.num_heads,
        "w_q": w_q.T,
        "w_k": w_k.T,
        "w_v": w_v.T,
        "w_o": module.out_proj.weight.detach().T,
        "b_q": b_q,
        "b_k": b_k,
        "b_v": b_v,
        "b_o": None if out_bias is None else out_bias.detach(),
    }


def linear_from_torch(linear) -> tuple:
    """``(W, b)`` of a ``torch.nn.Linear`` in attnlib's layout: ``W`` is ``(in, out)``."""
    bias = None if linear.bias is None else linear.bias.detach()
    return linear.weight.detach().T, bias


def activation_name(layer) -> str:
    """ "relu" or "gelu": the activation of a ``torch.nn.Transformer*Layer``."""
    activation = layer.activation
    name = activation if isinstance(activation, str) else getattr(activation, "__name__", "")
    if name not in ("relu", "gelu"):
        raise ValueError(
            f"from_torch: only relu and gelu activations are supported; got {activation!r}"
        )
    return name


def block_sizes(layer) -> tuple[int, int, int]:
    """``(d_model, num_heads, d_ff)`` of a ``torch.nn.TransformerEncoderLayer`` or
    ``TransformerDecoderLayer``: the sizes its attnlib copy is built with."""
    return layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features


def kv_heads_repr(layer) -> str:
    """``", num_kv_heads=…"`` for a multi-head layer's repr when it has fewer key-value heads
    than query heads, else nothing."""
    grouped = layer.num_kv_heads != layer.num_heads
    return f", num_kv_heads={layer.num_kv_heads}" if grouped else ""
