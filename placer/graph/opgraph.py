"""The placeable training-step graph: ops, edges, colocation groups and per-op features.

An `OpGraph` is an immutable record built once from a TensorFlow graph (see `placer.graph.build`); it
carries the serialized GraphDef that measurement runs, and everything agents and simulators read.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

import numpy as np

Shape = tuple[int, ...] | None  # None: unknown rank; -1 in a dimension: unknown size


@dataclass(frozen=True)
class OpNode:
    """One operation of the training step, with the facts placement and cost models need."""

    name: str
    type: str
    data_inputs: tuple[str, ...]
    """Input tensors in order, as "producer_op:output_index"."""
    control_inputs: tuple[str, ...]
    """Names of ops that must run before this one."""
    output_shapes: tuple[Shape, ...]
    output_dtypes: tuple[str, ...]
    output_bytes: tuple[int, ...]
    """Bytes of each output; 0 for handles (resource, variant) and for unknown sizes."""
    kernel_devices: frozenset[str]
    """Device types ("CPU", "GPU", ...) with a kernel registered for this op and its attributes."""
    group: int
    """Index of the colocation group (the placeable unit) this op belongs to."""
    flops: int
    """Floating-point operations per run, from TensorFlow's statistics registry (0 if not registered)."""
    parameters: int
    """Elements of the variable this op creates (VarHandleOp, VariableV2), else 0. Counts model weights and
    optimizer state (e.g. Adam's slots) alike: both occupy the device's memory."""
    in_step: bool
    """True if the op runs every training step; False if it only runs at initialization."""

    @property
    def producers(self) -> tuple[str, ...]:
        """Names of the ops whose outputs feed this one."""
        return tuple(tensor.rsplit(":", 1)[0] for tensor in self.data_inputs)


@dataclass(frozen=True)
class ColocationGroup:
    """Ops that TensorFlow always runs on one device: the unit a placement assigns."""

    index: int
    name: str
    """The group's anchor: the op its members are colocated with (a variable, usually), or its only op."""
    ops: tuple[str, ...]
    kernel_devices: frozenset[str]
    """Device types on which every op of the group has a kernel."""


@dataclass(frozen=True)
class TracedBatch:
    """The examples per step a model's training step was traced at, and who chose that number."""

    size: int
    chosen_by: str
    """"model": the model's inputs fix the batch; "caller": the builder was given it (batch_size=, inputs=);
    "default": nothing fixed it, so the builder took `model.fit`'s default."""


@dataclass(frozen=True)
class OpGraph:
    """A training step (forward, backward, update) as placeable ops, in deterministic topological order."""

    name: str
    ops: tuple[OpNode, ...]
    groups: tuple[ColocationGroup, ...]
    graph_def: bytes = field(repr=False)
    """Serialized GraphDef of the step and its initializers, with no devices set."""
    train_op: str
    init_op: str
    loss: str | None = None
    """Name of the loss tensor, when the builder knows it."""
    batch: TracedBatch | None = None
    """The batch the step was traced at, when the builder knows it (a Keras model's step). Not part of the
    fingerprint: the batch is already in the ops' shapes."""
    model_parameters: int | None = None
    """Elements of the model's own weights as Keras counts them (trainable or not, such as batch norm's moving
    statistics), without the optimizer's state, when the builder knows them; None otherwise. Not part of the
    fingerprint."""

    @cached_property
    def fingerprint(self) -> str:
        """A stable hash of the graph's structure: same model, same fingerprint, in any process."""
        return fingerprint_ops(self.ops, self.train_op, self.init_op)

    @cached_property
    def _op_index(self) -> Mapping[str, int]:
        return {op.name: i for i, op in enumerate(self.ops)}

    @cached_property
    def _group_index(self) -> Mapping[str, int]:
        return {group.name: group.index for group in self.groups}

    def groups_without_kernel(self, device_kind: str) -> np.ndarray:
        """One bool per colocation group: some op of the group has no kernel for `device_kind`."""
        cache = self._groups_without_kernel
        if device_kind not in cache:
            cache[device_kind] = np.array([device_kind not in g.kernel_devices for g in self.groups], dtype=bool)
        return cache[device_kind]

    @cached_property
    def _groups_without_kernel(self) -> dict[str, np.ndarray]:
        return {}

    def __contains__(self, op_name: str) -> bool:
        return op_name in self._op_index

    def op(self, name: str) -> OpNode:
        try:
            return self.ops[self._op_index[name]]
        except KeyError:
            raise KeyError(f"graph {self.name!r} has no op named {name!r}") from None

    def group(self, name_or_index: str | int) -> ColocationGroup:
        if isinstance(name_or_index, int):
            return self.groups[name_or_index]
        try:
            return self.groups[self._group_index[name_or_index]]
        except KeyError:
            raise KeyError(f"graph {self.name!r} has no colocation group named {name_or_index!r}") from None

    def group_of(self, op_name: str) -> ColocationGroup:
        return self.groups[self.op(op_name).group]

    @property
    def step_fetches(self) -> tuple[str, ...]:
        """What one training step runs: the train op, and the loss when the graph names one."""
        return (self.train_op,) if self.loss is None else (self.train_op, self.loss)

    @property
    def step_ops(self) -> tuple[OpNode, ...]:
        """The ops that run every training step (initializers left out)."""
        return tuple(op for op in self.ops if op.in_step)

    @property
    def num_parameters(self) -> int:
        """Elements of every variable of the step: the model's weights and the optimizer's state alike."""
        return sum(op.parameters for op in self.ops)

    def parameters_line(self) -> str:
        """"N parameters (+M optimizer state)", N as Keras counts the model's; every variable when the builder
        did not say which are the model's."""
        if self.model_parameters is None:
            return f"{self.num_parameters:,} parameters (optimizer state included)"
        return f"{self.model_parameters:,} parameters (+{self.num_parameters - self.model_parameters:,} optimizer state)"

    @property
    def batch_note(self) -> str | None:
        """One line for a step whose batch nothing fixed: which batch it was traced at, and how to choose one."""
        if self.batch is None or self.batch.chosen_by != "default":
            return None
        return (f"model {self.name!r} has no fixed batch; traced at {self.batch.size} examples: to choose, give its "
                "model function a `batch` parameter with that default (def model(batch=64))")

    def summary(self) -> str:
        """One line of the graph's facts (its batch among them, when known), and the batch note if there is one."""
        step = self.step_ops
        batch = f"batch {self.batch.size}, " if self.batch is not None else ""
        line = (
            f"{self.name}: {len(self.ops)} ops ({len(step)} per step), {len(self.groups)} colocation groups, "
            f"{self.parameters_line()}, {sum(op.flops for op in step):,} FLOPs per step, "
            f"{batch}fingerprint {self.fingerprint[:12]}"
        )
        return line if self.batch_note is None else f"{line}\n{self.batch_note}"


def fingerprint_ops(ops: Iterable[OpNode], train_op: str, init_op: str) -> str:
    """Hash of names, types, edges, shapes and dtypes; independent of process, time and devices."""
    digest = hashlib.sha256()
    digest.update(json.dumps([train_op, init_op]).encode())
    for op in ops:
        record = [op.name, op.type, op.data_inputs, op.control_inputs, op.output_shapes, op.output_dtypes]
        digest.update(json.dumps(record).encode())
    return digest.hexdigest()
