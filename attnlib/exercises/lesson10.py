"""Checkers for the exercises of the lesson on attention at inference (``10.k``)."""

from __future__ import annotations

import math

import numpy as np

from . import exercise, expect, phrase

# --------------------------------------------------------------------------- 10.1


def _slot_cache(slot):
    """``attnlib.decoder.KVCache`` with its ``slot`` replaced by the learner's function."""
    from ..decoder import KVCache

    class LearnersCache(KVCache):
        def slot(self, position: int) -> int:
            return int(slot(position, self.window, self.sinks))

    return LearnersCache


@exercise("10.1", "the ring buffer's slots")
def _check_slot(slot) -> None:
    import torch

    from ..decoder import DecoderLM, KVCache

    for window, sinks in ((4, 0), (3, 2), (5, 1)):
        reference = KVCache(1, 1, 1, 2, capacity=0, window=window, sinks=sinks)
        want = [reference.slot(p) for p in range(3 * window + sinks)]
        got = [slot(p, window, sinks) for p in range(3 * window + sinks)]
        call = phrase("slot(p, {window}, {sinks}) for p = 0, 1, 2, …", window=window, sinks=sinks)
        expect(
            all(isinstance(s, (int, np.integer)) for s in got),
            "{call}: return an integer, the index of a slot.",
            call=call,
        )
        expect(
            all(0 <= s < window + sinks for s in got),
            "{call} gave {got}: a slot lies between 0 and sinks + window − 1 = {last}.",
            call=call,
            got=got,
            last=window + sinks - 1,
        )
        expect(
            got[:sinks] == list(range(sinks)),
            "{call} gave {got}: the first {sinks} tokens (the sinks) keep slots 0 … {last} "
            "for good.",
            call=call,
            got=got,
            sinks=sinks,
            last=sinks - 1,
        )
        overwritten = [s for s in got[sinks:] if s < sinks]
        expect(
            not overwritten,
            "{call} gave {got}: a later token overwrote a sink's slot; the window's slots are "
            "sinks … sinks + window − 1.",
            call=call,
            got=got,
        )
        expect(
            got == want,
            "{call} gave {got}, expected {want}: after the sinks, token p takes the window's "
            "slots in turn, so that it overwrites the token window positions before it.",
            call=call,
            got=got,
            want=want,
        )
    # the cache with this slot function, in a model: decoding equals the masked forward pass
    model = DecoderLM(vocab_size=11, d_model=16, num_heads=4, num_layers=2, seed=3).double()
    tokens = torch.randint(0, 11, (1, 40), generator=torch.Generator().manual_seed(4))
    window, sinks = 6, 2
    cache = _slot_cache(slot)(2, 1, 4, 4, capacity=0, window=window, sinks=sinks,
                              dtype=torch.float64)  # fmt: skip
    with torch.no_grad():
        steps = torch.cat([model(tokens[:, i : i + 1], cache) for i in range(40)], dim=1)
        masked = model(tokens, window=window, sinks=sinks)
    worst = float((steps - masked).abs().max())
    expect(
        worst < 1e-9,
        "decoding 40 tokens one by one through a cache that uses your slot (window 6, 2 sinks) "
        "differs from the masked forward pass by {worst:.2g}.",
        worst=worst,
    )


# --------------------------------------------------------------------------- 10.2


def _decode_inputs(batch, q_heads, kv_heads, length, head_dim, seed):
    """Random float32 q ``(B, H_q, 1, d)``, k and v ``(B, H_kv, L, d)``, with large scores."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, q_heads, 1, head_dim, generator=generator) * 4.0
    k, v = (torch.randn(batch, kv_heads, length, head_dim, generator=generator) for _ in "kv")
    return q, k * 4.0, v


def run_decode_kernel(kernel, q, k, v, block_k: int = 16):
    """Launch ``kernel`` (a plain function, the signature of the lesson's ``decode_kernel``)
    with ``triton.jit`` on one program per query row: ``q`` ``(B, H_q, 1, d)``, ``k``, ``v``
    ``(B, H_kv, L, d)`` → ``(B, H_q, 1, d)``. The keys and values sit in buffers of
    ``B · H_q`` rows whose rows past ``B · H_kv`` are NaN, so that a kernel that reads a
    key-value head that does not exist gets NaN rather than another program's memory."""
    import torch

    from .. import triton as flash

    flash.interpreting()  # imports Triton as attnlib.triton does: without a GPU, interpreted
    import triton

    batch, q_heads, _, head_dim = q.shape
    kv_heads, length = k.shape[1], k.shape[2]
    padded = []
    for x in (k, v):
        rows = torch.full((batch * q_heads, length, head_dim), math.nan)
        rows[: batch * kv_heads] = x.reshape(batch * kv_heads, length, head_dim)
        padded.append(rows)
    out = torch.empty_like(q)
    jitted = triton.jit(kernel)
    try:
        jitted[(batch * q_heads,)](
            q.contiguous(), *padded, out, length,
            head_dim**-0.5, q_heads, kv_heads, HEAD_DIM=head_dim, BLOCK_K=block_k,
        )  # fmt: skip
    except Exception as error:  # the interpreter wraps what the kernel raised
        if isinstance(error.__cause__, NotImplementedError):  # "your code here" still there
            raise NotImplementedError from error
        raise
    return out


@exercise("10.2", "grouped-query attention in a Triton kernel")
def _check_decode_kernel(kernel) -> None:
    import importlib.util

    import torch.nn.functional as F

    expect(
        importlib.util.find_spec("triton") is not None,
        "Triton is not installed here (it ships for Linux): run this exercise on Linux or Colab.",
    )
    for batch, q_heads, kv_heads, length in ((1, 4, 4, 20), (2, 4, 2, 37), (2, 6, 1, 33),
                                             (1, 8, 2, 50)):  # fmt: skip
        q, k, v = _decode_inputs(batch, q_heads, kv_heads, length, 16, seed=length)
        call = phrase(
            "B = {batch}, H_q = {q_heads}, H_kv = {kv_heads}, L = {length}",
            batch=batch, q_heads=q_heads, kv_heads=kv_heads, length=length,
        )  # fmt: skip
        got = run_decode_kernel(kernel, q, k, v)
        want = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        worst = float((got - want).abs().max())
        expect(
            not got.isnan().any(),
            "{call}: your kernel read key-value heads that do not exist (it got NaN): kv_head "
            "must stay below H_kv. The query heads of one group are neighbours: heads "
            "0 … {last} share key-value head 0.",
            call=call,
            last=q_heads // kv_heads - 1,
        )
        if worst > 1e-4 and 1 < kv_heads < q_heads:
            spread = [h % kv_heads for h in range(q_heads)]
            mistaken = F.scaled_dot_product_attention(q, k[:, spread], v[:, spread])
            expect(
                float((got - mistaken).abs().max()) > 1e-4,
                "{call}: your kernel reads key-value head h % H_kv for query head h. The "
                "query heads of one group are neighbours: heads 0 … {last} share key-value "
                "head 0, so it is h // (H_q / H_kv).",
                call=call,
                last=q_heads // kv_heads - 1,
            )
        expect(
            worst < 1e-4,
            "{call}: your kernel differs from scaled_dot_product_attention(…, enable_gqa=True) "
            "by {worst:.3g}.",
            call=call,
            worst=worst,
        )


# --------------------------------------------------------------------------- 10.3


@exercise("10.3", "Change the experiment: how short can the window be?")
def _check_window_experiment(answer) -> None:
    expect(
        isinstance(answer, tuple) and len(answer) == 2,
        "Set window_task = (window_loss, smallest_window).",
    )
    window_loss, smallest = answer
    expect(callable(window_loss), "window_loss must be a function of (window, sinks).")
    losses = {}
    for window in (8, 16, 32, 64, 128):
        loss = window_loss(window, 0)
        expect(
            np.ndim(loss) == 0 and math.isfinite(float(loss)),
            "window_loss({window}, 0) returned {loss!r}; return one loss, a number.",
            window=window,
            loss=loss,
        )
        losses[window] = float(loss)
    expect(
        max(losses.values()) - min(losses.values()) > 1e-9,
        "window_loss gave the same loss for every window ({loss:.3f}): use the window you are "
        "given, model(long_x, window=window, sinks=sinks).",
        loss=losses[8],
    )
    best = min(losses.values())
    want = min(w for w, loss in losses.items() if loss <= best + 0.05)
    expect(
        smallest == want,
        "smallest_window = {got!r}; with your window_loss the losses are {losses}, and the "
        "smallest window within 0.05 of the best is {want}.",
        got=smallest,
        losses={w: round(loss, 3) for w, loss in losses.items()},
        want=want,
    )
