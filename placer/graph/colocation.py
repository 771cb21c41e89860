"""Colocation groups: the sets of ops TensorFlow's placer always puts on one device.

TensorFlow colocates an op with the ops named in its `_class: loc:@name` attribute, and every consumer
of a resource handle or reference tensor with the op producing it (a variable with all its readers and
updaters). Placing whole groups is what keeps soft placement from silently moving ops. placer also keeps a
functional loop with the ops that make its inputs (see `colocation_groups`).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence


class _UnionFind:
    def __init__(self, names: Iterable[str]):
        self.parent = {name: name for name in names}

    def find(self, name: str) -> str:
        root = name
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[name] != root:  # path compression
            self.parent[name], name = root, self.parent[name]
        return root

    def union(self, a: str, b: str) -> None:
        root_a, root_b = self.find(a), self.find(b)
        if root_a != root_b:
            self.parent[root_b] = root_a


def colocation_groups(
    order: Sequence[str],
    colocate_with: Mapping[str, Sequence[str]],
    handle_edges: Iterable[tuple[str, str]],
    loop_input_edges: Iterable[tuple[str, str]] = (),
) -> tuple[dict[str, int], list[tuple[str, list[str]]]]:
    """Group ops that must share a device.

    order: op names in topological order (group and member order follow it, so results are deterministic).
    colocate_with: op -> names from its `_class: loc:@...` attribute (names not in `order` are ignored).
    handle_edges: (producer, consumer) pairs where the consumer reads a resource handle or reference.
    loop_input_edges: (producer, loop) pairs where a functional loop (`While`) takes its initial value from the
    producer. TensorFlow does not require these to share a device, but it runs each loop variable's frame
    (Enter, Merge, Switch, NextIteration, Exit) on its initial value's device and the body on the loop's, so a
    loop split from its inputs sends every variable across twice per iteration: on `local:2` on 2026-11-27 a
    20-step Keras LSTM's loop moved off its inputs' worker took 68.7-82.2 ms a step against 3.37 ms on one worker
    (`experiments/probes/loop_split.py`). A loop and what starts it are therefore one unit.
    Returns op -> group index, and per group (anchor name, member op names). The anchor is the op the
    others are colocated with when there is one, otherwise the group's first op.
    """
    uf = _UnionFind(order)
    anchors: set[str] = set()
    for op, targets in colocate_with.items():
        for target in targets:
            if target in uf.parent and op in uf.parent:
                uf.union(target, op)
                anchors.add(target)
    for producer, consumer in handle_edges:
        if producer in uf.parent and consumer in uf.parent:
            uf.union(producer, consumer)
            anchors.add(producer)
    for producer, loop in loop_input_edges:
        if producer in uf.parent and loop in uf.parent:
            uf.union(loop, producer)

    members: dict[str, list[str]] = {}
    for name in order:
        members.setdefault(uf.find(name), []).append(name)
    groups: list[tuple[str, list[str]]] = []
    group_of: dict[str, int] = {}
    for ops in members.values():  # dict keeps first-seen order: groups ordered by their first op
        anchor = next((op for op in ops if op in anchors), ops[0])
        for op in ops:
            group_of[op] = len(groups)
        groups.append((anchor, ops))
    return group_of, groups
