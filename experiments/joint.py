"""Placement, thread settings and schedule decided together against one at a time, measured side by side.

    python experiments/joint.py [--models two-tower:small mlp:small nmt-2:tiny rnnlm:tiny] [--target local:2]
        [--rounds 3] [--learn-updates 10] [--schedules] [--out results/joint.json]

Per model, `placer optimize` (agents/optimize.py) on the target: one process under every thread setting of
`placer tune`, every heuristic placement and a placement the hierarchical planner learns on the calibrated
twin, the fastest placement under other pools (and with --schedules its micro-batch schedules), all measured
side by side in interleaved rounds. From that one comparison, per model (medians, ms):
- default: one process under TensorFlow's default pools; recommended: TensorFlow's recommended setting
  (intra = physical cores, inter = sockets);
- threads alone: the fastest one-process thread setting (what `placer tune` picks);
- placement alone: the fastest heuristic placement on the target's workers, and the learned placement;
- one after another: the fastest placement predicted, then the target's workers under other pools (then a
  schedule): each decision made with the others fixed; scheduled: the fastest of those with a micro-batch
  schedule (with --schedules); expert scheduled: the expert's placement under its fastest measured schedule
  (with --schedules, built-in models: the schedule-only decision of the pipeline papers);
- joint: what `placer optimize` recommends, the fastest measured of all.
Reported: the joint plan against the best one-dimension decision, and the threads-alone pick against the
recommended setting (the IPDPS 2019 comparison). Search time per model. Every number comes from one
comparison per model, so the ratios within a model are side by side; across models they are not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

COLUMNS = ["model", "default_ms", "recommended_ms", "threads_ms", "threads_setting", "placement_ms",
           "placement", "learned_ms", "expert_scheduled_ms", "sequential_ms", "scheduled_ms", "joint_ms", "joint",
           "joint_vs_best_one_dim_pct", "threads_vs_recommended_pct", "search_s"]


def summarize(model: str, result) -> dict:
    """The rows' decisions, from one `OptimizeResult`'s measured comparison."""
    measured = [m for m in result.measured if m.ok]

    def fastest(chosen):
        chosen = [m for m in measured if chosen(m.candidate)]
        return min(chosen, key=lambda m: m.median) if chosen else None

    def ms(m):
        return None if m is None else m.median * 1e3

    default = fastest(lambda c: c.name == "one process, default")
    recommended = fastest(lambda c: c.name.startswith("one process, recommended"))
    threads = fastest(lambda c: c.dimensions in ((), ("pools",)) and c.name.startswith("one process"))
    placement = fastest(lambda c: c.dimensions == ("placement",) and c.made_by.startswith("heuristic"))
    learned = fastest(lambda c: any(name == "learned" or name.startswith("learned (") for name in c.name.split(" = ")))
    sequential = fastest(lambda c: len(c.dimensions) > 1)
    scheduled = fastest(lambda c: "schedule" in c.dimensions)
    expert_scheduled = fastest(lambda c: "schedule" in c.dimensions and "expert" in c.name.split(" + ")[0].split(" = "))
    one_dimension = fastest(lambda c: c.one_dimension)
    joint = result.recommended
    return {
        "model": model, "default_ms": ms(default), "recommended_ms": ms(recommended), "threads_ms": ms(threads),
        "threads_setting": threads and threads.candidate.name, "placement_ms": ms(placement),
        "placement": placement and placement.candidate.name, "learned_ms": ms(learned),
        "expert_scheduled_ms": ms(expert_scheduled),
        "expert_schedule": expert_scheduled and expert_scheduled.candidate.name,
        "sequential_ms": ms(sequential), "scheduled_ms": ms(scheduled), "joint_ms": ms(joint), "joint": joint.candidate.name,
        "joint_vs_best_one_dim_pct": 100 * (1 - joint.median / one_dimension.median) if one_dimension else None,
        "threads_vs_recommended_pct": 100 * (1 - threads.median / recommended.median)
        if threads and recommended else None,
        "search_s": result.seconds,
        "measured": {m.candidate.name: m.median for m in measured},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["two-tower:small", "mlp:small", "nmt-2:tiny", "rnnlm:tiny"],
                        help="MODEL:SIZE each (default two-tower:small mlp:small nmt-2:tiny rnnlm:tiny)")
    parser.add_argument("--target", default="local:2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--learn-updates", type=int, default=10)
    parser.add_argument("--schedules", action="store_true", help="also try micro-batch schedules (built-ins)")
    parser.add_argument("--out", default="results/joint.json")
    args = parser.parse_args(argv)

    from agents.optimize import OptimizeArgs, optimize

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for spec in args.models:
            model, _, size = spec.partition(":")
            started = time.monotonic()
            result = optimize(OptimizeArgs(model=model, size=size or "tiny", target=args.target, rounds=args.rounds,
                                           learn_updates=args.learn_updates, schedules=args.schedules,
                                           out=os.path.join(scratch, f"{model}-{size}.plan.json"), progress=False))
            row = summarize(f"{model} {size or 'tiny'}", result)
            row["search_s"] = time.monotonic() - started
            rows.append(row)
            print(f"{spec}: joint {row['joint_ms']:.2f} ms ({row['joint']}), {row['joint_vs_best_one_dim_pct']:+.1f} % "
                  f"against the best one-dimension decision", flush=True)
    ratios = [r["threads_vs_recommended_pct"] for r in rows if r["threads_vs_recommended_pct"] is not None]
    gains = [r["joint_vs_best_one_dim_pct"] for r in rows if r["joint_vs_best_one_dim_pct"] is not None]
    command = "python experiments/joint.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("joint", COLUMNS, rows, args.out, command=command.strip(), target=args.target, rounds=args.rounds,
                 threads_vs_recommended_mean_pct=statistics.mean(ratios) if ratios else None,
                 joint_at_least_10pct_faster=sum(g >= 10 for g in gains), joint_slower=sum(g < 0 for g in gains))
    if ratios:
        print(f"threads alone against the recommended setting: {statistics.mean(ratios):.1f} % shorter on average "
              f"(the IPDPS 2019 figure: 36 %)")
    if gains:
        print(f"joint against the best one-dimension decision: >= 10 % faster on {sum(g >= 10 for g in gains)} of "
              f"{len(gains)} models, slower on {sum(g < 0 for g in gains)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
