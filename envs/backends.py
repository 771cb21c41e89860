"""Where an environment's step times come from: real execution (`measured`) or the simulator (`simulated`).

Both answer `evaluate(assignment)` with an `Evaluation`, so the environments do not care which one runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from placer.devices import DeviceSet
from placer.errors import PlacementError, PlacerError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement


@dataclass(frozen=True)
class Evaluation:
    step_time: float
    """Seconds per training step (median when measured); inf if the placement failed."""
    failure: str | None = None
    """"oom", "invalid", "timeout", "crash" or "runtime" (None when it ran)."""
    message: str = ""
    peak_memory: Mapping[str, int] = field(default_factory=dict)
    """Bytes per device (simulated backend only; TensorFlow does not report it per step)."""
    moved_ops: int = 0
    """Ops TensorFlow ran elsewhere than placed (measured backend only)."""
    stats: Mapping[str, Any] = field(default_factory=dict)
    """Step-time statistics: samples, median, spread (measured) or per-device busy time (simulated)."""

    @property
    def ok(self) -> bool:
        return self.failure is None


class SimulatedBackend:
    name = "simulated"

    def __init__(self, graph: OpGraph, devices: DeviceSet, costs, config=None):
        from placer.simulate import Simulator

        self.graph = graph
        self.devices = devices
        self.simulator = Simulator(graph, devices, costs, config)

    @property
    def op_cost(self) -> np.ndarray:
        return self.simulator.op_cost

    def evaluate(self, assignment: Sequence[int]) -> Evaluation:
        try:
            Placement.from_assignment(self.graph, self.devices, assignment)  # the same validation as real runs
        except PlacementError as error:
            return Evaluation(math.inf, "invalid", str(error))
        result = self.simulator.simulate(assignment)
        stats = {"busy": dict(result.device_busy), "simulated_step_time": result.step_time}
        if not result.ok:
            return Evaluation(math.inf, "oom", f"out of memory on {', '.join(result.out_of_memory)}",
                              dict(result.peak_memory), stats=stats)
        return Evaluation(result.step_time, peak_memory=dict(result.peak_memory), stats=stats)

    def close(self) -> None:
        pass


class MeasuredBackend:
    """Real execution through a `placer.measure.Measurer` on `target` (started on first use)."""

    name = "measured"

    def __init__(self, graph: OpGraph, target, measure_config=None):
        from placer.measure import Measurer

        self.graph = graph
        self.measurer = Measurer(target, measure_config)
        self.measurer.start()
        self.devices = self.measurer.devices

    @property
    def op_cost(self) -> None:
        return None

    def evaluate(self, assignment: Sequence[int]) -> Evaluation:
        try:
            placement = Placement.from_assignment(self.graph, self.devices, assignment)
        except PlacementError as error:
            return Evaluation(math.inf, "invalid", str(error))
        try:
            result = self.measurer.measure(self.graph, placement)
        except PlacerError as error:
            return Evaluation(math.inf, "runtime", str(error))
        stats = {"samples": list(result.samples), "median": result.median if result.ok else None, "spread": result.spread,
                 "overhead": dict(result.overhead)}
        if not result.ok:
            return Evaluation(math.inf, result.failure.kind, result.failure.message, stats=stats)
        return Evaluation(result.median, moved_ops=len(result.moved_ops), stats=stats)

    def close(self) -> None:
        self.measurer.close()
