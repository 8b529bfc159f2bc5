r"""Ring attention: exact attention of a sequence too long for one process, split across
several processes of a ``torch.distributed`` group (Liu et al., 2023, "Ring Attention with
Blockwise Transformers for Near-Infinite Context").

**The layout.** A sequence of ``L`` tokens is cut into ``P`` shards of ``n = L/P`` tokens, one
per process. Process ``r`` holds the queries, keys and values of its own shard, ``(B, H, n, d)``
each (any leading axes will do: tokens are rows), and computes the output rows of its own
queries. By default a shard is contiguous: process ``r`` holds positions ``r·n … (r+1)·n − 1``
(``layout="contiguous"``). ``split_sequence`` cuts a whole sequence into the shards of a layout
and ``join_shards`` puts them back together.

**The ring.** A query needs every key. So the key and value shards travel round the processes
in a ring: at step ``s = 0 … P−1`` process ``r`` holds the keys and values of process
``(r − s) mod P``, folds them into its queries' running state, and passes them on to process
``r + 1`` while it receives the next ones from ``r − 1``. The exchange of step ``s + 1`` is
started (``torch.distributed.batch_isend_irecv``) *before* the block of step ``s`` is
computed, so that sending and computing overlap: ``time_overlap`` measures it over a link
slowed on purpose (``SlowLink``), against the schedule that waits. After ``P`` steps every
query has met every key, and no process ever held more than two key shards or one block of
``BLOCK × BLOCK`` scores (per sequence) at a time.

**The running state** is the online softmax of tiled attention (``attnlib.torch.tiled_attention``,
the same ``OnlineSoftmax``): each query row keeps a running maximum ``m``, a running sum ``ℓ``
and an unnormalised output ``y``; a block of scores ``s_j`` (in base 2, as in the tiled kernel)
updates them as

.. math:: m' = \max(m, \max_j s_j), \quad
          \ell \leftarrow 2^{m - m'}\,\ell + \textstyle\sum_j 2^{s_j - m'}, \quad
          y \leftarrow 2^{m - m'}\,y + \textstyle\sum_j 2^{s_j - m'}\, v_j ,

and the output is ``y / ℓ``, exactly softmax attention, in whatever order the blocks arrive.
The state is float32 for float16 and bfloat16 inputs (float64 for float64).

**The backward pass** runs the ring again. Each process recomputes its blocks' weights ``W``
(FlashAttention's ``P``) from the log-sum-exp ``lse = m + log₂ ℓ`` saved by the forward pass,
``W = 2^{S − lse}``, and with ``D = rowsum(dO ∘ O)`` and the scale ``s``:

.. math:: dS = W \circ (dO\,V^\top - D), \quad dQ \mathrel{+}= s\,dS\,K, \quad
          dK \mathrel{+}= s\,dS^\top Q, \quad dV \mathrel{+}= W^\top dO .

``dQ`` stays home. ``dK`` and ``dV`` belong to the key shard: they travel round the ring with
it, each process adding its queries' share, and arrive back at the shard's own process after
``P`` hops.

**Causal attention, balanced.** With a causal mask and contiguous shards, process 0's queries
need only its own keys while process ``P − 1``'s need all of them: the first process idles
while the last does all the work. ``layout="balanced"`` cuts the sequence into ``2P`` chunks
and gives process ``r`` chunks ``r`` and ``2P − 1 − r``, one from each end (the zig-zag
layout, used for the context parallelism of Llama 3, Dubey et al., 2024): then every process
computes the same number of tiles. In these two layouts a shard is two chunks, and a *tile* is
one chunk of queries times one chunk of keys; tiles entirely above the diagonal are skipped.
``layout="striped"`` balances the work another way (striped attention, Brandon et al., 2023):
process ``r`` holds every ``P``-th token from token ``r``, one strided chunk, so that every tile
is cut by the mask and the saving comes from the blocks above the diagonal inside each tile.
``tile_counts`` and ``score_counts`` count the tiles and scores of each process without
running anything, and a ``RingStats`` passed to ``ring_attention`` counts those it computes
and the bytes it sends at each step.

**Positions follow the tokens.** A shard's tokens are not at positions ``0 … n − 1`` of the
sequence: ``shard_positions`` gives their places, which rotary encodings and the labels of the
loss must use (``compare_rotary_with_dense`` shows the difference). PyTorch's own context
parallelism (``torch.distributed.tensor.experimental.context_parallel``, a prototype) cuts its
buffers exactly as the balanced layout does; its attention runs on GPUs only
(``compare_with_pytorch_context_parallel``).

**FlashAttention inside each step.** A tile is not computed whole: ``tile_blocks`` cuts it
into blocks of at most ``BLOCK`` (256) queries × ``BLOCK`` keys, and each block is folded into
its queries' running state (forward) or turned into its share of the gradients
(``attnlib._torch_tiled.tile_gradients``, the tiled backward pass's own), as the tiled kernel
of ``attnlib.torch.tiled_attention`` does; that is what production rings (Ring Attention; the
ring-flash-attention library) do with a FlashAttention kernel at each step, merging its
output and log-sum-exp with the same online-softmax merge.

**Memory and messages.** A process holds its own q, k, v and output shards, the key and value
shards of the current step and of the next (arriving while it computes), and one block of
scores at a time, at most ``BLOCK × BLOCK`` for each of the ``B·H`` sequences (two in the
backward pass): memory ``O(n·d)``, linear in its shard, against dense attention's
``O(L·d + L²)`` in one process. At each forward step but the last a process sends its key
and value shards, ``B·H·n·(d_k + d_v)`` numbers; at each backward step also their gradients
(``RingStats.sent_bytes``), in the working dtype: float32 for float16 or bfloat16 inputs, so
that a backward step then sends three times a forward step's bytes.

**Starting processes.** ``launch(fn, P, *args)`` starts ``P`` local processes joined in a
``gloo`` group that talks over the loopback interface only, and returns what ``fn(*args)``
returned in each, rank by rank (from a notebook too: see ``launch`` for which functions it
can run on which system).
``python -m attnlib.distributed`` checks ring attention against dense attention, in local
processes or under ``torchrun`` (``main``).

>>> import torch
>>> x = torch.arange(8.0).reshape(8, 1)  # 8 tokens of dimension 1
>>> [s.flatten().tolist() for s in split_sequence(x, 2, layout="balanced")]
[[0.0, 1.0, 6.0, 7.0], [2.0, 3.0, 4.0, 5.0]]
>>> [tile_counts(4, 16, layout=layout, causal=True) for layout in ("contiguous", "balanced")]
[[3, 7, 11, 15], [9, 9, 9, 9]]
"""

from .cli import (
    compare_rotary_with_dense,
    compare_ulysses_with_dense,
    compare_with_dense,
    compare_with_pytorch_context_parallel,
    dense_reference,
    main,
    peak_memory_bytes,
)
from .launcher import launch
from .overlap import OverlapTimes, SlowLink, time_overlap
from .ring import LAYOUTS as _LAYOUTS
from .ring import (
    RingStats,
    Tile,
    join_shards,
    ring_attention,
    ring_plan,
    score_counts,
    shard_chunks,
    shard_positions,
    split_sequence,
    tile_counts,
)
from .ulysses import UlyssesStats, ulysses_attention

#: The two ways of cutting the sequence into shards (``layout=``): contiguous, or balanced
#: (each process holds chunk r and chunk 2P - 1 - r of 2P, so that causal work is equal).
LAYOUTS = _LAYOUTS

__all__ = [
    "LAYOUTS",
    "ring_attention",
    "split_sequence",
    "join_shards",
    "shard_chunks",
    "shard_positions",
    "ring_plan",
    "tile_counts",
    "score_counts",
    "Tile",
    "RingStats",
    "ulysses_attention",
    "UlyssesStats",
    "launch",
    "compare_with_dense",
    "compare_ulysses_with_dense",
    "compare_rotary_with_dense",
    "compare_with_pytorch_context_parallel",
    "time_overlap",
    "OverlapTimes",
    "SlowLink",
    "dense_reference",
    "peak_memory_bytes",
    "main",
]
