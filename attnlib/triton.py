r"""FlashAttention as a Triton teaching kernel: exact attention in memory linear in the length.

``flash_attention(q, k, v, causal=False, scale=None)`` takes ``(B, H, L, d)`` tensors and
returns ``softmax(scale · q kᵀ) v``, the same numbers as ``attnlib.torch.attention``, without
ever holding the ``L_q × L_k`` matrix of scores: the forward and backward passes of
FlashAttention (Dao et al., 2022) in the loop order of FlashAttention-2 (Dao, 2023), written
in Triton, a Python dialect for GPU kernels.

**How a Triton kernel runs.** A kernel is a Python function that one *program* runs on one
block of data; the launch ``kernel[grid](...)`` starts one program per grid cell, in parallel.
Inside, ``tl.load`` reads a whole tile from memory, ``tl.dot`` multiplies tiles, and the
compiler turns that into GPU code. Here one program owns one block of ``BLOCK_Q`` queries of
one sequence (one ``(batch, head)`` pair) and walks along the keys, ``BLOCK_K`` at a time: the
grid is ``(⌈L_q / BLOCK_Q⌉, B·H)``.

**The forward pass** is Algorithm 1 of FlashAttention-2 (queries outside, keys inside;
FlashAttention-1's Algorithm 1 has the loops the other way round). Each query row keeps a
running maximum ``m_i``, a running sum ``ℓ_i`` and an unnormalised output row ``acc``, the
state of the *online softmax*, updated by each tile of scores ``s = scale · q kᵀ``:

.. math::
    m \leftarrow \max(m_{\text{old}}, \max_j s_j), \qquad
    \ell \leftarrow e^{m_{\text{old}} - m}\,\ell + \textstyle\sum_j e^{s_j - m}, \qquad
    \mathrm{acc} \leftarrow e^{m_{\text{old}} - m}\,\mathrm{acc}
        + \textstyle\sum_j e^{s_j - m}\,v_j

After the last tile the output row is ``acc / ℓ``. Multiplying by ``e^{m_old − m}``
re-expresses what was summed under the old maximum under the new one, so the result is the
exact softmax, not an approximation.

**float32 state.** ``m``, ``ℓ`` and ``acc`` are float32 whatever the inputs' dtype: a float16
running sum drops every weight below 1/4096 of itself (float16 keeps 11 significant bits),
and past a few thousand keys typical weights are that small; ``tl.dot`` of float16 or
bfloat16 tiles adds up its products in float32 anyway. Only the weights ``p`` are rounded to
the inputs' dtype before they multiply ``v`` (that product runs on the GPU's tensor cores),
and the output is rounded once, when it is stored.

**Base 2.** The kernels exponentiate with ``exp2``, the GPU's native exponential: scores are
multiplied by ``scale · log₂ e``, so that ``2^{s·log₂e} = e^{s}``; the maximum, the
log-sum-exp and everything derived from them are in base 2 too.

**Saved for the backward pass:** the output ``O`` and, for each query row, one number: the
log-sum-exp of its scores, ``lse = m + log₂ ℓ``. With it the backward pass recomputes any
tile of weights exactly, ``P = 2^{s − lse}``, without the running maximum, and nothing of size
``L_q × L_k`` is ever stored.

**The backward pass** (FlashAttention-2, Algorithm 2). With ``dO`` the gradient of the
output, ``dP = dO Vᵀ`` and ``D_i = rowsum(dO ∘ O)_i`` (which equals ``Σ_j P_ij dP_ij``),
softmax's gradient is ``dS = P ∘ (dP − D)``, and

.. math::
    dV = P^{\top} dO, \qquad dQ = \text{scale} \cdot dS\,K, \qquad
    dK = \text{scale} \cdot dS^{\top} Q .

Two kernels share the work, so that no two programs ever add into the same memory: one
program per block of *queries* computes ``D`` and ``dQ`` (walking along the keys, like the
forward pass), then one program per block of *keys* computes ``dK`` and ``dV`` (walking along
the queries). Both recompute their tiles of ``S``, ``P`` and ``dP``: the backward pass does 7
products of size ``L_q·L_k·d`` (``tl.dot``: 3 + 4), 9 with the forward pass, against 5 and 7 for
FlashAttention-2's single loop over key blocks, which adds ``dQ`` atomically (in no fixed
order, so not bit for bit the same from run to run). Two kernels buy determinism with
recomputation.

**Causal attention.** With ``causal=True`` query ``i`` attends to keys ``j ≤ i``, the
convention of ``attnlib.torch.causal_mask`` and of PyTorch's
``scaled_dot_product_attention(is_causal=True)``, also when ``L_q ≠ L_k`` (the mask is
``ones(L_q, L_k).tril()``, aligned at the top left). Key 0 is visible to every query, so no
row is ever fully masked. The kernels skip the tiles above the diagonal altogether: about half
the work. With ``causal_alignment="lower_right"`` the diagonal ends at the bottom right
instead, ``j ≤ i + L_k − L_q``, as FlashAttention-2's own library aligns it: the queries are
the last ``L_q`` positions of the sequence, as when new tokens attend to a cache of keys
(there, if ``L_q > L_k``, the first ``L_q − L_k`` rows see no key and get zeros).

**Grouped-query attention.** ``k`` and ``v`` may have fewer heads than ``q`` (``H_kv``
dividing ``H_q``): query head ``h`` reads key head ``h // (H_q / H_kv)``. The kernels compute
that index from the program's sequence, so the keys are never copied; the ``dK``/``dV``
kernel adds up, in one program, the gradients from every query head of its key head.

**Decoding.** ``flash_decode`` serves one query per sequence (a generation step): its kernel
(Flash-Decoding) splits the keys into chunks that run in parallel and writes one (output,
log-sum-exp) pair per chunk, merged afterwards (``merge_partials``), instead of one program
walking along all the keys.

**Any length.** Blocks are powers of two (``tl.arange`` needs one), so the last block of a
sequence is usually partly outside it: loads there are masked (they read zeros), scores of keys
past the end are set to ``−∞`` (weight 0), and rows past the end are not stored.

**Where it runs.** On a CUDA GPU the kernels are compiled. (Launched so far on one GPU, an
NVIDIA H200, with PyTorch 2.11 and Triton 3.6, on 2026-11-28: ``make gpu-check`` passed the
tests marked ``cuda`` there, and ``docs/gpu-check.md`` holds what it wrote. The kernels are
also tested in the interpreter, and every test run compiles them for a T4, an A100 and an
H100 without launching them and checks their shared memory and registers against those GPUs
(``tools/gpu_ready.py``). Their block sizes are tuned for no GPU.)
Without a GPU they run in Triton's *interpreter*, which executes the same Python functions
with NumPy arrays for tiles: slow, but every learner can run them, print inside them and step
through them with a debugger. Triton
runs a whole process one way, chosen when it is first imported: the interpreter where the
environment has ``TRITON_INTERPRET=1``. On a machine without a CUDA GPU, importing
``attnlib.triton`` sets it, so import it before anything that imports Triton (PyTorch's
``torch.utils.flop_counter`` does); on a machine with one, start Python with
``TRITON_INTERPRET=1`` to step through the kernels (then on CPU or GPU tensors).
``interpreting()`` says which way this process runs.

(Triton 3.7's interpreter multiplies bfloat16 tiles as if their bits were integers, so there
bfloat16 inputs are computed in float32 and the output rounded back.)

Requirements: ``triton`` (Linux; the book's ``requirements.txt`` pins the version PyTorch's
CUDA wheels ask for), imported on the first call, not with ``attnlib``; ``d`` one of 16, 32,
64, 128; float16, bfloat16 or float32 (for float64, ``attnlib.torch.attention``).

>>> import torch
>>> from attnlib.torch import attention, causal_mask
>>> device = "cpu" if interpreting() else "cuda"  # the interpreter takes CPU tensors
>>> generator = torch.Generator().manual_seed(0)
>>> q, k, v = (torch.randn(1, 2, 50, 16, generator=generator).to(device) for _ in "qkv")
>>> out = flash_attention(q, k, v, causal=True)
>>> out.shape
torch.Size([1, 2, 50, 16])
>>> expected = attention(q, k, v, causal_mask(50, device=device))[0]
>>> bool((out - expected).abs().max() < 1e-5)
True
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys

import torch

from . import _checks

__all__ = [
    "flash_attention",
    "flash_decode",
    "merge_partials",
    "FlashAttentionFunction",
    "interpreting",
    "default_blocks",
    "KERNELS",
]

#: The head sizes the kernels take: powers of two (``tl.arange`` needs one) of at least 16
#: (``tl.dot``'s smallest tile).
HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
LOG2_E = math.log2(math.e)

#: ``triton.language``, bound by ``_triton()`` on the first call: Triton is optional (it ships
#: for Linux only), so ``import attnlib.triton`` works without it.
tl = None


# --------------------------------------------------------------------------- the kernels
# Plain functions, decorated with ``triton.jit`` on first use (``_kernels``), because Triton
# is optional and imported only then. Arguments in capitals are pointers to the first element
# of a tensor, or compile-time constants (``tl.constexpr``). q, k, v, the output and their
# gradients are contiguous (B·H, L, d): row ``r`` of sequence ``seq`` starts
# ``(seq · L + r) · d`` elements after the first.


def _forward_kernel(
    Q, K, V, OUT, LSE,  # q: (B·H_q, L_q, d), k and v: (B·H_kv, L_k, d), the output like q;
                        # the log-sum-exp: (B·H_q, L_q)
    L_q, L_k, qk_scale,  # the two lengths; scale · log₂ e
    H_Q, GROUP, OFFSET,  # heads of q; query heads per key head (GQA); the causal diagonal's offset
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """FA-2, Algorithm 1, for one block of queries: its rows of the output and their log-sum-exp."""
    # Q, K, V, OUT and LSE point to their tensors' first numbers. A tl.constexpr is fixed when
    # the kernel is compiled, one compiled kernel per value: tile shapes may depend on it.
    block, seq = tl.program_id(0), tl.program_id(1).to(tl.int64)  # int64: offsets past 2³¹
    kv_seq = (seq // H_Q) * (H_Q // GROUP) + (seq % H_Q) // GROUP  # the key head it reads
    rows = block * BLOCK_Q + tl.arange(0, BLOCK_Q)  # this program's queries
    dims = tl.arange(0, HEAD_DIM)
    Q, OUT, LSE = Q + seq * L_q * HEAD_DIM, OUT + seq * L_q * HEAD_DIM, LSE + seq * L_q
    K, V = K + kv_seq * L_k * HEAD_DIM, V + kv_seq * L_k * HEAD_DIM  # its first row
    row_inside = rows[:, None] < L_q  # rows past the end of the sequence: read as zeros
    # A (BLOCK_Q, 1) column of row offsets plus a (1, HEAD_DIM) row of column offsets
    # broadcasts to a (BLOCK_Q, HEAD_DIM) grid of addresses: tl.load reads the whole tile into
    # fast memory (registers, or shared memory where the compiler pipelines a loop: num_stages).
    q = tl.load(Q + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_inside, other=0.0)

    # The online softmax's state, one entry per query row, float32 whatever the inputs' dtype.
    m_i = tl.full([BLOCK_Q], float("-inf"), tl.float32)  # the largest score so far (base 2)
    l_i = tl.zeros([BLOCK_Q], tl.float32)  # Σ_j 2^(s_j − m_i) over the keys so far
    acc = tl.zeros([BLOCK_Q, HEAD_DIM], tl.float32)  # Σ_j 2^(s_j − m_i) · v_j, likewise

    end = L_k
    if CAUSAL:  # keys after this block's last query (+ OFFSET) are hidden from all its rows
        end = tl.minimum(L_k, (block + 1) * BLOCK_Q + OFFSET)
    for start in range(0, end, BLOCK_K):  # the inner loop: one tile of keys at a time
        cols = start + tl.arange(0, BLOCK_K)
        col_inside = cols[:, None] < L_k
        k = tl.load(K + cols[:, None] * HEAD_DIM + dims[None, :], mask=col_inside, other=0.0)
        v = tl.load(V + cols[:, None] * HEAD_DIM + dims[None, :], mask=col_inside, other=0.0)

        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale  # scores, base 2
        visible = cols[None, :] < L_k
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None] + OFFSET)
        s = tl.where(visible, s, float("-inf"))  # a hidden key's weight: 2^(−∞) = 0

        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: 0
        alpha = tl.exp2(m_i - shift)  # moves the sums made under the old maximum to the new
        p = tl.exp2(s - shift[:, None])  # this tile's weights, not yet normalised
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    # Normalise once, after the last tile. A row that saw no key (causal, lower right, with
    # L_q > L_k) has l = 0: its output is 0 and its log-sum-exp −∞.
    seen = l_i > 0
    out = (acc / tl.where(seen, l_i, 1.0)[:, None]).to(OUT.dtype.element_ty)
    tl.store(OUT + rows[:, None] * HEAD_DIM + dims[None, :], out, mask=row_inside)
    lse = tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
    tl.store(LSE + rows, lse, mask=rows < L_q)  # all the backward pass needs


def _backward_dq_kernel(
    Q, K, V, OUT, DOUT, LSE, DELTA, DQ,  # DOUT, DQ: the gradients of the output and of q
    L_q, L_k, qk_scale, scale, H_Q, GROUP, OFFSET,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """For one block of queries: ``D = rowsum(dO ∘ O)``, stored for the next kernel, and
    ``dQ = scale · Σ_tiles dS K``, walking along the keys as the forward pass does."""
    block, seq = tl.program_id(0), tl.program_id(1).to(tl.int64)
    kv_seq = (seq // H_Q) * (H_Q // GROUP) + (seq % H_Q) // GROUP
    rows = block * BLOCK_Q + tl.arange(0, BLOCK_Q)
    dims = tl.arange(0, HEAD_DIM)
    at = seq * L_q * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]  # this block's rows
    row_inside = rows[:, None] < L_q
    K, V = K + kv_seq * L_k * HEAD_DIM, V + kv_seq * L_k * HEAD_DIM
    q = tl.load(Q + at, mask=row_inside, other=0.0)
    do = tl.load(DOUT + at, mask=row_inside, other=0.0)
    o = tl.load(OUT + at, mask=row_inside, other=0.0)
    lse = tl.load(LSE + seq * L_q + rows, mask=rows < L_q, other=0.0)
    lse = tl.where(lse == float("-inf"), 0.0, lse)  # a row with no key: its weights are all 0

    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), axis=1)  # D = rowsum(dO ∘ O)
    tl.store(DELTA + seq * L_q + rows, delta, mask=rows < L_q)

    dq = tl.zeros([BLOCK_Q, HEAD_DIM], tl.float32)
    end = L_k
    if CAUSAL:
        end = tl.minimum(L_k, (block + 1) * BLOCK_Q + OFFSET)
    for start in range(0, end, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        col_inside = cols[:, None] < L_k
        k = tl.load(K + cols[:, None] * HEAD_DIM + dims[None, :], mask=col_inside, other=0.0)
        v = tl.load(V + cols[:, None] * HEAD_DIM + dims[None, :], mask=col_inside, other=0.0)

        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        visible = cols[None, :] < L_k
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None] + OFFSET)
        p = tl.exp2(tl.where(visible, s - lse[:, None], float("-inf")))  # P, recomputed exactly
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # dP = dO Vᵀ
        ds = p * (dp - delta[:, None])  # dS = P ∘ (dP − D): the softmax's backward pass
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)  # dQ += dS K
    tl.store(DQ + at, (dq * scale).to(DQ.dtype.element_ty), mask=row_inside)


def _backward_dk_dv_kernel(
    Q, K, V, DOUT, LSE, DELTA, DK, DV,
    L_q, L_k, qk_scale, scale, H_Q, GROUP, OFFSET,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """For one block of keys of one key head: ``dV = Σ_tiles Pᵀ dO`` and
    ``dK = scale · Σ_tiles dSᵀ Q``, walking along the queries of every query head that reads
    this key head (``GROUP`` of them with GQA, one without)."""
    block, kv_seq = tl.program_id(0), tl.program_id(1).to(tl.int64)
    cols = block * BLOCK_K + tl.arange(0, BLOCK_K)  # this program's keys
    dims = tl.arange(0, HEAD_DIM)
    at = kv_seq * L_k * HEAD_DIM + cols[:, None] * HEAD_DIM + dims[None, :]  # this block's keys
    col_inside = cols[:, None] < L_k
    k = tl.load(K + at, mask=col_inside, other=0.0)
    v = tl.load(V + at, mask=col_inside, other=0.0)

    dk = tl.zeros([BLOCK_K, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_K, HEAD_DIM], tl.float32)
    first = 0
    if CAUSAL:  # queries before this block's first key (− OFFSET) see none of it: skip them
        first = tl.maximum(0, (block * BLOCK_K - OFFSET) // BLOCK_Q * BLOCK_Q)
    heads_kv = H_Q // GROUP
    for member in range(0, GROUP):  # the query heads of this key head, one after another
        seq = (kv_seq // heads_kv) * H_Q + (kv_seq % heads_kv) * GROUP + member
        Q_s, DOUT_s = Q + seq * L_q * HEAD_DIM, DOUT + seq * L_q * HEAD_DIM
        LSE_s, DELTA_s = LSE + seq * L_q, DELTA + seq * L_q
        for start in range(first, L_q, BLOCK_Q):  # from the first query block that sees a key
            rows = start + tl.arange(0, BLOCK_Q)
            row_inside = rows[:, None] < L_q
            q = tl.load(Q_s + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_inside, other=0.0)
            do = tl.load(
                DOUT_s + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_inside, other=0.0
            )
            lse = tl.load(LSE_s + rows, mask=rows < L_q, other=0.0)
            lse = tl.where(lse == float("-inf"), 0.0, lse)
            delta = tl.load(DELTA_s + rows, mask=rows < L_q, other=0.0)

            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
            visible = row_inside & (cols[None, :] < L_k)
            if CAUSAL:
                visible = visible & (cols[None, :] <= rows[:, None] + OFFSET)
            p = tl.exp2(tl.where(visible, s - lse[:, None], float("-inf")))
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)  # dV += Pᵀ dO
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
            ds = p * (dp - delta[:, None])
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)  # dK += dSᵀ Q
    tl.store(DK + at, (dk * scale).to(DK.dtype.element_ty), mask=col_inside)
    tl.store(DV + at, dv.to(DV.dtype.element_ty), mask=col_inside)


def _decode_kernel(
    Q, K, V, LENGTHS, OUT, LSE,  # q: (B·H_q, d), one query per head; k, v: (B·H_kv, L_k, d);
                                 # LENGTHS: (B,) keys each sequence has; OUT: (B·H_q, SPLITS, d),
                                 # LSE: (B·H_q, SPLITS), one partial result per chunk of keys
    L_k, qk_scale, H_Q, GROUP, CHUNK, SPLITS,
    HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    """Flash-Decoding, one chunk of ``CHUNK`` keys of one key head: the ``GROUP`` queries
    that read this key head (a block of ``BLOCK_Q`` rows, the rest padding) against the chunk,
    by the online softmax; writes each query's partial output (normalised over the chunk) and
    log-sum-exp (base 2; −∞ for a chunk past the sequence's length), merged afterwards."""
    split, kv_seq = tl.program_id(0), tl.program_id(1).to(tl.int64)
    heads_kv = H_Q // GROUP
    batch = kv_seq // heads_kv
    members = tl.arange(0, BLOCK_Q)  # the query heads of this key head, as rows of one tile
    seqs = batch * H_Q + (kv_seq % heads_kv) * GROUP + members
    real = members < GROUP
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + seqs[:, None] * HEAD_DIM + dims[None, :], mask=real[:, None], other=0.0)
    K, V = K + kv_seq * L_k * HEAD_DIM, V + kv_seq * L_k * HEAD_DIM
    length = tl.load(LENGTHS + batch)  # this sequence's keys: 0 … length − 1

    m_i = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, HEAD_DIM], tl.float32)
    first = split * CHUNK
    for start in range(first, tl.minimum(first + CHUNK, length), BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        inside = (cols < length) & (cols < first + CHUNK)
        k = tl.load(K + cols[:, None] * HEAD_DIM + dims[None, :], mask=inside[:, None], other=0.0)
        v = tl.load(V + cols[:, None] * HEAD_DIM + dims[None, :], mask=inside[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        s = tl.where(inside[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - shift)
        p = tl.exp2(s - shift[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    seen = l_i > 0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
    at = seqs * SPLITS + split
    tl.store(OUT + at[:, None] * HEAD_DIM + dims[None, :], out, mask=real[:, None])
    tl.store(LSE + at, lse, mask=real)


#: The kernels by the job they do, as plain Python functions (``triton.jit`` is applied when
#: Triton is first used): the forward pass, the backward pass's two halves, and decoding.
KERNELS = {
    "forward": _forward_kernel,
    "backward_dq": _backward_dq_kernel,
    "backward_dk_dv": _backward_dk_dv_kernel,
    "decode": _decode_kernel,
}


# --------------------------------------------------------------------------- loading Triton
# Triton runs a whole process one way, compiled for a GPU or in the interpreter, fixed when
# ``triton.language`` is first imported (its own library functions, ``tl.zeros`` and others,
# are decorated then), by whatever imports it first: ``torch.utils.flop_counter`` does, for
# one. Without a CUDA GPU only the interpreter can run, so ``attnlib.triton`` switches it on
# (``TRITON_INTERPRET=1``) as soon as it is imported, unless the environment says otherwise or
# Triton is loaded already.


def _use_the_interpreter_without_a_gpu() -> None:
    """Set ``TRITON_INTERPRET=1`` where there is no CUDA GPU, if Triton is not loaded yet and
    the environment does not set it."""
    if "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


_use_the_interpreter_without_a_gpu()


@functools.cache
def _triton():
    """The ``triton`` module, imported on the first call (and ``tl`` bound for the kernels),
    or an ImportError that says how to get it."""
    global tl
    _use_the_interpreter_without_a_gpu()
    try:
        import triton
        import triton.language
    except ImportError as error:
        raise ImportError(
            "attnlib.triton needs the triton package, which PyTorch's CUDA wheels bring on "
            "Linux; install it with `pip install triton` (Linux, x86-64 or ARM). There is no "
            "Triton for macOS or Windows: use attnlib.torch.tiled_attention, the same "
            "algorithm in PyTorch operations."
        ) from error
    tl = triton.language
    return triton


def interpreting() -> bool:
    """Whether this process runs Triton kernels in the interpreter rather than compiled for a
    GPU: whether Triton's own library was decorated for the interpreter when it was imported.
    Imports Triton.

    >>> interpreting() or torch.cuda.is_available()  # without a GPU, always the interpreter
    True
    """
    triton = _triton()
    try:  # a private class of Triton's (3.x); a later Triton may move it
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # then the setting it was imported under decides
        return os.environ.get("TRITON_INTERPRET", "0") == "1"
    return isinstance(triton.language.zeros, InterpretedFunction)


@functools.cache
def _kernels() -> dict:
    """``KERNELS`` decorated with ``triton.jit`` the way Triton's library was (``triton.jit``
    reads ``TRITON_INTERPRET`` when it decorates): compiled on their first launch, or run by
    the interpreter."""
    triton, interpret = _triton(), interpreting()
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        return {name: triton.jit(kernel) for name, kernel in KERNELS.items()}
    finally:
        if saved is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = saved


# --------------------------------------------------------------------------- launching


def default_blocks(head_dim: int, dtype: torch.dtype, shared_memory: int | None = None):
    """``(BLOCK_Q, BLOCK_K)`` for a head size and dtype, on a GPU whose programs may use
    ``shared_memory`` bytes of on-chip memory (None: the CPU's interpreter).

    On a GPU 64 × 64 where a row of a tile takes at most 128 bytes (float16 up to d = 64,
    float32 up to d = 32), else 32 × 32; halved (down to 16) while ``9 · block · d · bytes``
    exceeds the GPU's on-chip memory (compiled for sm_75, sm_80 and sm_90, the kernels with
    d ≥ 64, where the rule can bind, needed at most 8 times that product). The interpreter
    takes 64 × 64: its cost is per tile (a few milliseconds), not per score.

    Why smaller than lesson 09's model, which fills one multiprocessor's on-chip memory with a
    block of 211 queries: the kernel keeps its running state and ``acc`` in registers, at most
    255 of 4 bytes per thread; a GPU runs several programs on one multiprocessor, so that one
    computes while another waits for memory; and the repeated reads of K and V that the model
    charges to slow memory can come from the GPU's L2 cache (tens of MB), which holds a head's
    keys and values (1 MiB at L = 4096, d = 64, float16).

    >>> default_blocks(64, torch.float16, shared_memory=232448)  # an H100 (227 KiB)
    (64, 64)
    >>> default_blocks(128, torch.float16, shared_memory=65536)  # a T4 (64 KiB)
    (16, 16)
    """
    if shared_memory is None:
        return 64, 64
    row_bytes = head_dim * dtype.itemsize
    block = 64 if row_bytes <= 128 else 32
    while block > 16 and 9 * block * row_bytes > shared_memory:
        block //= 2
    return block, block


@functools.cache
def _shared_memory(device_index: int) -> int:
    """Bytes of on-chip memory one program may use on this GPU, as Triton reads them."""
    properties = _triton().runtime.driver.active.utils.get_device_properties(device_index)
    return properties["max_shared_mem"]


def _settings(q: torch.Tensor, block_q, block_k) -> dict:
    """The launch settings shared by the kernels."""
    shared_memory = None if interpreting() else _shared_memory(q.device.index)
    default_q, default_k = default_blocks(q.shape[-1], q.dtype, shared_memory)
    return {
        "HEAD_DIM": q.shape[-1],
        "BLOCK_Q": block_q or default_q,
        "BLOCK_K": block_k or default_k,
        # float32 products in full float32, not TF32 (Triton's default on NVIDIA GPUs)
        "PRECISION": "ieee" if q.dtype == torch.float32 else None,
        "num_warps": 4,  # 4 groups of 32 threads share each program's tiles
        "num_stages": 2,  # loads for the next turn of a loop start while this one computes
    }


def _forward(q, k, v, causal: bool, offset: int, scale: float, block_q, block_k):
    """Launch the forward kernel: the output and the log-sum-exp (base 2) of each row."""
    batch, heads, len_q, _ = q.shape
    heads_kv, len_k = k.shape[1], k.shape[2]
    settings = _settings(q, block_q, block_k)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, len_q, device=q.device, dtype=torch.float32)
    grid = (-(-len_q // settings["BLOCK_Q"]), batch * heads)
    shape = (len_q, len_k, scale * LOG2_E)
    gqa = (heads, heads // heads_kv, offset)
    _kernels()["forward"][grid](q, k, v, out, lse, *shape, *gqa, CAUSAL=causal, **settings)
    return out, lse


def _backward(q, k, v, out, lse, grad_out, causal, offset, scale, block_q, block_k):
    """Launch the two backward kernels: the gradients of q, k and v."""
    batch, heads, len_q, _ = q.shape
    heads_kv, len_k = k.shape[1], k.shape[2]
    settings = _settings(q, block_q, block_k)
    kernels = _kernels()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty_like(lse)
    shape = (len_q, len_k, scale * LOG2_E, scale, heads, heads // heads_kv, offset)
    grid_q = (-(-len_q // settings["BLOCK_Q"]), batch * heads)
    kernels["backward_dq"][grid_q](
        q, k, v, out, grad_out, lse, delta, dq, *shape, CAUSAL=causal, **settings
    )
    grid_k = (-(-len_k // settings["BLOCK_K"]), batch * heads_kv)  # one program per key block
    kernels["backward_dk_dv"][grid_k](
        q, k, v, grad_out, lse, delta, dk, dv, *shape, CAUSAL=causal, **settings
    )
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """``flash_attention`` as an autograd operation: the forward kernel, and the two backward
    kernels, which recompute the weights from the saved log-sum-exp. Returns the output and
    the log-sum-exp in base 2 (not differentiable).

    Public so that its code can be read, not to be called: ``FlashAttentionFunction.apply``
    skips what ``flash_attention`` does first (every argument checked, the default scale and
    blocks, bfloat16 computed in float32 in Triton's interpreter). Call ``flash_attention``."""

    @staticmethod
    def forward(ctx, q, k, v, causal, offset, scale, block_q, block_k):
        """The output and log-sum-exp; saves q, k, v, the output and the log-sum-exp."""
        with _on_device(q):
            out, lse = _forward(q, k, v, causal, offset, scale, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = causal, offset, scale, block_q, block_k
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out, _grad_lse):
        """The gradients of q, k and v (and None for the settings)."""
        q, k, v, out, lse = ctx.saved_tensors
        with _on_device(q):
            grads = _backward(q, k, v, out, lse, grad_out.contiguous(), *ctx.settings)
        return (*grads, None, None, None, None, None)


def _on_device(q: torch.Tensor):
    """A ``with`` block in which Triton launches on q's GPU (it launches on the current one)."""
    return torch.cuda.device(q.device) if q.is_cuda else contextlib.nullcontext()


def merge_partials(outs: torch.Tensor, lses: torch.Tensor):
    r"""Merge attention results computed over separate parts of the keys into the result over
    all of them: the FlashAttention lesson's merge of (output, log-sum-exp) pairs, for any number
    of parts.

    .. math:: \text{lse} = \log \textstyle\sum_s e^{\text{lse}_s}, \qquad
              \text{out} = \textstyle\sum_s e^{\text{lse}_s - \text{lse}}\, \text{out}_s

    Shapes: ``outs`` ``(..., S, d)`` (each part's output, normalised over its own keys),
    ``lses`` ``(..., S)`` (natural log; −∞ for a part with no key) → ``(out (..., d),
    lse (...))``; where every part is empty, zeros and −∞.

    >>> outs = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # two parts of one key each
    >>> out, lse = merge_partials(outs, torch.zeros(2))  # scores 0 and 0: equal weights
    >>> out.tolist(), round(float(lse), 4)
    ([0.5, 0.5], 0.6931)
    """
    lse = torch.logsumexp(lses, dim=-1)
    finite = torch.where(lse == -math.inf, 0.0, lse)  # all parts empty: weights 0, not NaN
    weights = torch.exp(lses - finite.unsqueeze(-1))
    return (weights.unsqueeze(-1) * outs.float()).sum(-2).to(outs.dtype), lse


# --------------------------------------------------------------------------- the public calls

CAUSAL_ALIGNMENTS = ("upper_left", "lower_right")


def flash_attention(
    q,
    k,
    v,
    *,
    causal=False,
    causal_alignment="upper_left",
    scale=None,
    return_lse=False,
    block_q=None,
    block_k=None,
):
    r"""Exact attention by the FlashAttention kernels in Triton (the module's docstring walks
    through them).

    .. math:: \operatorname{out} = \operatorname{softmax}(s\,q k^{\top})\, v,
              \qquad s = 1/\sqrt{d} \text{ by default}

    Shapes: ``q`` ``(B, H_q, L_q, d)``, ``k`` and ``v`` ``(B, H_kv, L_k, d)`` → ``(B, H_q,
    L_q, d)``, ``d`` in {16, 32, 64, 128}. With ``H_kv < H_q`` (``H_kv`` dividing ``H_q``),
    grouped-query attention: query head ``h`` reads key head ``h // (H_q / H_kv)``, as
    ``scaled_dot_product_attention(..., enable_gqa=True)``, without copying the keys. float16,
    bfloat16 or float32, all three alike; the output keeps the dtype, and its gradients flow
    back to q, k and v (``FlashAttentionFunction``).

    ``causal=True`` hides the keys after each query. ``causal_alignment`` says where the
    diagonal lies when ``L_q ≠ L_k``: ``"upper_left"`` (query ``i`` sees keys ``j ≤ i``, as
    ``is_causal=True``) or ``"lower_right"`` (``j ≤ i + L_k − L_q``: the queries are the *last*
    ``L_q`` positions, as when new tokens attend to a cache of keys; PyTorch's
    ``causal_lower_right``); a query that sees no key gets zeros. ``return_lse=True`` returns
    ``(out, lse)``, ``lse`` each row's log-sum-exp of its scores, natural log, ``(B, H_q,
    L_q)`` (−∞ for a row with no key), not differentiable. ``block_q`` and ``block_k`` (powers
    of two, at least 16) set the tiles; by default ``default_blocks``. Compiled on a CUDA GPU;
    on the CPU, run by Triton's interpreter.

    >>> device = "cpu" if interpreting() else "cuda"
    >>> x = torch.eye(16, device=device).reshape(1, 1, 16, 16)
    >>> out = flash_attention(x, x, x, causal=True, block_q=16, block_k=16)
    >>> round(float(out[0, 0, 1, 0]), 4)  # row 1 sees keys 0 and 1, scores 0 and 1/4
    0.4378
    """
    fn = "flash_attention"
    _check(fn, q, k, v, block_q, block_k)
    _checks.require_flag(fn, "causal", causal)
    _checks.require_flag(fn, "return_lse", return_lse)
    _checks.check_choice(fn, "causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    scale = _checks.scale_or_default(fn, scale, q.shape[-1])
    offset = k.shape[2] - q.shape[2] if causal_alignment == "lower_right" else 0
    if q.shape[2] == 0 or k.shape[2] == 0:  # no tile to run: no rows, or rows with nothing to
        out = _dense(q, k, v, scale)  # attend to, which get zeros (dense attention's)
        lse = q.new_full(q.shape[:3], -math.inf, dtype=torch.float32)
        return (out, lse) if return_lse else out
    _require_the_interpreter_for_cpu_tensors(fn, q)
    dtype = q.dtype
    q, k, v = _kernel_inputs(q, k, v)
    out, lse = FlashAttentionFunction.apply(q, k, v, causal, offset, scale, block_q, block_k)
    out = out.to(dtype)
    return (out, lse / LOG2_E) if return_lse else out  # log₂ → natural log


def flash_decode(q, k, v, *, lengths=None, scale=None, splits=None, return_lse=False, block_k=None):
    r"""One decoding step by Flash-Decoding: one query per sequence and head against a cache of
    keys, the keys split into ``splits`` chunks that run in parallel, each chunk's (output,
    log-sum-exp) pair then merged (``merge_partials``).

    ``flash_attention`` runs one program per block of queries: with one query per sequence,
    ``B·H`` programs in all, too few to fill a GPU of a hundred processors when the batch is
    small, however long the cache. Here ``splits × B·H_kv`` programs share the keys; the GQA
    heads that read one key head are one tile of queries, so each key is loaded once for all
    of them.

    Shapes: ``q`` ``(B, H_q, 1, d)``, ``k`` and ``v`` ``(B, H_kv, L_k, d)`` (``H_kv``
    dividing ``H_q``, as in ``flash_attention``) → ``(B, H_q, 1, d)``. ``lengths`` (``(B,)``
    integers, default ``L_k``): sequence ``b`` sees only keys ``0 … lengths[b] − 1`` (a batch
    of caches filled to different lengths; a sequence of length 0 gets zeros). ``splits``: by
    default enough chunks of whole ``block_k`` tiles to give a GPU two programs per processor
    (four in the interpreter). ``return_lse``: as in ``flash_attention``. Forward only.

    >>> device = "cpu" if interpreting() else "cuda"
    >>> g = torch.Generator().manual_seed(0)
    >>> q = torch.randn(2, 4, 1, 16, generator=g).to(device)
    >>> k, v = (torch.randn(2, 2, 100, 16, generator=g).to(device) for _ in "kv")
    >>> out = flash_decode(q, k, v, splits=3, block_k=16)
    >>> expected = flash_attention(q, k, v)  # 4 query heads read 2 key heads
    >>> bool((out - expected).abs().max() < 1e-5)
    True
    """
    fn = "flash_decode"
    _check(fn, q, k, v, None, block_k)
    _checks.require_flag(fn, "return_lse", return_lse)
    scale = _checks.scale_or_default(fn, scale, q.shape[-1])
    batch, heads, len_q, head_dim = q.shape
    heads_kv, len_k = k.shape[1], k.shape[2]
    if len_q != 1:
        raise ValueError(
            f"{fn}: q must hold one query per sequence and head, (B, H_q, 1, d); got "
            f"q.shape={_checks.shape_str(q)} (for several, use flash_attention)"
        )
    lengths = _decode_lengths(fn, lengths, q, len_k)
    if splits is not None:
        _checks.require_positive_int(fn, "splits", splits)
    if len_k == 0:
        out, lse = _dense(q, k, v, scale), q.new_full((batch, heads, 1), -math.inf)
        return (out, lse.float()) if return_lse else out
    _require_the_interpreter_for_cpu_tensors(fn, q)
    dtype = q.dtype
    q, k, v = _kernel_inputs(q, k, v)
    settings = _settings(q, None, block_k)
    group = heads // heads_kv
    settings["BLOCK_Q"] = max(16, 1 << (group - 1).bit_length())  # the group's queries, padded
    tiles = -(-len_k // settings["BLOCK_K"])
    splits = min(tiles, splits or _default_splits(q, batch * heads_kv))
    chunk = -(-tiles // splits) * settings["BLOCK_K"]  # whole tiles per chunk
    splits = -(-len_k // chunk)
    outs = torch.empty(batch * heads, splits, head_dim, device=q.device, dtype=torch.float32)
    lses = torch.empty(batch * heads, splits, device=q.device, dtype=torch.float32)
    with _on_device(q):
        _kernels()["decode"][(splits, batch * heads_kv)](
            q, k, v, lengths, outs, lses,
            len_k, scale * LOG2_E, heads, group, chunk, splits, **settings,
        )  # fmt: skip
    out, lse = merge_partials(outs, lses / LOG2_E)  # log₂ → natural log
    out = out.reshape(batch, heads, 1, head_dim).to(dtype)
    return (out, lse.reshape(batch, heads, 1)) if return_lse else out


def _kernel_inputs(q, k, v):
    """q, k and v as the kernels take them: contiguous, and float32 copies of bfloat16 ones in
    the interpreter (Triton 3.7's multiplies bfloat16 tiles as if their bits were integers;
    the caller rounds the result back)."""
    upcast = q.dtype == torch.bfloat16 and interpreting()
    return [x.float().contiguous() if upcast else x.contiguous() for x in (q, k, v)]


def _default_splits(q: torch.Tensor, programs: int) -> int:
    """Chunks per key head: two programs per processor of the GPU in all, four chunks in the
    interpreter."""
    if interpreting():
        return 4
    processors = torch.cuda.get_device_properties(q.device).multi_processor_count
    return max(1, -(-2 * processors // programs))


def _decode_lengths(fn: str, lengths, q: torch.Tensor, len_k: int) -> torch.Tensor:
    """``lengths`` as int32 on q's device, checked: ``(B,)`` integers in ``0 … L_k``."""
    if lengths is None:
        return torch.full((q.shape[0],), len_k, dtype=torch.int32, device=q.device)
    if not isinstance(lengths, torch.Tensor) or lengths.dtype.is_floating_point:
        raise TypeError(f"{fn}: lengths must be a tensor of integers; got {lengths!r}"[:200])
    if lengths.shape != (q.shape[0],):
        raise ValueError(
            f"{fn}: lengths must have shape (B,) = ({q.shape[0]},), one per sequence; got "
            f"lengths.shape={_checks.shape_str(lengths)}"
        )
    if bool((lengths < 0).any()) or bool((lengths > len_k).any()):
        raise ValueError(
            f"{fn}: lengths must lie in 0 … L_k = {len_k}; got {lengths.tolist()}"[:200]
        )
    return lengths.to(device=q.device, dtype=torch.int32)


def _dense(q, k, v, scale: float) -> torch.Tensor:
    """Dense attention (``attnlib.torch.attention``), the key heads repeated for GQA: for the
    cases without a tile to run (zeros where a row has no key)."""
    from . import torch as attn_torch

    group = q.shape[1] // max(1, k.shape[1])
    k, v = (x.repeat_interleave(group, dim=1) for x in (k, v))
    return attn_torch.attention(q, k, v, scale=scale)[0]


def _require_the_interpreter_for_cpu_tensors(fn: str, q: torch.Tensor) -> None:
    """CPU tensors run only in the interpreter: a clear error in a process compiled for a GPU."""
    if q.device.type == "cpu" and not interpreting():
        raise RuntimeError(
            f"{fn}: q, k and v are on the CPU, but this process runs Triton compiled for a "
            "GPU: TRITON_INTERPRET was not 1 when triton was first imported (import "
            "attnlib.triton before anything that imports triton, torch.utils.flop_counter for "
            "one, or start Python with TRITON_INTERPRET=1). On a GPU, move them there."
        )


def _check(fn: str, q, k, v, block_q, block_k) -> None:
    """The kernel's rules: tensors on one CPU or CUDA device, ``(B, H, L, d)``, one of the
    kernel's dtypes and head sizes, matching shapes, finite values, tiles that are powers of
    two of at least 16. Each error names the argument and the shapes."""
    named = {"q": q, "k": k, "v": v}
    for name, x in named.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(
                f"{fn}: {name} must have shape (B, H, L, d), 4 dimensions; "
                f"got {name}.shape={_checks.shape_str(x)}"
            )
        if x.dtype not in DTYPES:
            raise TypeError(
                f"{fn}: {name} must be float16, bfloat16 or float32; got dtype "
                f"{_checks.dtype_name(x.dtype)} (shape {_checks.shape_str(x)})"
                + (". For float64 use attnlib.torch.attention." if x.is_floating_point() else "")
            )
    _checks.require_same_dtype(fn, named)
    devices = {x.device for x in named.values()}
    if len(devices) > 1 or q.device.type not in ("cpu", "cuda"):
        where = ", ".join(f"{name} on {x.device}" for name, x in named.items())
        raise ValueError(f"{fn}: q, k and v must be on one CPU or CUDA device; got {where}")
    shapes = f"q.shape={_checks.shape_str(q)}, k.shape={_checks.shape_str(k)}, " + (
        f"v.shape={_checks.shape_str(v)}"
    )
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"{fn}: the head size d must be one of {HEAD_DIMS}; got {shapes}")
    if k.shape[-1] != q.shape[-1] or v.shape[-1] != q.shape[-1]:
        raise ValueError(f"{fn}: q, k and v must have the same head size d; got {shapes}")
    if not (q.shape[0] == k.shape[0] == v.shape[0] and k.shape[1] == v.shape[1]):
        raise ValueError(
            f"{fn}: q, k and v must have the same batch size B, and k and v the same number of "
            f"heads H_kv, without broadcasting; got {shapes}"
        )
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(
            f"{fn}: k's heads H_kv must divide q's heads H_q (each key head serves H_q / H_kv "
            f"query heads); got {shapes}"
        )
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"{fn}: k and v must have the same length L_k; got {shapes}")
    for name, block in (("block_q", block_q), ("block_k", block_k)):
        if block is not None:
            _checks.require_positive_int(fn, name, block)
            if block < 16 or block & (block - 1):
                raise ValueError(f"{fn}: {name} must be a power of two >= 16; got {block}")
    _checks.require_all_finite(fn, named)
