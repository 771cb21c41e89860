"""Run real training steps of a placed graph on a target through the measurement worker, so that their step
times compare with the one recorded when the placement was measured (what `placer apply` prints).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from placer.apply.place import as_placement_file
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement, PlacementFile

if TYPE_CHECKING:  # the measurement service (and TensorFlow) loads only when a graph is run
    from placer.measure import Measurement, Measurer, MovedOp
    from placer.measure.targets import Target


@dataclass(frozen=True)
class TrainingRun:
    """Real training steps of a placed graph on a target: the measurement of the timed ones, and the check.

    Step times only: the measurement worker does not fetch losses. To read them, run the graph placed by
    `place_graph` in your own session."""

    measurement: Measurement
    """Per-step times of the timed steps, moved ops, or the failure (see `placer.measure.Measurement`)."""
    warmup_steps: int
    """Untimed steps run first (the first one traced to check where TensorFlow ran each op)."""

    @property
    def ok(self) -> bool:
        return self.measurement.ok

    @property
    def step_times(self) -> tuple[float, ...]:
        return self.measurement.samples

    @property
    def median(self) -> float:
        """Median seconds per timed step; inf if the run failed."""
        return self.measurement.median

    @property
    def moved_ops(self) -> tuple[MovedOp, ...]:
        return self.measurement.moved_ops

    @property
    def steps_run(self) -> int:
        return self.warmup_steps + len(self.step_times) if self.ok else 0


def run_training(
    graph: OpGraph,
    placement: str | Path | PlacementFile | Placement,
    target: str | Target | Measurer = "inprocess:1",
    steps: int = 10,
    *,
    warmup_steps: int = 2,
    step_timeout: float = 60.0,
) -> TrainingRun:
    """Run `warmup_steps` + `steps` real training steps of `graph` placed by `placement` on `target`.

    Goes through `placer.measure.Measurer` (a worker process: a crash or hang comes back as `failure`), so
    the timings are comparable with the step time recorded when the placement was measured. A Measurer
    passed as target is used and left open.
    """
    from placer.measure import MeasureConfig, Measurer

    if steps < 1 or warmup_steps < 1:
        raise PlacerError(f"run at least one warm-up and one timed step (got warmup {warmup_steps}, steps {steps})")
    config = MeasureConfig(warmup_steps=warmup_steps, timed_steps=steps, step_timeout=step_timeout)
    owned = not isinstance(target, Measurer)
    measurer = Measurer(target, config) if owned else target
    try:
        resolved = _placement_on(placement, graph, measurer)
        result = measurer.measure(graph, resolved, config)
    finally:
        if owned:
            measurer.close()
    return TrainingRun(result, warmup_steps)


def _placement_on(placement, graph: OpGraph, measurer: Measurer) -> Placement:
    """The placement for `graph` over the measurer's devices; refuses another graph's before starting a worker."""
    exported = as_placement_file(placement, graph)
    if isinstance(placement, Placement):
        return placement
    return exported.to_placement(graph, measurer.devices)
