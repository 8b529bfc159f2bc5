"""The checkers of the lesson on attention across devices: reference solutions pass,
plausible mistakes get a useful hint."""

from __future__ import annotations

import pytest

from attnlib.exercises import check

# ---------------------------------------------------------------- reference solutions


def kv_bytes_per_token(layers, kv_heads, head_dim, bytes_per_number):
    return 2 * layers * kv_heads * head_dim * bytes_per_number


def causal_tiles_per_step(rank, world_size):
    # step 0: own keys, 3 of 2 × 2 tiles; then the keys of process r − s: earlier while s <= r
    return [3] + [4 if step <= rank else 0 for step in range(1, world_size)]


def busiest_over_mean(world_size, layout):
    if layout == "contiguous":  # process r computes 4r + 3 tiles: mean 2P + 1
        return (4 * world_size - 1) / (2 * world_size + 1)
    return 1.0  # every process computes 2P + 1


# ---------------------------------------------------------------- plausible mistakes


def kv_bytes_keys_only(layers, kv_heads, head_dim, bytes_per_number):
    return layers * kv_heads * head_dim * bytes_per_number


def kv_bytes_one_layer(layers, kv_heads, head_dim, bytes_per_number):
    return 2 * kv_heads * head_dim * bytes_per_number


def tiles_diagonal_in_full(rank, world_size):
    return [4] + [4 if step <= rank else 0 for step in range(1, world_size)]


def tiles_wrong_direction(rank, world_size):
    return [3] + [4 if step >= world_size - rank else 0 for step in range(1, world_size)]


def mean_over_busiest(world_size, layout):
    return 1 / busiest_over_mean(world_size, layout)


CORRECT = {
    "11.1": kv_bytes_per_token,
    "11.2": causal_tiles_per_step,
    "11.3": busiest_over_mean,
}

WRONG = [
    ("11.1", kv_bytes_keys_only, "key AND a value"),
    ("11.1", kv_bytes_one_layer, "every layer"),
    ("11.2", tiles_diagonal_in_full, "skipped"),
    ("11.2", tiles_wrong_direction, "BEFORE"),
    ("11.3", mean_over_busiest, "busiest over"),
    ("11.3", lambda world_size, layout: 1.5, "expected"),
]

# tests/test_exercises.py runs the common checks on CORRECT and WRONG; these are particular.


def test_the_references_agree_with_the_ring_plan():
    from attnlib.exercises import lesson11

    for world_size in (1, 2, 5, 8):
        for rank in range(world_size):
            assert causal_tiles_per_step(rank, world_size) == (
                lesson11.causal_tiles_per_step_reference(rank, world_size)
            )
        for layout in ("contiguous", "balanced"):
            assert busiest_over_mean(world_size, layout) == pytest.approx(
                lesson11.busiest_over_mean_reference(world_size, layout)
            )
    assert lesson11.kv_bytes_per_token_reference(32, 8, 128, 2) == 131_072


def test_a_wrong_length_of_list_gets_a_hint():
    result = check("11.2", lambda rank, world_size: [3])
    assert result.status == "wrong" and "one per ring step" in result.message
