"""One traced training step as a person reads it: per device, what ran when, from the step's start.

Reads both Chrome traces placer writes, the simulator's (`SimResult.chrome_trace`) and TensorFlow's traced
real step (`Measurement.chrome_trace`), into one `StepTimeline` whose devices carry their short names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Container, Mapping

from placer.devices import name_parts, short_name
from placer.errors import DeviceSpecError, TimelineError

# Ops that bring a tensor from another device: the testbed's gRPC handler, and in-process receives.
RECEIVE_OPS = frozenset({"RecvTensor", "_Recv", "_HostRecv"})
# TensorFlow names a trace's processes "<device> Compute" / "<device> Tensors", a GPU's streams
# "<device>/stream:N" and its copies "<device>/memcpy"; the device is the part before those.
_TF_DEVICE = re.compile(r"^(?P<device>\S*?(?:device:)?[A-Za-z_]+:\d+)(?P<stream>/(?:stream:\S+|memcpy))?(?: \w+)?$")


@dataclass(frozen=True)
class Span:
    """One op or received tensor on one device. Times in seconds from the step's first event."""

    device: str
    """Short device name (`placer.devices.short_name`): "GPU:0", "worker:1/CPU:0"."""
    name: str
    kind: str
    """"op" (computing) or "transfer" (a tensor received from another device)."""
    start: float
    duration: float
    node: str = ""
    """The graph node that ran, when the trace names it (TensorFlow's traces do; `name` is then its op type)."""

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class StepTimeline:
    """Every span of one step, and the devices that ran something, in device order."""

    devices: tuple[str, ...]
    spans: tuple[Span, ...]

    @property
    def step_time(self) -> float:
        """Seconds from the first span's start to the last one's end."""
        return max((span.end for span in self.spans), default=0.0)

    def on(self, device: str, kind: str | None = None) -> list[Span]:
        return [s for s in self.spans if s.device == device and (kind is None or s.kind == kind)]

    def busy(self, device: str) -> float:
        """Seconds the device spent computing: the union of its op spans (concurrent ops count once)."""
        busy, reached = 0.0, 0.0
        for span in sorted(self.on(device, "op"), key=lambda s: s.start):
            if span.end > reached:
                busy += span.end - max(span.start, reached)
                reached = span.end
        return busy


def read_chrome_trace(trace: Mapping[str, Any] | str | Path) -> StepTimeline:
    """The timeline of a Chrome trace: a dict, its JSON text, or a file (such as a run's timeline.json)."""
    if isinstance(trace, Path):
        try:
            trace = trace.read_text()
        except OSError as error:
            raise TimelineError(f"cannot read the timeline {trace}: {error.strerror}") from None
    if isinstance(trace, str):
        try:
            trace = json.loads(trace)
        except json.JSONDecodeError as error:
            raise TimelineError(f"a timeline is a Chrome trace in JSON; this is not JSON ({error})") from None
    events = trace.get("traceEvents") if isinstance(trace, Mapping) else None
    if not isinstance(events, list):
        raise TimelineError("a Chrome trace is a JSON object with a 'traceEvents' list; this one has none")
    processes = {event["pid"]: event["args"]["name"] for event in events
                 if event.get("ph") == "M" and event.get("name") == "process_name"}
    raw = []  # (device, name, kind, start and duration in microseconds)
    for event in events:
        if event.get("ph") != "X":
            continue
        process = processes.get(event.get("pid"))
        where = _device_and_stream(process) if process is not None else None
        if where is None:
            continue  # TensorFlow's "Allocators" and other processes that are no device
        device, stream = where
        if stream == "/stream:all":
            continue  # TensorFlow repeats every GPU kernel of the step there
        op = event.get("args", {}).get("op", event.get("name"))
        received = event.get("cat") == "transfer" or op in RECEIVE_OPS or event.get("name") in RECEIVE_OPS
        raw.append((device, str(event.get("name")), "transfer" if received or stream == "/memcpy" else "op",
                    float(event["ts"]), float(event.get("dur", 0.0)), str(event.get("args", {}).get("name", ""))))
    if not raw:
        raise TimelineError("the trace has no op on any device: was the step traced?")
    # Measured traces stamp events with the machine's clock: the step starts at its first event.
    origin = min(start for _, _, _, start, _, _ in raw)
    spans = tuple(Span(short_name(device), name, kind, (start - origin) / 1e6, duration / 1e6, node)
                  for device, name, kind, start, duration, node in sorted(raw, key=lambda r: r[3]))
    devices = tuple(short_name(device) for device in sorted({r[0] for r in raw}, key=name_parts))
    return StepTimeline(devices, spans)


def _device_and_stream(process: str) -> tuple[str, str | None] | None:
    match = _TF_DEVICE.match(process.strip())
    if match is None:
        return None
    try:
        name_parts(match["device"])
    except DeviceSpecError:
        return None
    return match["device"], match["stream"]


# -- the measured critical path ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CriticalLink:
    """Why an op on a step's critical path started when it did: it waited for `before`, by an edge of the graph
    on one device ("data"), by an edge from another device ("hop": a tensor or control edge sent between
    devices), or for its device to finish another op ("core")."""

    before: Span
    after: Span
    kind: str

    @property
    def wait(self) -> float:
        """Seconds between `before`'s end and `after`'s start: time on the critical path outside any op."""
        return max(0.0, self.after.start - self.before.end)


def op_spans(timeline: StepTimeline) -> dict[str, Span]:
    """Each graph node the timeline ran an op for, by name: its first span."""
    spans: dict[str, Span] = {}
    for span in timeline.spans:
        if span.kind == "op" and span.node:
            spans.setdefault(span.node, span)
    return spans


def traced_inputs(inputs: Mapping[str, Any], traced: Container[str]) -> Callable[[str], set[str]]:
    """For an op's name, the nearest ops among `traced` that it waits for: its inputs (`inputs`: name -> the
    names it waits for), and through those the trace lacks (ops grappler folded away), theirs."""
    found: dict[str, set[str]] = {}

    def nearest(name: str, seen: frozenset = frozenset()) -> set[str]:
        if name not in found:
            names: set[str] = set()
            for source in inputs.get(name, ()):
                if source in traced:
                    names.add(source)
                elif source not in seen:
                    names |= nearest(source, seen | {name})
            found[name] = names
        return found[name]

    return nearest


def critical_path(timeline: StepTimeline, inputs: Mapping[str, Any]) -> tuple[CriticalLink, ...]:
    """The chain of ops that made a measured step as long as it was, from its first op to its last, as links.

    inputs: each graph op's name -> the names of the ops it waits for (its data producers and control inputs;
    `OpNode.producers` and `control_inputs`). Walking back from the op that ended last, each op's cause is the
    one that ended latest among its inputs' spans (through inputs the trace lacks, such as ops grappler folded)
    and the op its device ran just before it. An op the graph does not know (TensorFlow inserts some, such as
    the control edges it gathers across devices) waits for the latest op of another device. Only op spans
    take part; a received tensor's own span is part of the hop that leads to its consumer."""
    spans = op_spans(timeline)
    by_device: dict[str, list[Span]] = {}
    for span in sorted(spans.values(), key=lambda s: (s.end, s.start)):
        by_device.setdefault(span.device, []).append(span)
    traced = traced_inputs(inputs, spans)
    if not spans:
        return ()
    links: list[CriticalLink] = []
    current = max(spans.values(), key=lambda s: (s.end, s.start))
    visited = {current.node}
    while True:
        candidates = []
        for name in traced(current.node):
            before = spans[name]
            candidates.append((before, "data" if before.device == current.device else "hop"))
        if current.node not in inputs:
            others = [s for s in spans.values() if s.device != current.device and s.end <= current.start]
            if others:
                candidates.append((max(others, key=lambda s: s.end), "hop"))
        earlier = [s for s in by_device[current.device]
                   if s.end <= current.start and (s.start, s.end) < (current.start, current.end)]
        if earlier:
            candidates.append((earlier[-1], "core"))
        candidates = [(span, kind) for span, kind in candidates if span.node not in visited]
        if not candidates:
            break
        before, kind = max(candidates, key=lambda c: min(c[0].end, current.start))
        links.append(CriticalLink(before, current, kind))
        visited.add(before.node)
        current = before
    return tuple(reversed(links))
