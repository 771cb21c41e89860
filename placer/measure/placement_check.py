"""Which placements of one graph need a traced step to check where TensorFlow ran each op.

A traced step shows, per op, the device it ran on; once a trace showed a colocation group running where it was
placed, a later placement that puts it on the same device (and, for groups grappler rewrites, its neighbours on the
same devices) needs no trace of its own. Kept per graph inside one worker process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from placer.measure.result import MovedOp


@dataclass(frozen=True)
class TracedStep:
    """What one traced step showed: the device each op ran on, and the op type it ran as (from step stats)."""

    ran_on: Mapping[str, str]
    ran_as: Mapping[str, str]


@dataclass(frozen=True)
class ReusedCheck:
    """What earlier traces showed of every group of a placement."""

    ops_checked: int
    ops_not_traced: int
    moved_ops: tuple[MovedOp, ...]
    """Fusion moves only: grappler ran an op fused into its producer's kernel, on the producer's device."""


@dataclass(frozen=True)
class _Seen:
    """One traced placement, per group: its devices, (ops checked, step ops not traced) and moves."""

    group_devices: Mapping[int, tuple[str, ...]]
    counts: Mapping[int, tuple[int, int]]
    moved: Mapping[int, list[MovedOp]]


class PlacementChecks:
    """(colocation group, device) pairs that traced steps of one graph confirmed.

    A plain group (each of its step ops ran under its own name and type) is confirmed on a device when a trace showed
    all its ops there. A group grappler rewrote (some step op of it was fused into another op's kernel or optimized
    away) depends on its neighbours: a fusion runs on the producer's device, so it moves the consumer only when the two
    sit apart, and fusions chain (MatMul+BiasAdd+Relu). Rewritten groups that touch form a component, confirmed only
    for the devices of all its groups and of the groups next to it; its fusion moves are remembered with it and
    reported again. Any other move (soft placement) is never confirmed: a placement that repeats it is traced again.
    """

    def __init__(self, op_groups: Mapping[str, int], op_inputs: Mapping[str, Iterable[str]],
                 op_types: Mapping[str, str], step_ops: Iterable[str]):
        self._op_groups = dict(op_groups)
        self._op_types = op_types
        self._step_ops = frozenset(step_ops)
        self._group_ops: dict[int, list[str]] = {}
        for op, group in self._op_groups.items():
            self._group_ops.setdefault(group, []).append(op)
        neighbours: dict[int, set[int]] = {}
        for op, inputs in op_inputs.items():
            if op not in self._op_groups:
                continue
            for producer in inputs:
                other = self._op_groups.get(producer)
                if other is not None and other != self._op_groups[op]:
                    neighbours.setdefault(self._op_groups[op], set()).add(other)
                    neighbours.setdefault(other, set()).add(self._op_groups[op])
        self._neighbours = neighbours
        self._rewritten: set[int] = set()
        self._components: list[tuple[frozenset[int], tuple[int, ...]]] = []
        """Each component of rewritten groups, and the groups whose devices key it (its own and its neighbours)."""
        self._component_of: dict[int, int] = {}
        self._plain: dict[tuple[int, tuple[str, ...]], tuple[int, int]] = {}
        """(group, devices) -> (ops checked, step ops not traced) in the trace that confirmed it."""
        self._rewritten_confirmed: dict[tuple, ReusedCheck] = {}
        self._seen: list[_Seen] = []
        """What each traced step showed, per group: to confirm components found later."""

    def group_devices(self, op_devices: Mapping[str, str]) -> dict[int, tuple[str, ...]]:
        """The devices each group's ops were placed on (one, unless the caller split a group)."""
        devices: dict[int, set[str]] = {}
        for op, group in self._op_groups.items():
            devices.setdefault(group, set()).add(op_devices.get(op, ""))
        return {group: tuple(sorted(names)) for group, names in devices.items()}

    def reusable(self, op_devices: Mapping[str, str]) -> ReusedCheck | None:
        """What earlier traces showed of this placement, if they confirmed every group of it; None if the placement
        needs a traced step."""
        group_devices = self.group_devices(op_devices)
        checked = not_traced = 0
        moved: list[MovedOp] = []
        for group, devices in group_devices.items():
            if group in self._rewritten:
                continue
            counts = self._plain.get((group, devices))
            if counts is None:
                return None
            checked += counts[0]
            not_traced += counts[1]
        for members, keyed_by in self._components:
            found = self._rewritten_confirmed.get(_component_key(members, keyed_by, group_devices))
            if found is None:
                return None
            checked += found.ops_checked
            not_traced += found.ops_not_traced
            moved.extend(found.moved_ops)
        return ReusedCheck(checked, not_traced, tuple(sorted(moved, key=lambda m: m.op)))

    def record(self, op_devices: Mapping[str, str], trace: TracedStep, moved_ops: Iterable[MovedOp],
               canonical: Callable[[str], str]) -> None:
        """Confirm what `trace` showed of the placement `op_devices`; moved_ops: the moves found in it.
        canonical: maps a requested device name to the form step stats report."""
        moved_by_group: dict[int, list[MovedOp]] = {}
        for move in moved_ops:
            if move.op not in self._op_groups:
                return  # a move this bookkeeping could not file: confirm nothing, so it is traced again
            moved_by_group.setdefault(self._op_groups[move.op], []).append(move)
        counts: dict[int, tuple[int, int]] = {}
        for group, ops in self._group_ops.items():
            checked = sum(1 for op in ops if op in trace.ran_on and op in op_devices)
            counts[group] = checked, sum(1 for op in ops if op not in trace.ran_on and op in self._step_ops)
        seen = _Seen(self.group_devices(op_devices), counts, moved_by_group)
        self._seen.append(seen)
        rewritten = {group for group, ops in self._group_ops.items() if any(self._was_rewritten(op, trace) for op in ops)}
        if rewritten <= self._rewritten:
            self._confirm(seen)
        else:
            # New components: what earlier traces saw of their groups still holds for the devices they had then.
            self._rewritten |= rewritten
            self._find_components()
            self._rewritten_confirmed.clear()
            for earlier in self._seen:
                self._confirm(earlier)

    def _confirm(self, seen: _Seen) -> None:
        for group, devices in seen.group_devices.items():
            if group not in self._rewritten and group not in seen.moved:
                self._plain[(group, devices)] = seen.counts[group]
        for members, keyed_by in self._components:
            moves = [move for group in members for move in seen.moved.get(group, ())]
            if all(move.ran_as for move in moves):  # fusions only
                self._rewritten_confirmed[_component_key(members, keyed_by, seen.group_devices)] = ReusedCheck(
                    sum(seen.counts[g][0] for g in members), sum(seen.counts[g][1] for g in members), tuple(moves))

    def _was_rewritten(self, op: str, trace: TracedStep) -> bool:
        if op not in trace.ran_on:
            return op in self._step_ops
        ran_as = trace.ran_as.get(op, "")
        return bool(ran_as) and ran_as != self._op_types.get(op, ran_as)

    def _find_components(self) -> None:
        self._components, self._component_of = [], {}
        for start in sorted(self._rewritten):
            if start in self._component_of:
                continue
            members, stack = {start}, [start]
            while stack:
                for other in self._neighbours.get(stack.pop(), ()):
                    if other in self._rewritten and other not in members:
                        members.add(other)
                        stack.append(other)
            keyed_by = set(members)
            for group in members:
                keyed_by |= self._neighbours.get(group, set())
                self._component_of[group] = len(self._components)
            self._components.append((frozenset(members), tuple(sorted(keyed_by))))


def _component_key(members: frozenset[int], keyed_by: tuple[int, ...], group_devices) -> tuple:
    return members, tuple(group_devices[group] for group in keyed_by)
