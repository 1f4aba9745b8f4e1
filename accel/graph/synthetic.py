"""Synthetic graphs of any size with a module hierarchy (for benchmarks and view tests)."""

from __future__ import annotations

import random

from accel.graph.model import Edge, Graph, Node

_OPS = ["conv2d", "batch_norm", "relu", "linear", "add", "mul", "layer_norm", "gelu", "matmul"]


def synthetic_graph(
    num_nodes: int = 10_000, *, blocks: int = 20, seed: int = 0, skip_prob: float = 0.05
) -> Graph:
    """A network-like DAG: ``blocks`` top-level blocks of layers of short op chains with
    residual adds, occasional two-way branches, one input and one output. With
    probability ``skip_prob`` an op also reads one of the 30 previous ops (a skip edge
    that makes the graph non-planar, so crossing reduction has work to do)."""
    rng = random.Random(seed)
    g = Graph(name=f"synthetic{num_nodes}", source="synthetic")
    g.nodes.append(Node("input:x", "input", "x", outputs=["x"]))
    g.inputs.append("input:x")
    prev = "input:x"
    budget = num_nodes - 2
    per_block = max(budget // blocks, 4)
    i = 0

    def add(op: str, path: str, srcs: list[str]) -> str:
        nonlocal i
        nid = f"n{i}"
        i += 1
        g.nodes.append(Node(nid, op, f"{op}_{i}", path, num_params=rng.choice([0, 0, 64, 4096])))
        for s in srcs:
            g.edges.append(Edge(s, nid, s, [1, 64], "float32"))
        if i > 31 and rng.random() < skip_prob:
            s = f"n{i - rng.randint(2, 30)}"
            if s not in srcs:
                g.edges.append(Edge(s, nid, s, [1, 64], "float32"))
        return nid

    b = 0
    while i < budget:
        block = f"stage{b}"
        start = i
        layer = 0
        while i - start < per_block and i < budget:
            path = f"{block}.layers.{layer}"
            entry = prev
            cur = prev
            n_ops = rng.randint(3, 9)
            branch = rng.random() < 0.3
            for k in range(n_ops):
                if i >= budget:
                    break
                sub = f"{path}.{'attn' if k < n_ops // 2 else 'mlp'}"
                cur = add(rng.choice(_OPS), sub, [cur])
                if branch and k == 0 and i < budget:
                    side = add("linear", f"{sub}.proj", [entry])
                    cur = add("add", sub, [cur, side]) if i < budget else cur
            if i < budget:
                cur = add("add", path, [cur, entry])  # residual
            prev = cur
            layer += 1
        b += 1
    g.nodes.append(Node("output:y", "output", "y"))
    g.edges.append(Edge(prev, "output:y", prev))
    g.outputs.append("output:y")
    g.build_groups()
    return g
