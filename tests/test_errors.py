"""Bad input raises ValueError/TypeError whose message names the argument and the shapes,
in both backends, with the same words."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import _checks
from attnlib import numpy as anp
from attnlib import torch as atorch

F64, F32 = np.float64, np.float32  # the torch layers are float32


def arrays(backend, *shapes, dtype=F64):
    """Zeros of the given shapes, as arrays or as tensors."""
    made = [np.zeros(s, dtype=dtype) for s in shapes]
    return made if backend is anp else [torch.from_numpy(a) for a in made]


def mask_of(backend, shape, dtype=bool):
    m = np.ones(shape, dtype=dtype)
    return m if backend is anp else torch.from_numpy(m)


BACKENDS = pytest.mark.parametrize("b", [anp, atorch], ids=["numpy", "torch"])


def qkv(b, length=4, d=3):
    return arrays(b, (length, d), (length, d), (length, d))


#: Scalars and flags, checked like arrays (the code review of 2026-11-28, §3): a string or a
#: bool is not a scale, a string is not a flag ("False" would read as true), eps must be
#: positive, a float mask cannot meet the causal mask, edges are integers, an axis exists.
SCALARS_AND_FLAGS = [
    (
        lambda b: b.attention(*qkv(b), scale="2"),
        TypeError,
        ["attention", "scale must be a positive real number", "str '2'"],
    ),
    (lambda b: b.attention(*qkv(b), scale=True), TypeError, ["attention", "scale", "bool"]),
    (
        lambda b: b.attention(*qkv(b), scale=float("nan")),
        ValueError,
        ["attention", "scale must be finite and above 0", "scale=nan"],
    ),
    (lambda b: b.attention(*qkv(b), scale=0), ValueError, ["attention", "scale=0"]),
    (lambda b: b.dot_product_scores(*qkv(b)[:2], scale=-1.0), ValueError, ["scale=-1.0"]),
    (lambda b: b.tiled_attention(*qkv(b), scale="2"), TypeError, ["tiled_attention", "scale"]),
    (
        lambda b: b.truncated_attention(*qkv(b), 1, scale=float("inf")),
        ValueError,
        ["truncated_attention", "scale=inf"],
    ),
    (
        lambda b: b.low_rank_attention(*qkv(b), *arrays(b, (2, 4)), scale="1"),
        TypeError,
        ["low_rank_attention", "scale"],
    ),
    (
        lambda b: b.tiled_attention(*qkv(b), causal="False"),
        TypeError,
        ["tiled_attention", "causal must be True or False", "str 'False'"],
    ),
    (
        lambda b: b.truncated_attention(*qkv(b), 1, causal="False"),
        TypeError,
        ["truncated_attention", "causal must be True or False", "str 'False'"],
    ),
    (
        lambda b: b.linear_attention(*qkv(b), causal=1),
        TypeError,
        ["linear_attention", "causal must be True or False", "int 1"],
    ),
    (
        lambda b: b.attention(*qkv(b), need_weights="no"),
        TypeError,
        ["attention", "need_weights must be True or False"],
    ),
    (
        lambda b: b.graph_mask([(0, 1)], 3, directed="yes"),
        TypeError,
        ["graph_mask", "directed must be True or False"],
    ),
    (
        lambda b: b.graph_mask([(0, 1)], 3, self_loops=0),
        TypeError,
        ["graph_mask", "self_loops must be True or False"],
    ),
    (
        lambda b: b.graph_mask([(0.5, 1.7)], 3),
        TypeError,
        ["graph_mask", "edges must be integer node indices", "float64"],
    ),
    (
        lambda b: b.softmax(*arrays(b, (3,)), axis=5),
        ValueError,
        ["softmax", "axis=5 is out of range", "x.shape=(3,)"],
    ),
    (
        lambda b: b.softmax(*arrays(b, (3,)), axis=0.0),
        TypeError,
        ["softmax", "axis must be an int"],
    ),
    (lambda b: b.LayerNorm(4, eps=-1), ValueError, ["LayerNorm", "eps must be finite and above 0"]),
    (lambda b: b.LayerNorm(4, eps="1e-5"), TypeError, ["LayerNorm", "eps must be a positive real"]),
    (
        lambda b: b.MultiHeadAttention(4, 2, bias="False"),
        TypeError,
        ["MultiHeadAttention", "bias must be True or False"],
    ),
    (
        lambda b: b.MultiHeadAttention(4, 2)(*arrays(b, (3, 4), dtype=F32), need_weights=None),
        TypeError,
        ["MultiHeadAttention", "need_weights must be True or False"],
    ),
    (
        lambda b: b.TransformerEncoderBlock(4, 2, 8, norm_first="True"),
        TypeError,
        ["TransformerEncoderBlock", "norm_first must be True or False"],
    ),
    (
        lambda b: b.TransformerDecoderBlock(4, 2, 8)(
            *arrays(b, (3, 4), (2, 4), dtype=F32), causal="False"
        ),
        TypeError,
        ["TransformerDecoderBlock", "causal must be True or False"],
    ),
    (
        lambda b: b.TransformerDecoderBlock(4, 2, 8)(
            *arrays(b, (3, 4), (2, 4), dtype=F32), mask=mask_of(b, (3, 3), F64)
        ),
        TypeError,
        ["TransformerDecoderBlock", "mask must be boolean", "float64"],
    ),
    (
        lambda b: b.sinusoidal_positional_encoding(4, 6, base=0.0),
        ValueError,
        ["sinusoidal_positional_encoding", "base must be finite and above 0"],
    ),
]


@BACKENDS
@pytest.mark.parametrize(
    "call, error, words",
    [
        (
            lambda b: b.attention(*arrays(b, (2, 5, 8), (2, 5, 4), (2, 5, 4))),
            ValueError,
            ["attention", "same last dimension d_k", "q.shape=(2, 5, 8)", "k.shape=(2, 5, 4)"],
        ),
        (
            lambda b: b.attention(*arrays(b, (5, 4), (6, 4), (5, 3))),
            ValueError,
            ["attention", "v must have one row per key (L_k=6)", "v.shape=(5, 3)"],
        ),
        (
            lambda b: b.attention(*arrays(b, (3, 5, 4), (2, 5, 4), (2, 5, 4))),
            ValueError,
            ["attention", "batch dimensions", "q.shape=(3, 5, 4)"],
        ),
        (
            lambda b: b.attention(*arrays(b, (4,), (4,), (4,))),
            ValueError,
            ["attention", "q must have shape (..., L_q, d_k)", "q.shape=(4,)"],
        ),
        (
            lambda b: b.attention(*arrays(b, (5, 4), (5, 4), (5, 4), dtype=np.int64)),
            TypeError,
            ["attention", "q must be a floating-point array", "int64"],
        ),
        (
            lambda b: b.attention(*arrays(b, (5, 4), (6, 4), (6, 4)), mask=mask_of(b, (6, 6))),
            ValueError,
            ["attention", "mask.shape=(6, 6)", "(5, 6) = (..., L_q, L_k)"],
        ),
        (
            lambda b: b.attention(*arrays(b, (5, 4), (5, 4), (5, 4)), mask=mask_of(b, (5, 5), F64)),
            TypeError,
            ["attention", "mask must be boolean", "float64"],
        ),
        (
            lambda b: b.softmax(*arrays(b, (3,), dtype=np.int64)),
            TypeError,
            ["softmax", "x must be a floating-point array"],
        ),
        (
            lambda b: b.softmax(*arrays(b, (2, 3)), mask=mask_of(b, (3, 3))),
            ValueError,
            ["softmax", "mask.shape=(3, 3)", "(2, 3)"],
        ),
        (
            lambda b: b.dot_product_scores(*arrays(b, (2, 3), (2, 4))),
            ValueError,
            ["dot_product_scores", "q.shape=(2, 3)", "k.shape=(2, 4)"],
        ),
        (
            lambda b: b.additive_scores(*arrays(b, (2, 3), (4, 5), (3, 6), (4, 6), (6,))),
            ValueError,
            ["additive_scores", "w_k must have shape (5, 6)", "w_k.shape=(4, 6)"],
        ),
        (
            lambda b: b.causal_mask(0),
            ValueError,
            ["causal_mask", "length must be >= 1", "length=0"],
        ),
        (lambda b: b.causal_mask(2.5), TypeError, ["causal_mask", "length must be an int", "2.5"]),
        (
            lambda b: b.window_mask(5, -1),
            ValueError,
            ["window_mask", "window must be >= 0", "window=-1"],
        ),
        (
            lambda b: b.padding_mask([2, 7], max_len=5),
            ValueError,
            ["padding_mask", "[0, max_len=5]", "lengths=[2, 7]"],
        ),
        (
            lambda b: b.padding_mask([[2, 3]]),
            TypeError,
            ["padding_mask", "lengths must be a 1-D array of ints", "(1, 2)"],
        ),
        (lambda b: b.padding_mask([1.5, 2.0]), TypeError, ["padding_mask", "lengths", "float"]),
        (lambda b: b.graph_mask([(0, 3)], 3), ValueError, ["graph_mask", "[0, 3)", "from 0 to 3"]),
        (lambda b: b.graph_mask([(0, 1, 2)], 3), ValueError, ["graph_mask", "(E, 2)", "(1, 3)"]),
        (
            lambda b: b.sinusoidal_positional_encoding(0, 4),
            ValueError,
            ["sinusoidal_positional_encoding", "length must be >= 1"],
        ),
        (
            lambda b: b.sinusoidal_positional_encoding(4, 3.0),
            TypeError,
            ["sinusoidal_positional_encoding", "d_model must be an int"],
        ),
        (lambda b: b.SelfAttention(4, d_k=0), ValueError, ["SelfAttention", "d_k must be >= 1"]),
        (
            lambda b: b.segment_means(0, 1),
            ValueError,
            ["segment_means", "length must be >= 1", "length=0"],
        ),
        (
            lambda b: b.LowRankSelfAttention(4, max_len=0, rank=1),
            ValueError,
            ["LowRankSelfAttention", "max_len must be >= 1", "max_len=0"],
        ),
        (
            lambda b: b.LowRankSelfAttention(4, max_len=4, rank=5),
            ValueError,
            ["LowRankSelfAttention", "rank=5 must not exceed the number of tokens, 4"],
        ),
        (
            lambda b: b.SelfAttention(4)(*arrays(b, (2, 5, 3))),
            ValueError,
            ["SelfAttention", "(..., L, d_model=4)", "x.shape=(2, 5, 3)"],
        ),
    ]
    + SCALARS_AND_FLAGS,
)
def test_bad_input_gets_a_clear_error(b, call, error, words):
    with pytest.raises(error) as caught:
        call(b)
    message = str(caught.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: atorch.attention(np.zeros((2, 3)), torch.zeros(2, 3), torch.zeros(2, 3)), "q"),
        (
            lambda: atorch.attention(
                torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), mask=np.ones((2, 2), bool)
            ),
            "mask",
        ),
        (lambda: atorch.softmax([1.0, 2.0]), "x"),
        (lambda: atorch.SelfAttention(3)(np.zeros((2, 3))), "x"),
    ],
)
def test_torch_backend_refuses_non_tensors(call, name):
    with pytest.raises(TypeError, match=f"{name} must be a torch.Tensor; got"):
        call()


def test_numpy_backend_refuses_non_numbers():
    with pytest.raises(TypeError, match="q must be an array of numbers"):
        anp.attention([["a"]], [[1.0]], [[1.0]])


def test_plot_heatmap_checks_labels():
    from attnlib import plot

    with pytest.raises(ValueError, match="row_labels has 2 labels for 3 entries"):
        plot.heatmap(np.zeros((3, 3)), row_labels=["a", "b"])
    with pytest.raises(ValueError, match="matrix must be 2-d"):
        plot.heatmap(np.zeros(3))


T32, T64 = torch.float32, torch.float64


def tensors(*dtypes, shape=(5, 4)):
    """Zero tensors of ``shape``, one of each dtype."""
    return [torch.zeros(shape, dtype=dtype) for dtype in dtypes]


@pytest.mark.parametrize(
    "call, words",
    [
        (
            lambda: atorch.attention(*tensors(T32, T64, T32)),
            [
                "attention: q, k and v must have the same dtype",
                "got q float32, k float64, v float32",
            ],
        ),
        (
            lambda: atorch.attention(*tensors(T32, T32, T64), need_weights=False),
            ["attention: q, k and v must have the same dtype", "v float64"],
        ),
        (
            lambda: atorch.attention(*tensors(T64, T32, T32), atorch.causal_mask(5)),
            ["attention: q, k and v must have the same dtype", "q float64, k float32, v float32"],
        ),
        (
            lambda: atorch.tiled_attention(*tensors(T32, T32, T64), block_q=2),
            ["tiled_attention: q, k and v must have the same dtype", "v float64"],
        ),
        (
            lambda: atorch.truncated_attention(*tensors(T32, T64, T32), window=1),
            ["truncated_attention: q, k and v must have the same dtype", "k float64"],
        ),
        (
            lambda: atorch.linear_attention(*tensors(T32, torch.float16, T32)),
            ["linear_attention: q, k and v must have the same dtype", "k float16"],
        ),
        (
            lambda: atorch.linear_attention_recurrent(*tensors(T64, T32, T32)),
            ["linear_attention_recurrent: q, k and v must have the same dtype", "q float64"],
        ),
        (
            lambda: atorch.low_rank_attention(*tensors(T32, T64, T32), atorch.segment_means(5, 2)),
            ["low_rank_attention: q, k and v must have the same dtype", "k float64"],
        ),
        (
            lambda: atorch.dot_product_scores(*tensors(T32, T64)),
            ["dot_product_scores: q and k must have the same dtype", "got q float32, k float64"],
        ),
        (
            lambda: atorch.additive_scores(
                *tensors(T32, T32), *tensors(T32, T64, shape=(4, 4)), torch.ones(4)
            ),
            [
                "additive_scores: q, k, w_q, w_k and w must have the same dtype",
                "w_q float32, w_k float64, w float32",
            ],
        ),
        (
            lambda: atorch.MultiHeadAttention(4, 2)(*tensors(T32, T64, T64)),
            ["MultiHeadAttention: query, key and value must have the same dtype", "key float64"],
        ),
        (
            lambda: atorch.TransformerDecoderBlock(4, 2, 8)(*tensors(T32, T64)),
            ["TransformerDecoderBlock", "must have the same dtype", "float32", "float64"],
        ),
        (
            lambda: atorch.low_rank_attention(
                *tensors(T32, T32, T32), atorch.segment_means(5, 2, dtype=T64)
            ),
            ["low_rank_attention: k, projection_k and projection_v must have the same dtype"],
        ),
        (
            lambda: atorch.SelfAttention(4)(*tensors(T64)),
            ["SelfAttention: x is float64 but the layer's parameters are float32", "x.to("],
        ),
        (
            lambda: atorch.LowRankSelfAttention(4, max_len=5, rank=2)(*tensors(T64)),
            ["LowRankSelfAttention: x is float64 but the layer's parameters are float32"],
        ),
        (
            lambda: atorch.MultiHeadAttention(4, 2)(*tensors(T64)),
            ["MultiHeadAttention: query is float64 but the layer's parameters are float32"],
        ),
        (
            lambda: atorch.LayerNorm(4)(*tensors(T64)),
            ["LayerNorm: x is float64 but the layer's parameters are float32"],
        ),
        (
            lambda: atorch.FeedForward(4, 8)(*tensors(T64)),
            ["FeedForward: x is float64 but the layer's parameters are float32"],
        ),
        (
            lambda: atorch.TransformerEncoderBlock(4, 2, 8)(*tensors(T64)),
            ["TransformerEncoderBlock: x is float64 but the layer's parameters are float32"],
        ),
        (
            lambda: atorch.TransformerDecoderBlock(4, 2, 8)(*tensors(T64, T64)),
            ["TransformerDecoderBlock: x is float64 but the layer's parameters are float32"],
        ),
    ],
)
def test_torch_backend_refuses_mixed_float_dtypes(call, words):
    """PyTorch does not promote q @ k.mT across dtypes: it would raise its own RuntimeError,
    which names neither the function nor the arguments."""
    with pytest.raises(TypeError) as caught:
        call()
    message = str(caught.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


@pytest.mark.parametrize(
    "call",
    [
        lambda q, k, v: anp.attention(q, k, v)[0],
        lambda q, k, v: anp.tiled_attention(q, k, v, block_q=2),
        lambda q, k, v: anp.truncated_attention(q, k, v, window=1),
        lambda q, k, v: anp.linear_attention(q, k, v),
        lambda q, k, v: anp.MultiHeadAttention(4, 2)(q, k, v)[0],
    ],
)
def test_numpy_backend_promotes_mixed_float_dtypes(call):
    q, k, v = (np.ones((5, 4), dtype) for dtype in (np.float32, np.float64, np.float32))
    assert call(q, k, v).dtype == np.float64  # as NumPy itself does


def test_a_boolean_mask_does_not_count_as_a_dtype_of_its_own():
    q, k, v = tensors(T64, T64, T64)
    out, _ = atorch.attention(q, k, v, mask=atorch.causal_mask(5))
    assert out.dtype == T64


def test_check_rank_names_the_length_as_its_caller_says():
    with pytest.raises(ValueError, match="num_tokens must be >= 1; got num_tokens=0"):
        _checks.check_rank("f", "num_tokens", 0, 1)
