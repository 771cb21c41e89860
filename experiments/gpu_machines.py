"""Where placement matters: every setup of the papers and of today's multi-GPU machines, each searched within a
budget of wall time, against the machine's bound and the expert. Predictions, not measurements.

    python experiments/gpu_machines.py [--setups nmt-4:paper@4xH100 gpt2:paper@8xH100 ...] [--budget 600]
        [--micro-batches M] [--learn-updates N] [--schedule-top 3] [--out results/gpu_machines.json]

A setup is MODEL[:SIZE]@NxGPU (size paper by default). The default setups are the papers' (NMT-2 on 2 and 4, NMT-4
on 2 and 4, Inception-V3 on 2 modeled V100s) and today's (NMT-4, the Transformer and the GPT-2- and Llama-shaped
language models on 4 and 8 modeled H100s). TensorFlow cannot run on a GPU here, so every number is the simulator's
step time on `modeled:NxGPU` (the H100's op costs rest on kernels measured on an H200: `placer measure` says which
ops do). Thread pools are a host CPU's setting, so the decisions are two: where the ops run, and the micro-batch
schedule. Each setup is the search of `placer optimize MODEL --target modeled:NxGPU --budget B`
(`agents.optimize_modeled.search_modeled`), reported per setup as (ms per step):
- bound: the step time no placement of the whole batch can beat (`placer.simulate.bound`); schedule bound: what no
  schedule of the first count of micro-batches can beat (`placer.schedule.predict.schedule_bound`); the counts are
  `placer optimize`'s (one per GPU, then the pipelines' placements over twice and four times that, while the
  budget holds them and until a count's bound shows that none of its schedules can beat the fastest plan found:
  a note then names the counts left out) unless --micro-batches gives one;
- single: every op on one GPU; best heuristic: the fastest heuristic placement (the exact baseline included);
- the learners, each with the share it closed of the gap between the best plan made without them (`baseline`: the
  heuristics' placements and data parallelism, unscheduled) and the machine's bound
  (`agents.optimize_modeled.ModeledSearch.learners`): planner, what the policy learned in what the budget leaves
  it (the hierarchical planner's best sample, trained on the simulator, at most --learn-updates, choosing data
  parallelism's degree too where replicas were priced), and it over the best plan; planner refined, its plan
  refined on the simulator by greedy moves (`placer.heuristics.refine`) in one tournament with the heuristics'
  fastest placements, the faster half going on after each round; heuristics refined, the fastest placements of
  the heuristics refined there (or the fastest plan made without the planner, where that is faster), the planner
  refined against it, and against the heuristics' fastest at the end of the last round the planner's plan ran
  in (the same time spent: `planner_refined_same_time_vs_heuristics_pct`);
- refined: the heuristics' refined placement (not learned: `refined_from` names the start that won); its best
  schedule, its share of the best heuristic placement's gap to the placements' bound closed, and against the
  expert's placement (the seed papers' metric);
- expert scheduled: the expert's placement under its fastest micro-batch schedule (GPipe, 1F1B, ZB-H1, Tessel's fast
  search, at its fastest count of micro-batches), or unscheduled if none is faster (models that cannot be built at another batch
  get no schedules);
- pipelines: for the placements a stage per GPU (the expert's, and the language models' balanced stages: layers
  per GPU cut where the stages' compute is even), the fastest schedule's speedup over the same placement
  unscheduled, beside the bubble arithmetic p M / (M + p - 1) of p equal stages (`pipeline_speedups` per method
  in the JSON);
- one after another: the fastest placement alone, then the fastest schedule for it;
- joint: the fastest pair of a placement above and a schedule (or none); the --schedule-top placements predicted
  fastest unscheduled are scheduled, and the expert's and one GPU's;
- data parallel: one replica a GPU, each on its slice of the batch, the gradients all-reduced on the machine's
  links (`placer.simulate.replicas`); hybrid: the fastest of fewer replicas, each over a group of GPUs placed by
  the heuristics, or run as a pipeline under a schedule (pipelined hybrid: the fastest of those); best: the fastest plan of any kind, and data parallel over it (vs data parallel, x: above 1 the
  best plan is faster), and it over the machine's bound (what no plan searched beats:
  `placer.simulate.bound.machine_bound`); recommended: what `placer optimize` writes, the simplest of the plans
  within 2 % of the best (`ModeledSearch.recommended`).
A schedule is priced op by op (`placer.schedule.predict`): its micro-batched step with transfers, the merge of the
micro-batches' gradients and the update. Each decision is shown over its bound (simulated): a placement unscheduled
over the bound, a scheduled plan over the schedule bound; with the wall time the setup's search took.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

COLUMNS = ["setup", "bound_ms", "schedule_bound_ms", "single_ms", "placement", "placement_ms", "baseline", "baseline_ms", "planner_ms", "planner_replicas", "planner_x_best",
           "planner_closed_pct", "planner_refined_ms", "planner_refined_closed_pct", "heuristics_refined",
           "heuristics_refined_ms", "heuristics_refined_closed_pct", "planner_refined_vs_heuristics_refined_pct",
           "planner_refined_rounds", "planner_refined_at_its_last_round_ms",
           "heuristics_refined_at_that_round_ms", "planner_refined_same_time_vs_heuristics_pct",
           "refined_ms", "refined_from", "refined_schedule",
           "refined_scheduled_ms", "refined_gap_closed_pct", "refined_vs_expert_pct", "expert_ms", "expert_schedule",
           "expert_scheduled_ms", "stages_ms", "pipeline_best", "pipeline_speedup", "bubble_arithmetic", "sequential",
           "sequential_ms", "joint", "joint_ms", "joint_vs_best_one_dim_pct",
           "placement_x_bound", "refined_x_bound", "joint_x_bound", "machine_bound_ms", "data_parallel_ms",
           "hybrid", "hybrid_ms", "pipelined_hybrid_ms", "best", "best_ms", "vs_data_parallel", "best_x_machine_bound", "recommended", "recommended_ms", "search_s"]

PAPER_SETUPS = ("nmt-2:paper@2xV100", "nmt-2:paper@4xV100", "nmt-4:paper@2xV100", "nmt-4:paper@4xV100",
                "inception-v3:paper@2xV100")
"""The seed papers' setups (docs/results/learned-placement.md), on the V100s they used."""
GPU_SETUPS = tuple(f"{model}:paper@{gpus}xH100" for model in ("nmt-4", "transformer", "gpt2", "llama") for gpus in (4, 8))
"""Today's: the recurrent and attention models and the two language models whose step fits no one GPU."""
SEARCHED_ALONE = ("llama",)
"""Models whose search at paper size takes more than half of 24 GiB (two Llama searches at once need more): with
--jobs above 1 their setups run after the others, one at a time."""
LEARN_UPDATES = 100_000
"""Updates of the planner when --learn-updates is not given: as many as the budget leaves."""


def parse_setup(setup: str) -> tuple[str, str, str]:
    """MODEL[:SIZE]@NxGPU -> (model, size, "modeled:NxGPU")."""
    model_size, at, machine = setup.partition("@")
    if not at or "x" not in machine:
        raise ValueError(f"setup {setup!r} is not MODEL[:SIZE]@NxGPU (e.g. nmt-4:paper@4xH100)")
    model, _, size = model_size.partition(":")
    return model, size or "paper", f"modeled:{machine}"


@contextlib.contextmanager
def opened_setup(setup: str):
    """The setup MODEL[:SIZE]@NxGPU built and its modeled machine open for the block: (model, graph, target, the
    step-time bound of placements on it), what the probes of the refinement and of the policies start from."""
    from placer.cost import open_target
    from placer.models import load_model
    from placer.simulate.bound import step_time_bound

    model, size, spec = parse_setup(setup)
    graph = load_model(model, size)
    with open_target(graph, spec) as target:
        yield model, graph, target, step_time_bound(target.simulator, simulated_on=spec.split(":", 1)[1])


def fastest_heuristic(target, model: str, *, seed: int = 0):
    """(name, timing) of the fastest heuristic placement of the built-in `model` on the simulated `target`
    (`placer.heuristics.time_heuristics`): the start the probes of the refinement and of the policies begin from."""
    from placer.heuristics import applicable_heuristics, time_heuristics

    names = applicable_heuristics(builtin_model=True, simulator=True, model=model)
    timings = {name: t for name, t in time_heuristics(target, names, model=model, seed=seed).items()
               if t.placement is not None and t.ok}
    name = min(timings, key=lambda n: timings[n].step_time.seconds)
    return name, timings[name]


def decide(model: str, size: str, spec: str, micro_batches: int | None, learn_updates: int, budget: float,
           schedule_top: int = 3) -> dict:
    """One row: every decision's predicted step time for `model` on the modeled machine `spec`, from the search
    `placer optimize --target modeled:NxGPU --budget B` makes (`agents.optimize_modeled.search_modeled`)."""
    from placer.cost import parse_target_spec
    from placer.models import model_spec

    from placer.models import model_batch

    from placer.replicas import replica_degrees

    from agents.optimize_modeled import search_modeled

    from agents.optimize import OptimizeArgs
    from agents.optimize_modeled import modeled_micro_batches, modeled_more_micro_batches

    started = time.monotonic()
    schedulable = model_spec(model).batch_of is not None
    gpus = sum(1 for device in parse_target_spec(spec).devices.devices if device.kind == "GPU")
    batch = model_batch(model, size) if schedulable else None
    # The micro-batch counts `placer optimize` searches: --micro-batches alone when given.
    asked = OptimizeArgs(model, target=spec, micro_batches=micro_batches)
    first = modeled_micro_batches(asked, gpus, batch)
    search = search_modeled(model, size, spec, learn_updates=learn_updates, micro_batches=first,
                            more_micro_batches=modeled_more_micro_batches(asked, first, batch),
                            schedule_top=schedule_top, replica_degrees=replica_degrees(gpus, batch),
                            deadline=started + budget)
    notes = list(search.notes)
    if not schedulable:
        notes.append(f"no schedules: {model} cannot be built at the micro-batch size")
    # By every name that proposed a placement ("expert = metis" counts as both): the columns name heuristics, and the
    # refinement's placement is "refined" whatever it started from.
    alone = {_column_name(name): c.predicted_seconds for c in search.placements if c.priced
             for name in c.placement_name.split(" = ")}
    # Each placement's schedule at its fastest count of micro-batches.
    scheduled, counts = {}, {}
    for c in sorted((c for c in search.scheduled if c.priced), key=lambda c: -c.predicted_seconds):
        for name in c.placement_name.split(" = "):
            scheduled[(_column_name(name), c.schedule.method)] = c.predicted_seconds
            counts[(_column_name(name), c.schedule.method)] = c.schedule.micro_batches
    row = summarize(alone, scheduled, search.bound.value,
                    None if search.schedule_bound is None else search.schedule_bound.value)
    row.update(replicated_columns(search))
    row.update(learner_columns(search))
    row.update(pipeline_speedups(alone, scheduled, gpus, counts))
    refined = search.refined()
    return {"setup": f"{model}:{size}@{spec.split(':', 1)[1]}", "model": f"{model} {size}", "machine": spec, **row,
            "refined_from": None if refined is None else _refined_from(refined),
            "refined_made_by": None if refined is None else refined.made_by, "bound": search.bound.to_dict(),
            "schedule_bound": None if search.schedule_bound is None else search.schedule_bound.to_dict(),
            "micro_batch_counts": list(search.micro_batch_counts),
            "search_s": time.monotonic() - started,
            "phase_seconds": dict(search.phase_seconds), "notes": notes}


def _column_name(name: str) -> str:
    """"refined" for the heuristics' refined placement, whatever it started from; every other name as it is."""
    from agents.candidates import PLANNER, REFINED

    return "refined" if name.endswith(REFINED) and name != PLANNER + REFINED else name


def _refined_from(candidate) -> str:
    from agents.candidates import REFINED

    return next(n for n in candidate.placement_name.split(" = ") if n.endswith(REFINED))[:-len(REFINED)]


def replicated_columns(search) -> dict:
    """Data parallelism's columns of a setup's search (`agents.optimize_modeled.ModeledSearch`)."""
    from placer.simulate.bound import times_bound

    plain = search.data_parallel()
    hybrids = [c for c in search.replicated if c is not plain and c.priced and not c.made_of("planner")]
    hybrid = min(hybrids, key=lambda c: c.predicted_seconds) if hybrids else None
    pipelined = min((c for c in hybrids if c.schedule is not None), key=lambda c: c.predicted_seconds, default=None)
    best = search.fastest
    machine = search.machine_bound or search.bound
    data_parallel = plain.predicted_seconds if plain is not None and plain.priced else None
    return {"machine_bound_ms": machine.value * 1e3, "machine_bound": machine.to_dict(),
            "data_parallel_ms": None if data_parallel is None else data_parallel * 1e3,
            "data_parallel_made_by": None if plain is None else plain.made_by,
            "hybrid": None if hybrid is None else hybrid.name, "hybrid_ms": None if hybrid is None else hybrid.predicted_seconds * 1e3,
            "pipelined_hybrid": None if pipelined is None else pipelined.name,
            "pipelined_hybrid_ms": None if pipelined is None else pipelined.predicted_seconds * 1e3,
            "best": best.name, "best_ms": best.predicted_seconds * 1e3,
            "vs_data_parallel": None if data_parallel is None else data_parallel / best.predicted_seconds,
            "best_x_machine_bound": times_bound(best.predicted_seconds, machine),
            "recommended": search.recommended.name, "recommended_ms": search.recommended.predicted_seconds * 1e3,
            "tied_with_best": [c.name for c in search.tied_with_fastest() if c is not best]}


def learner_columns(search) -> dict:
    """The planner alone, the planner's plan refined, and the heuristics refined, each with the share it closed of
    the gap between the best plan made with neither (`baseline`: the heuristics' placements and data parallelism)
    and the machine's bound (`agents.optimize_modeled.ModeledSearch.learners`); the planner chooses data
    parallelism's degree too where replicas were priced, so it is read against the fastest plan of any kind."""
    reading = search.learners()

    def ms(candidate):
        return None if candidate is None else candidate.predicted_seconds * 1e3

    def closed_pct(candidate):
        share = reading.gap_closed(candidate)
        return None if share is None else 100 * share

    planner, refined, heuristics = reading.planner, reading.planner_refined, reading.heuristics_refined
    return {"baseline": None if reading.baseline is None else reading.baseline.name,
            "baseline_ms": ms(reading.baseline),
            "planner_ms": ms(planner), "planner_closed_pct": closed_pct(planner),
            "planner_replicas": None if planner is None else 1 if planner.replicas is None else planner.replicas.degree,
            "planner_x_best": None if planner is None else planner.predicted_seconds / search.fastest.predicted_seconds,
            "planner_refined_ms": ms(refined), "planner_refined_closed_pct": closed_pct(refined),
            "heuristics_refined": None if heuristics is None else heuristics.name,
            "heuristics_refined_ms": ms(heuristics), "heuristics_refined_closed_pct": closed_pct(heuristics),
            "planner_refined_vs_heuristics_refined_pct":
                None if refined is None or heuristics is None else 100 * (1 - refined.predicted_seconds / heuristics.predicted_seconds),
            **_tournament_standing(refined)}


def _tournament_standing(refined) -> dict:
    """The planner's plan as it stood in the refinement's tournament (`agents.optimize_modeled`): the rounds it
    ran in, and it against the heuristics' fastest at the end of the last of them, the same time spent."""
    from placer.heuristics.refine import RoundStanding

    recorded = None if refined is None else refined.placement.metadata.get("tournament_standing")
    if recorded is None:
        return {"planner_refined_rounds": None, "planner_refined_at_its_last_round_ms": None,
                "heuristics_refined_at_that_round_ms": None, "planner_refined_same_time_vs_heuristics_pct": None}
    read = RoundStanding(**recorded)
    return {"planner_refined_rounds": read.rounds, "planner_refined_at_its_last_round_ms": read.seconds * 1e3,
            "heuristics_refined_at_that_round_ms": read.others_seconds * 1e3,
            "planner_refined_same_time_vs_heuristics_pct": 100 * read.ahead}


def summarize(alone: dict[str, float], scheduled: dict[tuple[str, str], float], bound: float | None = None,
              schedule_bound: float | None = None) -> dict:
    """The row's decisions from every placement's predicted seconds unscheduled (`alone`, by name; "refined" is
    the heuristics' refinement's, "planner" and "planner, refined" the policy's, neither a heuristic, "single-device"
    one GPU) and under each schedule (`scheduled`, by (placement, method)); with
    the step time `bound` of unscheduled placements, each placement over it and the share of the best heuristic
    placement's gap to it that the refined placement closed; each scheduled plan over `schedule_bound`, what no
    schedule can beat."""
    from placer.simulate.bound import gap_closed, times_bound

    heuristics = {name: s for name, s in alone.items() if name not in ("refined", "planner", "planner, refined")}
    best_placement = min(heuristics, key=heuristics.get)
    everything = {**alone, **{f"{name} + {method}": s for (name, method), s in scheduled.items()}}
    # one decision made, the other left at its default: a placement unscheduled, or one GPU under a schedule
    one_dimension = {**alone, **{f"single-device + {method}": s for (name, method), s in scheduled.items()
                                 if name == "single-device"}}
    best_one_dim = min(one_dimension, key=one_dimension.get)
    first = min(alone, key=alone.get)
    sequential = min([(first, alone[first])] + [(f"{first} + {method}", s) for (name, method), s in scheduled.items()
                                                 if name == first], key=lambda item: item[1])
    expert_schedules = {method: s for (name, method), s in scheduled.items() if name == "expert"}
    expert_schedule = min(expert_schedules, key=expert_schedules.get) if expert_schedules else None
    if expert_schedule is not None and expert_schedules[expert_schedule] >= alone.get("expert", float("inf")):
        expert_schedule = None  # no schedule makes the expert's placement faster
    joint = min(everything, key=everything.get)

    def ms(seconds):
        return None if seconds is None else seconds * 1e3

    closed = gap_closed(heuristics[best_placement], alone.get("refined"), bound)
    refined_schedules = {method: s for (name, method), s in scheduled.items() if name == "refined"}
    refined_schedule = min(refined_schedules, key=refined_schedules.get) if refined_schedules else None
    if refined_schedule is not None and refined_schedules[refined_schedule] >= alone.get("refined", float("inf")):
        refined_schedule = None
    versus_expert = (100 * (1 - alone["refined"] / alone["expert"])
                     if "refined" in alone and alone.get("expert") else None)
    return {
        "refined_schedule": refined_schedule or ("none" if "refined" in alone else None),
        "refined_scheduled_ms": ms(refined_schedules[refined_schedule] if refined_schedule else alone.get("refined")),
        "refined_vs_expert_pct": versus_expert,
        "single_ms": ms(alone.get("single-device")), "placement_ms": ms(heuristics[best_placement]),
        "placement": best_placement, "refined_ms": ms(alone.get("refined")), "expert_ms": ms(alone.get("expert")),
        "expert_scheduled_ms": ms(expert_schedules[expert_schedule] if expert_schedule else alone.get("expert")),
        "expert_schedule": expert_schedule or "none",
        "sequential_ms": ms(sequential[1]), "sequential": sequential[0], "joint_ms": ms(everything[joint]),
        "joint": joint, "joint_vs_best_one_dim_pct": 100 * (1 - everything[joint] / one_dimension[best_one_dim]),
        "best_one_dim": best_one_dim, "predicted_ms": {name: ms(s) for name, s in everything.items()},
        "bound_ms": ms(bound), "schedule_bound_ms": ms(schedule_bound),
        "placement_x_bound": times_bound(heuristics[best_placement], bound),
        "refined_x_bound": times_bound(alone.get("refined"), bound),
        "joint_x_bound": times_bound(everything[joint], bound if joint in alone else schedule_bound),
        "refined_gap_closed_pct": None if closed is None else 100 * closed,
        "x_bound": {name: times_bound(s, bound if name in alone else schedule_bound) for name, s in everything.items()},
    }


def bubble_arithmetic(stages: int, micro_batches: int) -> float:
    """What GPipe and 1F1B gain over running the stages one after another, on `stages` equal stages with
    `micro_batches`: the step of M micro-batches takes (M + p - 1) micro-batch stage times against p M."""
    return stages * micro_batches / (micro_batches + stages - 1)


def pipeline_speedups(alone: dict[str, float], scheduled: dict[tuple[str, str], float], stages: int,
                      counts: dict[tuple[str, str], int]) -> dict:
    """For the placements a stage per GPU (the expert's, the balanced stages'): each schedule's step over the
    same placement's unscheduled one (x faster), beside the bubble arithmetic of `stages` equal stages over the
    fastest pipeline's micro-batches (`counts`: (placement, method) -> its micro-batches)."""
    from agents.optimize_modeled import PIPELINE_PLACEMENTS

    speedups = {name: {method: alone[name] / s for (placement, method), s in scheduled.items() if placement == name}
                for name in PIPELINE_PLACEMENTS if name in alone}
    speedups = {name: methods for name, methods in speedups.items() if methods}
    best = max(((name, method, x) for name, methods in speedups.items() for method, x in methods.items()),
               key=lambda item: item[2], default=None)
    return {"stages_ms": alone["balanced-stages"] * 1e3 if "balanced-stages" in alone else None,
            "pipeline_speedups": speedups,
            "pipeline_speedup": None if best is None else round(best[2], 3),
            "pipeline_best": None if best is None else f"{best[0]} + {best[1]} x{counts[best[:2]]}",
            "pipeline_micro_batches": None if best is None else counts[best[:2]],
            "bubble_arithmetic": None if best is None else round(bubble_arithmetic(stages, counts[best[:2]]), 3)}


def _searched(setups: list[tuple[str, str, str]], args):
    """Each setup's row as its search ends: one after another, or --jobs at a time, each in a fresh process pinned
    to a core of its own (spawned: TensorFlow's threads do not survive a fork; fresh: a process that searched one
    paper-size setup keeps GBs it no longer needs, 7-11 GB after three)."""
    if args.jobs == 1:
        for model, size, spec in setups:
            yield decide(model, size, spec, args.micro_batches, args.learn_updates, args.budget, args.schedule_top)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        cores = manager.Queue()
        for core in sorted(os.sched_getaffinity(0))[:args.jobs]:
            cores.put(core)
        side_by_side, alone = split_searched_alone(setups)
        with ProcessPoolExecutor(args.jobs, mp_context=context, initializer=_die_with_parent,
                                 max_tasks_per_child=1) as pool:
            def submit(model, size, spec):
                return pool.submit(_decide_on_a_core, cores, model, size, spec, args.micro_batches,
                                   args.learn_updates, args.budget, args.schedule_top)

            for future in as_completed([submit(*setup) for setup in side_by_side]):
                yield future.result()
            for setup in alone:  # after the others, one at a time
                yield submit(*setup).result()


def _ms(value) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def split_searched_alone(setups: list[tuple[str, str, str]]) -> tuple[list, list]:
    """(setups that may be searched side by side, setups of SEARCHED_ALONE's models), each in the order given."""
    return ([setup for setup in setups if setup[0] not in SEARCHED_ALONE],
            [setup for setup in setups if setup[0] in SEARCHED_ALONE])


def _die_with_parent() -> None:
    from placer.testbed import die_with_parent

    die_with_parent()  # a benchmark stopped part way must not leave its searches running beside the next one
    tf_logs.configure()


def _decide_on_a_core(cores, *decide_args) -> dict:
    """`decide` pinned to a core taken from `cores` (a queue of free cores), given back when it ends."""
    core = cores.get()
    os.sched_setaffinity(0, {core})
    try:
        return decide(*decide_args)
    finally:
        cores.put(core)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", default=[*PAPER_SETUPS, *GPU_SETUPS],
                        help="MODEL[:SIZE]@NxGPU each, built-in models (default: the papers' and today's setups)")
    parser.add_argument("--budget", type=float, default=600.0,
                        help="seconds of wall time per setup, as `placer optimize --budget` (default 600)")
    parser.add_argument("--micro-batches", type=int, default=None,
                        help="the one count of micro-batches scheduled (default: as `placer optimize` searches them: "
                             "one per GPU, then the pipelines' placements over twice and four times that)")
    parser.add_argument("--learn-updates", type=int, default=LEARN_UPDATES,
                        help="simulated updates of the hierarchical planner at most (default: as many as the budget "
                             "leaves; 0: neither the planner nor the refinement)")
    parser.add_argument("--schedule-top", type=int, default=3,
                        help="schedule the K placements predicted fastest unscheduled (and the expert's and one GPU's)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="setups searched at once, each in its own process pinned to one core of its own (at most "
                             "this machine's cores); each setup's budget is then wall time on one core; Llama's "
                             "setups run after the others, one at a time (memory)")
    parser.add_argument("--out", default="results/gpu_machines.json")
    args = parser.parse_args(argv)
    if args.micro_batches is not None and args.micro_batches < 2:
        parser.error("--micro-batches must be at least 2: one micro-batch is no schedule")
    if args.schedule_top < 0:
        parser.error("--schedule-top must be 0 or more")
    if not args.budget > 0:
        parser.error(f"--budget must be positive, got {args.budget}")
    if not 1 <= args.jobs <= len(os.sched_getaffinity(0)):
        parser.error(f"--jobs must be 1 to {len(os.sched_getaffinity(0))} (this machine's cores), got {args.jobs}")
    from placer.cost import parse_target_spec
    from placer.errors import PlacerError
    from placer.models import MODELS
    from placer.models.registry import require_size

    setups = []
    for setup in args.setups:
        try:
            model, size, spec = parse_setup(setup)
            parse_target_spec(spec)
        except (ValueError, PlacerError) as error:
            parser.error(str(error))
        if model not in MODELS:
            parser.error(f"{model!r} is not a built-in model (`placer models`): schedules rebuild the model at the "
                         "micro-batch size")
        require_size(model, size)
        setups.append((model, size, spec))

    order = {f"{m}:{z}@{t.split(':', 1)[1]}": k for k, (m, z, t) in enumerate(setups)}
    command = "python experiments/gpu_machines.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows: list[dict] = []
    for row in _searched(setups, args):
        rows.append(row)
        refined = ("no refined placement" if row["refined_ms"] is None else
                   f"refined {row['refined_ms']:.2f} ms ({row['refined_from']}'s), "
                   f"{row['refined_gap_closed_pct'] or 0:.0f} % of the gap closed")
        planner = ("" if row.get("planner_ms") is None else
                   f"planner {row['planner_ms']:.2f} ms ({row['planner_replicas']} replica(s), "
                   f"{row['planner_x_best']:.2f}x the best), refined {_ms(row['planner_refined_ms'])}"
                   + ("" if row["planner_refined_rounds"] is None else
                      f" (after round {row['planner_refined_rounds']} of the tournament "
                      f"{row['planner_refined_same_time_vs_heuristics_pct']:+.1f}% against the heuristics')")
                   + "; "
                   f"heuristics refined {_ms(row['heuristics_refined_ms'])}; ")
        print(f"{row['setup']}: bound {row['bound_ms']:.2f} ms, best heuristic {row['placement_ms']:.2f} ms "
              f"({row['placement']}), {planner}{refined}; joint {row['joint_ms']:.2f} ms ({row['joint']}); "
              + ("" if row["data_parallel_ms"] is None else f"data parallel {row['data_parallel_ms']:.2f} ms; ")
              + f"best {row['best_ms']:.2f} ms ({row['best']}, {row['best_x_machine_bound']:.2f}x the machine's bound "
              f"{row['machine_bound_ms']:.2f}); "
              + ("" if row.get("recommended", row["best"]) == row["best"] else
                 f"recommended {row['recommended_ms']:.2f} ms ({row['recommended']}, the simplest of its tie); ")
              + f"{row['search_s']:.0f} s", flush=True)
        done = {r["setup"] for r in rows}
        # Written after every setup: a run of an hour stopped part way keeps the setups it finished.
        write_report("gpu_machines", COLUMNS, sorted(rows, key=lambda r: order[r["setup"]]), args.out,
                     command=command.strip(), budget=args.budget, jobs=args.jobs,
                     micro_batches=args.micro_batches, learn_updates=args.learn_updates,
                     setups_left=[name for name in order if name not in done],
                     caveat="predictions of the simulator on modeled machines, not measurements; the bounds are "
                            "simulated too: bound_ms bounds unscheduled placements of the whole batch, "
                            "schedule_bound_ms every schedule of --micro-batches micro-batches, machine_bound_ms "
                            "every plan searched (replicas too)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
