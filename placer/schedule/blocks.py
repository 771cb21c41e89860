"""Blocks: the pieces of one micro-batch's training step that a schedule orders in time (Tessel's model).

A `BlockTemplate` is what every micro-batch runs: blocks with an integer span, a signed memory delta, the
devices they occupy and the blocks of the same micro-batch they wait for. A schedule places copies of it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

from placer.errors import BlockTemplateError

FORWARD = "forward"
BACKWARD = "backward"
WEIGHT_GRADIENT = "weight-gradient"
"""The part of a backward that only the update reads (ZeroBubble's W): gradients of the variables, split off the
input-gradient chain (B, kind "backward") so that a schedule may run it later."""
BLOCK_KINDS = (FORWARD, BACKWARD, WEIGHT_GRADIENT)


@dataclass(frozen=True)
class BlockSpec:
    """One block of one micro-batch: a sub-graph run on some devices for `span` time units."""

    name: str
    """The sub-graph id, unique in its template (e.g. "f0", "b3")."""
    kind: str
    """"forward", "backward", or "weight-gradient" (a backward's weight gradients split off its input-gradient
    chain, `blocks_from_placement(..., split_weight_gradients=True)`)."""
    span: int
    """Time units the block occupies its devices (at least 1)."""
    memory: int
    """Memory units each of its devices gains when the block starts: + for a forward keeping activations,
    - for the backward that frees them."""
    devices: tuple[str, ...]
    """Devices the block occupies for its whole span (several: a tensor-parallel block)."""
    after: tuple[str, ...] = ()
    """Blocks of the same micro-batch that must end before this one starts."""

    def to_json_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "span": self.span, "memory": self.memory,
                "devices": list(self.devices), "after": list(self.after)}


@dataclass(frozen=True)
class BlockTemplate:
    """The blocks of one micro-batch over named devices; validated on construction."""

    name: str
    devices: tuple[str, ...]
    blocks: tuple[BlockSpec, ...]
    time_unit: float | None = None
    """Seconds per span unit when the spans come from real costs; None for modeled unit spans."""
    memory_unit: int | None = None
    """Bytes per memory unit when the deltas come from real activations; None for modeled units."""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)
    tail_seconds: float = 0.0
    """Seconds every step pays beyond its blocks' makespan whatever the schedule: the merge of the
    micro-batches' gradients, the update and the target's per-step overheads (`placer.schedule.predict.
    priced_template`); 0 where spans are op costs alone."""

    def __post_init__(self):
        if not self.devices or not self.blocks:
            raise BlockTemplateError(f"template {self.name!r} needs at least one device and one block")
        if not isinstance(self.tail_seconds, (int, float)) or not 0 <= self.tail_seconds < float("inf"):
            raise BlockTemplateError(f"template {self.name!r} has tail {self.tail_seconds!r} s; a step's tail is a "
                                     "finite number of seconds, at least 0")
        if self.tail_seconds and self.time_unit is None:
            raise BlockTemplateError(f"template {self.name!r} has a tail of {self.tail_seconds} s but unit spans (no "
                                     "time unit): a tail in seconds needs spans in seconds")
        if len(set(self.devices)) != len(self.devices):
            raise BlockTemplateError(f"template {self.name!r} lists a device twice: {list(self.devices)}")
        names = [block.name for block in self.blocks]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise BlockTemplateError(f"template {self.name!r} has several blocks named {twice}: give each sub-graph its own id")
        known = set(self.devices)
        for block in self.blocks:
            if block.kind not in BLOCK_KINDS:
                raise BlockTemplateError(f"block {block.name!r} has kind {block.kind!r}; use one of {', '.join(BLOCK_KINDS)}")
            if not isinstance(block.span, int) or block.span < 1:
                raise BlockTemplateError(f"block {block.name!r} has span {block.span!r}; spans are whole time units, at least 1")
            if not isinstance(block.memory, int):
                raise BlockTemplateError(f"block {block.name!r} has memory {block.memory!r}; memory deltas are whole units")
            if not block.devices or len(set(block.devices)) != len(block.devices):
                raise BlockTemplateError(f"block {block.name!r} must occupy one or more distinct devices, got {list(block.devices)}")
            unknown = [device for device in block.devices if device not in known]
            if unknown:
                raise BlockTemplateError(f"block {block.name!r} runs on unknown device(s) {unknown}; "
                                         f"the template's devices are {list(self.devices)}")
            missing = [name for name in block.after if name not in names]
            if missing:
                raise BlockTemplateError(f"block {block.name!r} waits for blocks {missing} that the template lacks")
        self.topological_order  # raises on a cycle
        for device in self.devices:
            balance = sum(block.memory for block in self.blocks if device in block.devices)
            if balance != 0:
                raise BlockTemplateError(
                    f"on {device} the blocks of one micro-batch add {balance} memory units in total: each micro-batch "
                    "must free what it keeps (give the backward block the forward's delta with the opposite sign)")

    # -- views --------------------------------------------------------------------------------------

    @cached_property
    def index(self) -> Mapping[str, int]:
        return {block.name: i for i, block in enumerate(self.blocks)}

    def block(self, name: str) -> BlockSpec:
        try:
            return self.blocks[self.index[name]]
        except KeyError:
            raise BlockTemplateError(f"template {self.name!r} has no block named {name!r}") from None

    @cached_property
    def topological_order(self) -> tuple[int, ...]:
        """Block indices such that every block comes after the blocks it waits for (stable in block order)."""
        index = {block.name: i for i, block in enumerate(self.blocks)}
        waiting = [len(block.after) for block in self.blocks]
        followers: list[list[int]] = [[] for _ in self.blocks]
        for i, block in enumerate(self.blocks):
            for name in block.after:
                followers[index[name]].append(i)
        ready = [i for i, count in enumerate(waiting) if count == 0]
        order = []
        while ready:
            ready.sort()
            current = ready.pop(0)
            order.append(current)
            for follower in followers[current]:
                waiting[follower] -= 1
                if waiting[follower] == 0:
                    ready.append(follower)
        if len(order) != len(self.blocks):
            stuck = [self.blocks[i].name for i, count in enumerate(waiting) if count > 0]
            raise BlockTemplateError(f"the dependencies of template {self.name!r} form a cycle through {stuck}; "
                                     "a micro-batch's blocks must be orderable")
        return tuple(order)

    @property
    def trains(self) -> bool:
        """True when a micro-batch has backward blocks (a training step); False for inference (`forward_only`)."""
        return any(block.kind in (BACKWARD, WEIGHT_GRADIENT) for block in self.blocks)

    @property
    def splits_weight_gradients(self) -> bool:
        """True when the backward is split into input-gradient (B) and weight-gradient (W) blocks."""
        return any(block.kind == WEIGHT_GRADIENT for block in self.blocks)

    def forward_only(self) -> BlockTemplate:
        """The template of inference: the forward blocks alone, waiting for each other as before, keeping no
        activations (nothing waits for a backward to free them). Its tail is 0: a forward-only step has no
        update; price it (`priced_template`) for the tail of its own step."""
        forwards = [block for block in self.blocks if block.kind == FORWARD]
        if not forwards:
            raise BlockTemplateError(f"template {self.name!r} has no forward blocks to run for inference")
        names = {block.name for block in forwards}
        blocks = tuple(dataclasses.replace(block, memory=0, after=tuple(a for a in block.after if a in names))
                       for block in forwards)
        devices = tuple(d for d in self.devices if any(d in block.devices for block in blocks))
        return BlockTemplate(f"{self.name}/inference", devices, blocks, self.time_unit, self.memory_unit,
                             {**self.metadata, "inference": True})

    def device_load(self) -> dict[str, int]:
        """Time units each device is busy per micro-batch: no schedule repeats faster than the largest."""
        return {device: sum(b.span for b in self.blocks if device in b.devices) for device in self.devices}

    def critical_path(self) -> int:
        """Time units of the longest dependency chain: one micro-batch can finish no sooner."""
        finish: dict[str, int] = {}
        for i in self.topological_order:
            block = self.blocks[i]
            finish[block.name] = max((finish[name] for name in block.after), default=0) + block.span
        return max(finish.values())

    def single_micro_batch_peak(self) -> dict[str, int]:
        """Peak memory units per device when one micro-batch runs alone in topological order."""
        live = {device: 0 for device in self.devices}
        peak = dict(live)
        for i in self.topological_order:
            block = self.blocks[i]
            for device in block.devices:
                live[device] += block.memory
                peak[device] = max(peak[device], live[device])
        return peak

    def to_json_dict(self) -> dict[str, Any]:
        return {"name": self.name, "devices": list(self.devices), "time_unit": self.time_unit,
                "memory_unit": self.memory_unit, "tail_seconds": self.tail_seconds, "metadata": dict(self.metadata),
                "blocks": [block.to_json_dict() for block in self.blocks]}


def template_from_json_dict(data: Any, *, source: str = "template") -> BlockTemplate:
    """The template a schedule file records (the reader validates it as the constructor does)."""
    try:
        blocks = tuple(BlockSpec(str(b["name"]), str(b["kind"]), b["span"], b["memory"], tuple(map(str, b["devices"])),
                                 tuple(map(str, b.get("after", ())))) for b in data["blocks"])
        return BlockTemplate(str(data["name"]), tuple(map(str, data["devices"])), blocks, data.get("time_unit"),
                             data.get("memory_unit"), dict(data.get("metadata") or {}), data.get("tail_seconds", 0.0))
    except (KeyError, TypeError, AttributeError) as error:
        raise BlockTemplateError(f"{source}: the block template is malformed ({error!r}); "
                                 "write it with SchedulePlan.save") from None
