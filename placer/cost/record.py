"""`StepTime`: what one placement costs on one target, the same record whether measured or simulated.

It crosses every boundary above the cost layer (environments, training, experiments, every command's --json),
so it is small, immutable and JSON-serializable. `StepTime.from_measurement` is the one conversion from the
measurement worker's wire record (`placer.measure.Measurement`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from placer.devices import short_name
from placer.measure.result import FAILURE_KINDS, MovedOp, interquartile_range

if TYPE_CHECKING:
    from placer.measure.result import Measurement

BACKENDS = ("measured", "simulated")


@dataclass(frozen=True)
class StepTime:
    """Seconds per training step of one placement on one target, or why it has none."""

    seconds: float
    """Median step time in seconds (measured), or the predicted one (simulated); inf when it failed."""
    backend: str
    """"measured" (real execution) or "simulated" (predicted by the simulator)."""
    target: str = ""
    """The target's spec, e.g. "local:2" or "modeled:2xV100"."""
    failure: str | None = None
    """One of `FAILURE_KINDS` ("oom", "invalid", "timeout", "crash", "runtime"); None when it ran."""
    message: str = ""
    """What failed, in one paragraph."""
    samples: tuple[float, ...] = ()
    """Measured: seconds of each timed step. Simulated: the one prediction."""
    peak_memory: Mapping[str, int] = field(default_factory=dict)
    """Bytes per device at the worst moment (simulated only: TensorFlow does not report it per step)."""
    busy: Mapping[str, float] = field(default_factory=dict)
    """Seconds each device computed (simulated only)."""
    moved_ops: tuple[MovedOp, ...] = ()
    """Ops TensorFlow ran elsewhere than placed (measured only): the requested and the real placement differ."""
    ops_checked: int = 0
    """Measured: placed ops found in the traced step and compared with the placement."""
    ops_not_traced: int = 0
    """Measured: placed ops absent from the traced step (folded or fused by grappler, or not run)."""
    placement_check: str = ""
    """Measured: "traced" (this placement's step was traced), "reused" (earlier traces confirmed every colocation
    group on its device) or "" (not checked)."""
    overhead: Mapping[str, float] = field(default_factory=dict)
    """Measured: seconds spent around the timed steps (graph rewrite, session, init, first step)."""

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {self.backend!r}")
        if self.failure is not None and self.failure not in FAILURE_KINDS:
            raise ValueError(f"failure must be one of {FAILURE_KINDS}, not {self.failure!r}")

    @classmethod
    def failed(cls, kind: str, message: str, backend: str, target: str = "", **details: Any) -> StepTime:
        return cls(math.inf, backend, target, kind, message, **details)

    @classmethod
    def from_measurement(cls, measurement: Measurement, target: str | None = None) -> StepTime:
        """A measured placement's record, from what the measurement worker sent back; `target` defaults to the
        Measurer's target the measurement names."""
        target = measurement.target if target is None else target
        details = {"samples": tuple(measurement.samples), "moved_ops": tuple(measurement.moved_ops),
                   "ops_checked": measurement.ops_checked, "ops_not_traced": measurement.ops_not_traced,
                   "placement_check": measurement.placement_check, "overhead": dict(measurement.overhead)}
        if not measurement.ok:
            return cls.failed(measurement.failure.kind, measurement.failure.message, "measured", target, **details)
        return cls(measurement.median, "measured", target, **details)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepTime:
        """The record `to_dict` wrote (derived fields such as `spread` are recomputed, not read)."""
        failure = data.get("failure")
        seconds = math.inf if failure is not None or data.get("seconds") is None else float(data["seconds"])
        return cls(
            seconds, str(data["backend"]), str(data.get("target", "")), failure, str(data.get("message", "")),
            samples=tuple(float(s) for s in data.get("samples", ())), peak_memory=dict(data.get("peak_memory", {})),
            busy=dict(data.get("busy", {})),
            moved_ops=tuple(MovedOp(m["op"], m["requested"], m["actual"], m.get("ran_as", ""))
                            for m in data.get("moved_ops", ())),
            ops_checked=int(data.get("ops_checked", 0)), ops_not_traced=int(data.get("ops_not_traced", 0)),
            placement_check=str(data.get("placement_check", "")), overhead=dict(data.get("overhead", {})),
        )

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def spread(self) -> float:
        """Interquartile range of the samples in seconds (0 for fewer than two)."""
        return interquartile_range(self.samples)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds if self.ok else None, "ok": self.ok, "backend": self.backend,
            "target": self.target, "failure": self.failure, "message": self.message,
            "samples": list(self.samples), "spread": self.spread, "peak_memory": dict(self.peak_memory),
            "busy": dict(self.busy), "ops_checked": self.ops_checked, "ops_not_traced": self.ops_not_traced,
            "placement_check": self.placement_check, "overhead": dict(self.overhead),
            "moved_ops": [{"op": m.op, "requested": m.requested, "actual": m.actual, "ran_as": m.ran_as}
                          for m in self.moved_ops],
        }

    def describe(self) -> str:
        """A few lines for a person: the step time and its spread, or the failure; moved ops; memory."""
        if not self.ok:
            return f"FAILED ({self.failure}): {self.message}"
        if self.backend == "simulated":
            lines = [f"simulated step time {self.seconds * 1e3:.2f} ms on {self.target}"]
            for device, busy in self.busy.items():
                memory = self.peak_memory.get(device, 0) / 2**20
                lines.append(f"  {short_name(device)}: busy {busy * 1e3:.2f} ms, peak memory {memory:.1f} MiB")
            return "\n".join(lines)
        text = (f"step time median {self.seconds * 1e3:.2f} ms, IQR {self.spread * 1e3:.2f} ms over "
                f"{len(self.samples)} steps (min {min(self.samples) * 1e3:.2f}, max {max(self.samples) * 1e3:.2f})")
        if self.moved_ops:
            shown = "; ".join(
                f"{m.op}: {m.requested} -> {m.actual}" + (f" (fused by grappler into {m.ran_as})" if m.ran_as else "")
                for m in self.moved_ops[:5])
            text += f"\nWARNING: TensorFlow moved {len(self.moved_ops)} ops: {shown}"
        elif self.ops_checked and self.placement_check == "reused":
            text += f"\nplacement check: all {self.ops_checked} ops ran where placed in earlier traced steps"
        elif self.ops_checked:
            text += f"\nplacement check: all {self.ops_checked} traced ops ran where placed"
        if self.ops_not_traced:
            text += f" ({self.ops_not_traced} placed ops were optimized away or not traced)"
        return text
