"""The checkers of lesson 14: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import tracemalloc
from collections import deque

import numpy as np

from attnlib import data
from attnlib import numpy as attn
from attnlib.exercises import check
from attnlib.exercises.lesson14 import (
    PATH_NODES,
    call_with_peak,
    hop_distances_reference,
)

# ---------------------------------------------------------------- reference solutions


def graph_mask_by_hand(edges, num_nodes, directed=False, self_loops=True):
    mask = np.zeros((num_nodes, num_nodes), dtype=bool)
    for i, j in edges:
        mask[i, j] = True
        if not directed:
            mask[j, i] = True
    if self_loops:
        mask[np.arange(num_nodes), np.arange(num_nodes)] = True
    return mask


def hop_distances(edges, num_nodes):
    neighbours = {i: set() for i in range(num_nodes)}
    for i, j in edges:
        neighbours[i].add(j)
        neighbours[j].add(i)
    dist = -np.ones((num_nodes, num_nodes), dtype=int)
    for source in range(num_nodes):
        dist[source, source] = 0
        frontier = deque([source])
        while frontier:
            node = frontier.popleft()
            for other in neighbours[node]:
                if dist[source, other] == -1:
                    dist[source, other] = dist[source, node] + 1
                    frontier.append(other)
    return dist


def hop_distances_by_powers(edges, num_nodes):
    mask = attn.graph_mask(edges, num_nodes).astype(int) if edges else np.eye(num_nodes, dtype=int)
    dist = np.where(np.eye(num_nodes, dtype=bool), 0, -1)
    reach = np.eye(num_nodes, dtype=int)
    for hops in range(1, num_nodes):
        reach = np.minimum(reach @ mask, 1)
        dist[(dist == -1) & (reach > 0)] = hops
    return dist


def message_passing(x, edges, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    neighbours = [{i} for i in range(len(x))]
    for i, j in edges:
        neighbours[i].add(j)
        neighbours[j].add(i)
    out = np.zeros((len(x), v.shape[1]))
    for i, around in enumerate(neighbours):
        around = sorted(around)
        scores = k[around] @ q[i] / np.sqrt(q.shape[1])
        weights = np.exp(scores - scores.max())
        out[i] = (weights / weights.sum()) @ v[around]
    return out


# ---------------------------------------------------------------- plausible mistakes


def mask_one_way(edges, num_nodes, directed=False, self_loops=True):
    return graph_mask_by_hand(edges, num_nodes, True, self_loops)


def mask_no_self_loops(edges, num_nodes, directed=False, self_loops=True):
    return graph_mask_by_hand(edges, num_nodes, directed, False)


def mask_transposed(edges, num_nodes, directed=False, self_loops=True):
    return graph_mask_by_hand(edges, num_nodes, directed, self_loops).T.copy()


def mask_as_int(edges, num_nodes, directed=False, self_loops=True):
    return graph_mask_by_hand(edges, num_nodes, directed, self_loops).astype(int)


def distances_counting_nodes(edges, num_nodes):
    dist = hop_distances(edges, num_nodes)
    return np.where(dist > 0, dist + 1, dist)


def distances_zero_if_unreachable(edges, num_nodes):
    return np.maximum(hop_distances(edges, num_nodes), 0)


def distances_inf_if_unreachable(edges, num_nodes):
    return np.where(hop_distances(edges, num_nodes) < 0, np.inf, hop_distances(edges, num_nodes))


def distances_directed(edges, num_nodes):
    dist = np.where(np.eye(num_nodes, dtype=bool), 0, -1)
    for source in range(num_nodes):
        frontier = deque([source])
        while frontier:
            node = frontier.popleft()
            for i, j in edges:
                if i == node and dist[source, j] == -1:
                    dist[source, j] = dist[source, node] + 1
                    frontier.append(j)
    return dist


def passing_full(x, edges, w_q, w_k, w_v):
    return attn.attention(x @ w_q, x @ w_k, x @ w_v)[0]


def passing_without_self(x, edges, w_q, w_k, w_v):
    mask = attn.graph_mask(edges, len(x), self_loops=False)
    return attn.attention(x @ w_q, x @ w_k, x @ w_v, mask=mask)[0]


def passing_one_way(x, edges, w_q, w_k, w_v):
    mask = attn.graph_mask(edges, len(x), directed=True)
    return attn.attention(x @ w_q, x @ w_k, x @ w_v, mask=mask)[0]


def passing_unscaled(x, edges, w_q, w_k, w_v):
    mask = attn.graph_mask(edges, len(x))
    return attn.attention(x @ w_q, x @ w_k, x @ w_v, mask=mask, scale=1.0)[0]


def passing_dense(x, edges, w_q, w_k, w_v):
    """Right numbers, the way the exercise forbids: masked attention over all N² pairs."""
    mask = attn.graph_mask(edges, len(x))
    return attn.attention(x @ w_q, x @ w_k, x @ w_v, mask=mask)[0]


def passing_with_a_square_mask(x, edges, w_q, w_k, w_v):
    """Scores only the neighbourhoods, but finds them in an N × N boolean mask."""
    mask = attn.graph_mask(edges, len(x))
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    out = np.zeros((len(x), v.shape[1]))
    for i in range(len(x)):
        around = np.flatnonzero(mask[i])
        scores = k[around] @ q[i] / np.sqrt(q.shape[1])
        weights = np.exp(scores - scores.max())
        out[i] = (weights / weights.sum()) @ v[around]
    return out


STACK = [attn.MultiHeadAttention(d_model=4, num_heads=2, seed=s) for s in range(6)]
X = np.random.default_rng(10).normal(size=(8, 4))


def gnn(h, num_layers, mask):
    for layer in STACK[:num_layers]:
        h = h + np.tanh(layer(h, mask=mask)[0])
    return h


def first_influence(mask, source, target):
    changed = X.copy()
    changed[source] += 1.0
    for num_layers in range(1, 7):
        if np.abs(gnn(changed, num_layers, mask)[target] - gnn(X, num_layers, mask)[target]).max():
            return num_layers
    return None


CORRECT = {
    "14.1": graph_mask_by_hand,
    "14.2": hop_distances,
    "14.3": first_influence,
    "14.4": message_passing,
}

WRONG = [
    ("14.1", mask_one_way, "not symmetric"),
    ("14.1", mask_no_self_loops, "diagonal must be True"),
    ("14.1", mask_transposed, "transposed"),
    ("14.1", mask_as_int, "boolean"),
    ("14.2", distances_counting_nodes, "one too large"),
    ("14.2", distances_zero_if_unreachable, "-1"),
    ("14.2", distances_inf_if_unreachable, "-1 (not inf"),
    ("14.2", distances_directed, "not symmetric"),
    ("14.3", lambda mask, source, target: 5, "the first n"),
    ("14.3", lambda mask, source, target: first_influence(mask, target, source) or 6, "None"),
    (
        "14.3",
        lambda mask, source, target: (first_influence(mask, source, target) or 1) - 1,
        "first n",
    ),
    ("14.4", passing_full, "full attention"),
    ("14.4", passing_without_self, "attend to itself"),
    ("14.4", passing_one_way, "undirected"),
    ("14.4", passing_unscaled, "sqrt(d_k)"),
    ("14.4", passing_dense, "mark of an N × N matrix"),
    ("14.4", passing_with_a_square_mask, "twice the nodes, 3."),
]


def test_matrix_powers_solve_14_2_too():
    assert bool(check("14.2", hop_distances_by_powers))


def test_distance_reference_on_the_textbook_graph():
    graph = data.example_graph()
    dist = hop_distances_reference(graph.edges, 8)
    assert dist[0].tolist() == [0, 5, 4, 3, 1, 1, 2, 1]  # from node 1; node 2 is 5 hops away
    assert dist.max() == 6  # the diameter: nodes 2 and 5 (or 6)


def test_memory_of_a_sparse_step_doubles_and_of_a_dense_one_quadruples():
    rng = np.random.default_rng(0)
    growth = {}
    for answer in (message_passing, passing_dense):
        peaks = []
        for n in PATH_NODES:
            x, edges = rng.normal(size=(n, 4)), [(i, i + 1) for i in range(n - 1)]
            w = [rng.normal(size=(4, d)) for d in (3, 3, 2)]
            peaks.append(call_with_peak(answer, x, edges, *w)[1])
        growth[answer] = peaks[1] / peaks[0]
    assert growth[message_passing] < 2.5 and growth[passing_dense] > 3.5


def test_call_with_peak_keeps_a_trace_that_was_running():
    tracemalloc.start()
    try:
        ones, peak = call_with_peak(np.ones, 100_000)
        assert peak >= ones.nbytes == 800_000 and tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()
    assert call_with_peak(np.ones, 100_000)[1] >= 800_000 and not tracemalloc.is_tracing()
