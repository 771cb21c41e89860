"""Run real training steps of a placed graph on a target through the measurement worker, so that their step
times compare with the one recorded when the placement was measured (what `placer apply` prints).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from placer.apply.place import as_placement_file
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.measure.config import ENOUGH_TIMED_SECONDS, MeasureConfig
from placer.placement import Placement, PlacementFile

if TYPE_CHECKING:  # the measurement service (and TensorFlow) loads only when a graph is run
    from placer.cost.record import StepTime
    from placer.measure import Measurer
    from placer.measure.targets import Target

APPLY_CONFIG = MeasureConfig(timed_steps=10, timed_seconds=ENOUGH_TIMED_SECONDS)
"""How `placer apply` and `run_training` time a placement unless told otherwise: 2 warm-up steps, then at least 10
timed and at least 0.3 s of them: a 3 ms step's median of 10 steps moves 13 % from one run to the next."""


def run_training(
    graph: OpGraph,
    placement: str | Path | PlacementFile | Placement,
    target: str | Target | Measurer = "inprocess:1",
    config: MeasureConfig = APPLY_CONFIG,
) -> StepTime:
    """Run `config.warmup_steps` + `config.timed_steps` real training steps of `graph` placed by `placement`
    on `target`; their step time (the timed steps' median), the ops TensorFlow moved, or the failure.

    Goes through `placer.measure.Measurer` (a worker process: a crash or hang comes back as a failed StepTime),
    so the timings are comparable with the step time recorded when the placement was measured. A Measurer
    passed as target is used and left open. Step times only: the worker does not fetch losses; to read them,
    run the graph placed by `place_graph` in your own session.
    """
    from placer.cost.record import StepTime
    from placer.measure import Measurer

    check_apply_config(config)
    owned = not isinstance(target, Measurer)
    measurer = Measurer(target, config) if owned else target
    try:
        resolved = _placement_on(placement, graph, measurer)
        result = measurer.measure(graph, resolved, config)
    finally:
        if owned:
            measurer.close()
    return StepTime.from_measurement(result)


def check_apply_config(config: MeasureConfig) -> None:
    """Refuse timings that cannot check where TensorFlow ran the ops (the first warm-up step is traced)."""
    if config.timed_steps < 1 or config.warmup_steps < 1:
        raise PlacerError(f"run at least one warm-up and one timed step (got warmup {config.warmup_steps}, "
                          f"repeats {config.timed_steps})")


def _placement_on(placement, graph: OpGraph, measurer: Measurer) -> Placement:
    """The placement for `graph` over the measurer's devices; refuses another graph's before starting a worker."""
    exported = as_placement_file(placement, graph)
    if isinstance(placement, Placement):
        return placement
    return exported.to_placement(graph, measurer.devices)
