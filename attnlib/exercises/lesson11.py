"""Checkers for the exercises of the lesson on attention across devices (ring attention)."""

from __future__ import annotations

from . import exercise, expect

# --------------------------------------------------------------------------- 11.1


def kv_bytes_per_token_reference(layers, kv_heads, head_dim, bytes_per_number) -> int:
    """The bytes of keys and values one token needs in every layer: ``2·layers·kv_heads·
    head_dim·bytes_per_number`` (a key and a value vector per key-value head and layer).

    >>> kv_bytes_per_token_reference(32, 8, 128, 2)  # Llama-3-8B-like, bfloat16
    131072
    """
    return 2 * layers * kv_heads * head_dim * bytes_per_number


@exercise("11.1", "bytes of keys and values per token")
def _check_kv_bytes_per_token(kv_bytes_per_token) -> None:
    configs = [(32, 8, 128, 2), (126, 8, 128, 2), (12, 12, 64, 4), (1, 1, 1, 1), (24, 4, 96, 1)]
    for layers, kv_heads, head_dim, size in configs:
        call = f"kv_bytes_per_token({layers}, {kv_heads}, {head_dim}, {size})"
        got = kv_bytes_per_token(layers, kv_heads, head_dim, size)
        want = kv_bytes_per_token_reference(layers, kv_heads, head_dim, size)
        expect(got is not None, "{call} returned None; return a number of bytes.", call=call)
        expect(
            got != want // 2,
            "{call} = {got}, half the answer: a token has a key AND a value in each head.",
            call=call,
            got=got,
        )
        expect(
            got != want // layers or layers == 1,
            "{call} = {got}: that is one layer; every layer keeps its own keys and values.",
            call=call,
            got=got,
        )
        expect(got == want, "{call} = {got}, expected {want}.", call=call, got=got, want=want)


# --------------------------------------------------------------------------- 11.2


def causal_tiles_per_step_reference(rank: int, world_size: int) -> list[int]:
    """Tiles process ``rank`` computes at each ring step, causal mask, contiguous layout
    (two chunks per shard), counted from ``attnlib.distributed.ring_plan``.

    >>> causal_tiles_per_step_reference(2, 4)
    [3, 4, 4, 0]
    """
    from .. import distributed  # PyTorch: imported when a checker of lesson 11 runs, not before

    plan = distributed.ring_plan(rank, world_size, 8 * world_size, "contiguous", causal=True)
    return [len(tiles) for tiles in plan]


@exercise("11.2", "the tiles of a causal contiguous shard")
def _check_causal_tiles_per_step(causal_tiles_per_step) -> None:
    for world_size in (1, 2, 3, 4, 8):
        for rank in range(world_size):
            call = f"causal_tiles_per_step({rank}, {world_size})"
            got = causal_tiles_per_step(rank, world_size)
            want = causal_tiles_per_step_reference(rank, world_size)
            expect(
                got is not None and len(list(got)) == world_size,
                "{call}: return a list of {world_size} counts, one per ring step.",
                call=call,
                world_size=world_size,
            )
            got = [int(x) for x in got]
            expect(
                got[0] == 3,
                "{call}[0] = {got_0}: at step 0 a process holds its own keys; of its 2 × 2 "
                "tiles, the one with the later chunk of keys against the earlier chunk of "
                "queries lies above the diagonal and is skipped: 3 tiles.",
                call=call,
                got_0=got[0],
            )
            mirrored = [3] + [
                4 if step >= world_size - rank else 0 for step in range(1, world_size)
            ]
            expect(
                got != mirrored or got == want,
                "{call} = {got}: at step s process r holds the keys of process (r − s) mod P, "
                "which come BEFORE its own queries while s <= r.",
                call=call,
                got=got,
            )
            expect(got == want, "{call} = {got}, expected {want}.", call=call, got=got, want=want)


# --------------------------------------------------------------------------- 11.3


def busiest_over_mean_reference(world_size: int, layout: str) -> float:
    """The busiest process's tile products over the mean, causal mask.

    >>> busiest_over_mean_reference(4, "contiguous")
    1.6666666666666667
    """
    from .. import distributed  # PyTorch: imported when a checker of lesson 11 runs, not before

    counts = distributed.tile_counts(world_size, 8 * world_size, layout=layout, causal=True)
    return max(counts) / (sum(counts) / len(counts))


@exercise("11.3", "Change the experiment: other numbers of processes")
def _check_busiest_over_mean(busiest_over_mean) -> None:
    for world_size in (2, 3, 4, 8):
        for layout in ("contiguous", "balanced"):
            call = f"busiest_over_mean({world_size}, {layout!r})"
            got = busiest_over_mean(world_size, layout)
            want = busiest_over_mean_reference(world_size, layout)
            expect(got is not None, "{call} returned None; return a ratio.", call=call)
            expect(
                abs(float(got) - 1 / want) > 1e-9 or want == 1,
                "{call} = {got}: that is the mean over the busiest; take the busiest over "
                "the mean (a number >= 1).",
                call=call,
                got=got,
            )
            expect(
                abs(float(got) - want) < 1e-9,
                "{call} = {float_got:.4f}, expected {want:.4f}. Count each process's tiles "
                "(tile_counts or ring_plan, causal=True) and divide the largest by the mean.",
                call=call,
                float_got=float(got),
                want=want,
            )
