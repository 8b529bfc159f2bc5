"""The checkers of lesson 10: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

from attnlib.decoder import DecoderLM
from attnlib.exercises import check

# ---------------------------------------------------------------- 10.1 the ring buffer's slots


def slot(position, window, sinks):
    return position if position < sinks else sinks + (position - sinks) % window


def test_the_ring_buffer_slot_passes():
    assert check("10.1", slot)


@pytest.mark.parametrize(
    ("mistake", "hint"),
    [
        (lambda p, w, s: p % (w + s), "overwrote a sink's slot"),
        (lambda p, w, s: p % w, "overwrote a sink's slot"),
        (lambda p, w, s: s + (p - s) % w, "keep slots"),  # the sinks moved too
        (lambda p, w, s: min(p, w + s - 1), "expected"),  # the newest always in the last slot
        (lambda p, w, s: p, "lies between 0"),  # no ring at all
        (lambda p, w, s: float(slot(p, w, s)), "return an integer"),
    ],
)
def test_ring_buffer_mistakes_get_hints(mistake, hint):
    result = check("10.1", mistake)
    assert not result and hint in str(result), str(result)


def test_not_attempted_is_not_a_failure():
    def unattempted(position, window, sinks):
        raise NotImplementedError

    assert "not attempted" in str(check("10.1", unattempted))


# ---------------------------------------------------------------- 10.2 GQA in a Triton kernel

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="Triton ships for Linux only"
)


KERNEL = """
def kernel(Q, K, V, OUT, L_k, scale, H_Q, H_KV, HEAD_DIM: tl.constexpr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    batch, head = row // H_Q, row % H_Q
    kv_head = {kv_head}
    kv_row = batch * H_KV + kv_head
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + row * HEAD_DIM + dims)
    K, V = K + kv_row * L_k * HEAD_DIM, V + kv_row * L_k * HEAD_DIM
    m, total = float("-inf"), 0.0
    acc = tl.zeros([HEAD_DIM], tl.float32)
    for start in range(0, L_k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        inside = cols < L_k
        k = tl.load(K + cols[:, None] * HEAD_DIM + dims[None, :], mask=inside[:, None], other=0.0)
        v = tl.load(V + cols[:, None] * HEAD_DIM + dims[None, :], mask=inside[:, None], other=0.0)
        s = tl.where(inside, tl.sum(q[None, :] * k, axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        p, alpha = tl.exp(s - m_new), tl.exp(m - m_new)
        total = total * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(OUT + row * HEAD_DIM + dims, acc / total)
"""


def decode_kernel_with(kv_head: str):
    """The lesson's decoding kernel with ``kv_head = <kv_head>`` (an expression in ``head``,
    ``H_Q`` and ``H_KV``): the right mapping, or a mistake learners make. Triton's interpreter
    runs a kernel with its module's globals, so the kernel is written out, not a closure."""
    from attnlib import triton as flash

    flash.interpreting()  # imports Triton as attnlib.triton does: without a GPU, interpreted
    import triton.language as tl

    namespace = {"tl": tl}
    exec(KERNEL.format(kv_head=kv_head), namespace)
    return namespace["kernel"]


@needs_triton
def test_the_gqa_kernel_passes():
    assert check("10.2", decode_kernel_with("head // (H_Q // H_KV)"))


@needs_triton
@pytest.mark.parametrize(
    ("mapping", "hint"),
    [
        ("head % H_KV", "h % H_kv"),
        ("head", "do not exist"),
        ("0", "differs from scaled_dot_product_attention"),
    ],
)
def test_gqa_kernel_mistakes_get_hints(mapping, hint):
    result = check("10.2", decode_kernel_with(mapping))
    assert not result and hint in str(result), str(result)


# ---------------------------------------------------------------- 10.3 the window experiment


def untrained_window_loss():
    """A window experiment on an untrained model and random text: the checker re-measures
    whatever function it is given, so the model need not be trained."""
    model = DecoderLM(11, d_model=16, num_heads=4, num_layers=1, seed=0).eval()
    tokens = torch.randint(0, 11, (1, 300), generator=torch.Generator().manual_seed(0))
    tokens[0, 150:] = tokens[0, :150]  # the second half repeats the first: far context helps

    def loss(window, sinks):
        with torch.no_grad():
            logits = model(tokens[:, :-1], window=window, sinks=sinks)
        return F.cross_entropy(logits[0], tokens[0, 1:]).item()

    return loss


window_loss = untrained_window_loss()
window_losses = {w: window_loss(w, 0) for w in (8, 16, 32, 64, 128)}
smallest_window = min(
    w for w, v in window_losses.items() if v <= min(window_losses.values()) + 0.05
)


def test_the_window_experiment_is_re_measured():
    """The checker calls the function again: a right answer for another function's losses
    is wrong for this one."""
    assert check("10.3", (window_loss, smallest_window))
    wrong = 128 if smallest_window != 128 else 8
    result = check("10.3", (window_loss, wrong))
    assert not result and "smallest window within 0.05" in str(result)


# ---------------------------------------------------------------- for tests/test_exercises.py

CORRECT = {
    "10.1": slot,
    "10.3": (window_loss, smallest_window),
}
WRONG = [
    ("10.1", lambda p, w, s: p % (w + s), "overwrote a sink's slot"),
    ("10.1", lambda p, w, s: p, "lies between 0"),
    ("10.3", (lambda window, sinks: window_loss(128, sinks), 8), "the same loss for every window"),
    ("10.3", (lambda window, sinks: [1.0, 2.0], 8), "return one loss"),
    ("10.3", (window_loss, 128 if smallest_window != 128 else 8), "smallest window within 0.05"),
]
if importlib.util.find_spec("triton") is not None:  # Triton ships for Linux only
    CORRECT["10.2"] = decode_kernel_with("head // (H_Q // H_KV)")
    WRONG += [
        ("10.2", decode_kernel_with("head % H_KV"), "h % H_kv"),
        ("10.2", decode_kernel_with("head"), "do not exist"),
    ]
