"""`SchedulePlan`: when each block of each micro-batch starts; checked on construction, and its one file format.

A plan that exists is valid: every block of every micro-batch exactly once, dependencies kept, no two
blocks at once on a device, each sub-graph's micro-batches in order, memory under the plan's limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from placer.errors import (BlockTemplateError, InvalidScheduleError, MicroBatchError, ScheduleFileError,
                           ScheduleInfeasibleError)
from placer.schedule.blocks import FORWARD, BlockSpec, BlockTemplate, template_from_json_dict

FILE_FORMAT = "placer.schedule"
FILE_FORMAT_VERSION = 1

SEARCH_STATUSES = ("finished", "best-so-far", "heuristic")
"""optimal: the search proved no shorter plan exists in its space; best-so-far: a time limit stopped it
first; heuristic: a rule built the plan (the standard schedules) and nothing was searched."""


@dataclass(frozen=True)
class ScheduledBlock:
    """One block of one micro-batch, started at an integer time."""

    spec: BlockSpec
    micro_batch: int
    start: int

    @property
    def end(self) -> int:
        return self.start + self.spec.span

    @property
    def key(self) -> tuple[str, int]:
        return self.spec.name, self.micro_batch


@dataclass(frozen=True)
class SchedulePlan:
    """A schedule of `micro_batches` copies of `template`, and how it was found."""

    template: BlockTemplate
    micro_batches: int
    blocks: tuple[ScheduledBlock, ...]
    method: str
    """What made it: "sequential", "gpipe", "1f1b", "tessel", "tessel-fast", ..."""
    memory_limit: int | None = None
    """Memory units per device the plan must stay under; None: unlimited."""
    search_status: str = "heuristic"
    search_seconds: float = 0.0
    repetend: tuple[int, int] | None = None
    """[start, end) of the first steady repetition of the repeating pattern, when the plan has one (tightening
    may since have moved some of its blocks earlier)."""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "blocks", tuple(sorted(self.blocks, key=lambda b: (b.start, b.micro_batch, b.spec.name))))
        _check(self)

    # -- what the plan costs ------------------------------------------------------------------------

    @property
    def makespan(self) -> int:
        """Time units from the first block's start to the last block's end."""
        return max(b.end for b in self.blocks) - min(b.start for b in self.blocks)

    @property
    def timed_out(self) -> bool:
        """True when a solver's time limit stopped the search: the plan is the best found, not proven best."""
        return self.search_status == "best-so-far"

    def busy_time(self) -> dict[str, int]:
        busy = {device: 0 for device in self.template.devices}
        for block in self.blocks:
            for device in block.spec.devices:
                busy[device] += block.spec.span
        return busy

    @property
    def bubble_rate(self) -> float:
        """Fraction of device time left idle within the makespan."""
        total = len(self.template.devices) * self.makespan
        return 1.0 - sum(self.busy_time().values()) / total

    def peak_memory(self) -> dict[str, int]:
        """Largest live memory units per device (deltas apply when a block starts)."""
        return _peak_memory(self.template, self.blocks)

    def seconds(self) -> float | None:
        """The step's seconds when the template's spans come from real costs: the makespan and the template's
        tail (the merge, the update and the per-step overheads where the spans were priced on a target)."""
        if self.template.time_unit is None:
            return None
        return self.makespan * self.template.time_unit + self.template.tail_seconds

    def describe(self) -> str:
        peak = self.peak_memory()
        status = {"finished": "searched to the end", "best-so-far": "time limit hit: best found so far",
                  "heuristic": "rule-based, not searched"}[self.search_status]
        lines = [f"{self.method} schedule of {self.micro_batches} micro-batches of {self.template.name}: makespan "
                 f"{self.makespan}" + (f" ({self.seconds() * 1e3:.3f} ms)" if self.seconds() is not None else "")
                 + f", bubble rate {self.bubble_rate:.1%}, {status}"
                 + (f", searched {self.search_seconds:.2f} s" if self.search_seconds else "")]
        limit = "" if self.memory_limit is None else f" (limit {self.memory_limit})"
        lines.append("  peak memory: " + ", ".join(f"{d} {p}" for d, p in peak.items()) + limit)
        if self.repetend is not None:
            lines.append(f"  repetend: time {self.repetend[0]} to {self.repetend[1]}")
        return "\n".join(lines)

    def start_of(self, name: str, micro_batch: int) -> int:
        return self._starts[(name, micro_batch)]

    @cached_property
    def _starts(self) -> Mapping[tuple[str, int], int]:
        return {b.key: b.start for b in self.blocks}

    # -- files and traces ---------------------------------------------------------------------------

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "format": FILE_FORMAT, "format_version": FILE_FORMAT_VERSION, "method": self.method,
            "micro_batches": self.micro_batches, "memory_limit": self.memory_limit,
            "search_status": self.search_status, "search_seconds": self.search_seconds,
            "repetend": None if self.repetend is None else list(self.repetend), "metadata": dict(self.metadata),
            "makespan": self.makespan, "bubble_rate": self.bubble_rate, "peak_memory": self.peak_memory(),
            "template": self.template.to_json_dict(),
            "blocks": [[b.spec.name, b.micro_batch, b.start] for b in self.blocks],
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json_dict(), indent=1))
        return path

    def chrome_trace(self) -> dict[str, Any]:
        """The plan in Chrome's trace-event format: one row per device, forwards and backwards in two colours.

        A time unit is drawn as its seconds when the template has them, else as one millisecond."""
        unit_us = 1e3 if self.template.time_unit is None else self.template.time_unit * 1e6
        rows = {device: i for i, device in enumerate(self.template.devices)}
        events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 0,
                                         "args": {"name": f"{self.method} schedule of {self.template.name}"}}]
        events += [{"ph": "M", "name": "thread_name", "pid": 0, "tid": row, "args": {"name": device}}
                   for device, row in rows.items()]
        for block in self.blocks:
            for device in block.spec.devices:
                events.append({
                    "ph": "X", "pid": 0, "tid": rows[device], "name": f"{block.spec.name} mb{block.micro_batch}",
                    "cat": block.spec.kind, "ts": block.start * unit_us, "dur": block.spec.span * unit_us,
                    "cname": "thread_state_running" if block.spec.kind == FORWARD else "thread_state_iowait",
                    "args": {"micro_batch": block.micro_batch, "kind": block.spec.kind, "memory": block.spec.memory},
                })
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def save_chrome_trace(self, path: str | Path) -> Path:
        from placer.files import write_atomically

        return write_atomically(path, json.dumps(self.chrome_trace()))


def read_schedule_file(path: str | Path) -> SchedulePlan:
    """The one reader of schedule files: parses, rebuilds and so re-checks every rule of the plan."""
    from placer.files import read_json_file

    data = read_json_file(path, "schedule file", "write one with `placer schedule ... --save FILE`", ScheduleFileError)
    return plan_from_json_dict(data, source=str(path))


def plan_from_json_dict(data: Any, *, source: str = "schedule") -> SchedulePlan:
    if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
        raise ScheduleFileError(f"{source} is not a placer schedule (format {FILE_FORMAT!r}); write one with SchedulePlan.save")
    if data.get("format_version") != FILE_FORMAT_VERSION:
        raise ScheduleFileError(f"{source} has schedule format version {data.get('format_version')}; "
                                f"this placer reads version {FILE_FORMAT_VERSION}")
    try:
        template = template_from_json_dict(data["template"], source=source)
        blocks = []
        for name, micro_batch, start in data["blocks"]:
            if not isinstance(micro_batch, int) or not isinstance(start, int):
                raise ScheduleFileError(f"{source}: block {name!r} has a non-integer micro-batch or start")
            blocks.append(ScheduledBlock(template.block(str(name)), micro_batch, start))
        repetend = data.get("repetend")
        plan = SchedulePlan(template, data["micro_batches"], tuple(blocks), str(data["method"]), data.get("memory_limit"),
                            data.get("search_status", "heuristic"), float(data.get("search_seconds", 0.0)),
                            None if repetend is None else (int(repetend[0]), int(repetend[1])),
                            dict(data.get("metadata") or {}))
    except (KeyError, TypeError, ValueError) as error:
        raise ScheduleFileError(f"{source}: the schedule is malformed ({error!r}); write it with SchedulePlan.save") from None
    except (InvalidScheduleError, BlockTemplateError) as error:
        raise ScheduleFileError(f"{source} describes a schedule that breaks its rules: {error}") from None
    if data.get("makespan", plan.makespan) != plan.makespan:
        raise ScheduleFileError(f"{source} records a makespan of {data['makespan']} but its blocks take {plan.makespan}: "
                                "the file was edited by hand; write it with SchedulePlan.save")
    return plan


# -- the rules ---------------------------------------------------------------------------------------


def _check(plan: SchedulePlan) -> None:
    template = plan.template
    if not isinstance(plan.micro_batches, int) or plan.micro_batches < 1:
        raise InvalidScheduleError(f"a plan needs at least one micro-batch, got {plan.micro_batches!r}")
    if plan.search_status not in SEARCH_STATUSES:
        raise InvalidScheduleError(f"search status {plan.search_status!r} is not one of {SEARCH_STATUSES}")
    expected = {(block.name, m) for block in template.blocks for m in range(plan.micro_batches)}
    seen: dict[tuple[str, int], ScheduledBlock] = {}
    for block in plan.blocks:
        if template.index.get(block.spec.name) is None or template.block(block.spec.name) != block.spec:
            raise InvalidScheduleError(f"block {block.spec.name!r} is not the template's block of that name")
        if block.key not in expected:
            raise InvalidScheduleError(f"block {block.spec.name!r} of micro-batch {block.micro_batch} is outside "
                                       f"micro-batches 0..{plan.micro_batches - 1}")
        if block.key in seen:
            raise InvalidScheduleError(f"block {block.spec.name!r} of micro-batch {block.micro_batch} is scheduled twice")
        if not isinstance(block.start, int) or block.start < 0:
            raise InvalidScheduleError(f"block {block.spec.name!r} of micro-batch {block.micro_batch} starts at "
                                       f"{block.start!r}; starts are whole time units from 0")
        seen[block.key] = block
    missing = sorted(expected - set(seen))
    if missing:
        raise InvalidScheduleError(f"{len(missing)} blocks are not scheduled, e.g. {missing[0][0]!r} of micro-batch {missing[0][1]}")
    for (name, m), block in seen.items():
        for before in block.spec.after:
            if seen[(before, m)].end > block.start:
                raise InvalidScheduleError(
                    f"block {name!r} of micro-batch {m} starts at {block.start}, before {before!r} (which it waits "
                    f"for) ends at {seen[(before, m)].end}")
        if m > 0 and seen[(name, m - 1)].start >= block.start:
            raise InvalidScheduleError(f"sub-graph {name!r} runs micro-batch {m} no later than micro-batch {m - 1}; "
                                       "each sub-graph takes micro-batches in order")
    for device in template.devices:
        on_device = sorted((b for b in plan.blocks if device in b.spec.devices), key=lambda b: b.start)
        for first, second in zip(on_device, on_device[1:]):
            if second.start < first.end:
                raise InvalidScheduleError(
                    f"{device} runs {first.spec.name!r} of micro-batch {first.micro_batch} and {second.spec.name!r} of "
                    f"micro-batch {second.micro_batch} at once (time {second.start})")
    if plan.memory_limit is not None:
        for device, peak in _peak_memory(template, plan.blocks).items():
            if peak > plan.memory_limit:
                raise InvalidScheduleError(f"{device} holds {peak} memory units at its peak, over the limit of "
                                           f"{plan.memory_limit}: keep fewer micro-batches in flight, or raise the limit")


def _peak_memory(template: BlockTemplate, blocks) -> dict[str, int]:
    peak = {}
    for device in template.devices:
        live = best = 0
        for block in sorted((b for b in blocks if device in b.spec.devices), key=lambda b: b.start):
            live += block.spec.memory
            best = max(best, live)
        peak[device] = best
    return peak


def check_plan_inputs(template: BlockTemplate, micro_batches: int, memory_limit: int | None) -> None:
    """Refuse what no schedule can satisfy before searching: no micro-batches, or a limit one micro-batch breaks."""
    if not isinstance(micro_batches, int) or micro_batches < 1:
        raise MicroBatchError(f"schedule at least one micro-batch, got {micro_batches!r}")
    if memory_limit is not None:
        worst = max(template.single_micro_batch_peak().items(), key=lambda item: item[1])
        if worst[1] > memory_limit:
            raise ScheduleInfeasibleError(
                f"one micro-batch alone needs {worst[1]} memory units on {worst[0]}, over the limit of {memory_limit}: "
                "raise the limit or split the model over more devices")
