"""Per-op thread counts by placement: on workers of different widths (`local:widths=2+1+1`)
an op runs on its worker's intra-op threads, so choosing an op's threads is choosing a device of that width."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from placer.devices import DeviceSet
from placer.errors import OpWidthError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement


@dataclass(frozen=True)
class WidthMismatch:
    """An op whose device runs it on other than the threads it asks for."""

    op: str
    device: str
    requested: int
    width: int | None
    """Threads the device runs one op on; None where the device does not say."""

    def describe(self) -> str:
        has = "an unknown number of threads" if self.width is None else f"{self.width} thread{'s' * (self.width > 1)}"
        return f"{self.op} asks for {self.requested} threads but {self.device} runs it on {has}"


def op_widths(graph: OpGraph, placement: Placement, devices: DeviceSet) -> dict[str, int | None]:
    """Threads each step op runs on under `placement`: its device's width (None where the device does not say)."""
    width = {device.name: device.width for device in devices}
    return {op: width[device] for op, device in placement.op_devices(graph).items()}


def width_mismatches(graph: OpGraph, placement: Placement, devices: DeviceSet,
                     requested: Mapping[str, int]) -> list[WidthMismatch]:
    """Ops of `requested` (op name -> threads) whose device's width differs from what they ask for."""
    widths = op_widths(graph, placement, devices)
    op_devices = placement.op_devices(graph)
    unknown = sorted(set(requested) - set(widths))
    if unknown:
        raise OpWidthError(f"{len(unknown)} ops asked a width for are not in {graph.name!r}, e.g. {unknown[0]!r}")
    return [WidthMismatch(op, devices.resolve(op_devices[op]).short_name, threads, widths[op])
            for op, threads in sorted(requested.items()) if widths[op] != threads]


def check_op_widths(graph: OpGraph, placement: Placement, devices: DeviceSet, requested: Mapping[str, int]) -> None:
    """Refuse a placement that puts an op on a device with fewer threads than it asks for (or whose threads are
    not known); ops on wider devices than asked are allowed (`width_mismatches` lists them)."""
    short = [m for m in width_mismatches(graph, placement, devices, requested) if m.width is None or m.width < m.requested]
    if short:
        available = ", ".join(f"{d.short_name}: {d.width if d.width is not None else '?'} threads"
                              + (f" on {d.cores} cores" if d.cores else "") for d in devices)
        more = f" (and {len(short) - 1} more)" if len(short) > 1 else ""
        raise OpWidthError(f"{short[0].describe()}{more}. The devices' widths are: {available}. Place those ops on "
                           "a device that wide, or ask for fewer threads")
