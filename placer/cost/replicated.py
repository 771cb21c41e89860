"""A data-parallel plan's step time on a simulated target: a replica's placement priced on the group of devices
one replica runs on, and its gradients' exchange on the whole machine (`placer.simulate.replicas`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from placer.cost.record import StepTime
from placer.cost.spec import MODELED, TargetSpec, parse_target_spec
from placer.errors import ReplicaError
from placer.replicas import replica_devices
from placer.simulate.replicas import ReplicatedStep, replicated_step

if TYPE_CHECKING:
    from placer.cost.targets import SimulatedCost
    from placer.placement import Placement


def replica_spec(spec: str | TargetSpec, degree: int) -> str:
    """The modeled machine one of `degree` replicas runs on: "modeled:8xH100" over 4 replicas -> "modeled:2xH100"
    (the same GPUs and links, a host CPU shared). Refuses a degree that does not divide the GPUs."""
    text = str(spec)
    match = MODELED.fullmatch(text)
    if not match:
        raise ReplicaError(f"replicas are priced on modeled machines (modeled:NxGPU), not on {text!r}")
    gpus, gpu, link = int(match.group(1)), match.group(2), match.group(3)
    if not isinstance(degree, int) or degree < 1 or gpus % degree:
        raise ReplicaError(f"{degree} replicas do not divide the {gpus} GPUs of {text}: give a divisor of {gpus} "
                           f"({', '.join(str(d) for d in range(1, gpus + 1) if gpus % d == 0)})")
    return f"modeled:{gpus // degree}x{gpu}" + (f"-{link}" if link else "")


def price_replicated(replica_target: SimulatedCost, placement: Placement, machine: str | TargetSpec,
                     degree: int) -> tuple[StepTime, ReplicatedStep]:
    """`degree` replicas of `replica_target`'s graph (the step at its slice of the batch), each placed as
    `placement` on its own group of `machine`'s devices, their gradients all-reduced: the simulated step."""
    from placer.schedule.micro_batch import gradients

    spec = parse_target_spec(machine, "simulated")
    simulator = replica_target.simulator
    timeline = simulator.simulate(replica_target.placement(placement).group_device_array, timeline=True)
    return _replicated_step_time(timeline, gradients(simulator.graph), spec, simulator.devices, degree,
                                 simulator.config.default_link)


def price_replicated_schedule(micro_batch_graph, placement: Placement, plan, group: str | TargetSpec,
                              machine: str | TargetSpec, degree: int) -> tuple[StepTime, ReplicatedStep]:
    """`degree` replicas, each a pipeline: `plan` (a schedule of one replica's micro-batches) over `placement` of
    `micro_batch_graph` (the step at one micro-batch of one replica's slice) on the modeled machine `group` (one
    replica's GPUs), their merged gradients all-reduced over `machine`: the simulated step of data parallelism over
    pipeline stages."""
    from placer.schedule.execute import scheduled_step, step_for_plan
    from placer.schedule.micro_batch import gradients
    from placer.schedule.predict import simulated_timeline

    group_spec, spec = parse_target_spec(group, "simulated"), parse_target_spec(machine, "simulated")
    step, step_placement = step_for_plan(plan, micro_batch_graph, placement, group_spec.devices)
    scheduled = scheduled_step(step, step_placement, group_spec.devices, plan)
    timeline = simulated_timeline(scheduled, group_spec)
    # A modeled machine names every link between its GPUs, so no default link is needed for the ring.
    return _replicated_step_time(timeline, gradients(scheduled.graph), spec, group_spec.devices, degree, None)


def _replicated_step_time(timeline, replica_gradients, spec: TargetSpec, group_devices, degree: int,
                          default_link) -> tuple[StepTime, ReplicatedStep]:
    """The data-parallel step of `degree` replicas each simulated as `timeline` on `group_devices`, as a StepTime
    (failed when a device's memory overflows) and its breakdown."""
    step = replicated_step(timeline, replica_gradients, spec.devices,
                           replica_devices(spec.devices, group_devices, degree), default_link=default_link)
    details = {"samples": (step.step_time,), "peak_memory": step.peak_memory,
               "busy": dict(timeline.device_busy)}
    if not timeline.ok or not step.ok:
        full = step.out_of_memory or timeline.out_of_memory
        return StepTime.failed("oom", f"{degree} replicas do not fit: out of memory on {', '.join(full)} ("
                               + ", ".join(f"{step.peak_memory.get(d, 0) / 1e9:.1f} GB" for d in full) + ")",
                               "simulated", str(spec), **details), step
    return StepTime(step.step_time, "simulated", str(spec), **details), step


class ReplicaPricer:
    """Data-parallel plans of one model that can be built at a slice of its batch, on one modeled machine, priced a
    degree at a time: the step at each degree's slice is built once, and its replica's machine opened once. A plan
    is a degree and a placement of the whole step over the machine, folded onto one replica's group (`placer.replicas.fold_onto_group`) and
    carried over to the slice's step by op name."""

    def __init__(self, model: str, size: str, spec: str | TargetSpec, graph):
        from placer.models import require_rebuildable_batch

        self.model, self.size, self.spec, self.graph = model, size, str(spec), graph
        self.batch = require_rebuildable_batch(model, size)
        self._targets: dict[int, SimulatedCost] = {}

    def replica_target(self, degree: int) -> SimulatedCost:
        """The simulated machine of one of `degree` replicas, over the step at its slice of the batch."""
        from placer.cost import open_target
        from placer.models import build_model_apart
        from placer.replicas import Replicas

        if degree not in self._targets:
            replicas = Replicas.of_batch(self.batch, degree)
            group = replica_spec(self.spec, degree)
            self._targets[degree] = open_target(build_model_apart(self.model, self.size, batch=replicas.batch), group)
        return self._targets[degree]

    def replica_placement(self, degree: int, placement: Placement) -> Placement:
        """One of `degree` replicas' placement: `placement` (of the whole step over the machine) folded onto its
        group and carried over to the step at its slice (`replica_target(degree).graph`)."""
        from placer.replicas import fold_onto_group
        from placer.schedule.micro_batch import placement_at_micro_batch

        target = self.replica_target(degree)
        folded = fold_onto_group(placement, self.graph, target.devices)
        return placement_at_micro_batch(folded, self.graph, target.graph, target.devices)

    def price(self, degree: int, placement: Placement) -> StepTime:
        """`degree` replicas, each placed as `placement` (of the whole step over the machine) folds onto its group."""
        return price_replicated(self.replica_target(degree), self.replica_placement(degree, placement), self.spec,
                                degree)[0]

    def close(self) -> None:
        for target in self._targets.values():
            target.close()
        self._targets.clear()
