"""An order of ops per device, enforced with control dependencies and checked on a traced step.

A chain is a sequence of op sets (links) that one device runs one after another: no op of a link starts
before every op of the link before it has ended. Schedules of micro-batches (`placer.schedule`) and op
orders per device use it alike.

Not every op can be held by an order (`unorderable_ops`): ops the initializer runs too would make
initialization wait for the step, and grappler drops the control edges out of constants.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from placer.errors import GraphBuildError, OrderError
from placer.graph.opgraph import OpGraph

BARRIER_SCOPE = "placer_order/"
"""Where the NoOps that separate links live."""
DEFAULT_TOLERANCE = 2e-6
"""Seconds a link's op may seem to start before the previous link ended: traces stamp whole microseconds."""


@dataclass(frozen=True)
class OpChain:
    """Op sets one device runs one after another."""

    device: str
    """The device the links run on; the barriers between them go there too."""
    links: tuple[frozenset[str], ...]
    labels: tuple[str, ...] = ()
    """A name per link for reports (e.g. "f@CPU:0 mb1"); default: link0, link1, ..."""

    def __post_init__(self):
        if self.labels and len(self.labels) != len(self.links):
            raise OrderError(f"chain on {self.device} has {len(self.links)} links but {len(self.labels)} labels")

    def label(self, index: int) -> str:
        return self.labels[index] if self.labels else f"link{index}"


@dataclass(frozen=True)
class OrderViolation:
    """A link whose first op started before the previous link's last op ended, on one device."""

    device: str
    before: str
    after: str
    early: float
    """Seconds the later link started before the earlier one ended."""

    def describe(self) -> str:
        return f"on {self.device}, {self.after} started {self.early * 1e6:.0f} us before {self.before} ended"


@dataclass(frozen=True)
class OrderedGraph:
    """A graph with chains enforced, and where its barriers must run."""

    graph: OpGraph
    barrier_devices: Mapping[str, str]
    """Every barrier NoOp -> the device of its chain."""

    def placed_op_devices(self, op_devices: Mapping[str, str], devices) -> dict[str, str]:
        """The device of every op of the ordered graph: every original op on the device `op_devices` gives it
        (full names), every barrier on its chain's device (a full or a short name in `barrier_devices`).
        `Placement.from_op_devices(ordered.graph, devices, ...)` makes it a placement."""
        full = {**{device.short_name: device.name for device in devices}, **{d.name: d.name for d in devices}}
        return {op.name: op_devices[op.name] if op.name in op_devices else full[self.barrier_devices[op.name]]
                for op in self.graph.ops}


INITIALIZER_RUNS_IT = "the initializer runs it too"
CONSTANT = "a constant: grappler computes it before the step and drops its control edges"


def unorderable_ops(graph: OpGraph) -> dict[str, str]:
    """Step ops an order cannot hold, each with why:

    - ops the initializer runs too (variable handles, shapes of initial values): a barrier before one would
      make initializing the variables wait for a training step, which reads them uninitialized;
    - constants, and ops computed from constants alone: grappler's dependency optimizer drops every control
      edge out of a constant with no inputs ("always executed early"), so a barrier waiting for one no longer
      waits, and constant folding turns the others into constants."""
    initializer = initializer_ops(graph)
    constant: set[str] = set()
    reasons: dict[str, str] = {}
    for op in graph.ops:  # topological order: an op's producers come first
        if op.type == "Const" or (op.data_inputs and not op.control_inputs and not _is_stateful(op.type)
                                  and all(p in constant for p in op.producers)):
            constant.add(op.name)
        if not op.in_step:
            continue
        if op.name in initializer:
            reasons[op.name] = INITIALIZER_RUNS_IT
        elif op.name in constant:
            reasons[op.name] = CONSTANT
    return reasons


def initializer_ops(graph: OpGraph) -> frozenset[str]:
    """The initializer op and every op it waits for."""
    needed = {graph.init_op}
    for op in reversed(graph.ops):  # topological order reversed: consumers before their producers
        if op.name in needed:
            needed.update(op.producers)
            needed.update(op.control_inputs)
    return frozenset(needed)


def _is_stateful(op_type: str) -> bool:
    """Whether TensorFlow may give `op_type` a new value each run (random ops, variable reads); an op type
    it does not know (a function call) counts as stateful."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op_type)
    return op_def is None or op_def.is_stateful


def enforce_order(graph: OpGraph, chains: Sequence[OpChain]) -> OrderedGraph:
    """`graph` with control dependencies that make each chain's device run its links in order.

    Between links k and k+1 a NoOp waits for every op of link k and for the NoOp before it, and every source
    op of link k+1 (one with no input from inside its link) waits for the NoOp; the other ops of link k+1
    descend from its sources. The NoOps wait for each other so that the chain holds even where grappler
    removes a whole link's ops (folds them into constants, drops identities).
    Raises OrderError if an op is in no graph, in two links, is one the initializer runs too and not in a
    chain's first link, or the order contradicts the graph's edges."""
    import tensorflow as tf

    step = {op.name: op for op in graph.step_ops}
    initializer = initializer_ops(graph)
    seen: dict[str, str] = {}
    for c, chain in enumerate(chains):
        for k, link in enumerate(chain.links):
            unknown = sorted(op for op in link if op not in step)
            if unknown:
                raise OrderError(f"chain on {chain.device}, {chain.label(k)}: ops {unknown[:3]} are not ops of the "
                                 f"training step of {graph.name!r}")
            for op in link:
                where = f"{chain.device} {chain.label(k)}"
                if op in seen:
                    raise OrderError(f"op {op!r} is in two links ({seen[op]} and {where}): give each op one place")
                seen[op] = where
            waits = sorted(op for op in link if op in initializer) if k > 0 else []
            if waits:
                raise OrderError(f"chain on {chain.device}, {chain.label(k)}: the initializer runs {waits[:3]} too, so "
                                 "making them wait for an earlier link would make initialization wait for the "
                                 "training step: leave them out of the chains (unorderable_ops lists such ops)")
    graph_def = tf.compat.v1.GraphDef.FromString(graph.graph_def)
    nodes = {node.name: node for node in graph_def.node}
    barriers: dict[str, str] = {}
    for c, chain in enumerate(chains):
        previous_barrier: str | None = None
        for k in range(1, len(chain.links)):
            earlier, later = chain.links[k - 1], chain.links[k]
            if not earlier or not later:
                continue
            waits_for = [f"^{op}" for op in sorted(earlier)] + ([f"^{previous_barrier}"] if previous_barrier else [])
            barrier = graph_def.node.add(name=f"{BARRIER_SCOPE}chain{c}/after{k - 1}", op="NoOp", input=waits_for)
            barriers[barrier.name] = chain.device
            previous_barrier = barrier.name
            for op in sorted(later):
                if not any(src in later for src in (*step[op].producers, *step[op].control_inputs)):
                    nodes[op].input.append(f"^{barrier.name}")
    return OrderedGraph(_with_order(graph, graph_def, barriers), barriers)


def _with_order(graph: OpGraph, graph_def, barriers: Mapping[str, str]) -> OpGraph:
    """`graph` as `graph_def` (its own, with `barriers` added and control edges to them) makes it: the same ops
    with their new control inputs, and a NoOp per barrier in a colocation group of its own, in a topological
    order. Built from `graph`'s ops without importing the graph into TensorFlow again, which took minutes for
    the micro-batched steps of paper-size models; what an import would add is the same (tested)."""
    import tensorflow as tf

    from placer.graph.build import _topological_order
    from placer.graph.kernels import kernel_device_types
    from placer.graph.opgraph import ColocationGroup, OpNode

    nodes = {node.name: node for node in graph_def.node}
    try:
        order = _topological_order(graph_def, nodes)
    except GraphBuildError as error:
        raise OrderError(f"the order contradicts the data flow of {graph.name!r} (a link waits for ops that need it "
                         f"first): {error}") from None
    old = {op.name: op for op in graph.ops}
    groups = list(graph.groups)
    ops = []
    for name in order:
        controls = tuple(raw[1:] for raw in nodes[name].input if raw.startswith("^"))
        if name in barriers:
            group = ColocationGroup(len(groups), name, (name,), kernel_device_types(nodes[name]))
            groups.append(group)
            ops.append(OpNode(name=name, type="NoOp", data_inputs=(), control_inputs=controls, output_shapes=(),
                              output_dtypes=(), output_bytes=(), kernel_devices=group.kernel_devices,
                              group=group.index, flops=0, parameters=0, in_step=True))
        else:
            op = old[name]
            ops.append(op if controls == op.control_inputs else dataclasses.replace(op, control_inputs=controls))
    ordered_def = tf.compat.v1.GraphDef()
    ordered_def.versions.CopyFrom(graph_def.versions)
    ordered_def.library.CopyFrom(graph_def.library)
    ordered_def.node.extend(nodes[name] for name in order)
    return dataclasses.replace(graph, ops=tuple(ops), groups=tuple(groups),
                               graph_def=ordered_def.SerializeToString(deterministic=True))


def order_violations(trace: Mapping[str, Any] | str | Path, chains: Sequence[OpChain], *,
                     tolerance: float = DEFAULT_TOLERANCE) -> tuple[OrderViolation, ...]:
    """Where a traced step broke a chain: per device, each link's earliest traced op must start after the
    latest traced op of the link before it ended (`tolerance` seconds of clock granularity allowed). Ops the
    trace lacks (grappler fused or removed them) are skipped; a link with none is compared no more."""
    from placer.timeline import read_chrome_trace

    timeline = read_chrome_trace(trace)
    spans: dict[str, tuple[float, float]] = {}
    for span in timeline.spans:
        if span.kind == "op" and span.node:
            start, end = spans.get(span.node, (span.start, span.end))
            spans[span.node] = (min(start, span.start), max(end, span.end))
    violations = []
    for chain in chains:
        previous: tuple[str, float] | None = None  # label and end of the last link with traced ops
        for k, link in enumerate(chain.links):
            traced = [spans[op] for op in link if op in spans]
            if not traced:
                continue
            start, end = min(s for s, _ in traced), max(e for _, e in traced)
            if previous is not None and start < previous[1] - tolerance:
                violations.append(OrderViolation(chain.device, previous[0], chain.label(k), previous[1] - start))
            previous = (chain.label(k), end)
    return tuple(violations)


def traced_links(trace: Mapping[str, Any] | str | Path, chains: Sequence[OpChain]) -> tuple[int, int]:
    """(links with at least one traced op, all links): how much of the order a trace could check."""
    from placer.timeline import read_chrome_trace

    nodes = {span.node for span in read_chrome_trace(trace).spans if span.node}
    links = [link for chain in chains for link in chain.links]
    return sum(1 for link in links if nodes & link), len(links)
