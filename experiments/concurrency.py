"""Thread settings against TensorFlow's recommended ones (issue 17, the IPDPS 2019 comparison), first part.

    python experiments/concurrency.py [--models nmt-2:small inception-v3:tiny rnnlm:small two-tower:small]
        [--rounds 3] [--warmup 3] [--repeats 10] [--out results/concurrency.json]

Per model, on one in-process CPU device: TensorFlow's default thread pools, the recommended setting
(intra-op = physical cores, inter-op = sockets) and every (intra, inter) pair up to the cores (the best
setting found by hand), each in its own measurement process, timed side by side in interleaved rounds
(`placer.concurrency.tune`). Reported per model: each setting's step time, the sweep's best against the
recommended setting, and how long the choice took. Then the setting the performance model picks
(`placer.concurrency.choose`), fitted leave-one-out: each model's choice comes from a model fitted on the
traced ops of the other models only (profiled at every intra-op thread count), and is read off the same
side-by-side timings. Not here yet: per-op concurrency through workers of different widths, and an op order.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402
from placer.concurrency import tune, tuning_candidates  # noqa: E402
from placer.concurrency.choose import choose_setting  # noqa: E402
from placer.concurrency.performance_model import fit_performance_model, profile_thread_counts  # noqa: E402
from placer.measure import MeasureConfig  # noqa: E402
from placer.models import build_model  # noqa: E402

DEFAULT_MODELS = ("nmt-2:small", "inception-v3:tiny", "rnnlm:small", "two-tower:small")
"""Sizes whose steps take well under a second here (FINDINGS.md's thread table used the first three)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), metavar="MODEL:SIZE")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default="results/concurrency.json")
    args = parser.parse_args()

    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)
    candidates = tuning_candidates()
    recommended = next(name for name in candidates if "recommended" in name.split(" = "))
    default = next(name for name in candidates if "default" in name.split(" = "))
    graphs = {}
    for spec in args.models:
        name, _, size = spec.partition(":")
        graphs[spec] = build_model(name, size or "tiny")
    profiles = {}
    for spec, graph in graphs.items():
        profiles[spec] = profile_thread_counts(graph)
        print(f"{graph.name}: ops profiled at {profiles[spec].threads} intra-op threads in {profiles[spec].seconds:.0f} s",
              flush=True)
    setting_names = {setting: name for name, setting in candidates.items()}
    rows, gains, model_gaps = [], [], []
    for spec, graph in graphs.items():
        others = [(graphs[o], profiles[o]) for o in graphs if o != spec]
        choice = choose_setting(graph, fit_performance_model(others))
        print(f"{graph.name}: {len(candidates)} settings x {args.rounds} rounds", flush=True)
        result = tune(graph, candidates, rounds=args.rounds, measure_config=config)
        print(result.describe(), flush=True)
        picked = setting_names[choice.setting]
        print(f"  the performance model (fitted on the other models) picks {choice.setting}", flush=True)
        gain = result.against(recommended)
        gains.append(gain)
        model_gap = result.medians[picked] / result.medians[result.best] - 1
        model_gaps.append(model_gap)
        row = {"model": graph.name, "recommended_ms": result.medians[recommended] * 1e3,
               "default_ms": result.medians[default] * 1e3, "best": result.best,
               "best_ms": result.medians[result.best] * 1e3, "shorter_than_recommended_pct": 100 * gain,
               "choice_s": result.seconds, "model_picks": str(choice.setting),
               "model_pick_ms": result.medians[picked] * 1e3,
               "model_pick_shorter_than_recommended_pct": 100 * (1 - result.medians[picked] / result.medians[recommended]),
               "model_pick_above_best_pct": 100 * model_gap, "model_choice_s": choice.seconds,
               "profiling_s": profiles[spec].seconds}
        row.update({f"{setting} ms": seconds * 1e3 for setting, seconds in result.medians.items()})
        rows.append(row)
    print()
    write_report("concurrency", ["model", "recommended_ms", "default_ms", "best", "best_ms",
                                 "shorter_than_recommended_pct", "choice_s", "model_picks", "model_pick_ms",
                                 "model_pick_shorter_than_recommended_pct", "model_pick_above_best_pct",
                                 "model_choice_s"], rows, args.out,
                 rounds=args.rounds, warmup=args.warmup, repeats=args.repeats, cores=len(os.sched_getaffinity(0)),
                 settings={n: [s.intra_op_threads, s.inter_op_threads] for n, s in candidates.items()},
                 command="python experiments/concurrency.py " + " ".join(sys.argv[1:]))
    print(f"best of the sweep against the recommended setting: {100 * statistics.mean(gains):.1f} % shorter steps "
          f"on average (per model: {', '.join(f'{100 * g:.1f} %' for g in gains)})")
    picked = [r["model_pick_shorter_than_recommended_pct"] for r in rows]
    print(f"the performance model's pick against the recommended setting: {statistics.mean(picked):.1f} % shorter "
          f"on average; above the sweep's best by {', '.join(f'{100 * g:.1f} %' for g in model_gaps)}")


if __name__ == "__main__":
    main()
