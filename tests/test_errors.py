"""Bad input raises ValueError/TypeError whose message names the argument and the shapes,
in both backends, with the same words."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import numpy as anp
from attnlib import torch as atorch

F64 = np.float64


def arrays(backend, *shapes, dtype=F64):
    """Zeros of the given shapes, as arrays or as tensors."""
    made = [np.zeros(s, dtype=dtype) for s in shapes]
    return made if backend is anp else [torch.from_numpy(a) for a in made]


def mask_of(backend, shape, dtype=bool):
    m = np.ones(shape, dtype=dtype)
    return m if backend is anp else torch.from_numpy(m)


BACKENDS = pytest.mark.parametrize("b", [anp, atorch], ids=["numpy", "torch"])


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
            lambda b: b.SelfAttention(4)(*arrays(b, (2, 5, 3))),
            ValueError,
            ["SelfAttention", "(..., L, d_model=4)", "x.shape=(2, 5, 3)"],
        ),
    ],
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
