"""Operation scheduling (IPDPS 2019's second decision): an order of ops per device, and which ops co-run.

Stock TensorFlow runs any ready op; here a strategy fixes the order with control dependencies
(`placer.graph.order`). One priority list over the whole step gives a topological order; each device's
ops, in that order, are cut into links of up to `corun` ops none of which waits for another, and a device
starts a link only when the previous one has ended. Since every link follows the ones before it in one
global topological order, the chains of different devices cannot wait for each other in a cycle.

Strategies:
- "default": no order (TensorFlow's own);
- "critical-path": the ready op with the longest path of op time to the end of the step first;
- "complementary": as critical-path, but a link pairs a compute-bound op with a memory-bound one when one
  is ready (arithmetic intensity above or below `COMPUTE_BOUND_FLOPS_PER_BYTE`), so co-running ops
  compete less for the same resource, as the paper co-runs them.

An order leaves some step ops free (`OpOrder.left_free`, with why): those no order can hold
(`placer.graph.order.unorderable_ops`), and, on request, the short ones. Every link costs a barrier the
executor waits on, so ordering only the ops that take long (`min_op_seconds`, `longest`) keeps the decisions
that matter at a fraction of the barriers.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from typing import Collection, Mapping

from placer.devices import DeviceSet
from placer.errors import OrderError
from placer.graph.opgraph import OpGraph
from placer.graph.order import OpChain, enforce_order, unorderable_ops
from placer.placement import Placement

STRATEGIES = ("default", "critical-path", "complementary")
COMPUTE_BOUND_FLOPS_PER_BYTE = 10.0
"""Above this many FLOPs per byte an op is compute-bound (a CPU core does ~10-50 FLOPs in the time it moves
a byte from memory); below, memory-bound."""


def priorities(graph: OpGraph, op_seconds: Mapping[str, float]) -> dict[str, float]:
    """Each step op's bottom level: its time plus the longest path of op time from it to the end of the step."""
    step = graph.step_ops
    names = {op.name for op in step}
    consumers: dict[str, list[str]] = {op.name: [] for op in step}
    for op in step:
        for source in (*op.producers, *op.control_inputs):
            if source in names:
                consumers[source].append(op.name)
    level: dict[str, float] = {}
    for op in reversed(step):  # step ops are in topological order
        level[op.name] = op_seconds.get(op.name, 0.0) + max((level[c] for c in consumers[op.name]), default=0.0)
    return level


def is_compute_bound(graph: OpGraph, op_name: str) -> bool:
    """More FLOPs per byte read and written than `COMPUTE_BOUND_FLOPS_PER_BYTE`."""
    op = graph.op(op_name)
    moved = sum(op.output_bytes)
    for tensor in op.data_inputs:
        producer, _, index = tensor.rpartition(":")
        outputs = graph.op(producer).output_bytes
        moved += outputs[int(index)] if int(index) < len(outputs) else 0
    return op.flops > COMPUTE_BOUND_FLOPS_PER_BYTE * max(moved, 1)


@dataclass(frozen=True)
class OpOrder:
    """Per device, the links a strategy runs one after another, and the step ops it leaves to TensorFlow."""

    strategy: str
    chains: tuple[OpChain, ...]
    left_free: Mapping[str, str]
    """Step op -> why the order does not hold it; TensorFlow runs it whenever its inputs are ready."""

    @property
    def links(self) -> int:
        return sum(len(chain.links) for chain in self.chains)

    @property
    def ordered_ops(self) -> int:
        return sum(len(link) for chain in self.chains for link in chain.links)

    def left_free_counts(self) -> dict[str, int]:
        """How many ops were left free for each reason."""
        return dict(Counter(self.left_free.values()))

    def describe(self) -> str:
        free = "; ".join(f"{count} {why}" for why, count in sorted(self.left_free_counts().items()))
        return (f"{self.strategy}: {self.ordered_ops} ops in {self.links} links on {len(self.chains)} devices"
                + (f", left free: {free}" if free else ""))


@dataclass(frozen=True)
class OrderedStep:
    """A step with an op order enforced: what a `Measurer` runs, and the order to check its trace against."""

    graph: OpGraph
    """The step with the order's barriers and control dependencies."""
    placement: Placement
    """Of `graph`: every original op where it was, every barrier on its chain's device."""
    order: OpOrder


def order_ops(graph: OpGraph, placement: Placement, op_seconds: Mapping[str, float], strategy: str,
              corun: int = 2, *, min_op_seconds: float = 0.0, longest: int | None = None) -> OpOrder:
    """Per device, the chain of op links `strategy` runs there (none for "default").

    op_seconds: each op's time on its device (e.g. a `Simulator`'s op costs or a profile); corun: ops per
    link, none of which waits for another; min_op_seconds: order only ops at least this long; longest: order
    only each device's `longest` longest ops. The ops left out run whenever they are ready."""
    if strategy not in STRATEGIES:
        raise OrderError(f"unknown op-order strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    if not isinstance(corun, int) or isinstance(corun, bool) or corun < 1:
        raise OrderError(f"corun must be a whole number of ops per link, at least 1, got {corun!r}")
    if not min_op_seconds >= 0:
        raise OrderError(f"min_op_seconds must be 0 or more seconds, got {min_op_seconds!r}")
    if longest is not None and (not isinstance(longest, int) or isinstance(longest, bool) or longest < 1):
        raise OrderError(f"longest must be a whole number of ops per device, at least 1 (or None for all), "
                         f"got {longest!r}")
    if strategy == "default":
        return OpOrder(strategy, (), {})
    op_device = placement.op_devices(graph)
    left_free = _left_free(graph, op_device, op_seconds, min_op_seconds, longest)
    order = _list_order(graph, op_seconds, set(left_free), complementary=strategy == "complementary")
    position, upstream = _ordered_ancestors(graph, set(order))
    per_device: dict[str, list[list[str]]] = {}
    for name in order:
        links = per_device.setdefault(op_device[name], [])
        current = links[-1] if links else None
        # ops of a link co-run, so none may wait for another, even through ops left free
        waits = current is not None and any(upstream[name] >> position[op] & 1 for op in current)
        if current is None or len(current) >= corun or waits:
            links.append([name])
        else:
            current.append(name)
    chains = tuple(OpChain(device, tuple(frozenset(link) for link in links),
                           tuple(f"{strategy} {i}" for i in range(len(links))))
                   for device, links in per_device.items())
    return OpOrder(strategy, chains, left_free)


def ordered_step(graph: OpGraph, placement: Placement, devices: DeviceSet, op_seconds: Mapping[str, float],
                 strategy: str, corun: int = 2, *, min_op_seconds: float = 0.0,
                 longest: int | None = None) -> OrderedStep:
    """`graph` with `strategy`'s order (`order_ops`) enforced, placed on `devices` as `placement` places it."""
    order = order_ops(graph, placement, op_seconds, strategy, corun, min_op_seconds=min_op_seconds, longest=longest)
    ordered = enforce_order(graph, order.chains)
    metadata = {**placement.metadata, "op_order": strategy, "corun": corun, "min_op_seconds": min_op_seconds,
                "longest": longest}
    placed = ordered.placed_op_devices(placement.op_devices(graph), devices)
    return OrderedStep(ordered.graph, Placement.from_op_devices(ordered.graph, devices, placed, dict(metadata)), order)


def _left_free(graph: OpGraph, op_device: Mapping[str, str], op_seconds: Mapping[str, float],
               min_op_seconds: float, longest: int | None) -> dict[str, str]:
    """Step ops no order can hold, then those shorter than `min_op_seconds`, then those beyond each device's
    `longest` longest, each with why."""
    left_free = unorderable_ops(graph)
    candidates = [op.name for op in graph.step_ops if op.name not in left_free]
    if min_op_seconds > 0:
        short = f"shorter than {min_op_seconds * 1e6:g} us"
        for name in candidates:
            if op_seconds.get(name, 0.0) < min_op_seconds:
                left_free[name] = short
    if longest is not None:
        per_device: dict[str, list[str]] = {}
        for name in candidates:
            if name not in left_free:
                per_device.setdefault(op_device[name], []).append(name)
        beyond = f"not among its device's {longest} longest"
        for names in per_device.values():
            for name in sorted(names, key=lambda n: -op_seconds.get(n, 0.0))[longest:]:
                left_free[name] = beyond
    return left_free


def _ordered_ancestors(graph: OpGraph, ordered: set[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Each step op's position among the step ops, and per step op a bit set (bit = position) of the
    `ordered` ops it waits for, directly or through other ops."""
    step = graph.step_ops
    index = {op.name: i for i, op in enumerate(step)}
    upstream: dict[str, int] = {}
    for op in step:  # topological order: producers first
        bits = 0
        for source in (*op.producers, *op.control_inputs):
            if source in index:
                bits |= upstream[source] | ((1 << index[source]) if source in ordered else 0)
        upstream[op.name] = bits
    return index, upstream


def _list_order(graph: OpGraph, op_seconds: Mapping[str, float], free: Collection[str], *,
                complementary: bool) -> list[str]:
    """The step ops that are not `free`, in a topological order of the step that takes the ready op of highest
    priority first; with `complementary`, alternating compute-bound and memory-bound ops while both kinds
    are ready. Free ops are taken as soon as they are ready: the order does not hold them."""
    level = priorities(graph, op_seconds)
    step = graph.step_ops
    names = {op.name for op in step}
    waiting = {op.name: sum(1 for s in {*op.producers, *op.control_inputs} if s in names) for op in step}
    consumers: dict[str, list[str]] = {op.name: [] for op in step}
    for op in step:
        for source in {*op.producers, *op.control_inputs}:
            if source in names:
                consumers[source].append(op.name)
    position = {op.name: i for i, op in enumerate(step)}
    kinds = {name: is_compute_bound(graph, name) for name in names - set(free)} if complementary else {}
    ready: dict[bool | None, list] = {None: [], True: [], False: []}  # None: free ops

    def push(name: str) -> None:
        side = None if name in free else kinds.get(name, True)
        heapq.heappush(ready[side], (-level[name], position[name], name))

    for name, count in waiting.items():
        if count == 0:
            push(name)
    order, want_compute = [], True
    while ready[None] or ready[True] or ready[False]:
        if ready[None]:
            name = heapq.heappop(ready[None])[2]
        else:
            side = want_compute if ready[want_compute] else not want_compute
            if not complementary:
                side = True
            name = heapq.heappop(ready[side])[2]
            order.append(name)
            want_compute = not side
        for consumer in consumers[name]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                push(consumer)
    return order
