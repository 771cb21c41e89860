"""What a simulated step reports: step time, per-device busy time and peak memory, link traffic, timeline."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from placer.devices import short_name


@dataclass(frozen=True)
class SimulatedOp:
    name: str
    device: str
    start: float
    end: float


@dataclass(frozen=True)
class SimulatedTransfer:
    tensor: str
    source: str
    target: str
    start: float
    end: float
    bytes: int


@dataclass(frozen=True)
class SimResult:
    """One simulated training step. Times in seconds, memory in bytes, devices by full name."""

    step_time: float
    device_busy: Mapping[str, float]
    """Seconds each device spent computing."""
    peak_memory: Mapping[str, int]
    """Largest live memory per device: variables plus the tensors alive at the worst moment."""
    link_bytes: Mapping[tuple[str, str], int]
    """Bytes sent per (source, target) device pair."""
    out_of_memory: tuple[str, ...] = ()
    """Devices whose peak memory exceeds their capacity: the placement would fail with OOM."""
    ops: tuple[SimulatedOp, ...] = field(default=(), repr=False)
    transfers: tuple[SimulatedTransfer, ...] = field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        return not self.out_of_memory

    def describe(self) -> str:
        lines = [f"simulated step time {self.step_time * 1e3:.3f} ms" + ("" if self.ok else
                 f"; OUT OF MEMORY on {', '.join(map(short_name, self.out_of_memory))}")]
        for device, busy in self.device_busy.items():
            lines.append(f"  {short_name(device)}: busy {busy * 1e3:.3f} ms, "
                         f"peak memory {self.peak_memory[device] / 2**20:.1f} MiB")
        moved = sum(self.link_bytes.values())
        if moved:
            lines.append(f"  transfers: {moved / 2**20:.2f} MiB over {len(self.link_bytes)} links")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_time": self.step_time, "ok": self.ok, "out_of_memory": list(self.out_of_memory),
            "device_busy": dict(self.device_busy), "peak_memory": dict(self.peak_memory),
            "link_bytes": {f"{a} -> {b}": v for (a, b), v in self.link_bytes.items()},
        }

    def chrome_trace(self) -> dict[str, Any]:
        """The timeline in Chrome's trace-event format (open it in Perfetto or chrome://tracing).

        One process per device, ops on its compute track, transfers on a track per incoming link. Each op's
        event names its node in `args` as TensorFlow's traces do, so checks of a traced step (such as
        `placer.graph.order.order_violations`) read a simulated one alike."""
        devices = sorted({op.device for op in self.ops} | {t.target for t in self.transfers})
        pid = {device: index for index, device in enumerate(devices)}
        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": pid[device], "args": {"name": device}} for device in devices
        ]
        events += [{"ph": "M", "name": "thread_name", "pid": pid[device], "tid": 0, "args": {"name": "ops"}}
                   for device in devices]
        events += [{"ph": "M", "name": "thread_name", "pid": pid[target], "tid": 1 + pid.get(source, 0),
                    "args": {"name": f"tensors from {short_name(source)}"}}
                   for source, target in sorted({(t.source, t.target) for t in self.transfers})]
        for op in self.ops:
            events.append({"ph": "X", "name": op.name, "pid": pid[op.device], "tid": 0, "ts": op.start * 1e6,
                           "dur": (op.end - op.start) * 1e6, "cat": "op", "args": {"name": op.name}})
        for transfer in self.transfers:
            events.append({"ph": "X", "name": f"recv {transfer.tensor}", "pid": pid[transfer.target],
                           "tid": 1 + pid.get(transfer.source, 0), "ts": transfer.start * 1e6,
                           "dur": (transfer.end - transfer.start) * 1e6, "cat": "transfer",
                           "args": {"bytes": transfer.bytes, "from": transfer.source}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def save_chrome_trace(self, path: str | Path) -> Path:
        if not self.ops:
            raise ValueError("this result has no timeline: simulate with timeline=True")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.chrome_trace()))
        return path
