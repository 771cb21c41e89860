"""Placement and micro-batch schedule decided together on modeled GPU machines: predictions, not measurements.

    python experiments/probes/joint_modeled.py [--models inception-v3:paper nmt-4:paper] [--gpus 4 8] [--gpu H100]
        [--micro-batches 4] [--learn-updates 20] [--schedule-top 3] [--out results/joint_modeled.json]

The GPU half of experiments/joint.py. TensorFlow cannot run on a GPU here, so every number is the simulator's
step time on `modeled:NxGPU` (the H100's op costs rest on kernels measured on an H200: `placer measure` says
which ops do). Thread pools are a host CPU's setting, so the decisions are two: where the ops run, and the
micro-batch schedule. Per model and machine (ms per step):
- single: every op on one GPU;
- placement alone: the fastest heuristic placement (the exact baseline included), and the placement the
  hierarchical planner learns in --learn-updates simulated updates (the same loop as `placer train`);
- expert scheduled: the papers' expert placement under its fastest micro-batch schedule (GPipe, 1F1B, ZB-H1,
  Tessel's fast search over --micro-batches), or unscheduled if none is faster (models that cannot be built at
  another batch get no schedules);
- one after another: the fastest placement alone, then the fastest schedule for it;
- joint: the fastest pair of a placement above and a schedule (or none); the --schedule-top placements predicted
  fastest unscheduled are scheduled, and the expert's and one GPU's.
The search is `placer optimize MODEL --target modeled:NxGPU`'s (`agents.optimize_modeled.search_modeled`); this
probe reports it per model and machine as the columns below.
A schedule is priced op by op (`placer.schedule.predict`): its micro-batched step with transfers, the merge of the
micro-batches' gradients and the update. Reported: the joint decision against the best one-dimension decision
(a placement alone, or the single GPU under its best schedule), and each decision over the machine's step time
bound (`placer.simulate.bound`, simulated; it bounds unscheduled placements, so a schedule may go below it) with
the share of the best heuristic placement's gap to it that the learned placement closed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

COLUMNS = ["model", "machine", "single_ms", "placement_ms", "placement", "learned_ms", "expert_ms",
           "expert_scheduled_ms", "expert_schedule", "sequential_ms", "sequential", "joint_ms", "joint",
           "joint_vs_best_one_dim_pct", "bound_ms", "placement_x_bound", "learned_x_bound", "joint_x_bound",
           "learned_gap_closed_pct", "search_s"]


def decide(model: str, size: str, gpus: int, gpu: str, micro_batches: int, learn_updates: int,
           schedule_top: int = 3) -> dict:
    """One row: every decision's predicted step time for `model` on `gpus` modeled GPUs, from the search
    `placer optimize --target modeled:NxGPU` makes (`agents.optimize_modeled.search_modeled`)."""
    from placer.models import model_spec

    from agents.optimize_modeled import search_modeled

    started = time.monotonic()
    spec = f"modeled:{gpus}x{gpu}"
    schedulable = model_spec(model).batch_of is not None
    search = search_modeled(model, size, spec, learn_updates=learn_updates,
                            micro_batches=micro_batches if schedulable else None, schedule_top=schedule_top)
    notes = list(search.notes)
    if not schedulable:
        notes.append(f"no schedules: {model} cannot be built at the micro-batch size")
    # By every name that proposed a placement ("expert = metis" counts as both): the columns name heuristics.
    alone = {name: c.seconds for c in search.placements if c.step_time.ok for name in c.placement_name.split(" = ")}
    scheduled = {(name, c.schedule.method): c.seconds for c in search.scheduled if c.step_time.ok
                 for name in c.placement_name.split(" = ")}
    row = summarize(alone, scheduled, search.bound.value)
    return {"model": f"{model} {size}", "machine": spec, **row, "bound": search.bound.to_dict(),
            "search_s": time.monotonic() - started, "notes": notes}


def summarize(alone: dict[str, float], scheduled: dict[tuple[str, str], float], bound: float | None = None) -> dict:
    """The row's decisions from every placement's predicted seconds unscheduled (`alone`, by name; "learned" is
    the planner's, "single-device" one GPU) and under each schedule (`scheduled`, by (placement, method)); with
    the step time `bound` of unscheduled placements, each decision over it and the share of the best heuristic
    placement's gap to it that the learned placement closed."""
    from placer.simulate.bound import gap_closed, times_bound

    heuristics = {name: s for name, s in alone.items() if name != "learned"}
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

    closed = gap_closed(heuristics[best_placement], alone.get("learned"), bound)
    return {
        "single_ms": ms(alone.get("single-device")), "placement_ms": ms(heuristics[best_placement]),
        "placement": best_placement, "learned_ms": ms(alone.get("learned")), "expert_ms": ms(alone.get("expert")),
        "expert_scheduled_ms": ms(expert_schedules[expert_schedule] if expert_schedule else alone.get("expert")),
        "expert_schedule": expert_schedule or "none",
        "sequential_ms": ms(sequential[1]), "sequential": sequential[0], "joint_ms": ms(everything[joint]),
        "joint": joint, "joint_vs_best_one_dim_pct": 100 * (1 - everything[joint] / one_dimension[best_one_dim]),
        "best_one_dim": best_one_dim, "predicted_ms": {name: ms(s) for name, s in everything.items()},
        "bound_ms": ms(bound), "placement_x_bound": times_bound(heuristics[best_placement], bound),
        "learned_x_bound": times_bound(alone.get("learned"), bound), "joint_x_bound": times_bound(everything[joint], bound),
        "learned_gap_closed_pct": None if closed is None else 100 * closed,
        "x_bound": {name: times_bound(s, bound) for name, s in everything.items()},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["nmt-4:paper", "inception-v3:paper"],
                        help="MODEL:SIZE each, built-in models (default nmt-4:paper inception-v3:paper)")
    parser.add_argument("--gpus", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--gpu", default="H100", help="the modeled GPU (default H100: op costs from measured kernels)")
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--learn-updates", type=int, default=20,
                        help="simulated updates of the hierarchical planner (0: no learned placement)")
    parser.add_argument("--schedule-top", type=int, default=3,
                        help="schedule the K placements predicted fastest unscheduled (and the expert's and one GPU's)")
    parser.add_argument("--out", default="results/joint_modeled.json")
    args = parser.parse_args(argv)
    if args.micro_batches < 2:
        parser.error("--micro-batches must be at least 2: one micro-batch is no schedule")
    if args.schedule_top < 0:
        parser.error("--schedule-top must be 0 or more")
    from placer.models import MODELS
    from placer.models.registry import require_size

    specs = []
    for spec in args.models:
        model, _, size = spec.partition(":")
        if model not in MODELS:
            parser.error(f"{model!r} is not a built-in model (`placer models`): schedules rebuild the model at the "
                         "micro-batch size")
        require_size(model, size or "paper")
        specs.append((model, size or "paper"))

    rows = []
    for model, size in specs:
        for gpus in args.gpus:
            row = decide(model, size, gpus, args.gpu, args.micro_batches, args.learn_updates, args.schedule_top)
            rows.append(row)
            print(f"{model} {size} on {row['machine']}: joint {row['joint_ms']:.2f} ms ({row['joint']}), "
                  f"{row['joint_vs_best_one_dim_pct']:+.1f} % against the best one-dimension decision "
                  f"({row['best_one_dim']})", flush=True)
    command = "python experiments/probes/joint_modeled.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("joint_modeled", COLUMNS, rows, args.out, command=command.strip(), gpu=args.gpu,
                 micro_batches=args.micro_batches, learn_updates=args.learn_updates,
                 caveat="predictions of the simulator on modeled machines, not measurements; the bound is simulated "
                        "too, and bounds unscheduled placements of the whole batch: a micro-batch schedule may go "
                        "below it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
