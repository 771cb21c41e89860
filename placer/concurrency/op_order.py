"""Operation scheduling (IPDPS 2019's second decision): an order of ops per device, and which ops co-run.

Stock TensorFlow runs any ready op; here a strategy fixes the order with control dependencies
(`placer.graph.order`). One priority list over the whole step gives a topological order; each device's
ops, in that order, are cut into links of up to `corun` ops that do not feed each other, and a device
starts a link only when the previous one has ended. Since every link follows the ones before it in one
global topological order, the chains of different devices cannot wait for each other in a cycle.

Strategies:
- "default": no order (TensorFlow's own);
- "critical-path": the ready op with the longest path of op time to the end of the step first;
- "complementary": as critical-path, but a link pairs a compute-bound op with a memory-bound one when one
  is ready (arithmetic intensity above or below `COMPUTE_BOUND_FLOPS_PER_BYTE`), so co-running ops
  compete less for the same resource, as the paper co-runs them.
"""

from __future__ import annotations

import heapq
from typing import Mapping

from placer.devices import DeviceSet
from placer.errors import OrderError
from placer.graph.opgraph import OpGraph
from placer.graph.order import OpChain, OrderedGraph, enforce_order
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


def op_order_chains(graph: OpGraph, placement: Placement, op_seconds: Mapping[str, float], strategy: str,
                    corun: int = 2) -> list[OpChain]:
    """Per device, the chain of op links `strategy` runs there (empty for "default"). op_seconds: each op's
    time on its device (e.g. a `Simulator`'s op costs or a profile); corun: ops per link."""
    if strategy not in STRATEGIES:
        raise OrderError(f"unknown op-order strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    if not isinstance(corun, int) or corun < 1:
        raise OrderError(f"corun must be a whole number of ops per link, at least 1, got {corun!r}")
    if strategy == "default":
        return []
    order = _list_order(graph, op_seconds, complementary=strategy == "complementary")
    op_device = placement.op_devices(graph)
    step = {op.name: op for op in graph.step_ops}
    per_device: dict[str, list[list[str]]] = {}
    for name in order:
        links = per_device.setdefault(op_device[name], [])
        current = links[-1] if links else None
        feeds = current is not None and any(src in current for src in (*step[name].producers, *step[name].control_inputs))
        if current is None or len(current) >= corun or feeds:
            links.append([name])
        else:
            current.append(name)
    return [OpChain(device, tuple(frozenset(link) for link in links),
                    tuple(f"{strategy} {i}" for i in range(len(links))))
            for device, links in per_device.items()]


def ordered_step(graph: OpGraph, placement: Placement, devices: DeviceSet, op_seconds: Mapping[str, float],
                 strategy: str, corun: int = 2) -> tuple[OrderedGraph, Placement, list[OpChain]]:
    """`graph` with `strategy`'s order enforced, its placement on `devices` (barriers on their chains'
    devices), and the chains."""
    chains = op_order_chains(graph, placement, op_seconds, strategy, corun)
    ordered = enforce_order(graph, chains)
    return ordered, ordered.place(placement.op_devices(graph), devices,
                                  {**placement.metadata, "op_order": strategy, "corun": corun}), chains


def _list_order(graph: OpGraph, op_seconds: Mapping[str, float], *, complementary: bool) -> list[str]:
    """A topological order of the step ops, the ready op of highest priority first; with `complementary`,
    alternating compute-bound and memory-bound ops while both kinds are ready."""
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
    kinds = {name: is_compute_bound(graph, name) for name in names} if complementary else {}
    ready: dict[bool, list] = {True: [], False: []}

    def push(name: str) -> None:
        heapq.heappush(ready[kinds.get(name, True)], (-level[name], position[name], name))

    for name, count in waiting.items():
        if count == 0:
            push(name)
    order, want_compute = [], True
    while ready[True] or ready[False]:
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
