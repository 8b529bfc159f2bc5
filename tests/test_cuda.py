"""The PyTorch backend on a CUDA GPU gives what it gives on the CPU: tiled and truncated
attention equal dense attention (gradients too), the layers equal PyTorch's own, and no public
call makes the host wait for the device (values on a GPU are not scanned for NaN).

attnlib.triton's FlashAttention kernels, compiled: equal to dense attention (gradients too) in
float32, within rounding in float16 and bfloat16, in memory linear in the length.

Skipped where there is no CUDA GPU (CI has none). On a machine with one:
``pytest -m cuda tests``."""

from __future__ import annotations

import importlib.util
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_edge_cases import relative_error
from test_tiled import MASK_KINDS, masks

from attnlib import torch as atorch
from attnlib import triton as atriton

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
CUDA = torch.device("cuda")
EXACT = {"rtol": 1e-10, "atol": 1e-10}  # float64 on both devices
FLOAT32 = {"rtol": 2e-5, "atol": 2e-5}


def output_and_gradient_errors(got, grads, expected, expected_grads) -> dict[str, float]:
    """``relative_error`` of an output and of the gradients of q, k and v, by name."""
    errors = {"output": relative_error(got, expected)}
    for name, g, e in zip("qkv", grads, expected_grads):
        errors[f"gradient of {name}"] = relative_error(g, e)
    return errors


def on_cuda(*tensors):
    """Copies on the GPU that keep their ``requires_grad``."""
    return [
        None if t is None else t.detach().to(CUDA).requires_grad_(t.requires_grad) for t in tensors
    ]


@pytest.mark.parametrize("blocks", [{"block_q": 8, "block_k": 6}, {}], ids=["8x6", "default"])
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_tiled_on_cuda_equals_attention_on_cpu(kind, blocks):
    rng = np.random.default_rng(20 + MASK_KINDS.index(kind))
    mask = masks(rng)[kind]
    mask = None if mask is None else torch.from_numpy(mask[:, None] if mask.ndim == 3 else mask)
    q, k, v = (
        torch.from_numpy(rng.standard_normal(shape)).requires_grad_(True)
        for shape in [(2, 3, 37, 8), (2, 1, 29, 8), (2, 3, 29, 5)]  # k shared by the heads
    )
    upstream = torch.from_numpy(rng.standard_normal((2, 3, 37, 5)))
    expected = atorch.attention(q, k, v, mask)[0]
    expected_grads = torch.autograd.grad(expected, (q, k, v), upstream)

    q_c, k_c, v_c, mask_c, upstream_c = on_cuda(q, k, v, mask, upstream)
    got = atorch.tiled_attention(q_c, k_c, v_c, mask_c, **blocks)
    assert got.device.type == "cuda"
    torch.testing.assert_close(got.cpu(), expected.detach(), **EXACT)
    grads = torch.autograd.grad(got, (q_c, k_c, v_c), upstream_c)
    for name, a, b in zip("qkv", expected_grads, grads):
        torch.testing.assert_close(b.cpu(), a, **EXACT, msg=f"gradient of {name}")
    if kind == "fully masked rows":
        assert (got[:, :, [0, 5, 36]] == 0).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [3, 32, 100])
def test_truncated_on_cuda_equals_dense_window_attention(window, causal):
    torch.manual_seed(window)
    length = 300
    q, k, v = (
        torch.randn(2, 2, length, 16, dtype=torch.float64, requires_grad=True) for _ in "qkv"
    )
    upstream = torch.randn(2, 2, length, 16, dtype=torch.float64)
    mask = atorch.window_mask(length, window)
    if causal:
        mask = mask & atorch.causal_mask(length)
    expected = atorch.attention(q, k, v, mask)[0]
    expected_grads = torch.autograd.grad(expected, (q, k, v), upstream)

    q_c, k_c, v_c, upstream_c = on_cuda(q, k, v, upstream)
    got = atorch.truncated_attention(q_c, k_c, v_c, window, causal=causal)
    torch.testing.assert_close(got.cpu(), expected.detach(), **EXACT)
    grads = torch.autograd.grad(got, (q_c, k_c, v_c), upstream_c)
    for name, a, b in zip("qkv", expected_grads, grads):
        torch.testing.assert_close(b.cpu(), a, **EXACT, msg=f"gradient of {name}")


@pytest.mark.parametrize(
    "dtype, tolerance", [(torch.float16, 7e-4), (torch.bfloat16, 6e-3)], ids=["fp16", "bf16"]
)
@pytest.mark.parametrize("kind", ["tiled", "tiled causal", "band", "band causal"])
def test_half_precision_on_cuda_stays_within_rounding(kind, dtype, tolerance):
    """tests/test_edge_cases.py's half-precision test on the GPU, with its default blocks (at
    L = 4096, key tiles of 1024) and the band's GPU plan (all sequences at once): output and
    gradients within the rounding of float64 dense attention on the same inputs."""
    if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    torch.manual_seed(0)
    length, window, causal = 4096, 100, "causal" in kind
    q, k, v, upstream = (torch.randn(2, 2, length, 64, device=CUDA).to(dtype) for _ in range(4))
    half = [x.requires_grad_(True) for x in (q, k, v)]
    mask = atorch.causal_mask(length, device=CUDA) if causal else None
    if kind.startswith("band"):
        got = atorch.truncated_attention(*half, window, causal=causal)
        band = atorch.window_mask(length, window, device=CUDA)
        mask = band & mask if causal else band
    else:
        got = atorch.tiled_attention(*half, mask)
    grads = torch.autograd.grad(got, half, upstream)
    exact = [x.detach().double().requires_grad_(True) for x in (q, k, v)]
    expected = atorch.attention(*exact, mask)[0]
    expected_grads = torch.autograd.grad(expected, exact, upstream.double())
    assert got.dtype == dtype and all(g.dtype == dtype for g in grads)
    errors = output_and_gradient_errors(got, grads, expected, expected_grads)
    assert max(errors.values()) < tolerance, errors


def test_float32_kernels_on_cuda_agree_with_scaled_dot_product_attention():
    """At the bench's size: the library's dense, tiled and band attention against PyTorch's
    fused kernel, in float32 on the GPU (TF32 off, PyTorch's default for float32 products)."""
    assert not torch.backends.cuda.matmul.allow_tf32
    torch.manual_seed(0)
    length, window = 4096, 64
    q, k, v = (torch.randn(1, 4, length, 64, device=CUDA) for _ in "qkv")
    band = atorch.window_mask(length, window, device=CUDA)
    reference = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(
        atorch.attention(q, k, v, need_weights=False)[0], reference, **FLOAT32
    )
    torch.testing.assert_close(atorch.tiled_attention(q, k, v), reference, **FLOAT32)
    torch.testing.assert_close(
        atorch.truncated_attention(q, k, v, window),
        F.scaled_dot_product_attention(q, k, v, attn_mask=band),
        **FLOAT32,
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_on_cuda_equals_torch_layer(norm_first):
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(
        64, 4, 128, dropout=0.0, batch_first=True, norm_first=norm_first, device=CUDA
    ).eval()
    x = torch.randn(3, 50, 64, device=CUDA)
    padding = torch.arange(50, device=CUDA) >= torch.tensor([50, 31, 7], device=CUDA)[:, None]
    block = atorch.TransformerEncoderBlock.from_torch(layer)
    assert block.self_attention.w_q.device.type == "cuda"
    expected = layer(x, src_key_padding_mask=padding)
    got, _ = block(x, mask=~padding[:, None, :], need_weights=False)
    keep = ~padding  # PyTorch's fast path may leave padded rows undefined
    torch.testing.assert_close(got[keep], expected[keep], **FLOAT32)


def test_multihead_on_cuda_equals_torch_module():
    torch.manual_seed(2)
    module = torch.nn.MultiheadAttention(64, 8, batch_first=True, device=CUDA)
    x = torch.randn(2, 40, 64, device=CUDA)
    causal = atorch.causal_mask(40, device=CUDA)
    expected, expected_weights = module(x, x, x, attn_mask=~causal, average_attn_weights=False)
    got, weights = atorch.MultiHeadAttention.from_torch(module)(x, mask=causal)
    torch.testing.assert_close(got, expected, **FLOAT32)
    torch.testing.assert_close(weights, expected_weights, **FLOAT32)


def public_calls(device: torch.device) -> dict:
    """Every public entry point, by name, as a call on inputs that live on ``device``."""
    d, heads, length = 16, 2, 40
    x = torch.randn(2, length, d, device=device)
    memory = torch.randn(2, length + 3, d, device=device)
    mask = atorch.causal_mask(length, device=device)
    on = {"seed": 0, "device": device}
    layers = {
        "SelfAttention": atorch.SelfAttention(d, **on),
        "MultiHeadAttention": atorch.MultiHeadAttention(d, heads, **on),
        "LayerNorm": atorch.LayerNorm(d, device=device),
        "FeedForward": atorch.FeedForward(d, 32, **on),
        "encoder block": atorch.TransformerEncoderBlock(d, heads, 32, **on),
        "pre-norm encoder block": atorch.TransformerEncoderBlock(
            d, heads, 32, norm_first=True, **on
        ),
        "decoder block": atorch.TransformerDecoderBlock(d, heads, 32, **on),
    }
    return dict(
        [
            ("softmax", lambda: atorch.softmax(x)),
            ("attention", lambda: atorch.attention(x, x, x, mask)),
            ("attention, fused", lambda: atorch.attention(x, x, x, mask, need_weights=False)),
            (
                "tiled_attention",
                lambda: atorch.tiled_attention(x, x, x, mask, block_q=16, block_k=8),
            ),
            ("truncated_attention", lambda: atorch.truncated_attention(x, x, x, 5)),
            ("truncated_attention, causal", lambda: atorch.truncated_attention(x, x, x, 5, True)),
            ("SelfAttention", lambda: layers["SelfAttention"](x, mask)),
            ("MultiHeadAttention", lambda: layers["MultiHeadAttention"](x, mask=mask)),
            ("LayerNorm", lambda: layers["LayerNorm"](x)),
            ("FeedForward", lambda: layers["FeedForward"](x)),
            ("encoder block", lambda: layers["encoder block"](x, mask)),
            ("pre-norm encoder block", lambda: layers["pre-norm encoder block"](x)),
            ("decoder block", lambda: layers["decoder block"](x, memory)),
        ]
    )


def synchronisations(call) -> list[str]:
    """The host-device synchronisations that ``call()`` makes, as PyTorch's sync debug mode
    reports them."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    messages = [str(w.message) for w in seen]
    return [m.splitlines()[0] for m in messages if m.startswith("called a synchronizing")]


def test_sync_debug_mode_sees_a_read_back():
    """The test below can fail: reading one value back is a synchronisation it counts."""
    x = torch.ones(3, device=CUDA)
    assert len(synchronisations(lambda: bool(x.sum() > 0))) == 1


@pytest.mark.parametrize("name", list(public_calls(torch.device("cpu"))))
def test_a_public_call_never_makes_the_host_wait(name):
    call = public_calls(CUDA)[name]
    call()  # the first call makes the plans, and sends a band's tile masks to the GPU
    torch.cuda.synchronize()
    syncs = synchronisations(call)
    assert not syncs, f"{name}: {len(syncs)} synchronisations: {syncs}"


def test_nan_on_cuda_comes_out_as_nan_and_on_cpu_as_an_error():
    q = torch.randn(2, 6, 4)
    q[1, 2, 3] = math.nan
    with pytest.raises(ValueError, match=r"attention: q contains NaN.*index \(1, 2, 3\)"):
        atorch.attention(q, q, q)
    out, _ = atorch.attention(*on_cuda(q, q, q))
    assert out[1].isnan().all() and out[0].isfinite().all()


# --------------------------------------------------------------------------- Triton kernels


def compiled_triton() -> bool:
    """Whether this process runs attnlib.triton's kernels compiled for the GPU (triton is
    installed, and TRITON_INTERPRET was not 1 when it was imported)."""
    has_triton = importlib.util.find_spec("triton") is not None
    return torch.cuda.is_available() and has_triton and not atriton.interpreting()


needs_compiled_triton = pytest.mark.skipif(
    not compiled_triton(), reason="needs triton, compiled for the GPU in this process"
)


@needs_compiled_triton
@pytest.mark.parametrize("blocks", [(None, None), (16, 32)], ids=["default blocks", "16x32"])
@pytest.mark.parametrize(
    "len_q, len_k, d, causal",
    [
        (1, 1, 16, True),
        (100, 100, 32, False),
        (1000, 1000, 64, True),
        (300, 700, 128, True),
        (700, 300, 64, False),
        (1030, 1030, 128, False),
    ],
)
def test_flash_attention_compiled_equals_attention(len_q, len_k, d, causal, blocks):
    """float32 (products in full float32, not TF32): output and gradients within 2e-5 of
    float64 dense attention on the same inputs, causal or not, at lengths that fill no
    block, L_q ≠ L_k included (the causal mask aligned at the top left)."""
    torch.manual_seed(len_q + len_k + d)
    shapes = [(2, 3, len_q, d), (2, 3, len_k, d), (2, 3, len_k, d), (2, 3, len_q, d)]
    q, k, v, upstream = (torch.randn(s, dtype=torch.float64, device=CUDA) for s in shapes)
    mask = torch.ones(len_q, len_k, dtype=torch.bool, device=CUDA).tril() if causal else None
    exact = [x.clone().requires_grad_(True) for x in (q, k, v)]
    expected = atorch.attention(*exact, mask)[0]
    expected_grads = torch.autograd.grad(expected, exact, upstream)
    single = [x.float().requires_grad_(True) for x in (q, k, v)]
    block_q, block_k = blocks
    got = atriton.flash_attention(*single, causal=causal, block_q=block_q, block_k=block_k)
    assert got.device.type == "cuda" and got.dtype == torch.float32
    grads = torch.autograd.grad(got, single, upstream.float())
    torch.testing.assert_close(got.double(), expected.detach(), **FLOAT32)
    for name, a, b in zip("qkv", grads, expected_grads):
        torch.testing.assert_close(a.double(), b, **FLOAT32, msg=f"gradient of {name}")


@needs_compiled_triton
@pytest.mark.parametrize("len_q, len_k", [(300, 1000), (1000, 1000), (1000, 300)])
def test_grouped_query_and_lower_right_compiled_equal_attention(len_q, len_k):
    """8 query heads reading 2 key heads, the causal diagonal at the bottom right, float32:
    output and gradients within 2e-5 of float64 dense attention (zeros for rows with no key)."""
    torch.manual_seed(len_q + len_k)
    shapes = [(2, 8, len_q, 64), (2, 2, len_k, 64), (2, 2, len_k, 64), (2, 8, len_q, 64)]
    q, k, v, upstream = (torch.randn(s, dtype=torch.float64, device=CUDA) for s in shapes)
    mask = torch.ones(len_q, len_k, dtype=torch.bool, device=CUDA).tril(len_k - len_q)
    exact = [x.clone().requires_grad_(True) for x in (q, k, v)]
    repeated = [x.repeat_interleave(4, dim=1) for x in exact[1:]]
    expected = atorch.attention(exact[0], *repeated, mask)[0]
    expected_grads = torch.autograd.grad(expected, exact, upstream)
    single = [x.float().requires_grad_(True) for x in (q, k, v)]
    got = atriton.flash_attention(*single, causal=True, causal_alignment="lower_right")
    grads = torch.autograd.grad(got, single, upstream.float())
    torch.testing.assert_close(got.double(), expected.detach(), **FLOAT32)
    for name, a, b in zip("qkv", grads, expected_grads):
        torch.testing.assert_close(a.double(), b, **FLOAT32, msg=f"gradient of {name}")


@needs_compiled_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_flash_decode_compiled_equals_attention_over_each_cache(dtype):
    """One query per sequence and head (32 query heads, 8 key heads) against caches of 8,192,
    3,000, 1 and 0 keys, chunks run in parallel and merged: within rounding of float64
    attention over each sequence's own keys."""
    torch.manual_seed(5)
    q = torch.randn(4, 32, 1, 128, device=CUDA)
    k, v = (torch.randn(4, 8, 8192, 128, device=CUDA) for _ in "kv")
    lengths = torch.tensor([8192, 3000, 1, 0], device=CUDA)
    q, k, v = (x.to(dtype) for x in (q, k, v))  # the reference gets the same rounded inputs
    got = atriton.flash_decode(q, k, v, lengths=lengths)
    tolerance = 2e-5 if dtype == torch.float32 else 2e-3
    for b, n in enumerate(lengths.tolist()):
        keys = [x[b : b + 1, :, :n].double().repeat_interleave(4, dim=1) for x in (k, v)]
        expected = atorch.attention(q[b : b + 1].double(), *keys)[0]
        torch.testing.assert_close(got[b : b + 1].double(), expected, rtol=0, atol=tolerance)


@needs_compiled_triton
@pytest.mark.parametrize(
    "dtype, tolerance", [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)], ids=["fp16", "bf16"]
)
@pytest.mark.parametrize("d, causal", [(64, False), (64, True), (128, True)])
def test_flash_attention_half_precision_on_cuda_stays_within_rounding(d, causal, dtype, tolerance):
    """float16 and bfloat16 at L = 4096: output and gradients in the inputs' dtype, within
    four units of rounding (2⁻¹¹, 2⁻⁸) of float64 dense attention on the same rounded inputs,
    relative to the largest entry (the kernels' state and sums are float32)."""
    if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    torch.manual_seed(d)
    length = 4096
    q, k, v, upstream = (torch.randn(1, 2, length, d, device=CUDA).to(dtype) for _ in range(4))
    half = [x.clone().requires_grad_(True) for x in (q, k, v)]
    got = atriton.flash_attention(*half, causal=causal)
    grads = torch.autograd.grad(got, half, upstream)
    exact = [x.double().requires_grad_(True) for x in (q, k, v)]
    mask = atorch.causal_mask(length, device=CUDA) if causal else None
    expected = atorch.attention(*exact, mask)[0]
    expected_grads = torch.autograd.grad(expected, exact, upstream.double())
    assert got.dtype == dtype and all(g.dtype == dtype for g in grads)
    errors = output_and_gradient_errors(got, grads, expected, expected_grads)
    assert max(errors.values()) < tolerance, errors


@needs_compiled_triton
def test_flash_attention_holds_no_square_matrix_and_makes_the_host_wait_nowhere():
    """One head at L = 16384 in float16: forward+backward adds less than 1/16 of one L×L
    float16 matrix (32 MiB of 512) to the inputs; and a call, once compiled, makes no
    host-device synchronisation."""
    length = 16384
    q, k, v, upstream = (
        torch.randn(1, 1, length, 64, device=CUDA, dtype=torch.float16) for _ in range(4)
    )
    leaves = [x.requires_grad_(True) for x in (q, k, v)]

    def forward_backward():
        return torch.autograd.grad(atriton.flash_attention(*leaves), leaves, upstream)

    forward_backward()  # compiles the kernels
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    forward_backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    assert 0 < peak < length * length * 2 / 16, peak

    def causal():
        return atriton.flash_attention(q, k, v, causal=True)

    causal()  # compiles the causal kernel
    torch.cuda.synchronize()
    assert not synchronisations(causal)
