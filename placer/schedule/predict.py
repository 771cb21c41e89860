"""A schedule plan priced op by op: its micro-batched step, each device held to the plan's order by control
edges, simulated on a target with its transfers, the mean of the micro-batches' gradients and the update.

Block spans (`placer.schedule.from_placement`) price a plan as if transfers, barriers and the update were
free; this prices the step `placer apply --schedule` runs, so that on `calibrated:FILE` it predicts what that
command measures on the calibrated target.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from placer.cost import StepTime, TargetSpec, open_target, parse_target_spec, target_cost_tables
from placer.graph.opgraph import OpGraph
from placer.placement import Placement
from placer.profile import CostTable
from placer.schedule.execute import ScheduledStep, scheduled_step, step_for_plan
from placer.schedule.origin import PlanPrediction, check_plan_calibration
from placer.schedule.plan import SchedulePlan


def costs_of_ordered_step(tables: Any, scheduled: ScheduledStep) -> Any:
    """Cost tables of the micro-batched step (`scheduled.step.graph`) as tables of the ordered graph
    (`scheduled.graph`): the same ops by name, and the barriers, NoOps the executor runs inline, free."""
    def ordered(table: CostTable) -> CostTable:
        table.check_graph(scheduled.step.graph)
        return dataclasses.replace(table, graph_fingerprint=scheduled.graph.fingerprint,
                                   metadata={**table.metadata, "ordered_from": scheduled.step.graph.name})

    if isinstance(tables, CostTable):
        return ordered(tables)
    return {key: ordered(table) for key, table in tables.items()}


def predict_scheduled_step(scheduled: ScheduledStep, target: str | TargetSpec, *, costs: Any = "roofline",
                           simulator_config: Any = None) -> StepTime:
    """The step time of `scheduled` on the simulated `target`, op by op: per device the plan's order (its
    barriers and control edges), every transfer between devices (calibrated links and core costs on
    "calibrated:FILE"), the merge of the micro-batches and the update, and the target's per-step overheads.

    costs: the op costs of the micro-batched step `scheduled.step.graph` (a CostTable or a mapping of device
    model/kind to one); "roofline" means what the target's simulator uses: profiled on the calibrated target
    (cached beside FILE) or roofline estimates of modeled devices. `scheduled` must be placed on the
    target's devices (`scheduled_step(..., spec.devices, plan)`)."""
    spec = parse_target_spec(target, "simulated")
    tables = costs_of_ordered_step(target_cost_tables(scheduled.step.graph, spec, costs), scheduled)
    with open_target(scheduled.graph, spec, costs=tables, simulator_config=simulator_config) as simulated:
        return simulated.evaluate(scheduled.placement)


def predict_plans(plans: Mapping[str, SchedulePlan], micro_batch_graph: OpGraph, placement: Placement,
                  target: str | TargetSpec, *, costs: Any = "roofline") -> dict[str, PlanPrediction]:
    """Each plan's `PlanPrediction` on the simulated `target`: its step (training, or forward-only for an
    inference plan; `step_for_plan`) ordered by the plan and priced op by op (`predict_scheduled_step`).

    `placement` places `micro_batch_graph` (the model built at the micro-batch size) on the target's devices;
    `costs` as for `predict_scheduled_step`, of the micro-batched step (profiled once for all plans)."""
    spec = parse_target_spec(target, "simulated")
    for plan in plans.values():
        check_plan_calibration(plan, spec)
    steps: dict[bool, tuple] = {}  # one step per kind (training, inference), whatever the plans' orders
    predictions = {}
    for method, plan in plans.items():
        trains = plan.template.trains
        if trains not in steps:
            step, step_placement = step_for_plan(plan, micro_batch_graph, placement, spec.devices)
            steps[trains] = step, step_placement, target_cost_tables(step.graph, spec, costs)
        step, step_placement, tables = steps[trains]
        scheduled = scheduled_step(step, step_placement, spec.devices, plan)
        predictions[method] = PlanPrediction.on(predict_scheduled_step(scheduled, spec, costs=tables), spec)
    return predictions
