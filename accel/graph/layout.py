"""Layered (Sugiyama) layout of graphs, flat or one group at a time.

``layered_layout`` is the algorithm on plain index arrays:

1. cycles are broken by reversing edges that go backwards in the given node order
   (graphs arrive in execution order, so this rarely triggers);
2. layering by longest path, sources pulled down next to their first consumer;
3. edges spanning several layers get dummy nodes, one per crossed layer;
4. crossing reduction: barycentre sweeps down and up (vectorised per layer with
   numpy), keeping the best ordering seen;
5. x coordinates: repeated sweeps that move each node towards the mean x of its
   neighbours, then project the layer back onto "same order, no overlap" with the
   pool-adjacent-violators algorithm (exact least squares under the spacing
   constraints), so nodes never overlap whatever their widths;
6. y by layer; edges become polylines through their dummy nodes, always downward,
   vertical inside rows and bending only between rows (so they never cross a box).

``GroupLayouts`` lays out each module group separately (its member nodes and its
child groups as boxes) and caches the result, so the collapsed view lays out only
the top-level units and expanding a group lays out that group plus the few units of
its ancestors (their box grew). Edges crossing a group's boundary enter it through an
entry port at its top and leave through an exit port at its bottom, so inside an
expanded group they reach the very units they connect (a residual block's input edge
reaches both its first conv and its Add, beside the chain).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accel.graph.model import GROUP_PREFIX, ROOT, Graph, Node, ancestors

NODE_HEIGHT = 28.0
GROUP_HEIGHT = 36.0
CHAR_WIDTH = 7.0
MIN_WIDTH = 48.0
PAD = 12.0  # inside an expanded group box
HEADER = 22.0  # title strip of an expanded group box
PORT_SIZE = (8.0, 1.0)  # entry/exit port of an expanded group (not drawn)


def port_id(group: str, side: str) -> str:
    """Unit id of a group's entry (``side="in"``) or exit (``"out"``) port."""
    return f"port:{side}:{group}"


def default_size(node: Node) -> tuple[float, float]:
    """Box size of a node from its label (what the view draws, roughly)."""
    label = node.name or node.op
    if node.op == "group":
        text = max(len(label), len(str(node.attributes.get("type", ""))))
        return max(MIN_WIDTH, 16.0 + CHAR_WIDTH * text), GROUP_HEIGHT
    text = max(len(node.op), min(len(label), 24))
    return max(MIN_WIDTH, 16.0 + CHAR_WIDTH * text), NODE_HEIGHT


@dataclass
class Layout:
    """Node boxes ``(x, y, w, h)`` (top-left corner) and edge polylines, in pixels."""

    positions: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)
    # (src, dst, [(x, y), ...]) from the bottom of src to the top of dst.
    edges: list[tuple[str, str, list[tuple[float, float]]]] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0
    # Expanded group boxes (ids "group:<path>") among positions, drawn as frames.
    frames: list[str] = field(default_factory=list)
    # Layer and position in layer of every node (for tests and incremental views).
    layers: dict[str, int] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)
    reversed_edges: int = 0
    # Group layouts only: boxes of the group's entry/exit ports (see GroupLayouts).
    ports: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "positions": {k: list(v) for k, v in self.positions.items()},
            "edges": [[s, d, [list(p) for p in pts]] for s, d, pts in self.edges],
            "width": self.width,
            "height": self.height,
            "frames": list(self.frames),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Layout:
        return cls(
            positions={k: tuple(v) for k, v in d.get("positions", {}).items()},
            edges=[(s, t, [tuple(p) for p in pts]) for s, t, pts in d.get("edges", [])],
            width=d.get("width", 0.0),
            height=d.get("height", 0.0),
            frames=list(d.get("frames", [])),
        )

    def translated(self, dx: float, dy: float) -> Layout:
        return Layout(
            positions={k: (x + dx, y + dy, w, h) for k, (x, y, w, h) in self.positions.items()},
            edges=[(s, t, [(x + dx, y + dy) for x, y in pts]) for s, t, pts in self.edges],
            width=self.width,
            height=self.height,
            frames=list(self.frames),
        )


# ---- the layered algorithm -----------------------------------------------------------------


def _pav(t: list[float], w: list[float]) -> list[float]:
    """Nondecreasing sequence closest to ``t`` in weighted least squares (pool adjacent violators)."""
    vals: list[float] = []
    wts: list[float] = []
    cnts: list[int] = []
    for ti, wi in zip(t, w):
        v, ww, c = ti, wi, 1
        while vals and vals[-1] > v:
            pv, pw, pc = vals.pop(), wts.pop(), cnts.pop()
            v = (pv * pw + v * ww) / (pw + ww)
            ww += pw
            c += pc
        vals.append(v)
        wts.append(ww)
        cnts.append(c)
    out: list[float] = []
    for v, c in zip(vals, cnts):
        out.extend([v] * c)
    return out


def count_crossings(
    layer_of: np.ndarray, rank: np.ndarray, seg_u: np.ndarray, seg_v: np.ndarray
) -> int:
    """Edge crossings between adjacent layers (segments span exactly one layer)."""
    if len(seg_u) < 2:
        return 0
    lay = layer_of[seg_u]
    order = np.lexsort((rank[seg_v], rank[seg_u], lay))
    lay_sorted = lay[order]
    v_sorted = rank[seg_v][order]
    total = 0
    bounds = np.flatnonzero(np.diff(lay_sorted)) + 1
    for chunk in np.split(v_sorted, bounds):
        if len(chunk) < 2:
            continue
        total += _inversions(chunk)
    return total


def _inversions(a: np.ndarray) -> int:
    """Pairs i < j with a[i] > a[j] (Fenwick tree over ranks)."""
    vals = np.unique(a)
    idx = np.searchsorted(vals, a) + 1
    n = len(vals)
    tree = [0] * (n + 1)
    inv = 0
    seen = 0
    for i in idx.tolist():
        # count seen elements <= i
        s = 0
        j = i
        while j > 0:
            s += tree[j]
            j -= j & -j
        inv += seen - s
        seen += 1
        j = i
        while j <= n:
            tree[j] += 1
            j += j & -j
    return inv


@dataclass
class _Work:
    """Intermediate state of one layered layout (kept for tests and benchmarks)."""

    n: int  # real nodes; dummies are n..total-1
    layer_of: np.ndarray
    rank: np.ndarray
    seg_u: np.ndarray
    seg_v: np.ndarray
    chains: list[list[int]]  # per edge: node sequence src, dummies..., dst
    reversed: np.ndarray  # per edge: was it reversed to break a cycle


@dataclass
class _Layered:
    """The layered graph: real nodes 0..n-1, dummy nodes n..total-1 (one per layer a long
    edge crosses), edges as unit-length segments, and the segments bucketed by the layer of
    their lower end (``down``, for the down sweeps) and upper end (``up``)."""

    n: int
    layer_of: np.ndarray
    chains: list[list[int]]  # per edge: node sequence src, dummies..., dst
    seg_u: np.ndarray
    seg_v: np.ndarray
    widths: np.ndarray
    heights: np.ndarray
    weight: np.ndarray  # dummies pull harder: straight long edges
    nlayers: int
    down: np.ndarray
    down_b: np.ndarray
    up: np.ndarray
    up_b: np.ndarray

    @property
    def total(self) -> int:
        return len(self.layer_of)

    def into(self, li: int) -> np.ndarray:
        """Segments whose lower end lies in layer ``li``."""
        return self.down[self.down_b[li] : self.down_b[li + 1]]

    def out_of(self, li: int) -> np.ndarray:
        """Segments whose upper end lies in layer ``li``."""
        return self.up[self.up_b[li] : self.up_b[li + 1]]


def layered_layout(
    ids: Sequence[str],
    sizes: Sequence[tuple[float, float]],
    edges: Iterable[tuple[int, int]],
    *,
    node_sep: float = 20.0,
    rank_sep: float = 40.0,
    sweeps: int = 8,
    dummy_width: float = 8.0,
    seed_order: str = "input",
    _work: list | None = None,
) -> Layout:
    """Lay out nodes ``ids`` (sizes ``(w, h)``) with ``edges`` as index pairs.

    Nodes should come in execution order (it seeds the ordering and breaks cycles).
    ``seed_order="random"`` shuffles the initial order (the baseline tests compare to).
    """
    n = len(ids)
    if n == 0:
        return Layout()
    src, dst, rev = _forward_edges(edges)
    layer = _longest_path_layers(n, src, dst)
    g = _split_long_edges(layer, src, dst, sizes, dummy_width)
    members, loc, rank = _initial_order(g, seed_order)
    rank = _reduce_crossings(g, members, loc, rank, sweeps)
    for li in range(g.nlayers):
        m = members[li]
        members[li] = m[np.argsort(rank[m], kind="stable")]
    x = _assign_x(g, members, rank.astype(np.int64), node_sep)
    out = _place(ids, g, x, rank, rev, rank_sep)
    if _work is not None:
        _work.append(_Work(n, g.layer_of, rank, g.seg_u, g.seg_v, g.chains, rev))
    return out


def _forward_edges(edges: Iterable[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique edges without self-loops, each pointing forward in index order (``rev``: the
    ones reversed to get there, which breaks every cycle)."""
    e = np.array([(s, d) for s, d in edges if s != d], dtype=np.int64).reshape(-1, 2)
    if len(e):
        e = np.unique(e, axis=0)
    src, dst = e[:, 0].copy(), e[:, 1].copy()
    rev = src > dst
    src[rev], dst[rev] = e[rev, 1], e[rev, 0]
    return src, dst, rev


def _longest_path_layers(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Layering: longest path from the sources, in index order (a topological order now)."""
    if not len(src):
        return np.zeros(n, dtype=np.int64)
    # Edges sorted by destination: every edge into s (dst == s < d) comes before any
    # edge out of s, so lay[s] is final when it is read; one pass is enough.
    by_dst = np.argsort(dst, kind="stable")
    lay = [0] * n
    for s, d in zip(src[by_dst].tolist(), dst[by_dst].tolist()):
        ls = lay[s] + 1
        if ls > lay[d]:
            lay[d] = ls
    # Sources (inputs, constants) sit right above their first consumer.
    has_pred = np.zeros(n, dtype=bool)
    has_pred[dst] = True
    min_succ = [math.inf] * n
    for s, d in zip(src.tolist(), dst.tolist()):
        if lay[d] < min_succ[s]:
            min_succ[s] = lay[d]
    for v in range(n):
        if not has_pred[v] and min_succ[v] != math.inf:
            lay[v] = int(min_succ[v]) - 1
    layer = np.array(lay, dtype=np.int64)
    layer -= layer.min()
    return layer


def _split_long_edges(
    layer: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    sizes: Sequence[tuple[float, float]],
    dummy_width: float,
) -> _Layered:
    """Dummy nodes: an edge spanning k layers becomes k segments."""
    n = len(layer)
    span = layer[dst] - layer[src] if len(src) else np.zeros(0, dtype=np.int64)
    ndummy = int(np.maximum(span - 1, 0).sum())
    total = n + ndummy
    layer_of = np.concatenate([layer, np.zeros(ndummy, dtype=np.int64)])
    chains: list[list[int]] = []
    seg_u_l: list[int] = []
    seg_v_l: list[int] = []
    nxt = n
    for s, d, k in zip(src.tolist(), dst.tolist(), span.tolist()):
        chain = [s]
        base = layer[s]
        for j in range(1, k):
            layer_of[nxt] = base + j
            chain.append(nxt)
            nxt += 1
        chain.append(d)
        chains.append(chain)
        seg_u_l.extend(chain[:-1])
        seg_v_l.extend(chain[1:])
    seg_u = np.array(seg_u_l, dtype=np.int64)
    seg_v = np.array(seg_v_l, dtype=np.int64)
    widths = np.full(total, dummy_width)
    heights = np.zeros(total)
    for i, (w, h) in enumerate(sizes):
        widths[i], heights[i] = w, h
    nlayers = int(layer_of.max()) + 1
    # Segments bucketed by the layer of their lower end (down sweep) and upper end (up sweep).
    down = np.argsort(layer_of[seg_v], kind="stable")
    up = np.argsort(layer_of[seg_u], kind="stable")
    return _Layered(
        n=n,
        layer_of=layer_of,
        chains=chains,
        seg_u=seg_u,
        seg_v=seg_v,
        widths=widths,
        heights=heights,
        weight=np.where(np.arange(total) < n, 1.0, 2.0),
        nlayers=nlayers,
        down=down,
        down_b=np.searchsorted(layer_of[seg_v][down], np.arange(nlayers + 1)),
        up=up,
        up_b=np.searchsorted(layer_of[seg_u][up], np.arange(nlayers + 1)),
    )


def _initial_order(g: _Layered, seed_order: str) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Initial order within layers: input order (dummies follow their source's position).
    Returns the members of each layer, every node's slot in that list (``loc``, fixed) and
    its rank (changed by the sweeps)."""
    total = g.total
    if seed_order == "random":
        key0 = np.random.default_rng(0).permutation(total).astype(float)
    else:
        key0 = np.arange(total, dtype=float)
        if total > g.n:
            # A dummy starts next to the node its edge came from.
            for ch in g.chains:
                for dmy in ch[1:-1]:
                    key0[dmy] = ch[0] + 0.5
    members_order = np.lexsort((key0, g.layer_of))
    bounds = np.searchsorted(g.layer_of[members_order], np.arange(g.nlayers + 1))
    members = [members_order[bounds[i] : bounds[i + 1]] for i in range(g.nlayers)]
    rank = np.zeros(total, dtype=np.float64)
    for m in members:
        rank[m] = np.arange(len(m))
    loc = np.zeros(total, dtype=np.int64)
    for m in members:
        loc[m] = np.arange(len(m))
    return members, loc, rank


def _reduce_crossings(
    g: _Layered, members: list[np.ndarray], loc: np.ndarray, rank: np.ndarray, sweeps: int
) -> np.ndarray:
    """Barycentre sweeps down and up; the ranks of the ordering with the fewest crossings."""

    def reorder(li: int, near: np.ndarray, far: np.ndarray) -> None:
        m = members[li]
        if len(m) < 2 or len(near) == 0:
            return
        cnt = np.bincount(loc[near], minlength=len(m))
        bsum = np.bincount(loc[near], weights=rank[far], minlength=len(m))
        cur = rank[m]
        key = np.where(cnt > 0, bsum / np.maximum(cnt, 1), cur)
        order = np.lexsort((cur, key))
        rank[m[order]] = np.arange(len(m))

    seg_u, seg_v = g.seg_u, g.seg_v
    best = rank.copy()
    check = len(seg_u) <= 20000  # counting crossings costs about one sweep
    best_cross = count_crossings(g.layer_of, rank, seg_u, seg_v) if check else 0
    for it in range(sweeps):
        if it % 2 == 0:
            for li in range(1, g.nlayers):
                sl = g.into(li)
                reorder(li, seg_v[sl], seg_u[sl])
        else:
            for li in range(g.nlayers - 2, -1, -1):
                sl = g.out_of(li)
                reorder(li, seg_u[sl], seg_v[sl])
        if check:
            c = count_crossings(g.layer_of, rank, seg_u, seg_v)
            if c < best_cross:
                best_cross, best = c, rank.copy()
            if best_cross == 0:
                break
        else:
            best = rank
    return best


def _assign_x(
    g: _Layered, members: list[np.ndarray], pos: np.ndarray, node_sep: float
) -> np.ndarray:
    """x coordinates: neighbour means projected onto non-overlapping, order-keeping rows.
    ``pos``: every node's position within its (final) layer order."""
    x = np.zeros(g.total)
    offs: list[np.ndarray] = []
    for m in members:
        w = g.widths[m]
        s = (w[:-1] + w[1:]) / 2.0 + node_sep
        c = np.concatenate([[0.0], np.cumsum(s)])
        offs.append(c)
        x[m] = c - c[-1] / 2.0
    place_single = _single_node_placer(g, members, x)
    seg_u, seg_v, weight = g.seg_u, g.seg_v, g.weight

    def place_layer(li: int, segs_dn: np.ndarray | None, segs_up: np.ndarray | None) -> None:
        if len(members[li]) == 1:
            place_single(li, segs_dn is not None, segs_up is not None)
            return
        m = members[li]
        sum_x = np.zeros(len(m))
        cnt_x = np.zeros(len(m))
        for segs, near_arr, far_arr in (
            (segs_dn, seg_v, seg_u),
            (segs_up, seg_u, seg_v),
        ):
            if segs is None or len(segs) == 0:
                continue
            near, far = near_arr[segs], far_arr[segs]
            wf = weight[far] * weight[near]
            sum_x += np.bincount(pos[near], weights=x[far] * wf, minlength=len(m))
            cnt_x += np.bincount(pos[near], weights=wf, minlength=len(m))
        desired = np.where(cnt_x > 0, sum_x / np.maximum(cnt_x, 1e-9), x[m])
        c = offs[li]
        y = _pav((desired - c).tolist(), (weight[m] * (cnt_x + 0.25)).tolist())
        x[m] = np.asarray(y) + c

    for it in range(6):
        if it % 2 == 0:
            for li in range(1, g.nlayers):
                place_layer(li, g.into(li), None)
        else:
            for li in range(g.nlayers - 2, -1, -1):
                place_layer(li, None, g.out_of(li))
    for li in range(g.nlayers):
        place_layer(li, g.into(li), g.out_of(li))
    return x


def _single_node_placer(
    g: _Layered, members: list[np.ndarray], x: np.ndarray
) -> Callable[[int, bool, bool], None]:
    """Deep, narrow graphs have thousands of one-node layers: those take a pure-Python path
    (numpy's per-call overhead would dominate). The returned function moves the node of a
    one-node layer to the weighted mean x of its neighbours below and/or above."""
    single = [len(m) == 1 for m in members]
    wl = g.weight.tolist()
    layer_of = g.layer_of
    near_dn: dict[int, list[tuple[int, float]]] = {}
    near_up: dict[int, list[tuple[int, float]]] = {}
    for u, v in zip(g.seg_u.tolist(), g.seg_v.tolist()):
        w_uv = wl[u] * wl[v]
        if single[layer_of[v]]:
            near_dn.setdefault(v, []).append((u, w_uv))
        if single[layer_of[u]]:
            near_up.setdefault(u, []).append((v, w_uv))

    def place_single(li: int, dn: bool, up: bool) -> None:
        v = int(members[li][0])
        sx = cx = 0.0
        if dn:
            for f, w_f in near_dn.get(v, ()):
                sx += x[f] * w_f
                cx += w_f
        if up:
            for f, w_f in near_up.get(v, ()):
                sx += x[f] * w_f
                cx += w_f
        if cx > 0:
            x[v] = sx / cx

    return place_single


def _place(
    ids: Sequence[str],
    g: _Layered,
    x: np.ndarray,
    rank: np.ndarray,
    rev: np.ndarray,
    rank_sep: float,
) -> Layout:
    """y by layer, boxes centred on their layer's row; the node boxes and edge polylines."""
    n, nlayers, layer_of = g.n, g.nlayers, g.layer_of
    widths, heights = g.widths, g.heights
    layer_h = np.zeros(nlayers)
    np.maximum.at(layer_h, layer_of[:n], heights[:n])
    layer_h = np.maximum(layer_h, 1.0)
    top = np.concatenate([[0.0], np.cumsum(layer_h + rank_sep)])[:nlayers]
    cy = top[layer_of] + layer_h[layer_of] / 2.0
    left = x - widths / 2.0
    xmin = float(left[:n].min()) if n else 0.0
    if g.total > n:
        xmin = min(xmin, float(left.min()))
    x -= xmin
    out = Layout()
    xl, cyl, wl, hl = x.tolist(), cy.tolist(), widths.tolist(), heights.tolist()
    for i, nid in enumerate(ids):
        out.positions[nid] = (xl[i] - wl[i] / 2.0, cyl[i] - hl[i] / 2.0, wl[i], hl[i])
        out.layers[nid] = int(layer_of[i])
        out.order[nid] = int(rank[i])
    row_top = top.tolist()
    row_bot = (top + layer_h).tolist()
    lol = layer_of.tolist()
    for ch, was_rev in zip(g.chains, rev.tolist()):
        pts = _route(ch, xl, cyl, hl, lol, row_top, row_bot)
        s, d = ch[0], ch[-1]
        if was_rev:
            out.edges.append((ids[d], ids[s], pts[::-1]))
        else:
            out.edges.append((ids[s], ids[d], pts))
    right = x + widths / 2.0
    out.width = float(right.max()) if g.total else 0.0
    out.height = float(top[-1] + layer_h[-1]) if nlayers else 0.0
    out.reversed_edges = int(rev.sum())
    return out


def _route(
    ch: list[int],
    xl: list[float],
    cyl: list[float],
    hl: list[float],
    lol: list[int],
    row_top: list[float],
    row_bot: list[float],
) -> list[tuple[float, float]]:
    """One edge's polyline (source to destination). Edges run vertically through the rows (at
    their end's or dummy's x, which the coordinate assignment keeps clear of every other box
    in the row) and only change x in the gaps between rows, where there are no boxes: a long
    edge never crosses a node it passes (a residual edge stays beside the chain it skips)."""
    s, d = ch[0], ch[-1]
    ys = cyl[s] + hl[s] / 2.0
    pts = [(xl[s], ys)]
    if row_bot[lol[s]] > ys + 1e-9:
        pts.append((xl[s], row_bot[lol[s]]))
    for k in ch[1:-1]:
        lk = lol[k]
        pts.append((xl[k], row_top[lk]))
        pts.append((xl[k], row_bot[lk]))
    yd = cyl[d] - hl[d] / 2.0
    if row_top[lol[d]] < yd - 1e-9:
        pts.append((xl[d], row_top[lol[d]]))
    pts.append((xl[d], yd))
    return pts


def layout_graph(
    graph: Graph,
    size: Callable[[Node], tuple[float, float]] = default_size,
    **kwargs: Any,
) -> Layout:
    """Flat layered layout of every node of ``graph`` (a full graph or a view)."""
    ids = [n.id for n in graph.nodes]
    index = {nid: i for i, nid in enumerate(ids)}
    edges = [(index[e.src], index[e.dst]) for e in graph.edges if e.src in index and e.dst in index]
    return layered_layout(ids, [size(n) for n in graph.nodes], edges, **kwargs)


# ---- per-group layouts ---------------------------------------------------------------------


class GroupLayouts:
    """Layouts of a graph's groups, computed on demand and cached.

    ``layout(expanded)`` returns the compound layout of ``graph.view(expanded)``:
    collapsed groups are boxes, expanded groups are frames holding their own layout.
    Edges are drawn at the level where they are laid out: an edge into an expanded
    group ends at its frame.
    """

    def __init__(
        self,
        graph: Graph,
        size: Callable[[Node], tuple[float, float]] = default_size,
        **layout_kwargs: Any,
    ) -> None:
        self.graph = graph
        self.size = size
        self.kwargs = layout_kwargs
        self._cache: dict[tuple[str, tuple[str, ...]], Layout] = {}
        self._depth = {g: (g.count(".") + 1 if g else 0) for g in graph.groups}
        # Every edge belongs to the lowest group containing both ends: laying out a
        # group only touches its own edges.
        self._edges_at: dict[str, list[tuple[str, str]]] = {}
        self._enters: dict[str, list[str]] = {}
        self._leaves: dict[str, list[str]] = {}
        paths = {n.id: n.module_path for n in graph.nodes}
        chains = {p: ancestors(p) for p in set(paths.values()) | {ROOT}}
        for e in graph.edges:
            a, b = chains[paths.get(e.src, ROOT)], chains[paths.get(e.dst, ROOT)]
            k = 0
            while k + 1 < len(a) and k + 1 < len(b) and a[k + 1] == b[k + 1]:
                k += 1
            self._edges_at.setdefault(a[k], []).append((e.src, e.dst))
            # Groups the edge enters (below the common one on dst's side) and leaves.
            for g in b[k + 1 :]:
                self._enters.setdefault(g, []).append(e.dst)
            for g in a[k + 1 :]:
                self._leaves.setdefault(g, []).append(e.src)
        self._members: dict[str, list[Node]] = {}
        for n in graph.nodes:
            self._members.setdefault(n.module_path, []).append(n)
        self._group_nodes: dict[str, Node] = {}
        # Units of every group (member nodes and child groups) in first-execution order.
        self._units: dict[str, dict[str, None]] = {}
        for n in graph.nodes:
            chain = chains[n.module_path]
            for g, child in zip(chain, chain[1:]):
                self._units.setdefault(g, {}).setdefault(GROUP_PREFIX + child, None)
            self._units.setdefault(n.module_path, {}).setdefault(n.id, None)

    def _unit_in(self, group: str, node_id: str) -> str:
        path = self.graph.node(node_id).module_path
        if path == group:
            return node_id
        d = self._depth.get(group, 0)
        return GROUP_PREFIX + ".".join(path.split(".")[: d + 1])

    def _group_node(self, path: str) -> Node:
        node = self._group_nodes.get(path)
        if node is None:
            grp = self.graph.groups.get(path)
            node = Node(
                GROUP_PREFIX + path,
                "group",
                path.rsplit(".", 1)[-1],
                path,
                attributes={"type": grp.type if grp else ""},
            )
            self._group_nodes[path] = node
        return node

    def group_layout(self, group: str, expanded: Iterable[str] = ()) -> Layout:
        """Layout of the inside of ``group`` (relative coordinates), child groups as boxes
        (expanded ones sized to hold their own layout)."""
        exp = tuple(
            sorted(g for g in set(expanded) if g.startswith(group + ".") or (group == ROOT and g))
        )
        key = (group, exp)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        units: list[str] = []
        sizes: list[tuple[float, float]] = []
        expanded_set = set(exp)
        for u in self._units.get(group, {}):
            units.append(u)
            if u.startswith(GROUP_PREFIX):
                path = u[len(GROUP_PREFIX) :]
                if path in expanded_set:
                    inner = self.group_layout(path, exp)
                    sizes.append((inner.width + 2 * PAD, inner.height + HEADER + PAD))
                else:
                    sizes.append(self.size(self._group_node(path)))
            else:
                sizes.append(self.size(self.graph.node(u)))
        # Ports: the entry first and the exit last (the given order breaks cycles).
        enters = self._enters.get(group, []) if group != ROOT else []
        leaves = self._leaves.get(group, []) if group != ROOT else []
        if enters:
            units.insert(0, port_id(group, "in"))
            sizes.insert(0, PORT_SIZE)
        if leaves:
            units.append(port_id(group, "out"))
            sizes.append(PORT_SIZE)
        index = {u: i for i, u in enumerate(units)}
        pairs = []
        for s, d in self._edges_at.get(group, []):
            pairs.append((index[self._unit_in(group, s)], index[self._unit_in(group, d)]))
        if enters:
            pin = index[port_id(group, "in")]
            pairs.extend((pin, index[self._unit_in(group, d)]) for d in set(enters))
        if leaves:
            pout = index[port_id(group, "out")]
            pairs.extend((index[self._unit_in(group, s)], pout) for s in set(leaves))
        lay = layered_layout(units, sizes, pairs, **self.kwargs)
        for side, present in (("in", enters), ("out", leaves)):
            if present:
                pid = port_id(group, side)
                lay.ports[pid] = lay.positions.pop(pid)
                lay.layers.pop(pid, None)
                lay.order.pop(pid, None)
        self._cache[key] = lay
        return lay

    def layout(self, expanded: Iterable[str] = ()) -> Layout:
        """Compound layout with ``expanded`` groups open (their ancestors open too)."""
        exp: set[str] = set()
        for g in expanded:
            exp.update(ancestors(g)[1:])
        out = Layout()
        root = self.group_layout(ROOT, exp)
        out.width, out.height = root.width, root.height
        stack: list[tuple[str, float, float]] = [(ROOT, 0.0, 0.0)]
        # x of each expanded group's entry / exit port, where its outer edges attach.
        entry_x: dict[str, float] = {}
        exit_x: dict[str, float] = {}
        # (edge index, may its start move, may its end move): a port edge's frame end is
        # already where it belongs.
        ends: list[tuple[int, bool, bool]] = []
        while stack:
            group, dx, dy = stack.pop()
            lay = self.group_layout(group, exp)
            for uid, (x, y, w, h) in lay.positions.items():
                out.positions[uid] = (x + dx, y + dy, w, h)
                if uid.startswith(GROUP_PREFIX) and uid[len(GROUP_PREFIX) :] in exp:
                    out.frames.append(uid)
                    stack.append((uid[len(GROUP_PREFIX) :], x + dx + PAD, y + dy + HEADER))
            frame_id = GROUP_PREFIX + group
            pin, pout = port_id(group, "in"), port_id(group, "out")
            if pin in lay.ports:
                x, _, w, _ = lay.ports[pin]
                entry_x[frame_id] = x + dx + w / 2.0
            if pout in lay.ports:
                x, _, w, _ = lay.ports[pout]
                exit_x[frame_id] = x + dx + w / 2.0
            for s, d, pts in lay.edges:
                moved = [(px + dx, py + dy) for px, py in pts]
                # Port edges run from the frame's top / to its bottom, through the port.
                ends.append((len(out.edges), s != pin, d != pout))
                if s == pin:
                    fy = out.positions[frame_id][1]
                    s, moved = frame_id, [(moved[0][0], fy), *moved]
                elif d == pout:
                    fx, fy, fw, fh = out.positions[frame_id]
                    d, moved = frame_id, [*moved, (moved[-1][0], fy + fh)]
                out.edges.append((s, d, moved))
        # Edges into / out of an expanded group meet its port's edges at the port's x
        # (the layout of the level above aimed at the middle of the box).
        for i, fix_src, fix_dst in ends:
            s, d, pts = out.edges[i]
            if fix_dst and d in entry_x and pts[-1][0] != entry_x[d]:
                pts = _move_end(pts[::-1], entry_x[d])[::-1]
            if fix_src and s in exit_x and pts[0][0] != exit_x[s]:
                pts = _move_end(pts, exit_x[s])
            out.edges[i] = (s, d, pts)
        return out

    def clear(self) -> None:
        self._cache.clear()


def _move_end(pts: list[tuple[float, float]], x: float) -> list[tuple[float, float]]:
    """Move the first point to ``x``, with the point under it that extends the edge to
    the row's edge when the box is shorter than its row."""
    k = 2 if len(pts) > 2 and abs(pts[1][0] - pts[0][0]) < 1e-9 else 1
    return [(x, y) for _, y in pts[:k]] + pts[k:]
