"""How well does the performance model predict an op's time at p threads on models it was not fitted on?

    python experiments/probes/performance_model.py [--fit nmt-2 inception-v3 two-tower]
        [--heldout rnnlm placer.models.heldout:branchy_1_graph placer.models.heldout:mobilenet_v2_graph]
        [--size tiny] [--steps 3] [--bias-corrections none smearing ratio] [--out results/performance_model.json]

Each model's step is traced on one in-process CPU device at every intra-op thread count (one inter-op
thread, so ops run one at a time); the model (`placer.concurrency.performance_model`) is fitted on the --fit
models only, and its error is reported per held-out model and thread count: the mean absolute percentage
error over ops that ran at least 5 us, and the error of those ops' total. Also the fit models' own error,
and what profiling cost in seconds. One row per model and bias correction (`BIAS_CORRECTIONS`: none, Duan's
smearing, the ratio of sums), all fitted on the same --fit profiles, so the corrections compare on equal terms.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402
from placer.concurrency.performance_model import (  # noqa: E402
    BIAS_CORRECTIONS, accuracy, fit_performance_model, profile_thread_counts,
)
from placer.models import load_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", nargs="+", default=["nmt-2", "inception-v3", "two-tower"])
    parser.add_argument("--heldout", nargs="+", default=["rnnlm", "placer.models.heldout:branchy_1_graph",
                                                         "placer.models.heldout:mobilenet_v2_graph"])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--steps", type=int, default=3, help="traced steps per thread count")
    parser.add_argument("--bias-corrections", nargs="+", default=list(BIAS_CORRECTIONS), choices=BIAS_CORRECTIONS)
    parser.add_argument("--out", default="results/performance_model.json")
    args = parser.parse_args()

    profiled = {}
    for spec in [*args.fit, *args.heldout]:
        graph = load_model(spec, args.size)
        profile = profile_thread_counts(graph, steps=args.steps)
        profiled[spec] = (graph, profile)
        print(f"{graph.name}: profiled at {profile.threads} threads in {profile.seconds:.0f} s", flush=True)
    models = {correction: fit_performance_model((profiled[spec] for spec in args.fit), bias_correction=correction)
              for correction in args.bias_corrections}
    rows = []
    for spec, (graph, profile) in profiled.items():
        for correction, model in models.items():
            report = accuracy(model, graph, profile)
            row = {"model": graph.name, "set": "fit" if spec in args.fit else "held out", "bias_correction": correction,
                   "profiling_s": profile.seconds}
            for p in profile.threads:
                row[f"mape_{p}t_pct"] = report["mape_pct"][p]
                row[f"total_error_{p}t_pct"] = report["total_error_pct"][p]
            rows.append(row)
    threads = profiled[args.fit[0]][1].threads
    columns = ["model", "set", "bias_correction", *[f"mape_{p}t_pct" for p in threads],
               *[f"total_error_{p}t_pct" for p in threads], "profiling_s"]
    scales = {correction: {name: model.types[name].scale for name in sorted(model.types)}
              for correction, model in models.items()}
    write_report("performance_model", columns, rows, args.out, size=args.size, steps=args.steps, scales=scales,
                 op_types=sorted(models[args.bias_corrections[0]].types),
                 command="python experiments/probes/performance_model.py " + " ".join(sys.argv[1:]))
    for correction in args.bias_corrections:
        held = [r for r in rows if r["set"] == "held out" and r["bias_correction"] == correction]
        print(f"{correction:>9}: held-out mean MAPE " + ", ".join(
            f"{p}t {sum(r[f'mape_{p}t_pct'] for r in held) / len(held):.1f} %" for p in threads)
            + "; mean |total error| " + ", ".join(
            f"{p}t {sum(abs(r[f'total_error_{p}t_pct']) for r in held) / len(held):.1f} %" for p in threads))


if __name__ == "__main__":
    main()
