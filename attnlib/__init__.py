"""attnlib: the code appendix of *Self-Attention, Step by Step*.

Two backends share one API, so a lesson switches backend by changing one import::

    from attnlib import numpy as attn   # the reference path: NumPy, float64, plain and explicit
    from attnlib import torch as attn   # the PyTorch path: any device, differentiable, fast

Conventions, kept by every function in both backends:

* **Tokens are rows.** A sequence is an array of shape ``(..., L, d)``: ``L`` tokens of
  dimension ``d``, with any number of leading batch or head dimensions. Projections are
  written ``x @ W`` with ``W`` of shape ``(d_in, d_out)``. (The LeeDL textbook writes
  column vectors, ``Q = W^q I``; that is the same computation transposed.)
* **Masks are boolean, True = may attend**, the convention of PyTorch's
  ``scaled_dot_product_attention``. A mask broadcasts against the scores, shape
  ``(..., L_q, L_k)``. (``torch.nn.MultiheadAttention`` uses the opposite convention for
  its ``key_padding_mask``: True there means *ignore*.)
* **A query with nothing to attend to** gets zero weights and a zero output, never NaN.
* **Bad input** raises ``ValueError`` or ``TypeError`` with a message that names the
  argument, the shape it got and the shape it needed. Each public call checks its input once.
  In the PyTorch backend ``q``, ``k`` and ``v`` (a layer's ``query``, ``key`` and ``value``)
  must share one float dtype, and a layer's input must have its parameters' dtype, or a
  ``TypeError`` names each one's dtype; NumPy promotes them to the wider one. NaN and
  infinite values are found in NumPy arrays and CPU tensors; tensors on a GPU are not scanned
  for them, because reading the answer back would make the computer wait for the GPU on every
  call (there a NaN in the input gives NaN in the output, as in PyTorch's layers).

**Random weights are drawn per backend.** A layer draws its weights from ``seed``: the NumPy
layers with NumPy's generator, ``numpy.random.default_rng(seed)``, and ``seed=0`` by default
(the same weights every time); the PyTorch layers with a ``torch.Generator`` seeded with
``seed``, and by default (``seed=None``) from PyTorch's global generator
(``torch.manual_seed``). So the same seed gives different weights in the two backends. For
identical weights, copy them from one ``torch.nn`` module with ``from_torch``, which both
backends' ``MultiHeadAttention``, ``LayerNorm``, ``FeedForward``, ``TransformerEncoderBlock``
and ``TransformerDecoderBlock`` have.

The other modules: ``attnlib.plot`` (figures), ``attnlib.data`` (small datasets, made in code
or shipped with a package: nothing is downloaded), ``attnlib.exercises`` (the answer checkers
of the lessons), ``attnlib.progress`` (the progress bar of the lessons' training loops) and
``attnlib.bench`` (timing and peak-memory helpers; ``python -m attnlib.bench`` times attnlib
against PyTorch's own kernels), ``attnlib.decoder`` (a small decoder-only language model that
generates with a KV cache, full or a sliding window), ``attnlib.triton`` (FlashAttention as a
Triton kernel, compiled on a GPU or run in Triton's interpreter on a CPU) and
``attnlib.distributed`` (ring attention across the processes of a ``torch.distributed``
group).
"""

__version__ = "0.1.0"
