"""The ways to run a step that `placer optimize` weighs, on a real target's twin or a modeled machine alike: one
record (`Candidate`) and one maker per kind of plan (the heuristics' placements, the planner's, micro-batch
schedules, data parallelism's replicas), each priced through `placer.cost`.

agents/optimize.py (measured side by side on a real target) and agents/optimize_modeled.py (simulated on a
modeled GPU machine) take their candidates from here, so that a kind of plan is added once.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from placer.cost import StepTime
    from placer.graph.opgraph import OpGraph
    from placer.placement import Placement
    from placer.replicas import Replicas
    from placer.schedule.origin import PlanOrigin
    from placer.schedule.plan import SchedulePlan

PLANNER = "planner"
"""The name of the placement the hierarchical planner sampled on a modeled machine: the only one a policy
learned there."""
REFINED = ", refined"
"""How a placement the refinement made is named: after the placement it started from ("metis, refined")."""
SCHEDULE_METHODS = ("gpipe", "1f1b", "tessel-fast")
"""The schedules of a placement's block template (Tessel's exact search is too slow for a budget of minutes, its
fast search is not)."""


@dataclass(frozen=True)
class Candidate:
    """One way to run the step: how the machine is used, a placement on it (of one replica, with replicas), maybe a
    micro-batch schedule, what made it, and its predicted step time."""

    name: str
    """"metis", "expert = scotch" (every maker of the same placement), "expert + 1f1b x4", "2 replicas x 8"."""
    dimensions: tuple[str, ...]
    """What it changes from one process under TensorFlow's default pools: () for that, else some of "pools",
    "placement" (the target's devices, and where the ops run there), "schedule" and "replicas" (the devices each
    running a slice of the batch)."""
    machine: Any
    """Where it runs: a real target's machine use (`placer.plan.MachineUse`), or a modeled machine's spec."""
    placement: Placement | None
    """On the machine's devices (with replicas: one replica's, on its group); None: every op on its first device
    (made once the machine is open)."""
    schedule: SchedulePlan | None = None
    predicted: StepTime | None = None
    """On the calibrated twin or the modeled machine's simulator; None where nothing here can price it (another
    process's or workers' pools, a real target's replicas)."""
    made_by: str = ""
    """What proposed it: a thread setting, heuristics, the learned planner, the refinement, a schedule method."""
    placement_name: str = ""
    """The name of the placement it schedules or replicates; its own name when it is that placement."""
    replicas: Replicas | None = None
    """Data parallelism: `placement` places one replica (the step at its slice of the batch) on its group."""
    replica_graph: OpGraph | None = field(default=None, compare=False, repr=False)
    """With replicas: the step built at one replica's slice of the batch, the graph `placement` places."""
    scheduled: Any = field(default=None, compare=False, repr=False)
    """With a schedule on a real target: the `placer.schedule.execute.ScheduledStep` a measurer runs."""
    replicated: Any = field(default=None, compare=False, repr=False)
    """With replicas on a real target: (the data-parallel step, its placement over the machine), what a measurer
    runs (`placer.replicas.data_parallel_step`)."""

    def __post_init__(self):
        if not self.placement_name:
            object.__setattr__(self, "placement_name", self.name)

    @property
    def one_dimension(self) -> bool:
        return len(self.dimensions) <= 1

    @property
    def predicted_seconds(self) -> float:
        """The predicted step in seconds; infinite where it has none, or its prediction failed."""
        return self.predicted.seconds if self.predicted is not None and self.predicted.ok else math.inf

    @property
    def priced(self) -> bool:
        """True when it has a prediction that ran."""
        return self.predicted is not None and self.predicted.ok

    def made_of(self, name: str) -> bool:
        """True when `name` ("expert", "planner", "metis, refined") proposed its placement."""
        return name in self.placement_name.split(" = ")

    @property
    def refined(self) -> bool:
        """True when the refinement made its placement from a heuristic's ("metis, refined")."""
        return any(name.endswith(REFINED) and name != PLANNER + REFINED for name in self.placement_name.split(" = "))

    @property
    def heuristic(self) -> bool:
        """True when a heuristic proposed its placement (whatever else made the same one)."""
        return any(name != PLANNER and not name.endswith(REFINED) for name in self.placement_name.split(" = "))

    @property
    def from_planner(self) -> bool:
        """True when the planner's plan, or that plan refined, is this one (whatever else made the same)."""
        return self.made_of(PLANNER) or self.made_of(PLANNER + REFINED)


def merge_same_placements(candidates: Sequence[Candidate]) -> list[Candidate]:
    """One candidate per distinct placement, named after everything that proposed it ("expert = metis"): the same
    placement timed, priced or scheduled twice would only add noise and time."""
    merged: dict[tuple[int, ...], list[Candidate]] = {}
    for candidate in candidates:
        merged.setdefault(tuple(candidate.placement.group_devices), []).append(candidate)
    return [dataclasses.replace(same[0], made_by="; ".join(c.made_by for c in same),
                                name=" = ".join(c.name for c in same),
                                placement_name=" = ".join(c.placement_name for c in same))
            for same in merged.values()]


# -- placements ------------------------------------------------------------------------------------------


def heuristic_candidates(model: str, target, machine: Any, notes: list[str], *, seed: int = 0,
                         progress: Callable | None = None, keep_failed: bool = False) -> list[Candidate]:
    """Every heuristic of the registry that can place `model`'s graph on the simulated `target` (a calibrated twin,
    a modeled machine), priced there; one that cannot place it, or (unless `keep_failed`) whose prediction failed,
    is a note. Empty when none could."""
    from placer.heuristics import applicable_heuristics, time_heuristics
    from placer.models import is_builtin_model

    builtin = is_builtin_model(model)
    names = applicable_heuristics(builtin_model=builtin, simulator=True, model=model if builtin else None)
    timings = time_heuristics(target, names, model=model if builtin else None, seed=seed, progress=progress)
    candidates = []
    for name, timing in timings.items():
        if timing.placement is None:
            notes.append(f"heuristic {name} could not place the graph: {timing.error or 'no placement'}")
            continue
        if not (timing.ok or keep_failed):
            notes.append(f"heuristic {name}: its placement cannot run here ({timing.step_time.failure}: "
                         f"{timing.step_time.message})")
            continue
        candidates.append(Candidate(name, ("placement",), machine, timing.placement, predicted=timing.step_time,
                                    made_by=f"heuristic {name}"))
    return candidates


SIMULATED_SAMPLES_PER_UPDATE = 32
"""Placements per planner update on a simulator, where one is priced in milliseconds and the policy is the cost:
an update of 32 costs the policy half as much per sample as an update of 4 (experiments/probes/planner_speed.py),
and in the same minutes the planner learned as much or more from them (docs/results/learned-placement.md)."""


def learned_placement(graph: OpGraph, spec: str, *, updates: int, seconds: float | None = None, seed: int = 0,
                      progress: bool = False, stop_rules: Sequence = (), replica_degrees: Sequence[int] = (),
                      model: str | None = None, size: str | None = None) -> Placement | None:
    """The best placement the hierarchical planner finds in `updates` updates of `SIMULATED_SAMPLES_PER_UPDATE`
    placements (at most `seconds`, building its environment included, or until one of `stop_rules` holds) on the
    simulated target `spec` (the calibrated twin, a modeled machine), through the one training loop; None when no
    update completed.

    replica_degrees: data parallelism in the planner's choice too (`agents.replicated.ReplicaChoosingAgent` on
    `envs.replicated.ReplicatedPlacementEnv`), each degree's step rebuilt from the built-in `model` at `size`: the
    placement returned is of the whole step, and its metadata's "replicas" says how many replicas run it, each
    folded onto its share of the GPUs (1: none)."""
    from envs.placement import PlacementEnv
    from placer.placement import Placement

    from agents.factory import make_agent
    from agents.loop import TrainingConfig, train

    started = time.monotonic()
    replicated = bool(set(replica_degrees) - {1})
    if replicated:
        from envs.replicated import ReplicatedPlacementEnv

        env = ReplicatedPlacementEnv(model=graph, size=size, backend="simulated", devices=spec, slices_of=model,
                                     replica_degrees=sorted({1, *replica_degrees}))
    else:
        env = PlacementEnv(model=graph, backend="simulated", devices=spec)
    try:
        env.reset(seed=seed)
        agent = make_agent("hierarchical", graph, env.device_mask, env.devices, seed=seed)
        if replicated:
            from agents.replicated import ReplicaChoosingAgent

            agent = ReplicaChoosingAgent(agent, env.replica_degrees, seed=seed)
        if seconds is not None:  # building the environment (a step per degree of replicas) spends the same seconds
            seconds -= time.monotonic() - started
            if seconds <= 0:
                return None
        with tempfile.TemporaryDirectory(prefix="placer-optimize-") as run_dir:
            state = train(agent, env, run_dir, TrainingConfig(updates=updates, time_budget=seconds, progress=progress,
                                                              samples_per_update=SIMULATED_SAMPLES_PER_UPDATE),
                          stop_rules=stop_rules)
        if state.best_assignment is None:
            return None
        simulator = "the calibrated simulator" if spec.startswith("calibrated:") else f"the simulator of {spec}"
        record = {"method": f"hierarchical planner{' with replicas' if replicated else ''}, {state.updates} updates "
                            f"on {simulator}"}
        if replicated:
            return env.placement_of(state.best_assignment, record)
        return Placement.from_assignment(graph, env.devices, list(state.best_assignment), record)
    finally:
        env.close()


# -- schedules -------------------------------------------------------------------------------------------


def scheduled_candidates(candidate: Candidate, graph: OpGraph, micro_batch_graph: OpGraph, target,
                         micro_batches: int, notes: list[str], *, time_limit: float,
                         methods: Sequence[str] = SCHEDULE_METHODS, split_methods: Sequence[str] = (),
                         deadline: float = math.inf, origin: PlanOrigin | None = None,
                         before_pricing: Callable[[Any, Placement], None] | None = None) -> list[Candidate]:
    """`candidate`'s placement under each of `methods` over `micro_batches`, each priced op by op on the simulated
    `target` (a calibrated twin, a modeled machine; `micro_batch_graph`: the model built at the micro-batch size),
    and under each of `split_methods` with the backward split into input and weight gradients (ZB-H1). A template
    no method can schedule is a note. The split template costs what the whole one did: it is left out, with a
    note, unless that much is left before `deadline` (a `time.monotonic()`).

    origin: recorded in each schedule (a real target's plan file names the placement it was made from).
    before_pricing: called with the template and the placement at the micro-batch size before anything is priced
    (a real target profiles the micro-batched step's ops there for its twin)."""
    from placer.errors import PlacerError
    from placer.schedule.from_placement import blocks_from_placement
    from placer.schedule.methods import make_schedule
    from placer.schedule.micro_batch import placement_at_micro_batch
    from placer.schedule.origin import with_origin, with_prediction
    from placer.schedule.predict import predict_plans, priced_template

    scheduled = []
    variants = [(False, tuple(methods))]
    if split_methods and len(set(candidate.placement.group_devices)) > 1:  # on one device no gradient crosses
        variants.append((True, tuple(split_methods)))
    took = 0.0
    for split, each in variants:
        if split and deadline - time.monotonic() < took:
            notes.append(f"no {'/'.join(each)} schedule for {candidate.name}: --budget left less than the "
                         f"{took:.0f} s its other schedules took; raise --budget")
            continue
        started = time.monotonic()
        try:
            at_micro_batch = placement_at_micro_batch(candidate.placement, graph, micro_batch_graph, target.devices)
            template = blocks_from_placement(target.simulator, candidate.placement, micro_batches,
                                             split_weight_gradients=split)
            if before_pricing is not None:
                before_pricing(template, at_micro_batch)
            # Every method searches spans that include the transfers, barriers and update the step pays.
            template = priced_template(template, micro_batch_graph, at_micro_batch, target.spec)
            plans = {method: make_schedule(method, template, micro_batches, time_limit=time_limit)
                     for method in each}
            if origin is not None:
                plans = {method: with_origin(plan, origin) for method, plan in plans.items()}
            # One call per template: a split template's plans run a step of their own (weight gradients apart).
            predictions = predict_plans(plans, micro_batch_graph, at_micro_batch, target.spec)
        except PlacerError as error:
            notes.append(f"no {'/'.join(each)} schedule for {candidate.name}: {error}")
            continue
        took = time.monotonic() - started
        scheduled += [Candidate(f"{candidate.name} + {method} x{micro_batches}", (*candidate.dimensions, "schedule"),
                                candidate.machine, candidate.placement, with_prediction(plan, predictions[method]),
                                predictions[method].step_time, f"{candidate.made_by}; {method} schedule",
                                placement_name=candidate.name)
                      for method, plan in plans.items()]
    return scheduled


# -- replicas --------------------------------------------------------------------------------------------


def replica_step(model: str, size: str, degree: int, *, apart: bool = False) -> tuple[Replicas, OpGraph]:
    """`degree` replicas of `model` at `size` (a model that can be built at a slice of its batch,
    `placer.models.rebuildable_batch`; refused when they do not divide it), and the step one replica runs, built at
    its slice of the batch (`apart`: a built-in model in a process of its own, for a paper-size step whose building
    would otherwise keep GBs in this one)."""
    from placer.models import build_model_apart, load_model, require_rebuildable_batch
    from placer.replicas import Replicas

    replicas = Replicas.of_batch(require_rebuildable_batch(model, size), degree)
    return replicas, (build_model_apart if apart else load_model)(model, size, batch=replicas.batch)


def replicated_candidate(name: str, machine: Any, replicas: Replicas, replica_graph: OpGraph, placement: Placement,
                         predicted: StepTime | None, made_by: str, *, schedule: SchedulePlan | None = None,
                         placement_name: str = "", replicated: Any = None) -> Candidate:
    """Data parallelism as a row: `replicas` each running `replica_graph` as `placement` places one of them."""
    return Candidate(name, ("replicas", *(("schedule",) if schedule is not None else ())), machine, placement,
                     schedule, predicted, made_by, placement_name, replicas, replica_graph, replicated=replicated)
