"""A schedule plan executed for real: a micro-batched step (training, or forward-only for an inference plan)
whose devices run their blocks in the plan's order (control dependencies, `placer.graph.order`), timed by a
`Measurer`, its traced step checked for that order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from placer.cost.record import StepTime
from placer.devices import DeviceSet
from placer.errors import MicroBatchError, ScheduleMismatchError
from placer.graph.opgraph import OpGraph
from placer.graph.order import OpChain, OrderViolation, enforce_order, order_violations, traced_links
from placer.measure.config import MeasureConfig
from placer.placement import Placement
from placer.schedule.from_placement import block_dependencies, op_blocks, weight_gradient_split
from placer.schedule.inference import forward_only_graph, forward_only_placement
from placer.schedule.micro_batch import MicroBatchedStep, micro_batched_step
from placer.schedule.origin import PlanPrediction, plan_prediction
from placer.schedule.plan import ScheduledBlock, SchedulePlan


@dataclass(frozen=True)
class ScheduledStep:
    """A micro-batched step ordered by a plan, and its placement: what a `Measurer` runs."""

    plan: SchedulePlan
    step: MicroBatchedStep
    graph: OpGraph
    """The micro-batched step with the order's control dependencies."""
    placement: Placement
    """Of `graph`: each copy where its original went, each barrier on its chain's device."""
    chains: tuple[OpChain, ...]
    """Per device, its blocks' ops in the plan's order (links labelled "f@CPU:0 mb1")."""


def block_chains(step: MicroBatchedStep, placement: Placement, devices: DeviceSet, plan: SchedulePlan
                 ) -> tuple[OpChain, ...]:
    """Per device of the plan, the ops of each (block, micro-batch) it runs, in the order the plan starts them.

    `placement` places `step.micro_batch_graph`; its blocks (`op_blocks`) must be the plan's template's, with
    the same dependencies, and the plan must have as many micro-batches as the step."""
    ops_of = block_ops(step, placement, devices, plan)
    chains = []
    for device in plan.template.devices:
        scheduled = [b for b in device_blocks(plan, device) if b.key in ops_of]
        if len(scheduled) > 1:
            chains.append(OpChain(device, tuple(frozenset(ops_of[b.key]) for b in scheduled),
                                  tuple(f"{b.spec.name} mb{b.micro_batch}" for b in scheduled)))
    return tuple(chains)


def block_ops(step: MicroBatchedStep, placement: Placement, devices: DeviceSet, plan: SchedulePlan
              ) -> dict[tuple[str, int], frozenset[str]]:
    """The ops of `step.graph` each (block, micro-batch) of `plan` runs: the copies of its block's ops.

    Raises ScheduleMismatchError unless `placement` (of `step.micro_batch_graph`) makes the plan's template's
    blocks with the same dependencies, and MicroBatchError unless the plan has as many micro-batches as the step."""
    if plan.micro_batches != step.micro_batches:
        raise MicroBatchError(f"the plan orders {plan.micro_batches} micro-batches but the step has {step.micro_batches}: "
                              "make the plan and the step with the same --micro-batches")
    split = plan.template.splits_weight_gradients
    gates = weight_gradient_split(step.micro_batch_graph, placement.op_devices(step.micro_batch_graph)).gates if split else frozenset()
    if not gates <= step.dropped_control_edges:
        raise ScheduleMismatchError(
            f"the plan splits the backward into input and weight gradients, but the step keeps {len(gates - step.dropped_control_edges)} "
            "gradient gates that make input gradients wait for weight gradients: make the step with step_for_plan")
    membership = op_blocks(step.micro_batch_graph, placement, devices, split_weight_gradients=split)
    actual = {block: tuple(sorted(after))
              for block, after in block_dependencies(step.micro_batch_graph, membership, gates).items()}
    planned = {block.name: tuple(sorted(block.after)) for block in plan.template.blocks}
    if set(actual) != set(planned):
        raise ScheduleMismatchError(
            f"the plan was made for template {plan.template.name!r} with blocks {sorted(planned)}, but "
            f"{step.micro_batch_graph.name!r} placed this way has blocks {sorted(actual)}: make the plan from this "
            "graph and placement (blocks_from_placement)")
    differ = sorted(name for name in actual if actual[name] != planned[name])
    if differ:
        raise ScheduleMismatchError(
            f"the plan's template {plan.template.name!r} has other dependencies than the placed graph for blocks "
            f"{differ} (e.g. {differ[0]} waits for {list(planned[differ[0]])} in the plan, {list(actual[differ[0]])} "
            "in the graph): make the plan from this graph and placement")
    ops_of: dict[tuple[str, int], set[str]] = {}
    for copy, (micro_batch, original) in step.copies.items():
        block = membership.get(original)
        if block is not None:
            ops_of.setdefault((block, micro_batch), set()).add(copy)
    return {key: frozenset(ops) for key, ops in ops_of.items()}


def device_blocks(plan: SchedulePlan, device: str) -> list[ScheduledBlock]:
    """The blocks `plan` runs on `device`, in the order it starts them."""
    return sorted((b for b in plan.blocks if device in b.spec.devices), key=lambda b: (b.start, b.end))


def step_for_plan(plan: SchedulePlan, micro_batch_graph: OpGraph, placement: Placement, devices: DeviceSet
                  ) -> tuple[MicroBatchedStep, Placement]:
    """The micro-batched step `plan` orders, and the placement of the graph that step copies (`placement`
    places `micro_batch_graph`): the training step, or for a plan of forward blocks only (inference) the
    forward-only step (`placer.schedule.inference`). Give both to `scheduled_step`. A plan whose backward is
    split into input and weight gradients gets the step without the gradient gates between them
    (`weight_gradient_split`), so that its weight gradients can run later."""
    if plan.template.splits_weight_gradients:
        gates = weight_gradient_split(micro_batch_graph, placement.op_devices(micro_batch_graph)).gates
        return micro_batched_step(micro_batch_graph, plan.micro_batches, dropped_control_edges=gates), placement
    if plan.template.trains:
        return micro_batched_step(micro_batch_graph, plan.micro_batches), placement
    forward = forward_only_graph(micro_batch_graph)
    return (micro_batched_step(forward, plan.micro_batches),
            forward_only_placement(placement, micro_batch_graph, forward, devices))


def scheduled_step(step: MicroBatchedStep, placement: Placement, devices: DeviceSet, plan: SchedulePlan) -> ScheduledStep:
    """`step` with each device running its blocks in `plan`'s order, placed as `placement` places the
    micro-batch graph."""
    chains = block_chains(step, placement, devices, plan)
    ordered = enforce_order(step.graph, chains)
    lifted = step.lift_placement(placement, devices).op_devices(step.graph)
    ordered_placement = Placement.from_op_devices(
        ordered.graph, devices, ordered.placed_op_devices(lifted, devices),
        {**placement.metadata, "schedule": plan.method, "micro_batches": plan.micro_batches})
    return ScheduledStep(plan, step, ordered.graph, ordered_placement, chains)


@dataclass(frozen=True)
class ScheduleRun:
    """One measured run of a scheduled step: its step time, what the plan predicted, and whether the traced
    step kept the plan's order."""

    method: str
    step_time: StepTime
    """The measured step time (the timed steps' median), or why the step failed."""
    violations: tuple[OrderViolation, ...] = ()
    links_traced: int = 0
    links: int = 0
    predicted: float | None = None
    """The plan's makespan and tail in seconds (`SchedulePlan.seconds`), when its spans are in seconds: priced
    on a simulated target (transfers, barriers, update and overheads included), or op costs alone."""
    prediction: PlanPrediction | None = None
    """The plan's op-level prediction (`placer.schedule.predict`), when its file records one."""

    @property
    def ok(self) -> bool:
        return self.step_time.ok

    @property
    def seconds(self) -> float:
        """Median measured step time (inf when the step failed)."""
        return self.step_time.seconds

    @property
    def order_kept(self) -> bool | None:
        """True if the trace shows every device's blocks in the plan's order; None when nothing was traced."""
        if not self.ok or not self.links_traced:
            return None
        return not self.violations

    def to_json_dict(self) -> dict:
        """The run as `placer schedule --measure --json` and `placer apply --schedule --json` print it."""
        return {"method": self.method, "step_time": self.step_time.to_dict(), "predicted_seconds": self.predicted,
                "predicted_op_level": None if self.prediction is None else self.prediction.to_json_dict(),
                "order_kept": self.order_kept, "violations": [v.describe() for v in self.violations],
                "blocks_traced": self.links_traced, "blocks": self.links}

    def describe(self) -> str:
        if not self.ok:
            return f"{self.method}: {self.step_time.describe()}"
        predicted = []
        if self.prediction is not None and self.prediction.step_time.ok:
            predicted.append(f"predicted {self.prediction.step_time.seconds * 1e3:.2f} ms op by op on "
                             f"{self.prediction.target}")
        if self.predicted is not None:
            predicted.append(f"block spans {self.predicted * 1e3:.2f} ms")
        predicted = f", {', '.join(predicted)}" if predicted else ""
        order = {True: "order kept", False: f"order broken {len(self.violations)} times", None: "order not traced"}
        text = (f"{self.method}: measured {self.seconds * 1e3:.2f} ms{predicted}; {order[self.order_kept]} "
                f"({self.links_traced}/{self.links} blocks traced)")
        return "\n".join([text, *(f"  {v.describe()}" for v in self.violations[:5])])


def run_schedule(measurer, scheduled: ScheduledStep, config: MeasureConfig | None = None) -> ScheduleRun:
    """Time `scheduled` on `measurer`'s target and check the order in one traced step after the timed ones."""
    config = config or measurer.config
    config = dataclasses.replace(config, profile_steps=max(1, config.profile_steps))
    measurement = measurer.measure(scheduled.graph, scheduled.placement, config)
    step_time = StepTime.from_measurement(measurement)
    predicted, prediction = scheduled.plan.seconds(), plan_prediction(scheduled.plan)
    if not measurement.ok or not measurement.chrome_trace:
        return ScheduleRun(scheduled.plan.method, step_time, predicted=predicted, prediction=prediction)
    traced, links = traced_links(measurement.chrome_trace, scheduled.chains)
    return ScheduleRun(scheduled.plan.method, step_time, order_violations(measurement.chrome_trace, scheduled.chains),
                       traced, links, predicted, prediction)


def profiled_template(measurer, graph: OpGraph, placement: Placement, micro_batches: int, *, steps: int = 3,
                      split_weight_gradients: bool = False):
    """The block template of `graph` (built at the micro-batch size) placed by `placement`, its spans from op
    costs profiled on `measurer`'s target (`placer.profile.profile_costs`): what a plan predicts there.
    split_weight_gradients: as for `blocks_from_placement`."""
    from placer.profile import profile_costs
    from placer.schedule.from_placement import blocks_from_placement
    from placer.simulate import Simulator, SimulatorConfig

    costs = profile_costs(graph, measurer, steps=steps)
    simulator = Simulator(graph, measurer.devices, {costs.device_kind: costs}, SimulatorConfig(cpu_slots=1))
    return blocks_from_placement(simulator, placement, micro_batches, of_micro_batch=True,
                                 split_weight_gradients=split_weight_gradients)
