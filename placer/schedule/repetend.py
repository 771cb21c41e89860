"""The repeating pattern of a schedule (Tessel's repetend): one copy of every block in a window of `period`
time units, each block `lag` repetitions behind the micro-batch the pattern starts.

In repetition k, block x runs micro-batch k - lag[x] at time k * period + start[x]. The steady state holds,
on each device at window time t, sum over its blocks of memory[x] * ([start[x] <= t] - lag[x]) memory
units (the deltas of one micro-batch cancel), so the memory rule needs no unrolling.
"""

from __future__ import annotations

from dataclasses import dataclass

from placer.schedule.blocks import BlockTemplate


@dataclass(frozen=True)
class Repetend:
    period: int
    starts: tuple[int, ...]
    """Window time of each template block (template order)."""
    lags: tuple[int, ...]
    """Repetitions each template block runs behind (template order); the smallest is 0."""

    def start_of(self, block: int, micro_batch: int) -> int:
        return (micro_batch + self.lags[block]) * self.period + self.starts[block]

    def unroll(self, micro_batches: int) -> dict[tuple[int, int], int]:
        """(block index, micro-batch) -> start, with the pattern repeated and shifted to start at 0."""
        starts = {(x, m): self.start_of(x, m) for x in range(len(self.starts)) for m in range(micro_batches)}
        first = min(starts.values())
        return {key: start - first for key, start in starts.items()}

    def steady_memory(self, template: BlockTemplate) -> dict[str, int]:
        """Peak memory units per device in the steady state."""
        peak = {}
        for device in template.devices:
            members = [x for x, b in enumerate(template.blocks) if device in b.devices]
            base = -sum(template.blocks[x].memory * self.lags[x] for x in members)
            best = base
            for y in members:
                live = base + sum(template.blocks[x].memory for x in members if self.starts[x] <= self.starts[y])
                best = max(best, live)
            peak[device] = best
        return peak

    def bubbles(self, template: BlockTemplate) -> int:
        """Idle device time units in one window."""
        return len(template.devices) * self.period - sum(template.device_load().values())


def first_fit_repetend(template: BlockTemplate, memory_limit: int | None) -> Repetend:
    """Tessel-fast's repetend: pack each device's blocks first-fit into the shortest window, then give each
    block the lag its dependencies need, walking the chain; lengthen the window until memory fits.

    Always succeeds when one micro-batch in dependency order fits the limit (`check_plan_inputs`): a window
    as long as all the blocks in a row needs no lags at all."""
    load = max(template.device_load().values())
    total = sum(block.span for block in template.blocks)
    for period in range(load, total + 1):
        for after_dependencies in (False, True):
            repetend = _pack(template, period, after_dependencies)
            if repetend is not None and _fits(template, repetend, memory_limit):
                return repetend
    return _in_a_row(template)


def _pack(template: BlockTemplate, period: int, after_dependencies: bool) -> Repetend | None:
    """Place blocks in dependency order at the earliest window time their devices are free (no later than
    their dependencies' end within the window, with `after_dependencies`, when such a slot exists)."""
    busy: dict[str, list[tuple[int, int]]] = {device: [] for device in template.devices}
    starts = [0] * len(template.blocks)
    lags = [0] * len(template.blocks)
    for x in template.topological_order:
        block = template.blocks[x]
        deps = [template.index[name] for name in block.after]
        ready = max((starts[a] + template.blocks[a].span for a in deps), default=0) if after_dependencies else 0
        start = _earliest_slot(busy, block.devices, block.span, period, ready)
        if start is None and ready:
            start = _earliest_slot(busy, block.devices, block.span, period, 0)
        if start is None:
            return None
        for device in block.devices:
            busy[device].append((start, start + block.span))
        starts[x] = start
        lags[x] = max((lags[a] + (start < starts[a] + template.blocks[a].span) for a in deps), default=0)
    return Repetend(period, tuple(starts), tuple(lags))


def _earliest_slot(busy, devices, span: int, period: int, earliest: int) -> int | None:
    for start in range(earliest, period - span + 1):
        if all(end <= start or start + span <= begin for d in devices for begin, end in busy[d]):
            return start
    return None


def _in_a_row(template: BlockTemplate) -> Repetend:
    starts = [0] * len(template.blocks)
    time = 0
    for x in template.topological_order:
        starts[x] = time
        time += template.blocks[x].span
    return Repetend(time, tuple(starts), tuple(0 for _ in starts))


def _fits(template: BlockTemplate, repetend: Repetend, memory_limit: int | None) -> bool:
    return memory_limit is None or max(repetend.steady_memory(template).values()) <= memory_limit
