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
  NaN and infinite values are found in NumPy arrays and CPU tensors; tensors on a GPU are not
  scanned for them, because reading the answer back would make the computer wait for the GPU
  on every call (there a NaN in the input gives NaN in the output, as in PyTorch's layers).

The other modules: ``attnlib.plot`` (figures), ``attnlib.data`` (small synthetic data made in
code, nothing is downloaded) and ``attnlib.exercises`` (the answer checkers of the lessons).
"""

__version__ = "0.1.0"
