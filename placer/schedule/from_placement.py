"""Blocks from a real placement: a placed training step split per device into one forward and one backward
block per micro-batch (or the backward split again into input and weight gradients, `weight_gradient_split`),
with spans from the simulator's op costs and memory deltas from stashed activations.

Modeled assumptions, stated once: a micro-batch costs 1/micro_batches of the batch (op time and activation
bytes scale linearly with the batch); transfers between blocks cost nothing; the optimizer update runs once
per batch after the last backward and is left out of the blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from placer.devices import DeviceSet
from placer.errors import BlockTemplateError, MicroBatchError, PlacementError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement
from placer.schedule.blocks import BACKWARD, FORWARD, WEIGHT_GRADIENT, BlockSpec, BlockTemplate
from placer.simulate.simulator import ALIAS_OP_TYPES, Simulator

# Ops that make a step's input: their first dimension is the batch.
INPUT_OP_TYPES = frozenset({"Placeholder", "IteratorGetNext", "RandomUniform", "RandomUniformInt",
                            "RandomStandardNormal", "TruncatedNormal"})
# Ops that write variables: the optimizer's update, once per batch rather than per micro-batch. "Assign"
# covers ref and resource assignments alike; the scatters are sparse updates (Adam's slots of an embedding).
UPDATE_OP_PREFIXES = ("ResourceApply", "Apply", "ResourceSparseApply", "SparseApply", "Assign", "ResourceScatter",
                      "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMin", "ScatterMax",
                      "ScatterUpdate", "ScatterNdAdd", "ScatterNdSub", "ScatterNdUpdate")
# Sparse updates: their index inputs say which rows, so micro-batches' rows are concatenated, not averaged.
SPARSE_UPDATE_PREFIXES = ("ResourceSparseApply", "SparseApply", "ResourceScatter", "Scatter")

DEFAULT_RESOLUTION = 20
"""Time units the longest block gets when no time unit is given: enough to tell stages apart, small enough
for the solver."""
MiB = 2**20


def blocks_from_placement(
    simulator: Simulator, placement: Placement, micro_batches: int, *, batch_size: int | None = None,
    time_unit: float | None = None, memory_unit: int = MiB, of_micro_batch: bool = False,
    split_weight_gradients: bool = False,
) -> BlockTemplate:
    """The block template of one micro-batch of the simulator's graph placed by `placement` on its devices
    (`open_target(graph, "modeled:2xV100").simulator`, or a `Simulator` of your own cost tables).

    Each device that runs forward ops gets a block "f@DEVICE", each that runs backward ops "b@DEVICE"; a
    block waits for every block that feeds one of its ops. Spans are in units of `time_unit` seconds
    (default: the longest block / DEFAULT_RESOLUTION); a forward block keeps the activations its device's
    backward block reads, in `memory_unit` bytes, and that backward frees them.

    of_micro_batch: the graph was built at the micro-batch size (the step `placer.schedule.micro_batch`
    runs), so its op costs and activations are one micro-batch's as they are, not 1/micro_batches of them.

    split_weight_gradients: split each device's backward into its input-gradient chain "b@DEVICE" and its
    weight gradients "w@DEVICE" (ZeroBubble's B and W; `weight_gradient_split`), w waiting for what feeds it.
    The forward's activations that only B reads are freed by the last b block; those W reads, and the
    gradients B hands to W, by the last w block. Raises BlockTemplateError when no device has both parts."""
    graph, devices = simulator.graph, simulator.devices
    if of_micro_batch:
        if not isinstance(micro_batches, int) or micro_batches < 1:
            raise MicroBatchError(f"micro-batches must be a positive whole number, got {micro_batches!r}")
        batch = micro_batches * (batch_size if batch_size is not None else infer_batch_size(graph))
    else:
        batch = batch_size if batch_size is not None else infer_batch_size(graph)
        check_micro_batches(batch, micro_batches)
    if placement.graph_fingerprint != graph.fingerprint or tuple(placement.devices) != devices.names:
        raise PlacementError(f"the placement was made for another graph or other devices than {graph.name!r} on "
                             f"{devices.name!r}: place this graph on these devices")
    share = 1 if of_micro_batch else micro_batches  # what part of the graph's costs one micro-batch has
    step = graph.step_ops
    op_device = placement.op_devices(graph)
    split = weight_gradient_split(graph, op_device) if split_weight_gradients else None
    kind = split.kinds if split else op_kinds(graph)
    short = {device.name: device.short_name for device in devices}
    column = {device.name: i for i, device in enumerate(devices)}
    membership = op_blocks(graph, placement, devices, split_weight_gradients=split_weight_gradients)
    block_of = membership.get

    seconds: dict[str, float] = {}
    stashed: dict[str, int] = {}  # bytes per device that forward ops keep for backward ops
    stashed_for_w: dict[str, int] = {}  # of those, bytes a weight-gradient op reads: held until W
    handed_to_w: dict[str, int] = {}  # bytes per device that input-gradient ops produce for weight-gradient ops
    after = block_dependencies(graph, membership, ignored=split.gates if split else frozenset())
    readers = {src: set() for op in step for src in op.producers}
    for op in step:
        for src in op.producers:
            readers[src].add(kind.get(op.name))
    for row, op in enumerate(step):
        block = block_of(op.name)
        if block is None:
            continue
        seconds[block] = seconds.get(block, 0.0) + simulator.op_cost[row, column[op_device[op.name]]] / share
        read_by = readers.get(op.name, set())
        if op.type in ALIAS_OP_TYPES:
            continue
        device = short[op_device[op.name]]
        if kind[op.name] == FORWARD and read_by & {BACKWARD, WEIGHT_GRADIENT}:
            stashed[device] = stashed.get(device, 0) + sum(op.output_bytes)
            if WEIGHT_GRADIENT in read_by:
                stashed_for_w[device] = stashed_for_w.get(device, 0) + sum(op.output_bytes)
        elif kind[op.name] == BACKWARD and WEIGHT_GRADIENT in read_by:
            handed_to_w[device] = handed_to_w.get(device, 0) + sum(op.output_bytes)
    if not seconds:
        raise PlacementError(f"graph {graph.name!r} has no forward or backward ops to schedule (does it name its loss?)")
    unit = float(time_unit or max(seconds.values()) / DEFAULT_RESOLUTION or 1.0)
    blocks = []
    ordered = sorted(seconds, key=lambda b: (_BLOCK_PREFIXES.index(b[0]), _device_order(b, devices), _phase(b)))

    def units(table: dict[str, int], device: str) -> int:
        return math.ceil(table.get(device, 0) / share / memory_unit)

    for name in ordered:
        device = name.split("@", 1)[1]
        # What a device's forward keeps, its backward frees: held from its first forward block to its last
        # backward block; a device with only one of them keeps nothing. Split, the last b block frees what
        # only B reads and takes what it hands to W; the last w block frees the rest.
        forwards = [b for b in ordered if b[0] == "f" and b.endswith(f"@{device}")]
        backwards = [b for b in ordered if b[0] == "b" and b.endswith(f"@{device}")]
        weights = [b for b in ordered if b[0] == "w" and b.endswith(f"@{device}")]
        keeps = units(stashed, device) if forwards and (backwards or weights) else 0
        for_w = min(keeps, units(stashed_for_w, device)) if weights and backwards else keeps if weights else 0
        handed = units(handed_to_w, device) if weights and backwards else 0
        block_kind = _BLOCK_KINDS[name[0]]
        if block_kind == FORWARD:
            memory = keeps if name == forwards[0] else 0
        elif block_kind == BACKWARD:
            memory = handed - (keeps - for_w) if name == backwards[-1] else 0
        else:
            memory = -(for_w + handed) if name == weights[-1] else 0
        blocks.append(BlockSpec(name, block_kind, max(1, round(seconds[name] / unit)),
                                memory, (device,), tuple(sorted(after[name]))))
    used = tuple(d.short_name for d in devices if any(b.devices[0] == d.short_name for b in blocks))
    try:
        return BlockTemplate(f"{graph.name}/{micro_batches}mb", used, tuple(blocks), unit, memory_unit,
                             {"graph": graph.name, "fingerprint": graph.fingerprint, "batch_size": batch,
                              "micro_batches": micro_batches, "of_micro_batch": of_micro_batch,
                              "split_weight_gradients": split_weight_gradients})
    except BlockTemplateError as error:
        if "cycle" not in str(error):
            raise
        raise BlockTemplateError(
            f"the placement does not split {graph.name!r} into stages: {error}. A pipeline schedule needs each "
            "device's forward ops to form one contiguous stage (data flows device to device in one direction); "
            "place consecutive layers together") from None


def check_micro_batches(batch: int, micro_batches: int) -> int:
    """The micro-batch size; raises MicroBatchError unless `micro_batches` divides `batch`."""
    if not isinstance(micro_batches, int) or micro_batches < 1 or batch % micro_batches:
        raise MicroBatchError(f"{micro_batches!r} micro-batches do not divide the batch of {batch}: choose a divisor "
                              f"({', '.join(str(d) for d in range(1, batch + 1) if batch % d == 0)})")
    return batch // micro_batches


def op_blocks(graph: OpGraph, placement: Placement, devices: DeviceSet, *, split_weight_gradients: bool = False
              ) -> dict[str, str]:
    """The block of every forward and backward op of one micro-batch. A device's forward ops form one block
    "f@DEVICE" (the device's short name), its backward ops one block "b@DEVICE", when data crosses devices
    in one direction only, as in a pipeline. Where it comes back (NMT's layers alternate between devices, or
    attention reads an earlier device's output), one block per device would wait for itself; each op then
    gets a phase, the most device changes on a path of its kind's ops to it, and a device's ops of one phase
    form a block "f2@DEVICE" (phases from 1), so blocks always wait for earlier phases only; an op joins the
latest phase its consumers allow. The optimizer's
    updates and the train op belong to no block. split_weight_gradients: a device's weight-gradient ops
    (`weight_gradient_split`) form blocks of their own, "w@DEVICE" (phased as the others, "w2@DEVICE")."""
    op_device = placement.op_devices(graph)
    short = {device.name: device.short_name for device in devices}
    kinds = weight_gradient_split(graph, op_device).kinds if split_weight_gradients else op_kinds(graph)
    phase: dict[str, int] = {}
    for op in graph.step_ops:  # topological order
        kind = kinds.get(op.name)
        if kind is None:
            continue
        phase[op.name] = max((phase[src] + (op_device[src] != op_device[op.name])
                              for src in (*op.producers, *op.control_inputs) if kinds.get(src) == kind),
                             default=0)
    # Then as late as its consumers allow: ops nothing of their kind feeds (shapes, constants of the gradient)
    # join the phase that needs them instead of opening a phase of their own.
    consumers: dict[str, list[str]] = {name: [] for name in phase}
    for op in graph.step_ops:
        for src in (*op.producers, *op.control_inputs):
            if op.name in phase and kinds.get(src) == kinds[op.name]:
                consumers[src].append(op.name)
    for op in reversed(graph.step_ops):
        if op.name in phase and consumers[op.name]:
            phase[op.name] = min(phase[c] - (op_device[c] != op_device[op.name]) for c in consumers[op.name])
    phases: dict[tuple[str, str], set[int]] = {}
    for name, kind in kinds.items():
        phases.setdefault((kind, op_device[name]), set()).add(phase[name])
    numbered = {key: {p: i + 1 for i, p in enumerate(sorted(ps))} for key, ps in phases.items()}

    def block(name: str, kind: str) -> str:
        device = op_device[name]
        number = numbered[(kind, device)]
        return f"{kind[0]}{number[phase[name]] if len(number) > 1 else ''}@{short[device]}"

    return {name: block(name, kind) for name, kind in kinds.items()}


def infer_batch_size(graph: OpGraph) -> int:
    """The batch: the first dimension of the step's inputs (placeholders, iterators, synthetic random inputs)."""
    sizes = {op.output_shapes[0][0] for op in graph.step_ops
             if op.type in INPUT_OP_TYPES and op.output_shapes and op.output_shapes[0] and op.output_shapes[0][0] > 0}
    if len(sizes) != 1:
        found = f"first dimensions {sorted(sizes)}" if sizes else "no input ops with a known first dimension"
        raise MicroBatchError(f"cannot tell the batch size of {graph.name!r} ({found}): pass batch_size=")
    return sizes.pop()


def block_dependencies(graph: OpGraph, membership: dict[str, str],
                       ignored: frozenset[tuple[str, str]] = frozenset()) -> dict[str, set[str]]:
    """The blocks each block waits for: those that feed one of its ops (data or control), except through the
    `ignored` control edges (op, control input): the gradient gates a split backward drops."""
    after: dict[str, set[str]] = {block: set() for block in membership.values()}
    for op in graph.step_ops:
        block = membership.get(op.name)
        if block is None:
            continue
        for src in (*op.producers, *(c for c in op.control_inputs if (op.name, c) not in ignored)):
            source = membership.get(src)
            if source is not None and source != block:
                after[block].add(source)
    return after


def update_ops(graph: OpGraph) -> frozenset[str]:
    """The optimizer's update: its assignments (`UPDATE_OP_PREFIXES`) and every step op that runs after one of
    them (reads it or waits for it). An optimizer written in plain ops (tf-keras RMSprop) assigns a slot, reads it
    back and computes the variable's step from it: that arithmetic runs once per step, after every micro-batch's
    gradient, so it is the update's, not the backward's."""
    updates: set[str] = set()
    for op in graph.step_ops:  # topological order
        if op.type.startswith(UPDATE_OP_PREFIXES) or any(src in updates for src in (*op.producers, *op.control_inputs)):
            updates.add(op.name)
    return frozenset(updates)


def op_kinds(graph: OpGraph) -> dict[str, str]:
    """forward: the loss and what it is computed from; backward: the other step ops that depend on the batch,
    and those that feed them (gradients need not descend from the loss: TensorFlow seeds them with a constant of its
    shape). The optimizer's updates (`update_ops`), the train op, and what feeds only them are neither."""
    if graph.loss is None:
        raise PlacementError(f"graph {graph.name!r} does not name its loss, so its forward and backward ops cannot be "
                             "told apart: build it with loss=")
    loss = graph.loss.rsplit(":", 1)[0]
    step = {op.name: op for op in graph.step_ops}
    forward, stack = set(), [loss]
    while stack:
        name = stack.pop()
        if name in forward or name not in step:
            continue
        forward.add(name)
        stack.extend((*step[name].producers, *step[name].control_inputs))
    kinds = {name: FORWARD for name in forward}
    updates = update_ops(graph)
    rest = [op for op in graph.step_ops
            if op.name not in forward and op.name != graph.train_op and op.name not in updates]
    # The backward depends on the batch (through the forward's activations and loss), or feeds an op that does
    # (a shape, the gradient's seed). What does neither only feeds the update (the optimizer's constants, its
    # slots' handles, the powers of its betas, a variable's shape): it runs once per step with the update, in
    # no block.
    batch: set[str] = set()
    for op in graph.step_ops:  # topological order
        if op.type in INPUT_OP_TYPES or any(src in batch for src in (*op.producers, *op.control_inputs)):
            batch.add(op.name)
    gradient = {op.name for op in rest if op.name in batch}
    readers: dict[str, list[str]] = {}
    for op in rest:
        for src in (*op.producers, *op.control_inputs):
            readers.setdefault(src, []).append(op.name)
    for op in reversed(rest):
        if op.name not in gradient and any(reader in gradient for reader in readers.get(op.name, ())):
            gradient.add(op.name)
    kinds.update({name: BACKWARD for name in gradient})
    return kinds


@dataclass(frozen=True)
class WeightGradientSplit:
    """A step's ops by kind with the backward split into input gradients (B) and weight gradients (W)."""

    kinds: dict[str, str]
    """Every forward and backward op -> FORWARD, BACKWARD (B) or WEIGHT_GRADIENT (W)."""
    gates: frozenset[tuple[str, str]]
    """Control edges (B op, W NoOp) the split drops: TensorFlow's gradient gates (`tuple/group_deps`), which
    make an op's input gradient wait for its weight gradient though its value does not depend on it."""


def weight_gradient_split(graph: OpGraph, op_device: dict[str, str]) -> WeightGradientSplit:
    """The step's backward ops split as ZeroBubble (Qi et al., ICLR 2024) splits a layer's backward.

    B, the input-gradient chain: every backward op whose output a backward op on another device reads (the
    gradient an earlier stage waits for), and every backward op those wait for, through data edges and
    control edges, except control edges out of NoOps (gradient gates, which order without passing values).
    W: every other backward op; what it computes reaches only other W ops and the optimizer's updates, so it
    can run after B. `op_device` gives each op's device (full names, `Placement.op_devices`).

    Raises BlockTemplateError unless some device has both B and W ops: then the split separates nothing (every
    backward op feeds another device's gradient, or no gradient crosses devices, as on one device)."""
    kinds = op_kinds(graph)
    step = {op.name: op for op in graph.step_ops}
    backward = [name for name, kind in kinds.items() if kind == BACKWARD]
    chain = {src for op in step.values() if kinds.get(op.name) == BACKWARD for src in op.producers
             if kinds.get(src) == BACKWARD and op_device[src] != op_device[op.name]}
    stack = list(chain)
    while stack:
        op = step[stack.pop()]
        waits = (*op.producers, *(c for c in op.control_inputs if c in step and step[c].type != "NoOp"))
        for src in waits:
            if kinds.get(src) == BACKWARD and src not in chain:
                chain.add(src)
                stack.append(src)
    split = {name: (WEIGHT_GRADIENT if kind == BACKWARD and name not in chain else kind) for name, kind in kinds.items()}
    by_device: dict[str, set[str]] = {}
    for name in backward:
        by_device.setdefault(op_device[name], set()).add(split[name])
    if not any(len(parts) == 2 for parts in by_device.values()):
        why = ("no gradient crosses devices (one device, or stages that pass no gradient back), so there is no "
               "input-gradient chain to run ahead" if not chain else
               "each device's backward is all input-gradient chain (what another device's backward waits for) or all "
               "weight gradients, so no device has weight gradients to run after its chain")
        raise BlockTemplateError(f"the backward of {graph.name!r} placed this way cannot be split into input and "
                                 f"weight gradients: {why}. Schedule it without the split")
    gates = frozenset((name, control) for name in chain for control in step[name].control_inputs
                      if split.get(control) == WEIGHT_GRADIENT)
    return WeightGradientSplit(split, gates)


def gradient_gates(graph: OpGraph) -> frozenset[tuple[str, str]]:
    """Every gradient gate of the step, as control edges (backward op, NoOp): TensorFlow's `tuple/group_deps`,
    which order ops without passing values. `weight_gradient_split` drops those between its input-gradient
    chain and its weight gradients; without every one of them, the step waits for nothing any split of its
    backward does not wait for."""
    kinds = op_kinds(graph)
    step = {op.name: op for op in graph.step_ops}
    return frozenset((name, control) for name, kind in kinds.items() if kind == BACKWARD and name in step
                     for control in step[name].control_inputs if control in step and step[control].type == "NoOp")


_BLOCK_PREFIXES = "fbw"
_BLOCK_KINDS = {"f": FORWARD, "b": BACKWARD, "w": WEIGHT_GRADIENT}


def _phase(block_name: str) -> int:
    number = block_name.split("@", 1)[0][1:]
    return int(number) if number else 0


def _device_order(block_name: str, devices: DeviceSet) -> int:
    short = block_name.split("@", 1)[1]
    return next(i for i, d in enumerate(devices) if d.short_name == short)
