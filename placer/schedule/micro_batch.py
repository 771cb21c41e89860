"""A micro-batched training step: the forward and backward ops of a step built at the micro-batch size,
copied once per micro-batch, feeding one optimizer update with the mean of the copies' gradients.

Works on the GraphDef, so any model of the zoo can be micro-batched. Shared by all copies: the variables,
what only the initializer needs, and every op that does not depend on the batch (variable reads, constants,
the learning rate). Copied: every forward or backward op that descends from a batch input. The update
(`update_ops`: the assignments and what runs after one) stays single and reads the mean of the copies'
inputs; sparse updates read the copies' rows concatenated (each scaled by 1/M), so a scatter-add sums to the
mean. Deviations from one full-batch step, stated once: each micro-batch clips its own gradients (NMT's
global-norm clipping), and a sparse Adam update's second moment, like the mean square tf-keras RMSprop assigns
before its step, averages the squares of the micro-batches' gradients rather than squaring their mean. With
identical micro-batches both agree with the full-batch step.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Mapping, Sequence

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, node_def_pb2

from placer.devices import DeviceSet
from placer.errors import MicroBatchError
from placer.graph.build import op_graph_from_tf_graph
from placer.graph.opgraph import OpGraph
from placer.placement import Placement
from placer.schedule.from_placement import INPUT_OP_TYPES, SPARSE_UPDATE_PREFIXES, op_kinds, update_ops

MERGE_SCOPE = "micro_batch_merge/"
"""Where the ops that merge the copies (means, concatenations) live."""
_ENTER_OPS = ("Enter", "RefEnter")


def copy_prefix(micro_batch: int) -> str:
    """The name scope of micro-batch `micro_batch`'s copy of the step: "mb0/", "mb1/", ..."""
    return f"mb{micro_batch}/"


@dataclass(frozen=True)
class MicroBatchedStep:
    """One training step over `micro_batches` copies of `micro_batch_graph`'s forward and backward."""

    graph: OpGraph
    """The micro-batched step: fetch its train op and its loss (the mean of the copies' losses)."""
    micro_batch_graph: OpGraph
    """The step built at the micro-batch size that was copied."""
    micro_batches: int
    copies: Mapping[str, tuple[int, str]]
    """Every copied op -> (micro-batch, the op of `micro_batch_graph` it copies)."""
    merged: Mapping[str, str]
    """Every op that merges the copies' outputs -> the op of `micro_batch_graph` whose output it merges."""
    dropped_control_edges: frozenset[tuple[str, str]] = frozenset()
    """Control edges (op, control input) of `micro_batch_graph` its copies lack: the gradient gates a split of
    the backward into input and weight gradients drops (`weight_gradient_split`)."""

    def lift_placement(self, placement: Placement, devices: DeviceSet) -> Placement:
        """`placement` of the micro-batch graph as a placement of the micro-batched step: each copy goes where
        its original went, a merge where the merged op went (one transfer of the mean, not M)."""
        original = placement.op_devices(self.micro_batch_graph)
        op_devices = {}
        for op in self.graph.ops:
            if op.name in self.copies:
                op_devices[op.name] = original[self.copies[op.name][1]]
            elif op.name in self.merged:
                op_devices[op.name] = original[self.merged[op.name]]
            else:
                op_devices[op.name] = original[op.name]
        return Placement.from_op_devices(self.graph, devices, op_devices,
                                         {**placement.metadata, "micro_batches": self.micro_batches})


    def replicate_placement(self, placement: Placement, devices: DeviceSet,
                            replica_devices: Sequence[Mapping[str, str]]) -> Placement:
        """`placement` of the micro-batch graph as a data-parallel placement of the micro-batched step on
        `devices`: copy m is replica m, each of its ops on `replica_devices[m]` of the device its original went to;
        what the copies share (the variables, the update) and the merges of their gradients stay where replica 0
        puts them: the gradients are summed on the device that holds each variable."""
        if len(replica_devices) != self.micro_batches:
            raise MicroBatchError(f"{len(replica_devices)} replicas' devices for a step of {self.micro_batches} copies")
        original = placement.op_devices(self.micro_batch_graph)
        first = replica_devices[0]
        op_devices = {}
        for op in self.graph.ops:
            if op.name in self.copies:
                replica, name = self.copies[op.name]
                op_devices[op.name] = replica_devices[replica][original[name]]
            elif op.name in self.merged:
                op_devices[op.name] = first[original[self.merged[op.name]]]
            else:
                op_devices[op.name] = first[original[op.name]]
        # A copy colocated with a shared op (a Keras metric's running total, assigned by every copy) runs where
        # that op does: TensorFlow keeps a colocation group on one device.
        for group in self.graph.groups:
            shared = next((name for name in group.ops if name not in self.copies), None)
            if shared is not None:
                for name in group.ops:
                    op_devices[name] = op_devices[shared]
        return Placement.from_op_devices(self.graph, devices, op_devices,
                                         {**placement.metadata, "replicas": self.micro_batches})


STEPS_KEPT = 2
"""Micro-batched steps kept for the next call with the same arguments: a search prices every placement's schedules
on the same step (a placement changes where its ops run, not its ops), and building one imports the whole
micro-batched graph into TensorFlow."""
_steps: OrderedDict[tuple, MicroBatchedStep] = OrderedDict()


def micro_batched_step(graph: OpGraph, micro_batches: int, *,
                       dropped_control_edges: frozenset[tuple[str, str]] = frozenset()) -> MicroBatchedStep:
    """The step of `graph` (built at the micro-batch size) over `micro_batches` micro-batches, one update.

    dropped_control_edges: control edges (op, control input) of `graph` the step leaves out, in every copy:
    the gradient gates that would make an input gradient wait for a weight gradient (`weight_gradient_split`);
    they order ops without passing values, so the step computes the same."""
    key = (graph.name, graph.fingerprint, graph.loss, micro_batches, frozenset(dropped_control_edges))
    if key in _steps:
        _steps.move_to_end(key)
        return _steps[key]
    step = _micro_batched_step(graph, micro_batches, dropped_control_edges)
    _steps[key] = step
    while len(_steps) > STEPS_KEPT:
        _steps.popitem(last=False)
    return step


def _micro_batched_step(graph: OpGraph, micro_batches: int,
                        dropped_control_edges: frozenset[tuple[str, str]]) -> MicroBatchedStep:
    if not isinstance(micro_batches, int) or isinstance(micro_batches, bool) or micro_batches < 1:
        raise MicroBatchError(f"micro-batches must be a positive whole number, got {micro_batches!r}")
    updates = update_ops(graph)
    copied = batch_dependent_ops(graph)
    loss_op = graph.loss.rsplit(":", 1)[0]
    if loss_op not in copied:
        raise MicroBatchError(f"the loss of {graph.name!r} does not depend on any batch input ({', '.join(sorted(INPUT_OP_TYPES))}), "
                              "so there is nothing to split into micro-batches")
    clash = sorted(op.name for op in graph.ops if op.name.startswith(("mb", MERGE_SCOPE))
                   and op.name.split("/", 1)[0] in {copy_prefix(m)[:-1] for m in range(micro_batches)} | {MERGE_SCOPE[:-1]})
    if clash:
        raise MicroBatchError(f"graph {graph.name!r} already has ops in the scopes micro-batching uses, e.g. {clash[:3]}: "
                              "rename its top-level scopes mb0/, mb1/, ... or micro_batch_merge/")

    source = tf.compat.v1.GraphDef.FromString(graph.graph_def)
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(source.versions)
    out.library.CopyFrom(source.library)
    copies: dict[str, tuple[int, str]] = {}
    merger = _Merger(graph, copied, micro_batches, out)
    for node in source.node:
        if node.name in copied:
            for m in range(micro_batches):
                copy = out.node.add()
                copy.CopyFrom(node)
                copy.name = copy_prefix(m) + node.name
                copy.input[:] = [_renamed(i, m, copied) for i in node.input
                                 if not (i.startswith("^") and (node.name, i[1:]) in dropped_control_edges)]
                _rename_attrs(copy, m, copied)
                copies[copy.name] = (m, node.name)
            continue
        kept = out.node.add()
        kept.CopyFrom(node)
        kept.input[:] = [i for i in node.input if not (i.startswith("^") and (node.name, i[1:]) in dropped_control_edges)]
        if any(_op_of(i) in copied for i in node.input):
            if node.name != graph.train_op and node.name not in updates:
                raise MicroBatchError(f"op {node.name!r} ({node.op}) of {graph.name!r} reads batch-dependent ops but is "
                                      "neither an optimizer update nor the train op: cannot tell how to merge micro-batches")
            sparse = node.op.startswith(SPARSE_UPDATE_PREFIXES)
            inputs = []
            for ref in node.input:
                if ref.startswith("^") and ref[1:] in copied:  # wait for every copy
                    inputs.extend(f"^{copy_prefix(m)}{ref[1:]}" for m in range(micro_batches))
                elif _op_of(ref) in copied:
                    inputs.append(merger.concatenated(ref) if sparse else merger.mean(ref))
                else:
                    inputs.append(ref)
            kept.input[:] = inputs
    loss = merger.mean(graph.loss)

    imported = tf.Graph()
    with imported.as_default():
        tf.compat.v1.import_graph_def(out, name="")
    batched = op_graph_from_tf_graph(imported, graph.train_op, graph.init_op, loss=loss,
                                     name=f"{graph.name}-x{micro_batches}mb")
    return MicroBatchedStep(batched, graph, micro_batches, copies, dict(merger.merged), frozenset(dropped_control_edges))


def batch_dependent_ops(graph: OpGraph) -> set[str]:
    """The forward and backward ops that descend from a batch input: what each micro-batch, or each replica of a
    data-parallel step, runs on its own slice of the batch."""
    kinds = op_kinds(graph)
    dependent: set[str] = set()
    for op in graph.ops:  # topological order: producers first
        if op.name in kinds and (op.type in INPUT_OP_TYPES
                                 or any(src in dependent for src in (*op.producers, *op.control_inputs))):
            dependent.add(op.name)
    return dependent


@dataclass(frozen=True)
class Gradient:
    """A batch-dependent tensor the optimizer's update reads: what micro-batches average and replicas all-reduce."""

    tensor: str
    """"op:port"."""
    bytes: int
    update: str
    """The first update op (in the graph's order) that reads it."""


def gradients(graph: OpGraph) -> tuple[Gradient, ...]:
    """Every batch-dependent tensor an optimizer update reads, once each, in the graph's order: the tensors
    `micro_batched_step` merges."""
    dependent = batch_dependent_ops(graph)
    updates = update_ops(graph)
    found: dict[str, Gradient] = {}
    for op in graph.ops:
        if op.name not in updates:
            continue
        for ref in op.data_inputs:
            ref = _canonical(ref)
            producer, port = ref.rsplit(":", 1)
            if producer in dependent and ref not in found:
                found[ref] = Gradient(ref, int(graph.op(producer).output_bytes[int(port)]), op.name)
    return tuple(found.values())


class _Merger:
    """Adds the nodes that merge the copies of one tensor, once per tensor and kind of merge."""

    def __init__(self, graph: OpGraph, copied: set[str], micro_batches: int, out):
        self.graph, self.copied, self.micro_batches, self.out = graph, copied, micro_batches, out
        self.merged: dict[str, str] = {}
        self._original = ""  # the op whose copies the nodes being added merge
        self._done: dict[tuple[str, str], str] = {}

    def mean(self, ref: str) -> str:
        """The mean of the copies of tensor `ref` (an AddN, then a scale by 1/M)."""
        ref = _canonical(ref)
        self._original = _op_of(ref)
        if (ref, "mean") in self._done:
            return self._done[(ref, "mean")]
        dtype = self._dtype(ref)
        if not dtype.is_floating:
            raise MicroBatchError(f"{ref} is a batch-dependent {dtype.name} tensor read by an update: only floating-point "
                                  "inputs can be averaged over micro-batches")
        base = MERGE_SCOPE + ref.replace(":", "_")
        total = self._node(base + "/sum", "AddN", self._copies(ref), N=self.micro_batches, T=dtype)
        result = self._scaled(base, total, dtype)
        self._done[(ref, "mean")] = result
        return result

    def concatenated(self, ref: str) -> str:
        """The copies of `ref` stacked along the first axis; floating-point rows scaled by 1/M."""
        ref = _canonical(ref)
        self._original = _op_of(ref)
        if (ref, "concat") in self._done:
            return self._done[(ref, "concat")]
        dtype = self._dtype(ref)
        base = MERGE_SCOPE + ref.replace(":", "_")
        axis = self._node(base + "/axis", "Const", [], dtype=tf.int32,
                          value=tf.make_tensor_proto(0, tf.int32))
        joined = self._node(base + "/concat", "ConcatV2", [*self._copies(ref), axis], N=self.micro_batches, T=dtype,
                            Tidx=tf.int32)
        result = self._scaled(base, joined, dtype) if dtype.is_floating else joined
        self._done[(ref, "concat")] = result
        return result

    def _scaled(self, base: str, tensor: str, dtype: tf.DType) -> str:
        scale = self._node(base + "/inverse_count", "Const", [], dtype=dtype,
                           value=tf.make_tensor_proto(1.0 / self.micro_batches, dtype))
        return self._node(base + "/mean", "Mul", [tensor, scale], T=dtype)

    def _copies(self, ref: str) -> list[str]:
        return [copy_prefix(m) + ref for m in range(self.micro_batches)]

    def _dtype(self, ref: str) -> tf.DType:
        name, index = ref.rsplit(":", 1)
        return tf.as_dtype(self.graph.op(name).output_dtypes[int(index)])

    def _node(self, name: str, op: str, inputs: list[str], **attrs) -> str:
        node = node_def_pb2.NodeDef(name=name, op=op, input=inputs)
        for key, value in attrs.items():
            if isinstance(value, tf.DType):
                node.attr[key].CopyFrom(attr_value_pb2.AttrValue(type=value.as_datatype_enum))
            elif isinstance(value, int):
                node.attr[key].CopyFrom(attr_value_pb2.AttrValue(i=value))
            else:
                node.attr[key].CopyFrom(attr_value_pb2.AttrValue(tensor=value))
        self.out.node.append(node)
        self.merged[name] = self._original
        return f"{name}:0"


def _op_of(ref: str) -> str:
    return ref.lstrip("^").split(":", 1)[0]


def _canonical(ref: str) -> str:
    return ref if ":" in ref else f"{ref}:0"


def _renamed(ref: str, micro_batch: int, copied: set[str]) -> str:
    """An input of a copied op: the same micro-batch's copy when its producer is copied, else the shared op."""
    control = ref.startswith("^")
    name = ref[1:] if control else ref
    if _op_of(name) in copied:
        name = copy_prefix(micro_batch) + name
    return ("^" if control else "") + name


def _rename_attrs(node, micro_batch: int, copied: set[str]) -> None:
    """Colocation with a copied op means with the same micro-batch's copy; loop frames must stay unique."""
    if "_class" in node.attr:
        classes = []
        for value in node.attr["_class"].list.s:
            text = value.decode()
            if text.startswith("loc:@") and text[len("loc:@"):] in copied:
                text = "loc:@" + copy_prefix(micro_batch) + text[len("loc:@"):]
            classes.append(text.encode())
        node.attr["_class"].list.s[:] = classes
    if node.op in _ENTER_OPS and "frame_name" in node.attr:
        node.attr["frame_name"].s = (copy_prefix(micro_batch) + node.attr["frame_name"].s.decode()).encode()


def placement_at_micro_batch(placement: Placement, graph: OpGraph, micro_batch_graph: OpGraph,
                             devices: DeviceSet) -> Placement:
    """`placement` of `graph` (the model at its full batch) as a placement of `micro_batch_graph` (the same
    model built at the micro-batch size): each op on its device, by name. Ops the micro-batch graph lacks
    (a forward-only graph has no gradients) are left out. Ops only it has (TensorFlow builds a few more for a
    dimension of one sample, such as the reduction indices of a broadcast's gradient) go where their colocation
    group went, else with the ops they feed or read; one with no placed neighbour at all is refused."""
    op_devices = placement.op_devices(graph)
    carried = {op.name: op_devices[op.name] for op in micro_batch_graph.ops if op.name in op_devices}
    extra = [op.name for op in micro_batch_graph.ops if op.name not in carried]
    if extra:
        carried.update(_with_neighbours(micro_batch_graph, carried, extra, graph.name))
    return Placement.from_op_devices(micro_batch_graph, devices, {op.name: carried[op.name] for op in micro_batch_graph.ops},
                                     placement.metadata)


def _with_neighbours(graph: OpGraph, placed: Mapping[str, str], extra: list[str], other: str) -> dict[str, str]:
    """A device for each of `extra`, ops of `graph` that `placed` lacks: its colocation group's, else that of the
    first op it feeds, else of the first op it reads, repeated until nothing more can be placed."""
    devices = dict(placed)
    consumers: dict[str, list[str]] = {}
    for op in graph.ops:
        for producer in (*op.producers, *op.control_inputs):
            consumers.setdefault(producer, []).append(op.name)
    for name in extra:
        group_devices = [devices[op] for op in graph.group_of(name).ops if op in devices]
        if group_devices:
            devices[name] = group_devices[0]
    left = [name for name in extra if name not in devices]
    while left:
        still = []
        for name in left:
            op = graph.op(name)
            near = [n for n in (*consumers.get(name, ()), *op.producers, *op.control_inputs) if n in devices]
            if near:
                devices[name] = devices[near[0]]
            else:
                still.append(name)
        if len(still) == len(left):
            raise MicroBatchError(
                f"{graph.name!r} has {len(still)} ops that {other!r} does not (e.g. {still[:3]}) and that neither "
                "share a colocation group with nor feed or read a placed op, so its placement cannot be carried "
                "over: build both graphs from the same model")
        left = still
    return {name: devices[name] for name in extra}


def build_micro_batch_graph(model: str, size: str, micro_batches: int) -> OpGraph:
    """`model` at `size` with its batch divided by `micro_batches` (a model that can be built at another batch,
    `placer.models.rebuildable_batch`): the graph `micro_batched_step` copies. Raises MicroBatchError if the
    micro-batches do not divide the batch."""
    from placer.models import build_model_apart, require_rebuildable_batch
    from placer.schedule.from_placement import check_micro_batches

    micro_batch = check_micro_batches(require_rebuildable_batch(model, size), micro_batches)
    return build_model_apart(model, size, batch=micro_batch)
