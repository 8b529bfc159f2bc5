"""attnlib.decoder: rotary positions, the KV cache (full and windowed), generation, the
conversion to grouped-query attention, and the cache's bytes."""

import pytest
import torch
import torch.nn.functional as F

from attnlib import torch as tattn
from attnlib.decoder import (
    DecoderLM,
    KVCache,
    generate,
    kv_cache_bytes,
    pool_kv_heads,
    rotary,
    sink_window_mask,
)


def small_model(num_kv_heads=None, seed=0, dtype=torch.float64):
    model = DecoderLM(
        13, d_model=16, num_heads=4, num_layers=2, seed=seed, num_kv_heads=num_kv_heads
    )
    return model.to(dtype).eval()


def random_tokens(length, batch=1, seed=0):
    return torch.randint(0, 13, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_rotary_scores_depend_only_on_the_offset():
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 8, generator=generator, dtype=torch.float64)

    def score(p, s):
        return (rotary(q, torch.tensor([p])) @ rotary(k, torch.tensor([s])).T).item()

    assert score(7, 3) == pytest.approx(score(1007, 1003), abs=1e-9)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-3)
    assert torch.allclose(rotary(q, torch.tensor([0])), q)  # position 0: no rotation


def test_rotary_keeps_the_norm_and_refuses_an_odd_width():
    x = torch.randn(3, 5, 6, dtype=torch.float64)
    turned = rotary(x, torch.arange(5))
    assert torch.allclose(turned.norm(dim=-1), x.norm(dim=-1))
    with pytest.raises(ValueError, match="even last dimension"):
        rotary(torch.ones(2, 5), torch.arange(2))


def test_sink_window_mask_is_causal_windowed_and_keeps_the_sinks():
    mask = sink_window_mask(torch.arange(10), torch.arange(10), window=3, sinks=2)
    for i in range(10):
        for j in range(10):
            assert mask[i, j] == (j <= i and (i - j < 3 or j < 2))
    assert not sink_window_mask(torch.tensor([4]), torch.tensor([-1, 2]))[0, 0]  # empty slot


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_decoding_with_the_cache_equals_the_whole_forward_pass(num_kv_heads):
    model = small_model(num_kv_heads)
    tokens = random_tokens(30, batch=2)
    cache = model.new_cache(batch=2, capacity=30)
    with torch.no_grad():
        prefill = model(tokens[:, :12], cache)
        steps = [model(tokens[:, i : i + 1], cache) for i in range(12, 30)]
        whole = model(tokens)
    assert cache.length == 30
    assert cache.keys[0].shape == (2, num_kv_heads, 30, 4)  # the cache holds H_kv heads
    assert torch.allclose(torch.cat([prefill, *steps], dim=1), whole, atol=1e-12)


def test_generate_gives_the_same_tokens_with_and_without_the_cache():
    model = small_model(2, seed=5)
    prompt = random_tokens(6, batch=3, seed=2)
    cached = generate(model, prompt, steps=25)
    assert cached.shape == (3, 31) and torch.equal(cached[:, :6], prompt)
    assert torch.equal(cached, generate(model, prompt, steps=25, use_cache=False))


@pytest.mark.parametrize(("window", "sinks"), [(1, 0), (5, 0), (4, 3), (40, 2)])
def test_the_ring_buffer_equals_the_masked_forward_pass(window, sinks):
    model = small_model(2)
    tokens = random_tokens(50)
    cache = model.new_cache(batch=1, capacity=0, window=window, sinks=sinks)
    with torch.no_grad():
        steps = torch.cat([model(tokens[:, i : i + 1], cache) for i in range(50)], dim=1)
        masked = model(tokens, window=window, sinks=sinks)
    assert torch.allclose(steps, masked, atol=1e-12)
    assert cache.keys[0].shape[2] == window + sinks  # memory: window + sinks tokens, always


def test_a_windowed_cache_takes_the_sinks_at_once_but_later_tokens_one_at_a_time():
    model = small_model()
    cache = model.new_cache(batch=1, capacity=0, window=4, sinks=3)
    with torch.no_grad():
        model(random_tokens(3), cache)  # the three sinks, prefilled together
        with pytest.raises(ValueError, match="one token at a time"):
            model(random_tokens(2), cache)


def test_the_cache_refuses_too_many_tokens_and_bad_settings():
    model = small_model()
    cache = model.new_cache(batch=1, capacity=5)
    with torch.no_grad(), pytest.raises(ValueError, match="capacity of 5"):
        model(random_tokens(6), cache)
    with pytest.raises(ValueError, match="window must be"):
        KVCache(1, 1, 1, 2, capacity=4, window=0)
    with pytest.raises(ValueError, match="sinks must be"):
        KVCache(1, 1, 1, 2, capacity=4, window=2, sinks=-1)
    with pytest.raises(ValueError, match="tokens must be"):
        model(torch.tensor([1, 2, 3]))


def test_crop_forgets_the_later_tokens():
    model = small_model()
    tokens = random_tokens(12)
    cache = model.new_cache(batch=1, capacity=12)
    with torch.no_grad():
        model(tokens, cache)
        cache.crop(7)
        again = model(tokens[:, 7:8], cache)
        assert torch.allclose(again[:, 0], model(tokens[:, :8])[:, 7], atol=1e-12)
    windowed = model.new_cache(batch=1, capacity=0, window=3)
    with pytest.raises(ValueError, match="ring buffer"):
        windowed.crop(1)


def test_the_decoder_uses_gqa_as_pytorch_does():
    """One layer's attention equals scaled_dot_product_attention(enable_gqa=True) on the
    layer's own projections, with rotary positions and the causal mask."""
    model = small_model(num_kv_heads=2)
    layer = model.layers[0]
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    positions = torch.arange(9)
    a = layer.attention
    h = layer.norm_1(x)
    q = rotary(tattn.split_heads(h @ a.w_q, 4), positions)
    k = rotary(tattn.split_heads(h @ a.w_k, 2), positions)
    v = tattn.split_heads(h @ a.w_v, 2)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    attended = x + tattn.merge_heads(heads) @ a.w_o
    want = attended + layer.feed_forward(layer.norm_2(attended))
    assert torch.allclose(layer(x, positions), want, atol=1e-12)


def test_pool_kv_heads_averages_each_group_and_keeps_the_rest():
    model = small_model()
    pooled = pool_kv_heads(model, 2)
    w_k, pooled_k = model.layers[1].attention.w_k, pooled.layers[1].attention.w_k
    heads = w_k.reshape(16, 4, 4)  # (d_model, heads, d_head)
    assert torch.allclose(pooled_k.reshape(16, 2, 4)[:, 0], heads[:, :2].mean(1))
    assert torch.allclose(pooled_k.reshape(16, 2, 4)[:, 1], heads[:, 2:].mean(1))
    assert torch.equal(pooled.layers[1].attention.w_q, model.layers[1].attention.w_q)
    assert pooled.num_kv_heads == 2 and pooled.embed.weight.dtype == torch.float64
    same = pool_kv_heads(model, 4)  # groups of one: the same model
    tokens = random_tokens(10)
    with torch.no_grad():
        assert torch.allclose(same(tokens), model(tokens), atol=1e-12)
    with pytest.raises(ValueError, match="num_kv_heads"):
        pool_kv_heads(model, 3)


def test_pooling_identical_heads_changes_nothing():
    """When every head of a group already has the same keys and values, GQA is exact."""
    model = small_model()
    with torch.no_grad():
        for layer in model.layers:
            for name in ("w_k", "w_v"):
                w = getattr(layer.attention, name).reshape(16, 2, 2, 4)
                w[:, :, 1] = w[:, :, 0]  # heads 0 = 1 and 2 = 3
    tokens = random_tokens(15)
    with torch.no_grad():
        assert torch.allclose(pool_kv_heads(model, 2)(tokens), model(tokens), atol=1e-12)


def test_kv_cache_bytes_and_the_cache_size_agree():
    assert kv_cache_bytes(32, 8, 128) == 131_072  # Llama-3-8B-like, bfloat16
    assert kv_cache_bytes(32, 32, 128) == 4 * 131_072
    model = small_model(num_kv_heads=2, dtype=torch.float32)
    assert model.new_cache(1, 100).nbytes() == 100 * kv_cache_bytes(2, 2, 4, 4)
