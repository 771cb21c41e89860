"""How well does the performance model predict an op's time at p threads on models it was not fitted on?

    python experiments/performance_model.py [--fit nmt-2 inception-v3 two-tower]
        [--heldout rnnlm placer.models.heldout:branchy_1_graph placer.models.heldout:mobilenet_v2_graph]
        [--size tiny] [--steps 3] [--out results/performance_model.json]

Each model's step is traced on one in-process CPU device at every intra-op thread count (one inter-op
thread, so ops run one at a time); the model (`placer.concurrency.performance_model`) is fitted on the --fit
models only, and its error is reported per held-out model and thread count: the mean absolute percentage
error over ops that ran at least 5 us, and the error of those ops' total. Also the fit models' own error,
and what profiling cost in seconds.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402
from placer.concurrency.performance_model import accuracy, fit_performance_model, profile_thread_counts  # noqa: E402
from placer.models import load_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", nargs="+", default=["nmt-2", "inception-v3", "two-tower"])
    parser.add_argument("--heldout", nargs="+", default=["rnnlm", "placer.models.heldout:branchy_1_graph",
                                                         "placer.models.heldout:mobilenet_v2_graph"])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--steps", type=int, default=3, help="traced steps per thread count")
    parser.add_argument("--out", default="results/performance_model.json")
    args = parser.parse_args()

    profiled = {}
    for spec in [*args.fit, *args.heldout]:
        graph = load_model(spec, args.size)
        profile = profile_thread_counts(graph, steps=args.steps)
        profiled[spec] = (graph, profile)
        print(f"{graph.name}: profiled at {profile.threads} threads in {profile.seconds:.0f} s", flush=True)
    model = fit_performance_model(profiled[spec] for spec in args.fit)
    rows = []
    for spec, (graph, profile) in profiled.items():
        report = accuracy(model, graph, profile)
        row = {"model": graph.name, "set": "fit" if spec in args.fit else "held out", "profiling_s": profile.seconds}
        for p in profile.threads:
            row[f"mape_{p}t_pct"] = report["mape_pct"][p]
            row[f"total_error_{p}t_pct"] = report["total_error_pct"][p]
        rows.append(row)
    threads = profiled[args.fit[0]][1].threads
    columns = ["model", "set", *[f"mape_{p}t_pct" for p in threads], *[f"total_error_{p}t_pct" for p in threads],
               "profiling_s"]
    write_report("performance_model", columns, rows, args.out, size=args.size, steps=args.steps,
                 op_types=sorted(model.types), command="python experiments/performance_model.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
