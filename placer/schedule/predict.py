"""Schedules priced on a simulated target, the way `placer apply --schedule` runs them: a plan's micro-batched
step, each device held to the plan's order by control edges, simulated op by op with its transfers, the mean
of the micro-batches' gradients and the update (`predict_scheduled_step`); and the block spans every schedule
method searches over, taken from one such simulated step (`priced_template`), so that a plan's makespan
counts the transfers, barriers, update and overheads it will pay.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from placer.cost import StepTime, TargetSpec, open_target, parse_target_spec, target_cost_tables
from placer.graph.opgraph import OpGraph
from placer.placement import Placement
from placer.profile import CostTable
from placer.errors import BlockTemplateError
from placer.schedule.blocks import BlockTemplate
from placer.schedule.execute import ScheduledStep, block_ops, scheduled_step, step_for_plan
from placer.schedule.from_placement import DEFAULT_RESOLUTION
from placer.schedule.origin import PlanPrediction, check_plan_calibration
from placer.schedule.plan import SchedulePlan
from placer.schedule.standard import sequential
from placer.simulate.bound import StepTimeBound, step_time_bound
from placer.simulate.result import SimResult


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


def schedule_bound(micro_batch_graph: OpGraph, micro_batches: int, target: str | TargetSpec, *,
                   costs: Any = "roofline") -> StepTimeBound:
    """The step time no schedule of `micro_batches` copies of `micro_batch_graph` can beat on the simulated
    `target`, whatever the placement: the bound (`placer.simulate.bound`) of the micro-batched step with every
    gradient gate left out (`gradient_gates`). A schedule only adds order to that step, and a split backward
    (ZB-H1) drops some of those gates, never more; the whole batch's bound does not hold here, as micro-batches
    shorten the chain of dependent ops."""
    from placer.schedule.from_placement import gradient_gates
    from placer.schedule.micro_batch import micro_batched_step

    spec = parse_target_spec(target, "simulated")
    step = micro_batched_step(micro_batch_graph, micro_batches,
                              dropped_control_edges=gradient_gates(micro_batch_graph))
    with open_target(step.graph, spec, costs=target_cost_tables(step.graph, spec, costs)) as simulated:
        return step_time_bound(simulated.simulator, simulated_on=str(spec))


def slice_bound(slice_graph: OpGraph, slices: int, target: str | TargetSpec) -> StepTimeBound:
    """The step time no plan of `slices` slices of the batch (replicas, micro-batches of each, or both) can beat on
    the simulated `target`, whatever its placement and schedule: `placer.simulate.bound.sliced_step_bound` of
    `slice_graph` (the step built at one slice) on the whole machine, its batch-dependent ops counted once per
    slice and its gradient gates left out of the chain (a split backward drops some)."""
    import numpy as np

    from placer.schedule.from_placement import gradient_gates
    from placer.schedule.micro_batch import batch_dependent_ops
    from placer.simulate.bound import sliced_step_bound

    spec = parse_target_spec(target, "simulated")
    dependent = batch_dependent_ops(slice_graph)
    gates = gradient_gates(slice_graph)
    names = [op.name for op in slice_graph.step_ops]
    with open_target(slice_graph, spec) as simulated:
        simulator = simulated.simulator
        unordered = np.fromiter(((names[dst], names[src]) in gates
                                 for src, dst in zip(simulator.edge_src.tolist(), simulator.out_dst.tolist())),
                                dtype=bool, count=len(simulator.edge_src))
        return sliced_step_bound(simulator, slices, np.array([name in dependent for name in names], dtype=bool),
                                 unordered=unordered, simulated_on=str(spec))


def simulated_timeline(scheduled: ScheduledStep, target: str | TargetSpec, *, costs: Any = "roofline") -> SimResult:
    """`scheduled` simulated on `target` as `predict_scheduled_step` simulates it, with every op's start and end."""
    spec = parse_target_spec(target, "simulated")
    tables = costs_of_ordered_step(target_cost_tables(scheduled.step.graph, spec, costs), scheduled)
    with open_target(scheduled.graph, spec, costs=tables) as simulated:
        return simulated.simulator.simulate(scheduled.placement, timeline=True)


def priced_template(template: BlockTemplate, micro_batch_graph: OpGraph, placement: Placement,
                    target: str | TargetSpec, *, costs: Any = "roofline", time_unit: float | None = None
                    ) -> BlockTemplate:
    """`template` (`blocks_from_placement`'s, or its `forward_only()` for inference) with spans that include
    what the runtime pays, priced on the simulated `target` by the simulator `predict_scheduled_step` uses.

    The step of the template's sequential plan (training, or forward-only for forward blocks) is simulated op
    by op once. Each block of each micro-batch occupies its device from when a schedule would start it (its
    device free and the blocks it waits for done; a block that waits for none, from its first op that costs
    time) to its last op's end. That window holds its ops, the transfers it receives (link time, and on
    calibrated gRPC workers the cores' costs of sending and receiving) and its barriers. A block's span is
    its windows' mean over the micro-batches, in units of `time_unit` seconds (default: the longest /
    DEFAULT_RESOLUTION); the tail (`BlockTemplate.tail_seconds`) is the rest of the simulated step: the
    merge, the update and the target's per-step overheads. So the sequential plan's makespan and tail add up
    to its simulated step. Elsewhere two approximations remain: a transfer's link time counts as its
    receiver's, though a pipeline may hide it behind other compute; and a block's ops that the executor ran
    before the blocks it waits for were done (beside them, on a device idle one micro-batch at a time) are
    left out, though in a pipeline that device may be busy.

    `placement` places `micro_batch_graph` (the model built at the micro-batch size) on the target's devices;
    `costs` as for `predict_scheduled_step`, of the micro-batched step."""
    micro_batches = template.metadata.get("micro_batches")
    if not isinstance(micro_batches, int):
        raise BlockTemplateError(f"template {template.name!r} does not record its micro-batches: price a template "
                                 "made by blocks_from_placement")
    spec = parse_target_spec(target, "simulated")
    plan = sequential(template, micro_batches)
    step, step_placement = step_for_plan(plan, micro_batch_graph, placement, spec.devices)
    ops_of = block_ops(step, step_placement, spec.devices, plan)
    result = simulated_timeline(scheduled_step(step, step_placement, spec.devices, plan), spec, costs=costs)
    timeline = {op.name: op for op in result.ops}
    device_free = {device: 0.0 for device in template.devices}
    ends: dict[tuple[str, int], float] = {}
    windows: dict[str, list[float]] = {block.name: [] for block in template.blocks}
    first_begin = float("inf")
    for block in plan.blocks:  # in start order: a block's device and the blocks it waits for come first
        ops = [timeline[name] for name in ops_of.get(block.key, ())]
        free = max(device_free[device] for device in block.spec.devices)
        waits = [ends[(name, block.micro_batch)] for name in block.spec.after]
        # As a schedule starts a block: once its device is free and the blocks it waits for are done, so that
        # the windows of one micro-batch at a time add up to its step. A block that waits for none begins with
        # its first op that costs time (free ones hold no device).
        if waits:
            begin = max(free, *waits)
        else:
            begin = max(free, min((op.start for op in ops if op.end > op.start), default=free))
        end = max([begin, *(op.end for op in ops)])
        ends[block.key] = end
        for device in block.spec.devices:
            device_free[device] = end
        windows[block.spec.name].append(end - begin)
        first_begin = min(first_begin, begin)
    seconds = {name: sum(spans) / len(spans) for name, spans in windows.items()}
    unit = float(time_unit or max(seconds.values()) / DEFAULT_RESOLUTION or 1.0)
    blocks = tuple(dataclasses.replace(block, span=max(1, round(seconds[block.name] / unit)))
                   for block in template.blocks)
    tail = max(0.0, result.step_time - (max(ends.values()) - first_begin))
    return dataclasses.replace(template, blocks=blocks, time_unit=unit, tail_seconds=tail,
                               metadata={**template.metadata, "spans_priced_on": str(spec)})


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
