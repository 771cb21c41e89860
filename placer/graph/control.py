"""The control edges of a training step that TensorFlow still runs after grappler.

Graphs traced from `tf.function` carry automatic control dependencies: every stateful op waits for the
ones before it, so an optimizer step has thousands of control edges (7,126 in the Transformer at `tiny`).
Grappler's dependency optimizer removes most of them before the graph is partitioned (its
`TransitiveReduction`): a control edge A -> B goes when B is reachable from A along a longer path, since
that path already orders them. What is left is what TensorFlow sends between devices. Without this, the
simulator sent 2,668 tensors for a 90/10 split of the Transformer, where the partitioned graph TensorFlow
ran had 99 `_Recv` nodes (its data cuts); with it, the cut control edges went from 2,568 to 307, and
grouping per consumer and device (`placer.simulate.engine`) takes those to the one or few TensorFlow sends.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from placer.graph.opgraph import OpGraph

# Ops whose edges the dependency optimizer leaves alone: it cannot tell which path through a while loop's
# frame nodes (or out of a Merge) runs, so it neither removes their control edges nor counts paths through them.
FRAME_OP_TYPES = frozenset({"Enter", "RefEnter", "Exit", "RefExit", "NextIteration", "RefNextIteration"})
MERGE_OP_TYPES = frozenset({"Merge", "RefMerge"})
_NOT_WALKED_FROM = FRAME_OP_TYPES | MERGE_OP_TYPES


def kept_control_inputs(graph: OpGraph) -> dict[str, tuple[str, ...]]:
    """For each step op with control inputs, the ones grappler keeps: not duplicated by a data input of the
    same producer, and not implied by a longer path (the transitive reduction of the control edges)."""
    step = graph.step_ops
    index = {op.name: i for i, op in enumerate(step)}
    n = len(step)
    # Edges the reduction may walk: into ops that are not frame ops, from ops that are neither frame ops nor
    # merges. Step ops are in topological order, so every edge goes from a lower index to a higher one.
    walk_src, walk_dst, control_src, control_dst = [], [], [], []
    for j, op in enumerate(step):
        producers = set(op.producers)
        walkable_into = op.type not in FRAME_OP_TYPES
        for src in producers:
            i = index[src]
            if walkable_into and step[i].type not in _NOT_WALKED_FROM:
                walk_src.append(i)
                walk_dst.append(j)
        for src in dict.fromkeys(op.control_inputs):
            if src in producers:
                continue  # a control input that repeats a data input is dropped (CleanControlInputs)
            i = index[src]
            if walkable_into and step[i].type not in _NOT_WALKED_FROM:
                walk_src.append(i)
                walk_dst.append(j)
                control_src.append(i)
                control_dst.append(j)
    order = np.lexsort((np.array(walk_dst, dtype=np.int64), np.array(walk_src, dtype=np.int64)))
    src = np.array(walk_src, dtype=np.int64)[order]
    dst = np.array(walk_dst, dtype=np.int32)[order]
    out_ptr = np.searchsorted(src, np.arange(n + 1)).astype(np.int64)
    redundant = _redundant_control_edges(n, out_ptr, dst, np.array(control_src, dtype=np.int64),
                                         np.array(control_dst, dtype=np.int64))
    removed = {(step[s].name, step[t].name) for s, t, gone in zip(control_src, control_dst, redundant) if gone}
    kept = {}
    for op in step:
        if op.control_inputs:
            producers = set(op.producers)
            kept[op.name] = tuple(src for src in dict.fromkeys(op.control_inputs)
                                  if src not in producers and (src, op.name) not in removed)
    return kept


@njit(cache=True)
def _redundant_control_edges(n, out_ptr, out_dst, control_src, control_dst):
    """For each control edge, whether its target is also reached from its source by a path of two or more
    edges. Per source, one pass in topological order over the ops between its first output and its last
    control target, as grappler does (its longest-path lower bound, capped at 2)."""
    m = control_src.shape[0]
    redundant = np.zeros(m, dtype=np.bool_)
    by_source = np.argsort(control_src, kind="mergesort")
    distance = np.zeros(n, dtype=np.int8)  # 0: not reached, 1: by the direct edge only, 2: by a longer path
    first = 0
    while first < m:
        source = control_src[by_source[first]]
        last = first
        hi = -1
        while last < m and control_src[by_source[last]] == source:
            hi = max(hi, control_dst[by_source[last]])
            last += 1
        lo = n
        for e in range(out_ptr[source], out_ptr[source + 1]):
            lo = min(lo, out_dst[e])
        distance[lo:hi + 1] = 0
        for e in range(out_ptr[source], out_ptr[source + 1]):
            if out_dst[e] <= hi:
                distance[out_dst[e]] = 1
        for v in range(lo, hi + 1):
            if distance[v] > 0:
                for e in range(out_ptr[v], out_ptr[v + 1]):
                    if out_dst[e] <= hi:
                        distance[out_dst[e]] = 2
        for k in range(first, last):
            edge = by_source[k]
            redundant[edge] = distance[control_dst[edge]] == 2
        first = last
    return redundant
