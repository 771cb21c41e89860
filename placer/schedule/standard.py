"""The standard schedules (sequential, GPipe, 1F1B, ZB-H1) for any block template, by list scheduling with each one's priority rule.

sequential: one micro-batch at a time. GPipe: every forward before any backward on a device, memory ignored
(as GPipe does). 1F1B: backwards first, at most as many micro-batches in flight as there are devices, the
k-th stage of p holding at most p - k of them (its warm-up depth), and never over the memory limit. ZB-H1 (Qi et al., ICLR 2024, the handcrafted schedule with 1F1B's memory): 1F1B
over a template whose backward is split into input gradients (B) and weight gradients (W), B first, then
forwards, and W last, so that a device runs its weight gradients when it would otherwise wait; a micro-batch
stays in flight until its W ends, so no device holds more than p micro-batches, 1F1B's peak (its first
stage's); a later stage holds more than its 1F1B depth while its W wait.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass
from typing import Callable

from placer.errors import ScheduleError, ScheduleInfeasibleError
from placer.schedule.blocks import BACKWARD, FORWARD, WEIGHT_GRADIENT, BlockTemplate
from placer.schedule.plan import SchedulePlan, ScheduledBlock, check_plan_inputs


@dataclass(frozen=True)
class _Rule:
    priority: Callable[[str, int, int], tuple]
    """(kind, micro-batch, topological position) -> sort key; smaller starts first."""
    max_in_flight: int | None
    """Micro-batches started and not finished at once; None: no cap."""
    forwards_first_per_device: bool
    respects_memory: bool
    stage_in_flight: str | None = None
    """Cap the micro-batches each device holds (started there and not ended there) before it starts another's
    forward: "depth", p - k on the k-th stage (0-based) of p, as 1F1B's stages do; "devices", p on every device."""


def sequential(template: BlockTemplate, micro_batches: int, memory_limit: int | None = None) -> SchedulePlan:
    return list_schedule(template, micro_batches, "sequential", memory_limit)


def gpipe(template: BlockTemplate, micro_batches: int, memory_limit: int | None = None) -> SchedulePlan:
    """GPipe keeps every micro-batch's activations until the flush, so its plan carries no memory limit;
    compare its `peak_memory()` with the limit."""
    return list_schedule(template, micro_batches, "gpipe", memory_limit)


def one_f_one_b(template: BlockTemplate, micro_batches: int, memory_limit: int | None = None) -> SchedulePlan:
    return list_schedule(template, micro_batches, "1f1b", memory_limit)


def zero_bubble_h1(template: BlockTemplate, micro_batches: int, memory_limit: int | None = None) -> SchedulePlan:
    """ZB-H1 over a template with weight-gradient blocks (`blocks_from_placement(...,
    split_weight_gradients=True)`); raises ScheduleError for one without."""
    if not template.splits_weight_gradients:
        raise ScheduleError(f"zb-h1 defers weight-gradient blocks, and template {template.name!r} has none: make it "
                            "with blocks_from_placement(..., split_weight_gradients=True) (placer schedule "
                            "--split-weight-gradients)")
    return list_schedule(template, micro_batches, "zb-h1", memory_limit)


_KIND_RANK_ZB = {BACKWARD: 0, FORWARD: 1, WEIGHT_GRADIENT: 2}


def list_schedule(template: BlockTemplate, micro_batches: int, rule_name: str, memory_limit: int | None = None) -> SchedulePlan:
    """Greedy list scheduling: at each time, start every ready block whose devices are free, best priority first."""
    rules = {
        "sequential": _Rule(lambda kind, m, position: (m, position), 1, False, True),
        "gpipe": _Rule(lambda kind, m, position: (kind != FORWARD, m, position), None, True, False),
        "1f1b": _Rule(lambda kind, m, position: (kind != BACKWARD, m, position), len(template.devices), False, True,
                      stage_in_flight="depth"),
        "zb-h1": _Rule(lambda kind, m, position: (_KIND_RANK_ZB[kind], m, position), None, False, True,
                       stage_in_flight="devices"),
    }
    if rule_name not in rules:
        raise ScheduleError(f"unknown standard schedule {rule_name!r}; known: {', '.join(rules)}")
    rule = rules[rule_name]
    limit = memory_limit if rule.respects_memory else None
    check_plan_inputs(template, micro_batches, limit)
    position = {i: p for p, i in enumerate(template.topological_order)}

    def key(i: int, m: int) -> tuple:
        return (rule.priority(template.blocks[i].kind, m, position[i]), i, m)

    # Event-driven: a block joins `ready` when its dependencies of the same micro-batch have ended and the same
    # block of the micro-batch before has started; each time step checks the ready blocks alone, in priority
    # order, so the cost grows with the blocks that can start, not with every block of every micro-batch.
    after = [sorted({template.index[name] for name in block.after}) for block in template.blocks]
    dependents: list[list[int]] = [[] for _ in template.blocks]
    for i, before in enumerate(after):
        for j in before:
            dependents[j].append(i)
    waiting_for = [[len(after[i])] * micro_batches for i in range(len(template.blocks))]
    ready = sorted(key(i, 0) for i in range(len(template.blocks)) if not after[i])
    unstarted = len(template.blocks) * micro_batches
    running: list[tuple[int, int, int]] = []  # (end, block, micro-batch), a heap
    starts: dict[tuple[int, int], int] = {}
    device_free = {device: 0 for device in template.devices}
    live = {device: 0 for device in template.devices}
    forwards_left = {device: micro_batches * sum(1 for b in template.blocks if b.kind == FORWARD and device in b.devices)
                     for device in template.devices}
    total = len(template.blocks)
    started = [0] * micro_batches
    finished = [0] * micro_batches
    time = 0
    max_in_flight = rule.max_in_flight
    if limit is not None and max_in_flight is not None:
        # Admit only as many micro-batches as fit holding everything they ever allocate on a device at
        # once: then a waiting block always fits once its own micro-batch's earlier blocks have run.
        per_micro_batch = max(max(sum(b.memory for b in template.blocks if d in b.devices and b.memory > 0)
                                  for d in template.devices), 1)
        max_in_flight = max(1, min(max_in_flight, limit // per_micro_batch))
    # A ready block on several devices waiting for busy ones reserves them from when they all come free: other blocks may
    # use a reserved device only if they end by then. Without it a block on every device (tensor parallel)
    # waits until the pipeline drains, as blocks of earlier micro-batches keep one of its devices busy.
    reserved: dict[tuple[int, int], int] = {}
    stage_cap = _stage_caps(template, rule.stage_in_flight) if rule.stage_in_flight else {}
    on_device = {d: sum(1 for b in template.blocks if d in b.devices) for d in template.devices}
    started_on = {d: [0] * micro_batches for d in template.devices}
    ended_on = {d: [0] * micro_batches for d in template.devices}
    while unstarted:
        in_flight = sum(1 for m in range(micro_batches) if started[m] and finished[m] < total)
        index = 0
        while index < len(ready):
            entry = ready[index]
            _, i, m = entry
            block = template.blocks[i]
            free = all(device_free[d] <= time for d in block.devices)
            admitted = started[m] or max_in_flight is None or in_flight < max_in_flight
            phase = not (rule.forwards_first_per_device and block.kind == BACKWARD
                         and any(forwards_left[d] for d in block.devices))
            fits = limit is None or all(live[d] + block.memory <= limit for d in block.devices)
            held = all(started_on[d][m] or sum(1 for k in range(micro_batches) if started_on[d][k]
                                               and ended_on[d][k] < on_device[d]) < stage_cap[d]
                       for d in block.devices) if stage_cap else True
            eligible = admitted and phase and fits and held
            if eligible and not free and len(block.devices) > 1:
                reserved[(i, m)] = max(device_free[d] for d in block.devices)
            else:
                reserved.pop((i, m), None)
            if not (eligible and free) or _crosses_reservation(template, reserved, (i, m), time):
                index += 1
                continue
            del ready[index]
            unstarted -= 1
            starts[(i, m)] = time
            heapq.heappush(running, (time + block.span, i, m))
            if not started[m]:
                in_flight += 1
            started[m] += 1
            for d in block.devices:
                device_free[d] = time + block.span
                live[d] += block.memory
                started_on[d][m] += 1
                if block.kind == FORWARD:
                    forwards_left[d] -= 1
            if m + 1 < micro_batches and not waiting_for[i][m + 1]:  # the same block of the next micro-batch
                index += _insert(ready, key(i, m + 1), index)
        if not running:
            if unstarted:
                raise ScheduleInfeasibleError(
                    f"{rule_name} got stuck under the memory limit of {limit} units: every waiting block would "
                    f"overflow a device (one micro-batch alone needs {max(template.single_micro_batch_peak().values())} "
                    "in dependency order); raise the limit")
            break
        time = running[0][0]
        while running and running[0][0] == time:
            _, j, m = heapq.heappop(running)
            finished[m] += 1
            for d in template.blocks[j].devices:
                ended_on[d][m] += 1
            for i in dependents[j]:
                waiting_for[i][m] -= 1
                if not waiting_for[i][m] and (m == 0 or (i, m - 1) in starts):
                    _insert(ready, key(i, m), len(ready))
    blocks = tuple(ScheduledBlock(template.blocks[i], m, start) for (i, m), start in starts.items())
    return SchedulePlan(template, micro_batches, blocks, rule_name, limit, "heuristic")


STANDARD_SCHEDULES = {"sequential": sequential, "gpipe": gpipe, "1f1b": one_f_one_b}
"""The list schedules any template can take (ZB-H1 needs weight-gradient blocks)."""


def _stage_caps(template: BlockTemplate, rule: str) -> dict[str, int]:
    """Micro-batches a device may hold: "devices", p; "depth", 1F1B's p - k for the device whose forward block
    comes k-th in the template's topological order (devices with no forward block, and every device where one
    has several forward blocks, as when data comes back to it: p)."""
    order: list[str] = []
    for i in template.topological_order:
        block = template.blocks[i]
        if block.kind == FORWARD:
            order.extend(d for d in block.devices if d not in order)
    p = len(template.devices)
    forwards = [d for b in template.blocks if b.kind == FORWARD for d in b.devices]
    if any(forwards.count(d) > 1 for d in order):  # data comes back to a device: no stage has a depth
        return {d: p for d in template.devices}
    return {d: p - order.index(d) if rule == "depth" and d in order else p for d in template.devices}


def _insert(ready: list, entry: tuple, index: int) -> int:
    """Insert `entry` into the sorted `ready` list; 1 if it went before `index` (the pass already went past its
    place, so it waits for the next time step, as it would have had it been ready when the pass began), else 0."""
    at = bisect.bisect(ready, entry)
    ready.insert(at, entry)
    return int(at < index)


def _crosses_reservation(template: BlockTemplate, reserved: dict[tuple[int, int], int], key: tuple[int, int],
                         time: int) -> bool:
    """True if starting block `key` now would still hold a device another waiting block has reserved."""
    block = template.blocks[key[0]]
    end = time + block.span
    for (i, m), claim in reserved.items():
        if (i, m) != key and end > claim and set(block.devices) & set(template.blocks[i].devices):
            return True
    return False
