"""`placer optimize MODEL --target modeled:NxGPU`: where the ops run and the micro-batch schedule, searched together
on a modeled GPU machine. Nothing runs: every step time is the simulator's, each beside the machine's bound, and
the simplest of the plans tied with the fastest is written as a plan marked simulated for that machine.

TensorFlow runs no GPU here, so the search is one pass of predictions (`search_modeled`, also the search of
experiments/gpu_machines.py):

1. Every heuristic of the registry (the expert's placement among them: a stage of decoder blocks per GPU for the
   language models, and for them the balanced stages too: blocks per GPU cut where the stages' compute is even),
   priced on the simulator.
2. Data parallelism (`replicated_candidates`), each degree D above 1 that divides the GPUs and the batch: the step
   built at batch / D, one replica placed on GPUs / D GPUs (every op on its GPU where it has one; else by every
   heuristic, the fastest kept: a hybrid), its gradients all-reduced over the machine's links
   (`placer.cost.replicated`); a hybrid's replica is also run as a pipeline (the expert's or balanced stages'
   placement of its GPUs under every schedule, over one and two micro-batches per GPU of the replica:
   `_pipelined_replicas`). Priced before learning, so that the plan practitioners start from is always a row.
3. The hierarchical planner trained for --learn-updates on the same simulator (`agents.loop.train`), cut to
   PLANNER_SHARE of learning's seconds ("planner"); then one tournament of refinements on the simulator for the
   rest, coarse to fine (`placer.heuristics.refine`): the heuristics' fastest placements and the planner's beside
   them, by successive halving (after each round the faster half goes on; the heuristics' fastest refined is
   named after its start, "metis, refined", the planner's is "planner, refined": the refinement as the policy's
   last step, read against the heuristics' at the same time spent), so that the table reads the planner alone,
   the planner refined and the heuristics refined side by side (`ModeledSearch.learners`), and refining time
   goes to the starts that stay ahead. Learning takes the budget
   left less what scheduling one more placement over several GPUs needs, judged by the schedules before it, and
   at least half of it.
4. With schedules (on by default when the model can be built at the micro-batch size): the expert's and the
   balanced stages' placements (the ones pipeline schedules were made for: scheduled before learning, so that
   learning cannot spend the budget they need), the `schedule_top` other placements priced fastest and one
   GPU's, each under GPipe, 1F1B, Tessel's fast search and ZB-H1 over the micro-batches, priced op by op
   (`placer.schedule.predict`): seconds to a minute per placement, so the next placement is scheduled only
   while the budget left holds one of its templates (the longest so far). A count whose bound the fastest plan
   found so far beats is not scheduled, nor are larger ones; likewise a hybrid's pipelines (step 2) against one
   replica's bound: no schedule of them could win, and learning gets their time.

Every plan is read against the machine's bound (`placer.simulate.bound.machine_bound`), which no plan searched,
replicated, scheduled or placed, can beat. Plans within MODELED_TIE of the fastest are a tie, and the simplest of
them is recommended (`modeled_simplicity`: one GPU, then plain data parallelism, then a placement over several
devices, then replicas of such placements and schedules). Thread pools and one process are a host CPU's choices, and a GPU machine's ops run on its GPUs: neither is searched.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from placer.simulate.bound import StepTimeBound, gap_closed, times_bound

from agents.candidates import (
    PLANNER, REFINED, SCHEDULE_METHODS, Candidate, learned_placement, merge_same_placements, replica_step,
    replicated_candidate, scheduled_candidates,
)

if TYPE_CHECKING:
    from placer.cost import StepTime
    from placer.cost.spec import TargetSpec
    from placer.replicas import Replicas
    from placer.graph.opgraph import OpGraph
    from placer.placement import Placement
    from placer.plan import Plan
    from placer.schedule.plan import SchedulePlan

    from agents.optimize import OptimizeArgs

SPLIT_SCHEDULE_METHODS = ("zb-h1",)
"""The schedules of its template with the backward split into input and weight gradients."""
SCHEDULE_TOP = 2
"""Placements priced fastest unscheduled that are scheduled, besides the expert's and one GPU's."""
TESSEL_SECONDS = 10.0
"""The most one Tessel search may take: a fraction of a budget of minutes, enough for a 4-stage template."""
MORE_MICRO_BATCHES = (2, 4)
"""By default, after one micro-batch per GPU, the pipelines' placements are scheduled over this many times as many
micro-batches too, where that divides the batch: more micro-batches shrink a pipeline's bubble (p - 1 stage
times in M + p - 1) but run each op on fewer samples, nearer its kernel's launch floor; which wins is the model's."""
MORE_MICRO_BATCHES_SHARE = 0.25
"""Of the budget left, the most one more micro-batch count may take (judged at twice what the count before it
took: pricing op by op grows with the copies), so that learning keeps the rest."""
LEARNING_SHARE = 0.5
"""Of the budget left when learning starts, the least share it takes when schedules follow it; it takes more when
the schedules before it showed that scheduling one more placement needs less (`_Scheduling.reserve`)."""
PLANNER_SHARE = 0.4
"""Of learning's seconds, the most the hierarchical planner may take; refining the fastest placements found on
the simulator takes the rest: thousands of moves priced in the time the planner samples a few hundred. Half way
through its share, a planner whose best is slower than every placement of the refinement's tournament stops
(`out_of_the_tournament`)."""


MODELED_TIE = 0.02
"""Plans whose simulated steps lie within this share of the fastest's are a tie, and the simplest of them is
recommended: simulators of training steps on real GPUs err by 1.9-5 % on average (SimAI, Proteus, Lumos, dPRO),
and this one's error on GPUs is unmeasured, so a smaller lead is not known to be one."""


def modeled_simplicity(candidate: Candidate) -> tuple[int, bool]:
    """How far a plan on a modeled machine is from the ones practitioners start from (lower is simpler): the whole
    step on one GPU (0), plain data parallelism (1: each replica on one GPU, every op on it), a placement of the
    whole batch over several devices (2), replicas placed otherwise (3), a placement under a micro-batch schedule
    (4), replicas under one (5); then, at the same level, a placement the search made (the planner's, a refined
    one) after one a named method made."""
    searched = candidate.from_planner or REFINED in candidate.placement_name
    if candidate.replicas is None:
        placement = candidate.placement  # None: every op on the first device
        one_device = placement is None or len(set(placement.group_devices)) == 1
        level = 4 if candidate.schedule is not None else 0 if one_device else 2
    elif candidate.schedule is not None:
        level = 5
    else:
        level = 1 if candidate.name == candidate.replicas.name else 3
    return level, searched


@dataclass(frozen=True)
class LearnersReading:
    """The planner alone, the planner's plan refined, and the heuristics' placements refined, each read as the share
    of the gap between the best plan made with neither (the heuristics' placements and data parallelism) and the
    machine's bound that it closed. Unscheduled plans only: the planner chooses no schedule."""

    baseline: Candidate | None
    """The fastest plan neither the planner nor the refinement made."""
    planner: Candidate | None
    planner_refined: Candidate | None
    """The planner's plan refined; the plan itself where it is replicas of one GPU each (nothing to move)."""
    heuristics_refined: Candidate | None
    """The fastest plan made without the planner: the heuristics' refined, or unrefined where that is faster."""
    bound: StepTimeBound

    def gap_closed(self, candidate: Candidate | None) -> float | None:
        if candidate is None or self.baseline is None:
            return None
        return gap_closed(self.baseline.predicted_seconds, candidate.predicted_seconds, self.bound)

    def describe_closed(self, candidate: Candidate | None) -> str:
        """"12.30 ms (+45.0%)": its step and the share of the gap it closed; where it lost more than the whole gap
        (the gap is small beside its step: data parallelism near the bound), its step over the baseline's instead,
        "1278.46 ms (8.41x the best plan without them)", which a share of -22228% says less plainly."""
        if candidate is None:
            return "none"
        share = self.gap_closed(candidate)
        seconds = candidate.predicted_seconds
        if share is not None and share < -1:
            return f"{seconds * 1e3:.2f} ms ({seconds / self.baseline.predicted_seconds:.2f}x the best plan without them)"
        return f"{seconds * 1e3:.2f} ms" + ("" if share is None else f" ({100 * share:+.1f}%)")


@dataclass(frozen=True)
class ModeledSearch:
    """Every placement and schedule priced on one modeled machine, and its bound."""

    target: str
    placements: tuple[Candidate, ...]
    """One per distinct placement, unscheduled."""
    scheduled: tuple[Candidate, ...]
    bound: StepTimeBound
    """What no placement of the whole batch, unscheduled, can beat."""
    micro_batches: int | None
    """None: no schedules were asked for."""
    notes: tuple[str, ...] = ()
    phase_seconds: Mapping[str, float] = field(default_factory=dict)
    schedule_bound: StepTimeBound | None = None
    """What no schedule of `micro_batches` micro-batches can beat (`placer.schedule.predict.schedule_bound`):
    micro-batches shorten the chain of dependent ops, so `bound` does not hold for a scheduled plan. None where
    nothing was scheduled."""
    replicated: tuple[Candidate, ...] = ()
    """Data parallelism: each degree searched, its replicas placed as fast as the heuristics place one."""
    machine_bound: StepTimeBound | None = None
    """What no plan searched can beat, replicated, scheduled or placed (`placer.simulate.bound.machine_bound`);
    None where nothing was sliced (no replicas, no micro-batches): then `bound` is the machine's."""
    schedule_bounds: Mapping[int, StepTimeBound] = field(default_factory=dict)
    """Each micro-batch count scheduled -> what no schedule of that many micro-batches can beat
    (`schedule_bound` is `micro_batches`'s)."""

    def __post_init__(self):
        if not self.schedule_bounds and self.schedule_bound is not None and self.micro_batches is not None:
            object.__setattr__(self, "schedule_bounds", {self.micro_batches: self.schedule_bound})

    @property
    def micro_batch_counts(self) -> tuple[int, ...]:
        """Every count of micro-batches some plan was scheduled over, fewest first."""
        return tuple(sorted({c.schedule.micro_batches for c in self.scheduled}))

    def bound_of(self, candidate: Candidate) -> StepTimeBound | None:
        """The bound `candidate` is read against: the machine's, which every plan's step time is at or above;
        without one, its kind's."""
        return self.machine_bound or self.kind_bound_of(candidate)

    def kind_bound_of(self, candidate: Candidate) -> StepTimeBound | None:
        """The bound of `candidate`'s own kind of plan: the placements' for a placement of the whole batch, the
        schedules' for a scheduled plan, the machine's for replicas."""
        if candidate.replicas is not None:
            return self.bound_of(candidate)
        if candidate.schedule is None:
            return self.bound
        return self.schedule_bounds.get(candidate.schedule.micro_batches, self.schedule_bound)

    @property
    def candidates(self) -> list[Candidate]:
        """Fastest first; between equal step times, the simpler plan first: a placement unscheduled before one
        under a schedule, and either before replicas."""
        return sorted(self.placements + self.scheduled + self.replicated,
                      key=lambda c: (c.predicted_seconds, c.replicas is not None, c.schedule is not None))

    def data_parallel(self) -> Candidate | None:
        """Plain data parallelism: the most replicas searched, each on one GPU."""
        plain = [c for c in self.replicated if c.replicas is not None and c.name == c.replicas.name]
        return max(plain, key=lambda c: c.replicas.degree) if plain else None

    @property
    def fastest(self) -> Candidate:
        return self.candidates[0]

    def tied_with_fastest(self) -> list[Candidate]:
        """The plans within MODELED_TIE of the fastest's simulated step, the fastest first; the fastest alone where
        nothing was priced."""
        fastest = self.fastest
        if not fastest.priced:
            return [fastest]
        limit = fastest.predicted_seconds * (1 + MODELED_TIE)
        return [c for c in self.candidates if c.priced and c.predicted_seconds <= limit]

    @property
    def recommended(self) -> Candidate:
        """The simplest plan tied with the fastest (`modeled_simplicity`), the faster between equally simple ones."""
        return min(self.tied_with_fastest(), key=lambda c: (modeled_simplicity(c), c.predicted_seconds))

    def unscheduled(self, name: str) -> Candidate | None:
        """The placement `name` ("expert", "single-device", "planner") proposed, unscheduled."""
        return next((c for c in self.placements if c.made_of(name)), None)

    def refined(self) -> Candidate | None:
        """The refinement's placement, unscheduled."""
        return next((c for c in self.placements if c.refined), None)

    def learners(self) -> LearnersReading:
        """The planner and the refinements read against the best plan made with neither, on the machine's bound."""
        unscheduled = [c for c in (*self.placements, *self.replicated) if c.schedule is None and c.priced]

        def fastest(candidates) -> Candidate | None:
            return min(candidates, key=lambda c: c.predicted_seconds, default=None)

        def made_without_planner(c: Candidate, refined: bool) -> bool:
            if c.replicas is not None:
                return not c.from_planner and (refined or REFINED not in c.name)
            return c.heuristic or (refined and c.refined)

        planner = fastest(c for c in unscheduled if c.made_of(PLANNER))
        planner_refined = fastest(c for c in unscheduled if c.made_of(PLANNER + REFINED))
        if planner_refined is None and planner is not None and planner.replicas is not None and sum(
                "GPU" in device for device in planner.placement.devices) == 1:
            planner_refined = planner
        return LearnersReading(fastest(c for c in unscheduled if made_without_planner(c, refined=False)), planner,
                               planner_refined, fastest(c for c in unscheduled if made_without_planner(c, refined=True)),
                               self.machine_bound or self.bound)

    @property
    def gap_closed(self) -> float | None:
        """The share of the best heuristic placement's distance to the bound that the refined placement closed."""
        refined = self.refined()
        heuristics = [c.predicted_seconds for c in self.placements if c.heuristic]
        if refined is None or not heuristics:
            return None
        return gap_closed(min(heuristics), refined.predicted_seconds, self.bound)


def search_modeled(model: str, size: str, spec: str, *, graph: OpGraph | None = None, learn_updates: int = 0,
                   micro_batches: int | None = None, more_micro_batches: Sequence[int] = (),
                   schedule_top: int = SCHEDULE_TOP, seed: int = 0,
                   replica_degrees: Sequence[int] = (), deadline: float = math.inf, progress: bool = False,
                   every_schedule: bool = False, say: Callable[[str], None] = lambda line: None) -> ModeledSearch:
    """Every heuristic placement of `model` at `size` on the modeled machine `spec`, the learned one (with
    `learn_updates`), with `micro_batches` the schedules of the expert's, the `schedule_top` fastest and one
    GPU's placements, with each of `more_micro_batches` (larger counts) the pipelines' placements' schedules
    again, and data parallelism of each of `replica_degrees` (`replicated_candidates`); nothing
    learned, scheduled or replicated is started after `deadline` (a `time.monotonic()`). A count of micro-batches
    whose bound shows that none of its schedules can beat the fastest plan found before it is not scheduled, nor
    are larger ones, with a note; `every_schedule` schedules them all the same (a count the user named).

    graph: the model's graph at its full batch, if already built."""
    from placer.cost import open_target
    from placer.models import load_model
    from placer.schedule.micro_batch import build_micro_batch_graph
    from placer.schedule.predict import slice_bound
    from placer.simulate.bound import machine_bound, step_time_bound

    from agents.candidates import heuristic_candidates
    from agents.optimize import PhaseClock, progress_bar

    clock = PhaseClock()
    phase_done = clock.done
    graph = graph if graph is not None else load_model(model, size)
    notes: list[str] = []
    phase_done("building the graph")
    with open_target(graph, spec) as target:
        bound = step_time_bound(target.simulator, simulated_on=spec)
        say(f"pricing every heuristic placement on {spec}")
        found = heuristic_candidates(model, target, spec, notes, seed=seed,
                                     progress=progress_bar(progress, "heuristics", "placement"))
        phase_done("heuristics")
        if not found:
            from agents.optimize import OptimizeError

            raise OptimizeError(f"no heuristic could place {model} on {spec}: {'; '.join(notes)}")
        started = time.monotonic()
        scheduling = _Scheduling(graph, build_micro_batch_graph(model, size, micro_batches), target, micro_batches,
                                 deadline, notes, say) if micro_batches else None
        heuristic_placements = merge_same_placements(found)
        # The pipelines' own placements (else one GPU's) are scheduled before learning can spend the budget.
        first = _pipeline_placements(heuristic_placements) or _to_schedule(heuristic_placements, 0)[:1]
        more: list[_Scheduling] = []
        def to_beat(*plans: Sequence[Candidate]) -> float:
            """What a schedule must be able to beat to be priced: the fastest of `plans` (inf: anything)."""
            return math.inf if every_schedule else _fastest_seconds(*plans)

        # A count whose bound shows that no schedule of it beats the fastest plan found is not scheduled: on
        # paper-size models on H100s that leaves learning minutes that schedules which could not win took.
        if scheduling is not None:
            scheduling.schedule(first, to_beat(found))
            more = _more_micro_batches(model, size, graph, target, more_micro_batches, first, deadline, notes, say,
                                       took=time.monotonic() - started, fastest=to_beat(found), after=scheduling)
            phase_done("schedules")
        # Data parallelism before learning can spend the budget: plain data parallelism is the plan practitioners
        # start from, and each degree costs one graph build and one heuristic pass.
        replication = _Replication(model, size, spec, replica_degrees, deadline, notes, say, seed)
        replication.price(replica_degrees, to_beat(found, *_scheduled(scheduling, more)))
        phase_done("data parallel")
        if learn_updates:
            left = deadline - time.monotonic()
            # What learning leaves is what scheduling its placement takes: more would leave the budget idle.
            seconds = left if scheduling is None else max(left * LEARNING_SHARE, left - scheduling.reserve())
            # With data parallelism priced, the planner chooses replicas too: it may learn the plan the search found.
            degrees = planner_degrees(sorted({c.replicas.degree for c in replication.candidates}), seconds,
                                      replication.took, notes)
            learned = _learned(graph, spec, target, found, learn_updates=learn_updates, seed=seed, seconds=seconds,
                               notes=notes, progress=progress, say=say, replicas_of=(model, size, degrees))
            found += [c for c in learned if c.replicas is None]
            replication.candidates += [c for c in learned if c.replicas is not None]
        phase_done("learning")
        placements = merge_same_placements(found)
        scheduled: list[Candidate] = []
        if scheduling is not None:
            done = {tuple(c.placement.group_devices) for c in first}
            scheduling.schedule([c for c in _to_schedule(placements, schedule_top)
                                 if tuple(c.placement.group_devices) not in done],
                                to_beat(placements, *_scheduled(scheduling, more), replication.candidates))
            scheduled = _named_as(scheduling.scheduled + [c for m in more for c in m.scheduled], placements)
            scheduling.note_skipped()
        phase_done("schedules after learning")
        schedule_bounds: dict[int, StepTimeBound] = {}
        slice_bounds = dict(replication.slice_bounds)
        for each in [scheduling, *more] if scheduling is not None else []:
            if each.scheduled:
                schedule_bounds[each.micro_batches] = each.bound
                if each.micro_batches not in slice_bounds:
                    slice_bounds[each.micro_batches] = slice_bound(each.micro_batch_graph, each.micro_batches, spec)
            elif each.cannot_beat:  # the bound that says why the count has no schedule
                schedule_bounds[each.micro_batches] = each.bound
        machine = machine_bound([bound, *slice_bounds.values()]) if slice_bounds else None
        phase_done("bounds")
    return ModeledSearch(spec, tuple(placements), tuple(scheduled), bound, micro_batches, tuple(notes),
                         clock.seconds, schedule_bounds.get(micro_batches), tuple(replication.candidates), machine,
                         schedule_bounds)


def _fastest_seconds(*plans: Sequence[Candidate]) -> float:
    """The fastest predicted step among `plans` (lists of candidates), in seconds; inf where none was priced."""
    return min((c.predicted_seconds for group in plans for c in group), default=math.inf)


def _scheduled(scheduling: _Scheduling | None, more: Sequence[_Scheduling]) -> list[list[Candidate]]:
    return [each.scheduled for each in ([scheduling] if scheduling is not None else []) + list(more)]


def planner_degrees(degrees: Sequence[int], seconds: float, took: float, notes: list[str]) -> list[int]:
    """The degrees of data parallelism the planner chooses among: `degrees` (those priced) when learning's `seconds`
    hold what pricing one degree `took` (its step rebuilt at the degree's slice, which the planner's environment
    does again for each degree, before its first sample: Llama at paper size, tens of seconds each); else none,
    with a note, so that learning does not run past the budget building them."""
    if not degrees or seconds >= took:
        return list(degrees)
    notes.append(f"the planner chose no replicas: learning had {max(seconds, 0):.0f} s, less than the {took:.0f} s "
                 "pricing one degree of data parallelism took (its environment builds each degree's step first)")
    return []


def _learned(graph: OpGraph, spec: str, target, found: list[Candidate], *, learn_updates: int, seconds: float,
             seed: int, notes: list[str], progress: bool, say: Callable[[str], None],
             replicas_of: tuple[str, str, Sequence[int]] | None = None) -> list[Candidate]:
    """The planner's plan ("planner": trained for `learn_updates` updates, at most PLANNER_SHARE of `seconds`),
    then one tournament of refinements on the simulator for the rest (`placer.heuristics.refine.refine_starts`):
    the heuristics' fastest placements and the planner's beside them, the faster half going on after each round.
    The heuristics' best is named after its start ("metis, refined"); the planner's is "planner, refined" (the
    refinement as the policy's last step), read against the heuristics' at the same time spent. Every start gets
    time for as long as it is among the faster half, so a planner's plan that is not worth refining costs a
    round, not half of the time.

    replicas_of: (model, size, degrees): the planner chooses among those degrees of data parallelism too; when it
    chose more than one replica, its replica is another graph: its placement is refined over the replica's GPUs
    first, for the share one start gets in the tournament's first round, and read against the heuristics at the
    end of that round (nothing to move, and the tournament takes all the time, when a replica has one GPU)."""
    from placer.heuristics.refine import TOURNAMENT_STARTS, refine_starts, standing
    from placer.placement import Placement

    if seconds < 1:
        notes.append(f"no learned placement: --budget was spent before learning ({max(seconds, 0):.0f} s left)")
        return []
    until = time.monotonic() + seconds
    say(f"training the hierarchical planner on {spec} ({learn_updates} updates, at most {seconds * PLANNER_SHARE:.0f} s)")
    stopped: list[float] = []
    model, size, degrees = replicas_of or (None, None, ())
    planner = learned_placement(graph, spec, updates=learn_updates, seconds=seconds * PLANNER_SHARE, seed=seed,
                                progress=progress, replica_degrees=degrees, model=model, size=size,
                                stop_rules=[out_of_the_tournament(found, seconds * PLANNER_SHARE / 2, stopped)])
    if stopped:
        notes.append(f"the planner stopped after {stopped[0]:.0f} s of its {seconds * PLANNER_SHARE:.0f}: its best was "
                     f"slower than the {TOURNAMENT_STARTS} fastest placements found; the refinements took the rest")
    replicated = planner is not None and planner.metadata.get("replicas", 1) > 1
    pricer = None
    if replicated:
        from placer.cost.replicated import ReplicaPricer

        pricer = ReplicaPricer(model, size, spec, graph)
    try:
        made = []
        if replicated:
            made.append(_replicated_planner(pricer, planner))
            policy_start = made[0].placement if _replica_gpus(pricer, made[0]) > 1 else None
        elif planner is not None:
            made.append(Candidate(PLANNER, ("placement",), spec, planner, predicted=target.evaluate(planner),
                                  made_by=planner.metadata.get("method", "hierarchical planner")))
            policy_start = planner
        else:
            policy_start = None
        # Fastest first, each heuristic placement once: the tournament takes the first few.
        starts, seen = [], set()
        for candidate in sorted(found, key=lambda c: c.predicted_seconds):
            if tuple(candidate.placement.group_devices) not in seen:
                seen.add(tuple(candidate.placement.group_devices))
                starts.append(candidate)
        entrants = ", ".join(c.name for c in starts[:TOURNAMENT_STARTS])
        # The planner's placement enters the heuristics' tournament: it gets refining time for as long as it is
        # among the faster half, read against them at the same time spent. A replicated plan's replica is another
        # graph, priced with its gradients' exchange: it is refined first, for the share one start gets in the
        # tournament's first round, and read against the heuristics at the end of that round.
        challenger = policy_start is not None and not replicated
        replica_refined = None
        if policy_start is not None and replicated:
            heuristics = min(len(starts), TOURNAMENT_STARTS)
            share = (until - time.monotonic()) / (heuristics * (math.ceil(math.log2(heuristics)) + 1) + 1)
            say(f"refining the planner's replica on the simulator, at most {share:.0f} s")
            replica_refined = _refined_replicated_planner(pricer, made[0], time.monotonic() + share, seed)
        say(f"refining the placements of {entrants}{' and the planner' if challenger else ''} on the simulator, the "
            f"faster half going on after each round, at most {until - time.monotonic():.0f} s")
        refinements = refine_starts(graph, target.simulator, [c.placement.group_device_array for c in starts],
                                    deadline=until, seed=seed,
                                    challengers=[policy_start.group_device_array] if challenger else [])
        heuristics_refined = refinements[:min(len(starts), TOURNAMENT_STARTS)]
        best = min(range(len(heuristics_refined)), key=lambda k: heuristics_refined[k].seconds)
        refined, start = heuristics_refined[best], starts[best]
        placement = Placement.from_assignment(graph, target.devices, refined.group_devices)
        others = [f"{starts[k].name}'s {r.seconds * 1e3:.2f} ms after {r.wall_seconds:.0f} s"
                  for k, r in enumerate(heuristics_refined) if k != best and r.wall_seconds > 0]
        name = start.placement_name.split(" = ")[0] + REFINED
        made.append(Candidate(
            name, ("placement",), spec, placement, predicted=target.evaluate(placement),
            made_by=f"{start.name}'s placement refined on the simulator ({_refinement_made(refined)}"
                    + (f"; fastest of {len(others) + 1} starts refined, the others ended at {', '.join(others)})"
                       if others else ")")))
        if challenger:
            refinement = refinements[-1]
            placement = Placement.from_assignment(graph, target.devices, refinement.group_devices)
            planner_refined = Candidate(PLANNER + REFINED, ("placement",), spec, placement,
                                        predicted=target.evaluate(placement),
                                        made_by=f"the planner's placement refined on the simulator "
                                                f"({_refinement_made(refinement)})")
            made.append(_with_standing(planner_refined, standing(refinement.round_seconds, heuristics_refined)))
        elif replica_refined is not None:  # one round's share, read at the end of the tournament's first round
            made.append(_with_standing(replica_refined,
                                       standing((replica_refined.predicted_seconds,), heuristics_refined)))
        return made
    finally:
        if pricer is not None:
            pricer.close()


def _with_standing(planner_refined: Candidate, read) -> Candidate:
    """The planner's refined plan with how it stood against the heuristics' refinements at the same time spent
    (a `placer.heuristics.refine.RoundStanding`, None where there is no reading): in its placement's metadata
    ("tournament_standing") and in what made it."""
    if read is None:
        return planner_refined
    stayed = "to its last round" if read.last else f"for {read.rounds} round(s)"
    return dataclasses.replace(
        planner_refined, placement=planner_refined.placement.with_metadata(tournament_standing=dataclasses.asdict(read)),
        made_by=f"{planner_refined.made_by}; in the heuristics' tournament {stayed}: {read.seconds * 1e3:.2f} ms "
                f"against the heuristics' fastest {read.others_seconds * 1e3:.2f} ms at the end of round "
                f"{read.rounds} ({100 * read.ahead:+.1f}%)")


def _refinement_made(refinement) -> str:
    return (f"{refinement.moves} moves kept of {refinement.evaluations} placements simulated in "
            f"{refinement.wall_seconds:.0f} s, down to {refinement.finest_pieces} pieces")


def _replica_gpus(pricer, candidate: Candidate) -> int:
    target = pricer.replica_target(candidate.replicas.degree)
    return sum(1 for device in target.devices.devices if device.kind == "GPU")


def _replicated_planner(pricer, planner) -> Candidate:
    """The planner's plan with replicas as a row of the search: one replica's placement on its group, at its slice
    (`pricer`: a `placer.cost.replicated.ReplicaPricer` of the model on the machine)."""
    from placer.cost.replicated import price_replicated
    from placer.replicas import Replicas

    degree = int(planner.metadata["replicas"])
    replicas = Replicas.of_batch(pricer.batch, degree)
    target = pricer.replica_target(degree)
    placement = pricer.replica_placement(degree, planner)
    step_time, step = price_replicated(target, placement, pricer.spec, degree)
    return replicated_candidate(
        PLANNER, str(pricer.spec), replicas, target.graph, placement, step_time,
        f"{planner.metadata.get('method', 'hierarchical planner')}: {degree} replicas of {replicas.batch} "
        f"samples, gradients ({step.gradient_bytes / 1e6:.0f} MB) all-reduced in a ring")


def _refined_replicated_planner(pricer, planner: Candidate, until: float, seed: int) -> Candidate:
    """The planner's replicated plan with its replica's placement refined on the replica's GPUs until `until`."""
    from placer.cost.replicated import price_replicated
    from placer.heuristics.refine import Refiner
    from placer.placement import Placement

    degree = planner.replicas.degree
    target = pricer.replica_target(degree)
    refinement = Refiner(target.graph, target.simulator, planner.placement.group_device_array, seed=seed).run(until)
    placement = Placement.from_assignment(target.graph, target.devices, refinement.group_devices)
    step_time, step = price_replicated(target, placement, pricer.spec, degree)
    name = PLANNER + REFINED
    return replicated_candidate(
        name, planner.machine, planner.replicas, target.graph, placement, step_time,
        f"the planner's {degree} replicas, one replica's placement refined on the simulator "
        f"({_refinement_made(refinement)}), gradients ({step.gradient_bytes / 1e6:.0f} MB) all-reduced in a ring")


def out_of_the_tournament(found: Sequence[Candidate], after: float, stopped: list[float]):
    """A stop rule for the planner (`agents.loop.StopRule`): true once it has trained `after` seconds and its best is
    slower than the `TOURNAMENT_STARTS` fastest distinct placements `found`, so that the refinement's tournament
    would leave it out and its time is better spent refining those (on the language models and the Transformer on
    H100s the planner ended 1.2-1.9x the fastest heuristic's step, 2026-11-28). Appends the seconds it stopped
    after to `stopped`."""
    from placer.heuristics.refine import TOURNAMENT_STARTS

    seconds = sorted({tuple(c.placement.group_devices): c.predicted_seconds for c in found if c.priced}.values())
    bar = seconds[TOURNAMENT_STARTS - 1] if len(seconds) >= TOURNAMENT_STARTS else math.inf

    def rule(state) -> bool:
        if state.elapsed >= after and state.best_step_time > bar:
            stopped.append(state.elapsed)
            return True
        return False

    return rule


def schedule_candidates(graph: OpGraph, micro_batch_graph: OpGraph, target, candidate: Candidate,
                        micro_batches: int, notes: list[str], *, time_limit: float,
                        deadline: float = math.inf) -> list[Candidate]:
    """`candidate`'s placement under each schedule method over `micro_batches`, ZB-H1 (the backward split) among
    them, each priced op by op on the simulated `target` (`agents.candidates.scheduled_candidates`)."""
    return scheduled_candidates(candidate, graph, micro_batch_graph, target, micro_batches, notes,
                                time_limit=time_limit, split_methods=SPLIT_SCHEDULE_METHODS, deadline=deadline)


class _Scheduling:
    """Placements scheduled while the budget lasts: the next is started only if what is left holds the longest
    a template's schedules took (seconds to a minute each at paper size)."""

    def __init__(self, graph: OpGraph, micro_batch_graph: OpGraph, target, micro_batches: int, deadline: float,
                 notes: list[str], say: Callable[[str], None]):
        self.graph, self.micro_batch_graph, self.target = graph, micro_batch_graph, target
        self.micro_batches, self.deadline, self.notes, self.say = micro_batches, deadline, notes, say
        self.scheduled: list[Candidate] = []
        self.skipped: list[str] = []
        self.took = 0.0
        self.template_seconds = 0.0
        """The longest one template's schedules took: a placement on several GPUs has two (the whole backward
        and the split one), one GPU's one."""
        self.bound: StepTimeBound | None = None
        """What no schedule of this many micro-batches beats, once something was scheduled or a plan to beat was
        given: made then, inside the budget (seconds to a minute at paper size), not after it."""
        self.cannot_beat: list[str] = []
        """Placements left unscheduled because this count's bound is at or above the fastest plan found."""
        self.fastest = math.inf
        """The fastest plan's seconds that the bound was last read against."""

    def beaten(self, fastest: float) -> bool:
        """Whether no schedule of this many micro-batches can beat `fastest` seconds (the fastest plan found so
        far): its bound (made here, once) is at or above it. Always False for an infinite `fastest`."""
        if math.isinf(fastest):
            return False
        if self.bound is None:
            from placer.schedule.predict import schedule_bound

            self.bound = schedule_bound(self.micro_batch_graph, self.micro_batches, self.target.spec)
        self.fastest = fastest
        return self.bound.value >= fastest

    def schedule(self, candidates: list[Candidate], fastest: float = math.inf) -> None:
        """Each of `candidates` under every schedule, while the budget lasts; none when this count's bound shows
        that no schedule of it can beat `fastest` (seconds: the fastest plan found so far), as on paper-size
        recurrent models on H100s, whose micro-batches' small kernels add more work than a pipeline saves."""
        if candidates and self.beaten(fastest):
            self.cannot_beat += [c.name for c in candidates]
            return
        for candidate in candidates:
            left = self.deadline - time.monotonic()
            # One template's time starts a placement: the split template is then started only if what is left
            # holds what the whole one took (`schedule_candidates`), and learning left about two (`reserve`).
            if left < max(1.0, self.template_seconds):
                self.skipped.append(candidate.name)
                continue
            self.say(f"pricing {', '.join(SCHEDULE_METHODS + SPLIT_SCHEDULE_METHODS)} over {self.micro_batches} "
                     f"micro-batches of {candidate.name} op by op")
            started = time.monotonic()
            self.scheduled += schedule_candidates(self.graph, self.micro_batch_graph, self.target, candidate,
                                                  self.micro_batches, self.notes, deadline=self.deadline,
                                                  time_limit=min(TESSEL_SECONDS, max(1.0, left / 4)))
            self.took = time.monotonic() - started
            templates = 2 if len(set(candidate.placement.group_devices)) > 1 else 1
            self.template_seconds = max(self.template_seconds, self.took / templates)
        if self.scheduled and self.bound is None:
            from placer.schedule.predict import schedule_bound

            self.bound = schedule_bound(self.micro_batch_graph, self.micro_batches, self.target.spec)

    def reserve(self) -> float:
        """Seconds to keep for scheduling one more placement over several GPUs (the learned one): its two
        templates, each as long as the longest so far; the whole budget left where nothing was scheduled yet."""
        if self.cannot_beat:  # what learning finds is only faster: no schedule of this count will beat it
            return 0.0
        return 2 * self.template_seconds if self.template_seconds else math.inf

    def note_skipped(self) -> None:
        if self.cannot_beat:
            self.notes.append(
                f"no schedules over {self.micro_batches} micro-batches of {', '.join(self.cannot_beat)}: none can "
                f"beat the fastest plan found ({self.fastest * 1e3:.2f} ms), their bound is "
                f"{self.bound.value * 1e3:.2f} ms")
        if self.skipped:
            self.notes.append(f"--budget was spent before the schedules of {', '.join(self.skipped)}"
                              + (f" (the last placement's took {self.took:.0f} s)" if self.took else "")
                              + ": raise --budget")


def _more_micro_batches(model: str, size: str, graph: OpGraph, target, counts: Sequence[int],
                        pipelines: list[Candidate], deadline: float, notes: list[str],
                        say: Callable[[str], None], *, took: float, fastest: float = math.inf,
                        after: _Scheduling | None = None) -> list[_Scheduling]:
    """`pipelines` (the placements scheduled first) scheduled again over each of `counts` micro-batches, fewest
    first, while a count is judged to fit MORE_MICRO_BATCHES_SHARE of the budget left: at twice what the count
    before it `took` (its graph built and its schedules priced), and until a count's bound shows that none of
    its schedules can beat `fastest` (seconds: the fastest plan found so far; `_Scheduling.schedule`), that of
    `after` (the count scheduled before these) included: more micro-batches, each smaller, cost the GPUs more work
    in all (a kernel of B/k samples takes at least 1/k of one of B), so the larger counts cannot beat it either."""
    from placer.schedule.micro_batch import build_micro_batch_graph

    done = []
    for index, count in enumerate(counts):
        last = done[-1] if done else after
        if last is not None and last.cannot_beat:
            notes.append(f"no schedules over {', '.join(str(c) for c in counts[index:])} micro-batches: more "
                         f"micro-batches than {last.micro_batches}, whose bound the fastest plan beats, only "
                         "add work")
            break
        left = deadline - time.monotonic()
        if 2 * took > left * MORE_MICRO_BATCHES_SHARE:
            notes.append(f"no schedules over {', '.join(str(c) for c in counts[index:])} micro-batches: each more "
                         f"count takes about twice the last ({took:.0f} s), more than "
                         f"{MORE_MICRO_BATCHES_SHARE:.0%} of the --budget left; raise --budget or give --micro-batches")
            break
        started = time.monotonic()
        scheduling = _Scheduling(graph, build_micro_batch_graph(model, size, count), target, count, deadline, notes,
                                 say)
        scheduling.schedule(pipelines, fastest)
        scheduling.note_skipped()
        took = time.monotonic() - started
        done.append(scheduling)
    return done


class _Replication:
    """Data parallelism of each degree asked for, priced while the budget lasts: the step built at the degree's
    slice of the batch, placed on one replica's GPUs by every heuristic (one GPU's placement alone where a replica
    has one GPU: plain data parallelism), each replicated over the machine with its gradients all-reduced; the
    fastest placement of each degree is its row."""

    def __init__(self, model: str, size: str, spec: str, degrees: Sequence[int], deadline: float, notes: list[str],
                 say: Callable[[str], None], seed: int = 0):
        self.model, self.size, self.spec, self.degrees, self.seed = model, size, spec, tuple(degrees), seed
        self.deadline, self.notes, self.say = deadline, notes, say
        self.candidates: list[Candidate] = []
        self.slice_bounds: dict[int, StepTimeBound] = {}
        """Slices of the batch the plans priced run (replicas, times micro-batches where they are pipelines) ->
        the bound of every such plan on the machine (`placer.schedule.predict.slice_bound`): the machine's bound
        reads them."""
        self.took = 0.0
        """The longest one degree took to price."""

    def price(self, degrees: Sequence[int], fastest: float = math.inf) -> None:
        """Each of `degrees` while the budget lasts; `fastest`: seconds of the fastest plan found before, which
        a hybrid's pipelines must be able to beat to be priced (`_pipelined_replicas`)."""
        skipped = []
        for degree in degrees:
            if self.deadline - time.monotonic() < max(1.0, self.took):
                skipped.append(degree)
                continue
            started = time.monotonic()
            self.candidates += replicated_candidates(
                self.model, self.size, self.spec, degree, self.notes, self.say, slice_bounds=self.slice_bounds,
                deadline=self.deadline, seed=self.seed,
                fastest=min([fastest, *(c.predicted_seconds for c in self.candidates)]))
            self.took = max(self.took, time.monotonic() - started)
        if skipped:
            self.notes.append(f"--budget was spent before data parallelism of {', '.join(f'x{d}' for d in skipped)} "
                              f"replicas (a degree took {self.took:.0f} s): raise --budget")


HYBRID_REFINE_SECONDS = 30.0
"""The most a hybrid (replicas of several GPUs each) spends refining its replica's placement on the simulator,
after the heuristics placed it: the replica is another, smaller placement problem, and the heuristics alone leave
it as far from its bound as they leave the whole machine."""


def replicated_candidates(model: str, size: str, spec: str, degree: int, notes: list[str],
                          say: Callable[[str], None] = lambda line: None, *,
                          slice_bounds: dict[int, StepTimeBound] | None = None, deadline: float = math.inf,
                          seed: int = 0, fastest: float = math.inf) -> list[Candidate]:
    """`degree` replicas of `model` on the modeled machine `spec`, each on its share of the GPUs and of the batch,
    priced with the all-reduce of their gradients (`placer.cost.replicated`): one replica a GPU holds every op on it
    (plain data parallelism); a replica of several GPUs is placed by every heuristic, then the fastest few are
    refined on the simulator for at most HYBRID_REFINE_SECONDS (and not past `deadline`), and the fastest kept,
    then run as pipelines where their bound does not show that they cannot beat `fastest` (seconds: the fastest
    plan found before). Adds to `slice_bounds` the bound of each count of slices it priced plans of."""
    from placer.cost import open_target
    from placer.cost.replicated import price_replicated, replica_spec
    from placer.errors import PlacerError
    from placer.heuristics import applicable_heuristics, time_heuristics
    from placer.models import is_builtin_model
    from placer.schedule.predict import slice_bound

    group = replica_spec(spec, degree)
    say(f"pricing {degree} replicas: the step at 1/{degree} of the batch on each replica's {group.split(':')[1]}, "
        "its gradients all-reduced")
    replicas, graph = replica_step(model, size, degree, apart=True)
    if slice_bounds is not None and degree not in slice_bounds:
        slice_bounds[degree] = slice_bound(graph, degree, spec)
    with open_target(graph, group) as target:
        gpus = sum(1 for device in target.devices.devices if device.kind == "GPU")
        builtin = is_builtin_model(model)
        names = ["single-device"] if gpus == 1 else applicable_heuristics(builtin_model=builtin, simulator=True,
                                                                          model=model if builtin else None)
        timings = time_heuristics(target, names, model=model if builtin else None)
        best = None
        for name, timing in timings.items():
            if timing.placement is None or not timing.ok:
                continue
            try:
                step_time, step = price_replicated(target, timing.placement, spec, degree)
            except PlacerError as error:
                notes.append(f"{replicas.name} over {name}: {error}")
                continue
            if best is None or step_time.seconds < best[1].seconds or not best[1].ok:
                best = (name, step_time, step, timing.placement)
        if best is None:
            notes.append(f"{replicas.name}: no heuristic could place one replica on {group}")
            return []
        if gpus > 1 and deadline - time.monotonic() > 1:
            refined = _refined_replica(graph, target, timings, min(deadline, time.monotonic() + HYBRID_REFINE_SECONDS),
                                       seed)
            if refined is not None:
                start, placement = refined
                step_time, step = price_replicated(target, placement, spec, degree)
                if step_time.ok and step_time.seconds < best[1].seconds:
                    best = (f"{start}, refined", step_time, step, placement)
        pipelines = []
        if gpus > 1:
            # The placements pipeline schedules were made for, else the replica's fastest.
            starts = [(n, timings[n].placement) for n in PIPELINE_PLACEMENTS
                      if n in timings and timings[n].placement is not None and timings[n].ok] or [(best[0], best[3])]
            pipelines = _pipelined_replicas(model, size, spec, replicas, graph, target, starts, gpus, notes, say,
                                            deadline=deadline, slice_bounds=slice_bounds, fastest=fastest)
    name, step_time, step, placement = best
    row = replicas.name if gpus == 1 else f"{replicas.name} over {name}"
    made_by = (f"{degree} replicas of {replicas.batch} samples, one replica placed by heuristic {name.replace(', refined', ', then refined on the simulator')} on {group}, "
               f"gradients ({step.gradient_bytes / 1e6:.0f} MB) all-reduced in a ring: {step.exchange * 1e3:.2f} ms, "
               f"{step.exposed * 1e3:.2f} ms of it not hidden by the backward")
    return [replicated_candidate(row, spec, replicas, graph, placement, step_time, made_by), *pipelines]


REPLICA_MICRO_BATCHES = (1, 2)
"""A replica of several GPUs is scheduled as a pipeline over this many times one micro-batch per GPU of the
replica, where that divides its slice of the batch."""


def _pipelined_replicas(model: str, size: str, spec: str, replicas: Replicas, graph: OpGraph, target,
                        starts: Sequence[tuple[str, Placement]], gpus: int, notes: list[str],
                        say: Callable[[str], None], *, deadline: float,
                        slice_bounds: dict[int, StepTimeBound] | None = None,
                        fastest: float = math.inf) -> list[Candidate]:
    """Data parallelism over pipeline stages: each of `replicas` runs its slice of the batch in micro-batches under
    a schedule of one of `starts` (placements of one replica's step, `graph`, on its `gpus` GPUs: the pipelines'
    own and the hybrid's fastest), its merged gradients all-reduced (`placer.cost.replicated.
    price_replicated_schedule`). The fastest schedule of each count of micro-batches is a row. A count is started
    only with HYBRID_REFINE_SECONDS left before `deadline`, and one after the first only while
    MORE_MICRO_BATCHES_SHARE of what is left holds twice what the count before took, and only while one replica's
    schedule bound over the count (`placer.schedule.predict.schedule_bound` on its GPUs, which its pipeline with
    the all-reduce after cannot beat) is below `fastest` (seconds: the fastest plan found so far); a larger count
    only adds work (`_more_micro_batches`). Adds to `slice_bounds` the bound of each count of slices (replicas
    times micro-batches) it schedules: the machine's bound reads them."""
    from placer.cost.replicated import price_replicated_schedule, replica_spec
    from placer.errors import PlacerError
    from placer.models import build_model_apart
    from placer.schedule.micro_batch import placement_at_micro_batch
    from placer.schedule.predict import schedule_bound, slice_bound

    group = replica_spec(spec, replicas.degree)
    rows = []
    distinct, seen = [], set()
    for name, placement in starts:
        if tuple(placement.group_devices) not in seen:
            seen.add(tuple(placement.group_devices))
            distinct.append((name, placement))
    took = 0.0
    for count in (gpus * factor for factor in REPLICA_MICRO_BATCHES):
        if replicas.batch % count:
            continue
        left = deadline - time.monotonic()
        if left < HYBRID_REFINE_SECONDS or 2 * took > left * MORE_MICRO_BATCHES_SHARE:
            notes.append(f"{replicas.name}: --budget left no time to run its replicas as pipelines of {count} "
                         "micro-batches: raise --budget")
            break
        started = time.monotonic()
        say(f"pricing {replicas.name} over pipelines of {count} micro-batches of {replicas.batch // count} samples")
        micro_batch_graph = build_model_apart(model, size, batch=replicas.batch // count)
        if not math.isinf(fastest):
            bound = schedule_bound(micro_batch_graph, count, group)
            if bound.value >= fastest:
                notes.append(f"{replicas.name}: no pipelines of {count} or more micro-batches: none can beat the "
                             f"fastest plan found ({fastest * 1e3:.2f} ms), one replica's bound over {count} is "
                             f"{bound.value * 1e3:.2f} ms")
                break
        slices = replicas.degree * count
        if slice_bounds is not None and slices not in slice_bounds:
            slice_bounds[slices] = slice_bound(micro_batch_graph, slices, spec)
        best = None
        for name, placement in distinct:
            unreplicated = Candidate(name, ("placement",), group, placement, predicted=target.evaluate(placement))
            for scheduled in schedule_candidates(graph, micro_batch_graph, target, unreplicated, count, notes,
                                                 time_limit=min(TESSEL_SECONDS, max(1.0, (deadline - time.monotonic()) / 8)),
                                                 deadline=deadline):
                if not scheduled.priced or (best is not None and scheduled.predicted_seconds >= best[1].predicted_seconds):
                    continue
                best = (name, scheduled)
        took = time.monotonic() - started
        if best is None:
            continue
        name, scheduled = best
        at_micro_batch = placement_at_micro_batch(scheduled.placement, graph, micro_batch_graph, target.devices)
        try:
            step_time, step = price_replicated_schedule(micro_batch_graph, at_micro_batch, scheduled.schedule, group,
                                                        spec, replicas.degree)
        except PlacerError as error:
            notes.append(f"{replicas.name} over pipelines of {name}: {error}")
            continue
        method = scheduled.schedule.method
        row = f"{replicas.name} over {name} + {method} x{count}"
        made_by = (f"{replicas.degree} replicas of {replicas.batch} samples, each a pipeline on {group}: "
                   f"heuristic {name.replace(', refined', ', then refined on the simulator')}'s placement under "
                   f"{method} over {count} micro-batches of {replicas.batch // count}; merged gradients "
                   f"({step.gradient_bytes / 1e6:.0f} MB) all-reduced in a ring: {step.exchange * 1e3:.2f} ms, "
                   f"{step.exposed * 1e3:.2f} ms of it not hidden by the backward")
        rows.append(replicated_candidate(row, spec, replicas, graph, scheduled.placement, step_time, made_by,
                                         schedule=scheduled.schedule, placement_name=f"{replicas.name} over {name}"))
    return rows


def _refined_replica(graph: OpGraph, target, timings, deadline: float, seed: int):
    """The heuristics' fastest placements of one replica refined on its group's simulator until `deadline`
    (`placer.heuristics.refine.refine_starts`): (the start's name, the placement), or None when nothing ran."""
    from placer.heuristics.refine import refine_starts
    from placer.placement import Placement

    starts = sorted(((name, t) for name, t in timings.items() if t.placement is not None and t.ok),
                    key=lambda item: item[1].step_time.seconds)
    distinct, seen = [], set()
    for name, timing in starts:
        key = tuple(timing.placement.group_devices)
        if key not in seen:
            seen.add(key)
            distinct.append((name, timing.placement))
    if not distinct:
        return None
    refinements = refine_starts(graph, target.simulator, [p.group_device_array for _, p in distinct],
                                deadline=deadline, seed=seed)
    best = min(range(len(refinements)), key=lambda k: refinements[k].seconds)
    if refinements[best].wall_seconds <= 0:
        return None
    return distinct[best][0], Placement.from_assignment(graph, target.devices, refinements[best].group_devices)


def _named_as(scheduled: list[Candidate], placements: list[Candidate]) -> list[Candidate]:
    """`scheduled` named after the placements they schedule as finally merged: one scheduled before learning
    ("expert + 1f1b x4") takes the refined placement's name too when that is the same ("expert = expert, refined + ...")."""
    names = {tuple(p.placement.group_devices): p.placement_name for p in placements}
    renamed = []
    for c in scheduled:
        name = names[tuple(c.placement.group_devices)]
        renamed.append(dataclasses.replace(c, name=name + c.name[len(c.placement_name):], placement_name=name))
    return renamed


PIPELINE_PLACEMENTS = ("expert", "balanced-stages")
"""The heuristics that place a stage per GPU, what pipeline schedules were made for: scheduled first."""


def _pipeline_placements(placements: list[Candidate]) -> list[Candidate]:
    """The expert's and the balanced stages' placements, in that order (one entry where they are the same)."""
    return [c for c in placements if any(c.made_of(name) for name in PIPELINE_PLACEMENTS)]


def _to_schedule(placements: list[Candidate], top: int) -> list[Candidate]:
    """In the order they are scheduled while the budget lasts: the pipelines' placements (the expert's, the
    balanced stages'), the `top` others priced fastest, then one GPU's (the schedule alone: micro-batches on one
    device)."""
    pipelines = _pipeline_placements(placements)
    single = [c for c in placements if c.made_of("single-device") and c not in pipelines]
    others = sorted((c for c in placements if c not in pipelines and c not in single), key=lambda c: c.predicted_seconds)
    return pipelines + others[:top] + single


# -- the command -----------------------------------------------------------------------------------------


def modeled_micro_batches(args: OptimizeArgs, gpus: int, batch: int | None) -> int | None:
    """The micro-batches of the schedules searched, or None for none: --micro-batches, else one per GPU (a
    pipeline stage each) when that divides the batch, else 2. Schedules are searched with --schedules, and by
    default when the model can be built at another batch (`batch`: its batch, None when it cannot)."""
    if args.schedules is False or batch is None:
        return None
    if args.micro_batches is not None:
        return args.micro_batches
    return gpus if gpus > 1 and batch % gpus == 0 else 2


def modeled_more_micro_batches(args: OptimizeArgs, first: int | None, batch: int | None) -> tuple[int, ...]:
    """The larger micro-batch counts the pipelines' placements are scheduled over too: none with --micro-batches
    (the count is given) or without schedules, else each of MORE_MICRO_BATCHES times `first` that divides the
    batch (one sample a micro-batch at the most)."""
    if first is None or batch is None or args.micro_batches is not None:
        return ()
    return tuple(first * factor for factor in MORE_MICRO_BATCHES if batch % (first * factor) == 0)


def check_modeled_args(args: OptimizeArgs):
    """Refuse, before any work, what `placer optimize` cannot search on a modeled machine; returns the target's
    parsed spec and its `modeled_counts` (None for a model function: made once it is loaded)."""
    from placer.cost import parse_target_spec
    from placer.files import check_output_file
    from placer.models import check_model_spec, is_builtin_model, model_spec
    from placer.models.registry import model_batch

    from agents.optimize import OptimizeError

    if not args.model:
        raise OptimizeError("which model? give MODEL (see `placer models`)")
    check_model_spec(args.model, args.size)
    spec = parse_target_spec(args.target, "simulated")  # refuses a GPU or link placer does not model
    for flag, given in (("--calibration", args.calibration), ("--from-run", args.from_run)):
        if given:
            raise OptimizeError(f"{flag} is for a real target: on {args.target} nothing is calibrated or measured, "
                                "the simulator prices every plan")
    for name, value, least in (("--learn-updates", args.learn_updates, 0), ("--micro-batches", args.micro_batches, 2),
                               ("--replicas", args.replicas, 1)):
        if value is not None and value < least:
            raise OptimizeError(f"{name} must be at least {least}, got {value}")
    if not (math.isfinite(args.budget) and args.budget > 0):
        raise OptimizeError(f"--budget must be a positive number of seconds, got {args.budget}")
    if not is_builtin_model(args.model):  # whether a model function can be built at a slice of its batch is known
        if args.replicas is not None and args.replicas > 1:  # once it is loaded (`model_function_batch`)
            from placer.cost.replicated import replica_spec

            replica_spec(str(spec), args.replicas)  # refuses a degree that does not divide the GPUs
        check_output_file(args.out, "--out")
        return spec, None
    batch = None
    if model_spec(args.model).batch_of is not None:
        batch = model_batch(args.model, args.size)
    elif args.schedules:
        raise OptimizeError(f"--schedules rebuilds the model at the micro-batch size, which {args.model!r} cannot be: "
                            "give a model that can (a built-in model, placer models; a model function with a `batch` "
                            "parameter), or leave out --schedules")
    counts = modeled_counts(args, spec, batch)
    check_output_file(args.out, "--out")
    return spec, counts


def modeled_counts(args: OptimizeArgs, spec: TargetSpec, batch: int | None) -> tuple[int | None, tuple[int, ...],
                                                                                    tuple[int, ...]]:
    """For a step of `batch` samples (None: the model cannot be built at another batch), the micro-batches of the
    schedules searched (None: none), the larger counts the pipelines' placements are scheduled over too, and the
    data-parallel degrees."""
    from placer.schedule.from_placement import check_micro_batches

    gpus = sum(1 for device in spec.devices.devices if device.kind == "GPU")
    micro_batches = modeled_micro_batches(args, gpus, batch)
    if micro_batches is not None:
        check_micro_batches(batch, micro_batches)
    return (micro_batches, modeled_more_micro_batches(args, micro_batches, batch),
            modeled_replica_degrees(args, str(spec), gpus, batch))


def model_function_batch(args: OptimizeArgs) -> int | None:
    """The batch a model function, loaded, can be built at a slice of (`placer.models.rebuildable_batch`), None
    where it cannot; refused, saying what the function needs, where --schedules or --replicas ask for slices."""
    from placer.models import rebuildable_batch, require_rebuildable_batch

    if args.schedules or (args.replicas is not None and args.replicas > 1):
        return require_rebuildable_batch(args.model, args.size)
    return rebuildable_batch(args.model, args.size)


def modeled_replica_degrees(args: OptimizeArgs, spec: str, gpus: int, batch: int | None) -> tuple[int, ...]:
    """The data-parallel degrees searched: --replicas alone (checked against the batch and the GPUs; 1: none),
    else `replica_degrees`."""
    from placer.cost.replicated import replica_spec
    from placer.replicas import Replicas, replica_degrees

    if args.replicas is None:
        return replica_degrees(gpus, batch)
    if args.replicas == 1:
        return ()
    Replicas.of_batch(batch, args.replicas)  # refuses a degree that does not divide the batch
    replica_spec(spec, args.replicas)  # ... or the GPUs
    return (args.replicas,)


@dataclass(frozen=True)
class ModeledOptimizeResult:
    """The search on a modeled machine, the recommended candidate and its plan."""

    model: str
    size: str
    graph: str
    search: ModeledSearch
    recommended: Candidate
    plan: Plan
    plan_path: str
    seconds: float = 0.0
    ops: int = 0

    @property
    def target(self) -> str:
        return self.search.target

    def versus_expert(self) -> str | None:
        """How the recommended plan compares with the expert's placement, unscheduled and under its best schedule."""
        expert = self.search.unscheduled("expert")
        if expert is None or not expert.priced:
            return None
        best = self.recommended
        schedules = [c for c in self.search.scheduled if c.placement_name == expert.name and c.priced]
        scheduled = min(schedules, key=lambda c: c.predicted_seconds) if schedules else None
        if best is expert:
            return "the recommended plan is the expert's placement, unscheduled" + (
                "" if scheduled is None else f"; under its best schedule ({scheduled.schedule.method}) it takes "
                                             f"{scheduled.predicted_seconds * 1e3:.2f} ms")
        if best is scheduled:
            return (f"the recommended plan is the expert's placement under {scheduled.schedule.method}, "
                    f"{100 * (1 - best.predicted_seconds / expert.predicted_seconds):.1f}% shorter than it unscheduled "
                    f"({expert.predicted_seconds * 1e3:.2f} ms)")
        return (f"{100 * (1 - best.predicted_seconds / expert.predicted_seconds):.1f}% shorter than the expert's placement "
                f"({expert.predicted_seconds * 1e3:.2f} ms)") + (
            "" if scheduled is None else f", {100 * (1 - best.predicted_seconds / scheduled.predicted_seconds):.1f}% than it under its best "
                                         f"schedule ({scheduled.schedule.method}, {scheduled.predicted_seconds * 1e3:.2f} ms)")

    def describe(self) -> str:
        from agents.candidate_table import Row, candidate_table, milliseconds, ratio

        search, winner = self.search, self.recommended.predicted_seconds
        rows = search.candidates
        lines = [f"{self.model} ({self.size}, graph {self.graph!r}): {len(rows)} ways to run its step on {self.target}, "
                 "SIMULATED (nothing was measured: every step time is the simulator's)"]
        tied = search.tied_with_fastest()
        table = []
        for c in rows:
            if c.priced:
                simulated, versus = milliseconds(c.predicted_seconds), f"{c.predicted_seconds / winner:.2f}x"
                if len(tied) > 1 and c in tied:
                    versus += " tie"
            else:
                simulated, versus = c.predicted.failure or "failed", f"({c.predicted.message[:60]})"
            table.append(Row(c, c is self.recommended, simulated,
                             ratio(times_bound(c.predicted_seconds if c.priced else None, search.bound_of(c))), versus))
        lines += candidate_table(table, predicted_title="simulated")
        if len(tied) > 1:
            lines.append(f"  tie: {len(tied)} plans within {100 * MODELED_TIE:.0f}% of the fastest's simulated step "
                         f"(closer than simulators of training steps err on real GPUs, 2-5 % on average): "
                         f"{', '.join(c.name for c in tied)}; the recommended is the simplest of them (one GPU, then "
                         "plain data parallelism, then a placement over several devices, then replicas of such "
                         "placements and schedules)")
        if search.machine_bound is not None:
            lines.append(f"  x bound: every plan over the machine's {search.machine_bound.describe()}: what no plan "
                         "searched beats, whole batch, micro-batches or replicas")
            lines.append(f"  {'':9}placements of the whole batch alone: {search.bound.describe()}")
        else:
            lines.append(f"  x bound: a placement unscheduled over the {search.bound.describe()}")
        for count, schedule_bound in sorted(search.schedule_bounds.items()):
            alone = "scheduled plans alone: " if search.machine_bound is not None else "a scheduled plan over "
            lines.append(f"  {'':9}{alone}the schedules' {schedule_bound.describe()}: the step in "
                         f"{count} micro-batches, gradient gates left out")
        plain = search.data_parallel()
        if plain is not None and plain.priced:
            if plain is search.fastest:
                verdict = "data parallelism is the fastest plan"
            elif plain is self.recommended:
                verdict = (f"data parallelism is recommended, the simplest of the tie with the fastest plan "
                           f"({search.fastest.name}, {search.fastest.predicted_seconds * 1e3:.2f} ms)")
            elif plain.predicted_seconds < winner:
                verdict = (f"{100 * (1 - plain.predicted_seconds / winner):.1f}% faster than the recommended plan, "
                           "within the tie, and the recommended is simpler")
            else:
                verdict = f"the recommended plan is {plain.predicted_seconds / winner:.2f}x faster than data parallelism"
            lines.append(f"  replicas: {plain.name} ({plain.replicas.batch} samples a GPU): "
                         f"{plain.predicted_seconds * 1e3:.2f} ms; {verdict}")
        for c in search.replicated:
            lines.append(f"  {c.name}: {c.made_by}")
        learners = search.learners()
        if search.gap_closed is not None and learners.planner is None:
            lines.append(f"  gap closed: the refined placement ({search.refined().name}) closed "
                         f"{100 * search.gap_closed:+.1f}% of the best "
                         "heuristic's distance to the bound")
        if learners.planner is not None and learners.baseline is not None:
            closed = learners.describe_closed
            lines.append(f"  learners, each with the share it closed of the gap between the best plan made without "
                         f"them ({learners.baseline.name}, {learners.baseline.predicted_seconds * 1e3:.2f} ms) and the "
                         f"machine's bound: the planner alone {closed(learners.planner)}, the planner refined "
                         f"{closed(learners.planner_refined)}, the heuristics refined "
                         f"{closed(learners.heuristics_refined)}")
        versus = self.versus_expert()
        if versus:
            lines.append(f"  vs the expert: {versus}")
        lines.append("  thread settings and one process: not searched, they are a host CPU's choices and this machine's "
                     "ops run on its GPUs")
        if search.micro_batches is None:
            lines.append("  schedules: none searched (the model cannot be built at the micro-batch size, or "
                         "--no-schedules)")
        lines += [f"  note: {note}" for note in search.notes]
        best = self.recommended
        lines.append(f"recommended: {best.name} on {self.target}, {winner * 1e3:.2f} ms per step simulated")
        lines.append(f"wrote {self.plan_path} in {self.seconds:.0f} s of search: a plan for {self.target}, simulated; "
                     "`placer apply` runs plans made for a real target only")
        if search.phase_seconds:
            lines.append("  where the time went: " + ", ".join(f"{phase} {seconds:.0f} s"
                                                                for phase, seconds in search.phase_seconds.items()))
        return "\n".join(lines)

    def to_json_dict(self) -> dict[str, Any]:
        search = self.search

        def row(c: Candidate) -> dict[str, Any]:
            return {"name": c.name, "placement": c.placement_name, "made_by": c.made_by,
                    "schedule": None if c.schedule is None else {"method": c.schedule.method,
                                                                 "micro_batches": c.schedule.micro_batches},
                    "simulated": c.predicted.to_dict(), "ok": c.priced,
                    "seconds": c.predicted_seconds if c.priced else None,
                    "vs_fastest": c.predicted_seconds / self.recommended.predicted_seconds if c.priced else None,
                    "x_bound": times_bound(c.predicted_seconds if c.priced else None, search.bound_of(c)),
                    "tied_with_fastest": any(c is t for t in tied),
                    "replicas": None if c.replicas is None else c.replicas.to_json_dict()}

        expert = search.unscheduled("expert")
        learners = search.learners()
        tied = search.tied_with_fastest()

        def learner(c: Candidate | None) -> dict[str, Any] | None:
            return None if c is None else {"name": c.name, "seconds": c.predicted_seconds, "gap_closed": learners.gap_closed(c)}

        return {"model": self.model, "size": self.size, "graph": self.graph, "target": self.target,
                "simulated": True, "measured": False, "recommended": self.recommended.name, "plan": self.plan_path,
                "fastest": search.fastest.name, "tie_share": MODELED_TIE,
                "candidates": [row(c) for c in search.candidates], "micro_batches": search.micro_batches,
                "micro_batch_counts": list(search.micro_batch_counts),
                "schedule_bounds": {str(count): {**b.to_dict(), "simulated": True}
                                    for count, b in sorted(search.schedule_bounds.items())},
                "bound": {**search.bound.to_dict(), "simulated": True}, "gap_closed": search.gap_closed,
                "schedule_bound": None if search.schedule_bound is None else {**search.schedule_bound.to_dict(),
                                                                              "simulated": True},
                "machine_bound": None if search.machine_bound is None else {**search.machine_bound.to_dict(),
                                                                            "simulated": True},
                "data_parallel": None if search.data_parallel() is None else search.data_parallel().predicted_seconds,
                "expert": None if expert is None else expert.predicted_seconds, "notes": list(search.notes),
                "learners": {"baseline": learner(learners.baseline), "planner": learner(learners.planner),
                             "planner_refined": learner(learners.planner_refined),
                             "heuristics_refined": learner(learners.heuristics_refined)},
                "seconds": self.seconds, "ops": self.ops, "phase_seconds": dict(search.phase_seconds)}


def optimize_modeled(args: OptimizeArgs, *, command: str | None = None,
                     say: Callable[[str], None] | None = None) -> ModeledOptimizeResult:
    """Search `args.model`'s placement and schedule on the modeled machine `args.target` within `args.budget`
    seconds, and write the recommended (`ModeledSearch.recommended`) as a plan for that machine to `args.out`."""
    from placer.models import load_model
    from placer.plan import Plan

    from agents.optimize import _command_line

    started = time.monotonic()
    spec, counts = check_modeled_args(args)
    tell = say or (lambda line: print(line, file=sys.stderr, flush=True))

    def say_when(line: str) -> None:
        tell(f"[{time.monotonic() - started:4.0f} s of {args.budget:.0f}] {line}")

    graph = load_model(args.model, args.size)
    if args.replicas and args.replicas > 1:  # before any search: no placement fits replicas whose state does not
        from placer.replicas import check_replicas_fit

        check_replicas_fit(graph, spec.devices, args.replicas)
    say_when(graph.summary())
    micro_batches, more_micro_batches, degrees = counts or modeled_counts(args, spec, model_function_batch(args))
    search = search_modeled(args.model, args.size, str(spec), graph=graph, learn_updates=args.learn_updates,
                            micro_batches=micro_batches, more_micro_batches=more_micro_batches, seed=args.seed,
                            replica_degrees=degrees, deadline=started + args.budget,
                            every_schedule=args.micro_batches is not None,  # the user asked to see that count
                            progress=args.progress, say=say_when)
    best = search.recommended
    plan = Plan.made_for(args.model, args.size, best.replica_graph or graph, best.placement, str(spec),
                         schedule=best.schedule, predicted=best.predicted, replicas=best.replicas,
                         made_by="placer optimize",
                         command=command or _command_line(args))
    plan = dataclasses.replace(plan, provenance={
        **plan.provenance, "simulated": True, "candidate": best.name, "made_from": best.made_by,
        "tied_with": [c.name for c in search.tied_with_fastest() if c is not best],
        "alternatives": {c.name: c.predicted_seconds if c.priced else None for c in search.candidates}})
    plan.save(args.out)
    return ModeledOptimizeResult(args.model, args.size, graph.name, search, best, plan, str(args.out),
                                 time.monotonic() - started, len(graph.ops))
