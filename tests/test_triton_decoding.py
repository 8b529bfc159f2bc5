"""attnlib.triton serving a decoder, in Triton's interpreter: grouped-query attention (fewer key
heads than query heads, as ``enable_gqa=True``), the causal mask aligned at the bottom right
(new queries against a cache of keys), the log-sum-exp returned, and Flash-Decoding
(``flash_decode``: one query per sequence, the keys split into chunks whose results are merged),
each against dense attention, gradients included where they exist, at lengths that fill no
block and with scores of magnitude 30 and more (where a kernel without its running maximum
overflows)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_edge_cases import relative_error
from test_triton import FLOAT32, inputs, needs_interpreter, output_and_grads

from attnlib import torch as atorch
from attnlib import triton as atriton


def gqa_inputs(batch, heads, heads_kv, len_q, len_k, d=16, seed=0, logits=1.0):
    """q ``(B, H_q, L_q, d)``, k and v ``(B, H_kv, L_k, d)`` and an upstream gradient; q and k
    multiplied by ``logits`` (large values give scores far beyond e^s's float32 range)."""
    generator = torch.Generator().manual_seed(seed)
    q = logits * torch.randn(batch, heads, len_q, d, generator=generator)
    k = logits * torch.randn(batch, heads_kv, len_k, d, generator=generator)
    v = torch.randn(batch, heads_kv, len_k, d, generator=generator)
    return q, k, v, torch.randn(batch, heads, len_q, d, generator=generator)


def lower_right_mask(len_q: int, len_k: int) -> torch.Tensor:
    """Query i sees keys j <= i + L_k - L_q: the queries are the last L_q positions."""
    return torch.ones(len_q, len_k, dtype=torch.bool).tril(diagonal=len_k - len_q)


def dense(q, k, v, mask=None):
    """attnlib's dense attention in float64, key heads repeated for GQA (zeros for a row
    with no key)."""
    group = q.shape[1] // k.shape[1]
    k, v = (x.repeat_interleave(group, dim=1) for x in (k, v))
    return atorch.attention(q.double(), k.double(), v.double(), mask)[0]


@needs_interpreter
@pytest.mark.parametrize("heads, heads_kv", [(4, 2), (4, 1), (3, 3)])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_equals_sdpa_with_enable_gqa_and_its_gradients(heads, heads_kv, causal):
    q, k, v, upstream = gqa_inputs(2, heads, heads_kv, 37, 37, seed=heads + heads_kv)
    settings = {"causal": causal, "block_q": 16, "block_k": 16}
    got, grads = output_and_grads(
        lambda *x: atriton.flash_attention(*x, **settings), q, k, v, upstream
    )

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    expected, expected_grads = output_and_grads(sdpa, q, k, v, upstream)
    assert grads[1].shape == k.shape  # the key heads' gradients, summed over their groups
    torch.testing.assert_close(got, expected, **FLOAT32)
    for name, g, e in zip("qkv", grads, expected_grads):
        torch.testing.assert_close(g, e, **FLOAT32, msg=f"gradient of {name}")


@needs_interpreter
@pytest.mark.parametrize("len_q, len_k", [(9, 40), (40, 40), (40, 9), (1, 33)])
def test_lower_right_alignment_equals_the_mask_it_names(len_q, len_k):
    """j <= i + L_k - L_q, with large logits; rows that see no key (L_q > L_k) get zeros and
    zero gradients, and where L_q <= L_k the result is SDPA's with causal_lower_right."""
    q, k, v, upstream = gqa_inputs(1, 4, 2, len_q, len_k, seed=len_q, logits=6.0)
    settings = {"causal": True, "causal_alignment": "lower_right", "block_q": 16, "block_k": 16}
    call = lambda *x: atriton.flash_attention(*x, **settings)  # noqa: E731
    got, grads = output_and_grads(call, q, k, v, upstream)
    mask = lower_right_mask(len_q, len_k)
    exact = [x.double() for x in (q, k, v, upstream)]
    expected, expected_grads = output_and_grads(lambda *x: dense(*x, mask), *exact)
    assert (q.double() @ k.double().repeat_interleave(2, 1).mT / 4).abs().max() > 30
    assert relative_error(got, expected) < 5e-5
    for g, e in zip(grads, expected_grads):
        assert g.isfinite().all() and relative_error(g, e) < 1e-3
    empty = ~mask.any(-1)  # rows with no key
    assert not got[:, :, empty].any() and not grads[0][:, :, empty].any()
    if len_q <= len_k:
        from torch.nn.attention.bias import causal_lower_right

        bias = causal_lower_right(len_q, len_k)
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
        torch.testing.assert_close(got, sdpa, **FLOAT32)


@needs_interpreter
@pytest.mark.parametrize("alignment", ["upper_left", "lower_right"])
def test_return_lse_is_the_natural_log_sum_exp(alignment):
    q, k, v, _ = gqa_inputs(2, 2, 1, 20, 13, seed=3)
    out, lse = atriton.flash_attention(
        q, k, v, causal=True, causal_alignment=alignment, return_lse=True, block_q=16, block_k=16
    )
    mask = lower_right_mask(20, 13) if alignment == "lower_right" else torch.ones(20, 13).tril() > 0
    scores = (q.double() @ k.double().repeat_interleave(2, 1).mT / 4).masked_fill(~mask, -math.inf)
    assert lse.shape == (2, 2, 20) and not lse.requires_grad
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(
        out,
        atriton.flash_attention(
            q, k, v, causal=True, causal_alignment=alignment, block_q=16, block_k=16
        ),
    )


def test_merge_partials_is_attention_over_all_the_keys():
    """Attention over 30 keys, computed in parts of 7, 0, 13 and 10 keys, merged."""
    generator = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(3, n, 8, generator=generator, dtype=torch.float64) for n in (1, 30, 30))
    outs, lses = [], []
    for start, stop in [(0, 7), (7, 7), (7, 20), (20, 30)]:
        scores = q @ k[:, start:stop].mT
        outs.append(
            torch.softmax(scores, -1) @ v[:, start:stop]
            if stop > start
            else torch.zeros(3, 1, 8, dtype=torch.float64)
        )
        lses.append(torch.logsumexp(scores, -1))
    out, lse = atriton.merge_partials(torch.stack(outs, -2), torch.stack(lses, -1))
    torch.testing.assert_close(out, torch.softmax(q @ k.mT, -1) @ v)
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.mT, -1))
    nothing, lse = atriton.merge_partials(torch.zeros(2, 3, 8), torch.full((2, 3), -math.inf))
    assert not nothing.any() and (lse == -math.inf).all()


@needs_interpreter
@pytest.mark.parametrize("splits", [1, 3, 50])
@pytest.mark.parametrize("heads, heads_kv", [(4, 2), (8, 1), (2, 2)])
def test_flash_decode_equals_attention_over_each_cache(splits, heads, heads_kv):
    """Four sequences whose caches hold 100, 37, 1 and 0 of 100 keys (the others ignored),
    scores beyond 30 in magnitude: each query's output and log-sum-exp equal dense attention's
    over its own keys, whatever the number of chunks (50 asks for more chunks than tiles)."""
    q, k, v, _ = gqa_inputs(4, heads, heads_kv, 1, 100, seed=splits + heads, logits=6.0)
    lengths = torch.tensor([100, 37, 1, 0])
    out, lse = atriton.flash_decode(
        q, k, v, lengths=lengths, splits=splits, return_lse=True, block_k=16
    )
    assert out.shape == q.shape and lse.shape == (4, heads, 1)
    for b, n in enumerate(lengths.tolist()):
        expected = dense(q[b : b + 1], k[b : b + 1, :, :n], v[b : b + 1, :, :n])
        assert relative_error(out[b : b + 1], expected) < 5e-5 if n else not out[b].any()
        scores = q[b].double() @ k[b, :, :n].double().repeat_interleave(heads // heads_kv, 0).mT / 4
        if n > 1:
            assert scores.abs().max() > 30
        torch.testing.assert_close(
            lse[b].double(), torch.logsumexp(scores, -1), rtol=1e-6, atol=1e-5
        )


@needs_interpreter
def test_flash_decode_equals_flash_attentions_last_row():
    """A generation step: the newest token's query against the whole cache is the last row of
    causal attention over the sequence (lower right, or L_q = 1)."""
    q, k, v, _ = gqa_inputs(2, 4, 2, 1, 45, seed=9)
    decoded = atriton.flash_decode(q, k, v, splits=2, block_k=16)
    full = atriton.flash_attention(q, k, v, causal=True, causal_alignment="lower_right")
    torch.testing.assert_close(decoded, full, **FLOAT32)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"causal_alignment": "bottom_right"}, ValueError, "causal_alignment must be one of"),
        ({"return_lse": "yes"}, TypeError, "return_lse must be True or False"),
    ],
)
def test_bad_settings_get_an_error_naming_them(kwargs, error, message):
    q, k, v, _ = inputs((1, 2, 20, 16), 20)
    with pytest.raises(error, match=f"^flash_attention: {message}"):
        atriton.flash_attention(q, k, v, **kwargs)


def test_flash_decode_refuses_what_it_cannot_serve():
    q, k, v, _ = gqa_inputs(2, 4, 2, 1, 10)
    with pytest.raises(ValueError, match=r"^flash_decode: q must hold one query .*\(2, 4, 3, 16\)"):
        atriton.flash_decode(torch.zeros(2, 4, 3, 16), k, v)
    with pytest.raises(ValueError, match=r"^flash_decode: lengths must lie in 0 … L_k = 10"):
        atriton.flash_decode(q, k, v, lengths=torch.tensor([3, 11]))
    with pytest.raises(ValueError, match=r"^flash_decode: lengths must have shape \(B,\) = \(2,\)"):
        atriton.flash_decode(q, k, v, lengths=torch.tensor([3]))
    with pytest.raises(TypeError, match="^flash_decode: lengths must be a tensor of integers"):
        atriton.flash_decode(q, k, v, lengths=torch.tensor([3.0, 4.0]))
    with pytest.raises(ValueError, match=r"^flash_decode: k's heads H_kv must divide q's heads"):
        atriton.flash_decode(q, k[:, :1].expand(2, 3, 10, 16), v[:, :1].expand(2, 3, 10, 16))
