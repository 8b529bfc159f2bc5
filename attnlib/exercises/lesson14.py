"""Checkers for the exercises of lesson 14."""

from __future__ import annotations

import tracemalloc
from collections import deque

import numpy as np

from .. import data
from .. import numpy as attn
from . import exercise, expect, expect_shape, phrase


def _random_edges(rng: np.random.Generator, num_nodes: int, num_edges: int) -> list:
    """``num_edges`` distinct undirected edges ``(i, j)``, ``i != j``, in random order."""
    pairs = [(i, j) for i in range(num_nodes) for j in range(i + 1, num_nodes)]
    chosen = rng.choice(len(pairs), size=min(num_edges, len(pairs)), replace=False)
    edges = [pairs[k] for k in chosen]
    # Write some edges the other way round: an undirected edge has no preferred direction.
    return [(j, i) if rng.random() < 0.5 else (i, j) for i, j in edges]


def _graphs(seed: int):
    """(name, edges, num_nodes): the textbook's graph, ethanol, and random ones (some
    disconnected, one with an isolated node)."""
    rng = np.random.default_rng(seed)
    example, mol = data.example_graph(), data.ethanol()
    graphs = [
        (phrase("the example graph"), list(example.edges), 8),
        (phrase("ethanol"), list(mol.edges), 9),
        (phrase("a path of 5 nodes"), [(0, 1), (1, 2), (2, 3), (3, 4)], 5),
        (
            phrase("two triangles and an isolated node"),
            [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5)],
            7,
        ),
    ]
    for num_nodes, num_edges in ((6, 5), (10, 9), (12, 20), (9, 4)):
        graphs.append(
            (
                phrase("a random graph ({num_nodes} nodes)", num_nodes=num_nodes),
                _random_edges(rng, num_nodes, num_edges),
                num_nodes,
            )
        )
    return graphs


# --------------------------------------------------------------------------- 14.1


@exercise("14.1", "a graph mask from an edge list")
def _check_graph_mask(graph_mask_by_hand) -> None:
    for name, edges, n in _graphs(1001):
        for directed in (False, True):
            for self_loops in (True, False):
                call = phrase(
                    "graph_mask_by_hand(edges of {name}, {n}, directed={directed}, "
                    "self_loops={self_loops})",
                    name=name,
                    n=n,
                    directed=directed,
                    self_loops=self_loops,
                )
                got = np.asarray(graph_mask_by_hand(list(edges), n, directed, self_loops))
                want = attn.graph_mask(edges, n, directed=directed, self_loops=self_loops)
                expect_shape(got, want, call)
                expect(
                    got.dtype == bool,
                    "{call} has dtype {got_dtype}; return a boolean mask (True = may attend), "
                    "for example np.zeros((n, n), dtype=bool).",
                    call=call,
                    got_dtype=got.dtype,
                )
                if np.array_equal(got, want):
                    continue
                diagonal = np.diag(got)
                expect(
                    not self_loops or diagonal.all(),
                    "{call}: with self_loops=True every node may attend to itself: the diagonal "
                    "must be True.",
                    call=call,
                )
                expect(
                    self_loops or not diagonal.any(),
                    "{call}: with self_loops=False the diagonal must be False (none of these "
                    "graphs has an edge from a node to itself).",
                    call=call,
                )
                expect(
                    directed or np.array_equal(got, got.T),
                    "{call} is not symmetric. An undirected edge (i, j) lets i attend to j AND "
                    "j attend to i: set both mask[i, j] and mask[j, i].",
                    call=call,
                )
                expect(
                    not (directed and np.array_equal(got, want.T)),
                    "{call} is transposed. A directed edge (i, j) lets i attend to j: row i "
                    "(the query), column j (the key), so set mask[i, j].",
                    call=call,
                )
                expect(
                    not (directed and np.array_equal(got, got.T)),
                    "{call}: with directed=True an edge (i, j) opens only mask[i, j], not "
                    "mask[j, i].",
                    call=call,
                )
                expect(
                    False,
                    "{call} has the wrong entries; compare it with attn.graph_mask.",
                    call=call,
                )


# --------------------------------------------------------------------------- 14.2


def hop_distances_reference(edges, num_nodes: int) -> np.ndarray:
    """Fewest edges between every pair (undirected), 0 on the diagonal, -1 if unreachable."""
    neighbours = [[] for _ in range(num_nodes)]
    for i, j in edges:
        neighbours[i].append(j)
        neighbours[j].append(i)
    dist = np.full((num_nodes, num_nodes), -1, dtype=int)
    for source in range(num_nodes):
        dist[source, source] = 0
        queue = deque([source])
        while queue:  # breadth-first search: nodes come out in order of their distance
            node = queue.popleft()
            for other in neighbours[node]:
                if dist[source, other] < 0:
                    dist[source, other] = dist[source, node] + 1
                    queue.append(other)
    return dist


@exercise("14.2", "hop distances")
def _check_hop_distances(hop_distances) -> None:
    for name, edges, n in _graphs(1002):
        call = phrase("hop_distances(edges of {name}, {n})", name=name, n=n)
        got = np.asarray(hop_distances(list(edges), n))
        want = hop_distances_reference(edges, n)
        expect_shape(got, want, call)
        expect(
            np.issubdtype(got.dtype, np.number) and np.all(np.isfinite(got)),
            "{call} should contain whole numbers, with -1 (not inf or NaN) where there is no path.",
            call=call,
        )
        if np.array_equal(got, want):
            continue
        expect(
            np.all(np.diag(got) == 0),
            "{call}: a node is 0 hops from itself; the diagonal must be 0.",
            call=call,
        )
        reachable = want >= 0
        expect(
            np.all(got[~reachable] == -1) or not np.array_equal(got[reachable], want[reachable]),
            "{call}: where no path exists (different connected pieces) the answer is -1.",
            call=call,
        )
        expect(
            not np.array_equal(
                got[reachable], want[reachable] + 1 - np.eye(n, dtype=int)[reachable]
            ),
            "{call} is one too large: count the edges on the path, not the nodes.",
            call=call,
        )
        expect(
            np.array_equal(got, got.T),
            "{call} is not symmetric. The edges are undirected: (i, j) also connects j to i.",
            call=call,
        )
        expect(
            np.array_equal(got[reachable], want[reachable]),
            "{call}: some distances are wrong. Breadth-first search from every node, or: j is "
            "within n hops of i when (M^n)[i, j] > 0 for the graph mask M with self-loops.",
            call=call,
        )
        expect(
            False,
            "{call} has the right distances but marks unreachable pairs wrongly (-1).",
            call=call,
        )


# --------------------------------------------------------------------------- 14.3


def _distance(edges, num_nodes: int, source: int, target: int):
    """Hops from source to target along undirected edges (breadth-first), or None."""
    neighbours = [[] for _ in range(num_nodes)]
    for a, b in edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    hops, queue = {source: 0}, deque([source])
    while queue:
        node = queue.popleft()
        for other in neighbours[node]:
            if other not in hops:
                hops[other] = hops[node] + 1
                queue.append(other)
    return hops.get(target)


@exercise("14.3", "a shortcut and a cut")
def _check_first_influence(first_influence) -> None:
    graph = data.example_graph()
    cases = [
        (phrase("the example graph"), list(graph.edges), 1, 0),
        (phrase("with the shortcut 3-5"), [*graph.edges, (2, 4)], 1, 0),
        (phrase("without the edge 4-7"), [e for e in graph.edges if e != (3, 6)], 1, 0),
        (phrase("the example graph"), list(graph.edges), 7, 2),
        (phrase("a path 1-2-...-8"), [(i, i + 1) for i in range(7)], 0, 7),
    ]
    for name, edges, source, target in cases:
        mask = attn.graph_mask(edges, 8)
        hops = _distance(edges, 8, source, target)
        want = hops if hops is not None and hops <= 6 else None
        call = phrase(
            "first_influence(mask of {name}, source={source}, target={target})",
            name=name,
            source=source,
            target=target,
        )
        got = first_influence(mask, source, target)
        if want is None:
            expect(
                got is None,
                "{call} = {got!r}, but a change at node {source_node} (index {source}) never "
                "reaches node {target_node} (index {target}) within 6 layers: return None when "
                "no number of layers up to len(stack) moves the output.",
                call=call,
                got=got,
                source=source,
                target=target,
                source_node=source + 1,
                target_node=target + 1,
            )
            continue
        expect(
            got == want,
            "{call} = {got!r}; the change first reaches it after {want} layers. Change "
            "x[source], run gnn(changed, n, mask) for n = 1, 2, … layers and return the first n at "
            "which the output of node target moves.",
            call=call,
            got=got,
            want=want,
        )


# --------------------------------------------------------------------------- 14.4


def _variants(x, edges, n, w_q, w_k, w_v):
    """Plausible wrong outputs: (name, output, hint)."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    one_way = attn.graph_mask(edges, n, directed=True)
    return [
        (
            attn.attention(q, k, v)[0],
            phrase(
                "this is full attention: every node attends to every node. Score only the "
                "neighbours (and the node itself)."
            ),
        ),
        (
            attn.attention(q, k, v, mask=attn.graph_mask(edges, n, self_loops=False))[0],
            phrase(
                "each node should also attend to itself (a self-loop), as attn.graph_mask does "
                "by default; here a node with no neighbours should return its own value, not "
                "zeros."
            ),
        ),
        (
            attn.attention(q, k, v, mask=one_way)[0],
            phrase("the edges are undirected: edge (i, j) lets i attend to j and j attend to i."),
        ),
        (
            attn.attention(q, k, v, mask=attn.graph_mask(edges, n), scale=1.0)[0],
            phrase("divide the scores q_i · k_j by sqrt(d_k) before the softmax."),
        ),
    ]


@exercise("14.4", "one message-passing step")
def _check_message_passing(message_passing) -> None:
    rng = np.random.default_rng(1004)
    for name, edges, n in _graphs(1004):
        d_model, d_k, d_v = 4, 3, 2
        x = rng.normal(0.0, 1.0, (n, d_model))
        w_q, w_k, w_v = (rng.normal(0.0, 1.0, (d_model, d)) for d in (d_k, d_k, d_v))
        call = phrase("message_passing on {name}", name=name)
        got = np.asarray(
            message_passing(x.copy(), list(edges), w_q.copy(), w_k.copy(), w_v.copy()),
            dtype=float,
        )
        want = attn.attention(x @ w_q, x @ w_k, x @ w_v, mask=attn.graph_mask(edges, n))[0]
        expect(
            got.shape == want.shape,
            "{call} returned shape {got_shape}; expected (num_nodes, d_v) = {want_shape}.",
            call=call,
            got_shape=got.shape,
            want_shape=want.shape,
        )
        if np.allclose(got, want, atol=1e-10):
            continue
        for wrong, hint in _variants(x, edges, n, w_q, w_k, w_v):
            expect(not np.allclose(got, wrong, atol=1e-10), "{call}: {hint}", call=call, hint=hint)
        expect(
            False,
            "{call} gives the wrong numbers. For each node i: scores q_i · k_j / sqrt(d_k) for j "
            "in its neighbourhood (with i itself), softmax over those, then sum alpha_ij v_j.",
            call=call,
        )
    _check_sparse_memory(message_passing)


#: The two long paths on which 14.4's memory is measured: twice the nodes, twice the memory
#: for a step along the edges, four times for anything that holds an N × N matrix.
PATH_NODES = (1_000, 2_000)


def _path(num_nodes: int) -> list:
    """The edges of a path 0-1-...-(num_nodes - 1), every other edge written backwards."""
    return [(i, i + 1) if i % 2 else (i + 1, i) for i in range(num_nodes - 1)]


def call_with_peak(fn, *args):
    """``(fn(*args), peak)``: the result, and the most memory that the Python objects and NumPy
    arrays created during the call held at any one moment, in bytes (``tracemalloc``; a trace
    already running is kept running)."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    try:
        result = fn(*args)
        return result, tracemalloc.get_traced_memory()[1] - before
    finally:
        if not was_tracing:
            tracemalloc.stop()


def _check_sparse_memory(message_passing) -> None:
    """The point of 14.4: a step along the edges needs memory in proportion to N + 2|E|. On
    paths of 1,000 and 2,000 nodes an N × N matrix (even of booleans) quadruples its memory
    when N doubles; a step that scores only the neighbourhoods doubles it."""
    rng = np.random.default_rng(1005)
    w_q, w_k, w_v = (rng.normal(0.0, 1.0, (4, d)) for d in (3, 3, 2))
    peaks = []
    for n in PATH_NODES:
        x, edges = rng.normal(0.0, 1.0, (n, 4)), _path(n)
        got, peak = call_with_peak(message_passing, x, edges, w_q, w_k, w_v)
        peaks.append(peak)
        got = np.asarray(got, dtype=float)
        call = phrase("message_passing on a path of {n} nodes", n=n)
        want = attn.attention(x @ w_q, x @ w_k, x @ w_v, mask=attn.graph_mask(edges, n))[0]
        expect_shape(got, want, call)
        expect(
            np.allclose(got, want, atol=1e-10),
            "{call} gives the wrong numbers, although the small graphs were right. Every node "
            "i attends to itself and to its neighbours only.",
            call=call,
        )
    small, large = PATH_NODES
    expect(
        peaks[1] < 3 * peaks[0],
        "message_passing held {small_mb:.1f} MB at its peak on a path of {small} nodes and "
        "{large_mb:.1f} MB on a path of {large}: twice the nodes, {growth:.1f} times the "
        "memory. That is the mark of an N × N matrix (attn.graph_mask and attn.attention "
        "build them). Score each node's neighbourhood on its own: then twice the nodes need "
        "about twice the memory.",
        small=small,
        large=large,
        small_mb=peaks[0] / 1e6,
        large_mb=peaks[1] / 1e6,
        growth=peaks[1] / peaks[0],
    )
