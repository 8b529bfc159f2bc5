"""A small decoder-only language model that generates with a KV cache (PyTorch).

The model of the lesson on attention at inference: tokens in, next-token logits out, causal
self-attention with rotary positions (``rotary``), grouped-query attention
(``num_kv_heads``) and a ``KVCache`` that keeps every layer's keys and values, so that a new
token costs one row of attention instead of the whole sequence again. The cache can also be
a sliding window with attention sinks (``KVCache(window=..., sinks=...)``): a ring buffer of
the last ``window`` tokens plus the first ``sinks`` ones.

>>> import torch
>>> model = DecoderLM(vocab_size=10, d_model=16, num_heads=4, num_layers=1, seed=0)
>>> tokens = torch.tensor([[1, 2, 3]])
>>> cache = model.new_cache(batch=1, capacity=8)
>>> prefix = model(tokens[:, :2], cache)  # prefill two tokens
>>> step = model(tokens[:, 2:], cache)  # decode the third from the cache
>>> torch.allclose(step[:, -1], model(tokens)[:, -1], atol=1e-6)
True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks
from .torch import FeedForward, LayerNorm, MultiHeadAttention, merge_heads, split_heads

__all__ = [
    "rotary",
    "sink_window_mask",
    "KVCache",
    "DecoderLM",
    "generate",
    "pool_kv_heads",
    "kv_cache_bytes",
]


def rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    r"""Rotary positions (RoPE): each pair of features ``(x_i, x_{i + d/2})`` of the token at
    position ``p`` turned by the angle :math:`p\,\theta_i`, :math:`\theta_i = b^{-2i/d}`.

    .. math:: \operatorname{rot}(x, p) = x \cos(p\theta) + \operatorname{half}(x) \sin(p\theta),
              \qquad \operatorname{half}([x_1, x_2]) = [-x_2, x_1]

    So the score of a rotated query at position ``p`` and a rotated key at ``s`` depends on
    the positions only through ``p − s``: a key cached at its own position stays valid
    however long the sequence grows. Shapes: ``x`` ``(..., L, d)`` with ``d`` even,
    ``positions`` ``(L,)`` integers → ``(..., L, d)``.

    >>> q, k = torch.ones(1, 4), torch.ones(1, 4)
    >>> a = rotary(q, torch.tensor([5])) @ rotary(k, torch.tensor([3])).T
    >>> b = rotary(q, torch.tensor([12])) @ rotary(k, torch.tensor([10])).T
    >>> torch.allclose(a, b)
    True
    """
    half = x.shape[-1] // 2
    if x.shape[-1] % 2:
        raise ValueError(f"rotary: x must have an even last dimension; got shape {tuple(x.shape)}")
    exponents = torch.arange(half, dtype=torch.float64, device=x.device) / half
    angles = positions.to(torch.float64)[:, None] * base ** (-exponents)[None, :]  # (L, d/2)
    cos, sin = (f(angles).to(x.dtype).repeat(1, 2) for f in (torch.cos, torch.sin))
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def sink_window_mask(query_positions, key_positions, window=None, sinks: int = 0):
    """Which keys each query may attend to, True = may attend: causal (key position ≤ query
    position), and with a ``window`` only the last ``window`` positions (the query's own
    included) plus the first ``sinks`` positions of the sequence. A key position of −1 marks
    an empty slot of a cache, never attended to.

    Shapes: ``query_positions`` ``(L_q,)``, ``key_positions`` ``(L_k,)`` → ``(L_q, L_k)``.

    >>> sink_window_mask(torch.arange(5), torch.arange(5), window=2, sinks=1).int()
    tensor([[1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [1, 0, 1, 1, 0],
            [1, 0, 0, 1, 1]], dtype=torch.int32)
    """
    q, k = query_positions[:, None], key_positions[None, :]
    allowed = (k >= 0) & (k <= q)
    if window is not None:
        allowed &= (q - k < window) | (k < sinks)
    return allowed


class KVCache:
    """The keys and values of every layer for the tokens seen so far, in preallocated slots.

    ``keys[layer]`` and ``values[layer]`` are ``(B, H_kv, slots, d_head)`` and
    ``positions`` ``(slots,)`` says which token each slot holds (−1: empty). Without a
    ``window`` token ``p`` goes to slot ``p`` (``capacity`` slots). With a ``window`` the
    cache is a ring buffer: the first ``sinks`` tokens keep slots ``0 … sinks − 1`` for
    good, and every later token overwrites the oldest of the other ``window`` slots
    (``slot``), so memory stays ``sinks + window`` tokens however long the text.
    ``length`` counts the tokens seen; ``crop(n)`` forgets all but the first ``n``.

    >>> cache = KVCache(1, 1, 1, 2, capacity=100, window=3, sinks=1)
    >>> [cache.slot(p) for p in range(7)]
    [0, 1, 2, 3, 1, 2, 3]
    """

    def __init__(self, num_layers, batch, num_kv_heads, head_dim, capacity, window=None,
                 sinks=0, dtype=torch.float32, device=None):  # fmt: skip
        for name, value in (("capacity", capacity), ("sinks", sinks)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"KVCache: {name} must be an integer ≥ 0; got {value!r}")
        if window is not None and (not isinstance(window, int) or window < 1):
            raise ValueError(f"KVCache: window must be None or an integer ≥ 1; got {window!r}")
        self.window, self.sinks, self.capacity = window, sinks, capacity
        slots = capacity if window is None else sinks + window
        shape = (batch, num_kv_heads, slots, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.positions = torch.full((slots,), -1, dtype=torch.long, device=device)
        self.length = 0

    def slot(self, position: int) -> int:
        """The slot of the token at ``position``: itself without a window; with one, a sink
        keeps its own slot and later tokens take the ``window`` others in turn."""
        if self.window is None or position < self.sinks:
            return position
        return self.sinks + (position - self.sinks) % self.window

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        """Store the keys and values ``(B, H_kv, n, d_head)`` of the new tokens at
        ``positions`` ``(n,)`` in ``layer``; return that layer's ``(keys, values,
        key_positions)``, every slot, to attend to."""
        n = positions.numel()
        if self.window is not None and n > 1 and self.length + n > self.sinks:
            raise ValueError(
                f"KVCache.update: a windowed cache takes one token at a time past its sinks "
                f"(a later token would overwrite a slot an earlier one still reads); got {n}"
            )
        if self.window is None and self.length + n > self.capacity:
            raise ValueError(
                f"KVCache.update: {self.length} tokens cached and {n} new ones exceed the "
                f"capacity of {self.capacity}"
            )
        slots = torch.tensor([self.slot(int(p)) for p in positions], device=k.device)
        self.keys[layer][:, :, slots] = k
        self.values[layer][:, :, slots] = v
        self.positions[slots] = positions
        return self.keys[layer], self.values[layer], self.positions

    def crop(self, length: int) -> None:
        """Forget every token from ``length`` on (a cache without a window only)."""
        if self.window is not None:
            raise ValueError("KVCache.crop: a ring buffer has overwritten older tokens already")
        self.positions[length:] = -1
        self.length = min(self.length, length)

    def nbytes(self) -> int:
        """Bytes held by the keys and values of every layer."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


class DecoderLayer(nn.Module):
    """One pre-norm decoder layer: causal self-attention with rotary positions (on the
    ``attention`` layer's weights, ``MultiHeadAttention``), then a feed-forward network, each
    added to its input."""

    def __init__(self, d_model, num_heads, num_kv_heads, d_ff, generator_seed):
        super().__init__()
        self.norm_1, self.norm_2 = LayerNorm(d_model), LayerNorm(d_model)
        self.attention = MultiHeadAttention(
            d_model, num_heads, seed=generator_seed, num_kv_heads=num_kv_heads
        )
        self.feed_forward = FeedForward(d_model, d_ff, "gelu", seed=generator_seed + 1)

    def forward(self, x, positions, cache=None, layer=0, window=None, sinks=0):
        """``x`` ``(B, L, d_model)`` at ``positions`` ``(L,)`` → ``(B, L, d_model)``."""
        a = self.attention
        h = self.norm_1(x)
        q = rotary(split_heads(h @ a.w_q, a.num_heads), positions)
        k = rotary(split_heads(h @ a.w_k, a.num_kv_heads), positions)
        v = split_heads(h @ a.w_v, a.num_kv_heads)
        key_positions = positions
        if cache is not None:
            k, v, key_positions = cache.update(layer, k, v, positions)
            window, sinks = cache.window, cache.sinks
        mask = sink_window_mask(positions, key_positions, window, sinks)
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + merge_heads(heads) @ a.w_o
        return x + self.feed_forward(self.norm_2(x))


class DecoderLM(nn.Module):
    r"""A decoder-only language model: token embeddings, ``num_layers`` ``DecoderLayer``\ s
    (rotary positions, so no position table and no length limit), a final norm and the
    logits.

    ``forward(tokens, cache=None, window=None, sinks=0)``: ``tokens`` ``(B, L)`` → logits
    ``(B, L, vocab_size)``. With a ``cache`` the tokens continue the cached ones (positions
    ``cache.length`` on) and their keys and values are added to it; without one they start
    at position 0 and attend causally (within ``window`` plus ``sinks``, if given).

    >>> DecoderLM(vocab_size=7, d_model=8, num_heads=2, seed=0)(torch.tensor([[1, 2]])).shape
    torch.Size([1, 2, 7])
    """

    def __init__(self, vocab_size, d_model=64, num_heads=4, num_layers=2, d_ff=None, seed=0,
                 *, num_kv_heads=None):  # fmt: skip
        super().__init__()
        _checks.require_positive_int("DecoderLM", "vocab_size", vocab_size)
        self.vocab_size, self.d_model, self.num_heads = vocab_size, d_model, num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        self.embed = nn.Embedding(vocab_size, d_model)
        with torch.no_grad():
            generator = torch.Generator().manual_seed(seed)
            self.embed.weight.copy_(
                torch.randn(vocab_size, d_model, generator=generator) * d_model**-0.5
            )
        d_ff = d_ff or 4 * d_model
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, self.num_kv_heads, d_ff, seed + 2 * i + 1)
            for i in range(num_layers)
        )
        self.norm = LayerNorm(d_model)

    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None, window=None, sinks=0):
        """The logits of the next token after each of ``tokens``; see the class docstring."""
        if tokens.dim() != 2:
            raise ValueError(f"DecoderLM: tokens must be (B, L); got shape {tuple(tokens.shape)}")
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.embed(tokens)
        for index, layer in enumerate(self.layers):
            x = layer(x, positions, cache, index, window, sinks)
        if cache is not None:
            cache.length += tokens.shape[1]
        return self.norm(x) @ self.embed.weight.T  # the embeddings, tied, give the logits

    def new_cache(self, batch: int, capacity: int, window=None, sinks: int = 0) -> KVCache:
        """An empty ``KVCache`` for this model: ``capacity`` tokens, or a ring buffer of
        ``window`` tokens plus ``sinks``."""
        head_dim = self.d_model // self.num_heads
        reference = self.embed.weight
        return KVCache(
            len(self.layers), batch, self.num_kv_heads, head_dim, capacity, window, sinks,
            dtype=reference.dtype, device=reference.device,
        )  # fmt: skip


@torch.no_grad()
def generate(model: DecoderLM, prompt: torch.Tensor, steps: int, use_cache: bool = True):
    """Greedy decoding: ``steps`` new tokens after ``prompt`` ``(B, L)``, each the most likely
    next token; → ``(B, L + steps)``. With ``use_cache`` the prompt is run once (prefill) and
    each new token alone (decode); without, the whole sequence again for every token.

    >>> model = DecoderLM(vocab_size=5, d_model=8, num_heads=2, seed=0)
    >>> prompt = torch.tensor([[1, 2]])
    >>> torch.equal(generate(model, prompt, 4), generate(model, prompt, 4, use_cache=False))
    True
    """
    tokens = prompt
    if not use_cache:
        for _ in range(steps):
            next_token = model(tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
        return tokens
    cache = model.new_cache(prompt.shape[0], prompt.shape[1] + steps)
    logits = model(prompt, cache)  # prefill
    for _ in range(steps):
        next_token = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, next_token], dim=1)
        logits = model(next_token, cache)  # decode: one token, one row of attention per layer
    return tokens


def pool_kv_heads(model: DecoderLM, num_kv_heads: int) -> DecoderLM:
    """A copy of ``model`` with grouped-query attention: the key and value heads of each group
    of ``num_heads / num_kv_heads`` heads replaced by their mean (the GQA paper's conversion
    of a multi-head checkpoint); the queries, the output projection and the rest unchanged.

    >>> mha = DecoderLM(vocab_size=5, d_model=8, num_heads=4, seed=0)
    >>> pool_kv_heads(mha, 1).layers[0].attention.w_k.shape  # one key head: multi-query
    torch.Size([8, 2])
    """
    _checks.check_kv_heads("pool_kv_heads", model.num_heads, num_kv_heads)
    layers, d_ff = len(model.layers), model.layers[0].feed_forward.w_1.shape[1]
    pooled = DecoderLM(model.vocab_size, model.d_model, model.num_heads, layers, d_ff,
                       num_kv_heads=num_kv_heads).to(model.embed.weight.dtype)  # fmt: skip
    state = dict(model.state_dict())
    for index, layer in enumerate(model.layers):
        a = layer.attention
        group = model.num_kv_heads // num_kv_heads
        for name in ("w_k", "w_v"):
            w = getattr(a, name)  # (d_model, H_kv · d_head), heads side by side
            heads = w.reshape(a.d_model, num_kv_heads, group, -1)
            state[f"layers.{index}.attention.{name}"] = heads.mean(dim=2).flatten(1)
    pooled.load_state_dict(state)
    return pooled


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, bytes_per_number: int = 2) -> int:
    """Bytes of KV cache per token: a key and a value of ``head_dim`` numbers for each of
    ``kv_heads`` heads in each of ``layers`` layers, ``2 · layers · kv_heads · head_dim ·
    bytes_per_number`` (2 bytes: bfloat16).

    >>> kv_cache_bytes(32, 8, 128)  # a Llama-3-8B-like model
    131072
    """
    return 2 * layers * kv_heads * head_dim * bytes_per_number
