"""Run a placement with its schedule: real steps of a model that can be built at the micro-batch size over a
plan's micro-batches, each device running its blocks in the plan's order, timed, and one traced step checked for
that order (`placer apply --schedule`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from placer.apply.run import APPLY_CONFIG, check_apply_config
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.measure.config import MeasureConfig
from placer.placement import PlacementFile, check_same_graph
from placer.schedule.origin import check_plan_calibration, check_plan_fits
from placer.schedule.plan import SchedulePlan

if TYPE_CHECKING:  # the measurement service (and TensorFlow) loads only when a step is run
    from placer.measure.targets import Target
    from placer.schedule.execute import ScheduleRun


def run_with_schedule(
    model: str,
    size: str,
    graph: OpGraph,
    placement_file: PlacementFile,
    plan: SchedulePlan,
    target: str | Target = "inprocess:2",
    config: MeasureConfig = APPLY_CONFIG,
) -> ScheduleRun:
    """Run `config.warmup_steps` + `config.timed_steps` real steps of built-in `model` at `size` (whose graph at
    the full batch is `graph`, placed by `placement_file`) over `plan.micro_batches` micro-batches in `plan`'s
    order: training steps, or forward-only steps for an inference plan (`placer schedule --inference`).

    The model is rebuilt at the micro-batch size and its ops keep their devices by name. A plan made for
    another model, placement or micro-batch count is refused before anything is built (`check_plan_fits`),
    and so is a plan priced on the calibration of another target than `target` (`check_plan_calibration`);
    its blocks are checked against the built step before a worker starts (ScheduleMismatchError)."""
    from placer.cost import parse_target_spec
    from placer.measure import Measurer
    from placer.models import require_rebuildable_batch
    from placer.schedule.execute import run_schedule, scheduled_step, step_for_plan
    from placer.schedule.micro_batch import build_micro_batch_graph, placement_at_micro_batch

    check_plan_fits(plan, placement_file)
    check_plan_calibration(plan, parse_target_spec(target, "measured"))
    try:
        require_rebuildable_batch(model, size)
    except PlacerError as error:
        raise PlacerError(f"a schedule runs over micro-batches, so the model is rebuilt at the micro-batch size: "
                          f"{error}") from None
    check_apply_config(config)
    check_same_graph(placement_file, graph)
    micro_batch_graph = build_micro_batch_graph(model, size, plan.micro_batches)
    with Measurer(target, config) as measurer:
        devices = measurer.devices
        placement = placement_at_micro_batch(placement_file.to_placement(graph, devices), graph, micro_batch_graph,
                                             devices)
        step, placement = step_for_plan(plan, micro_batch_graph, placement, devices)
        return run_schedule(measurer, scheduled_step(step, placement, devices, plan), config)
