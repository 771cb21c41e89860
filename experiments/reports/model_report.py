"""The benchmark models at a glance: size of every model's training step, and what a tiny step costs here.

    python experiments/reports/model_report.py [--models nmt-2 rnnlm ...] [--sizes tiny small paper] [--out FILE]

Per model and size: ops (and those run every step), placeable units (colocation groups), parameters
as Keras counts them and the optimizer's state apart (`OpGraph.model_parameters`), FLOPs and output bytes per step, and the time to build the graph. For the
`tiny` size it also measures the step time of the single-device placement in-process and, when the local
testbed can start (2 workers, one core each), of the single-device and expert placements there.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from experiments._report import write_report  # noqa: E402
from placer.measure import LocalTestbed, MeasureConfig, Measurer  # noqa: E402
from placer.heuristics import make_heuristic  # noqa: E402
from placer.models import SIZES, build_model, model_names  # noqa: E402
from placer.testbed import isolation_available  # noqa: E402

COLUMNS = ["model", "size", "ops", "step_ops", "groups", "parameters", "optimizer_state", "gflops_per_step", "mb_per_step", "build_s",
           "inprocess_single_ms", "testbed_single_ms", "testbed_expert_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=model_names(benchmarks_only=True))
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=SIZES)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out")
    args = parser.parse_args()
    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)

    rows = []
    for name in args.models:
        for size in args.sizes:
            started = time.perf_counter()
            graph = build_model(name, size)
            built = time.perf_counter() - started
            step = graph.step_ops
            row = {
                "model": name, "size": size, "ops": len(graph.ops), "step_ops": len(step), "groups": len(graph.groups),
                "parameters": graph.num_parameters if graph.model_parameters is None else graph.model_parameters,
                "optimizer_state": None if graph.model_parameters is None else
                graph.num_parameters - graph.model_parameters, "gflops_per_step": sum(op.flops for op in step) / 1e9,
                "mb_per_step": sum(sum(op.output_bytes) for op in step) / 1e6, "build_s": built,
            }
            if size == "tiny":
                row.update(_measure_tiny(name, graph, config))
            print(f"{name} {size}: {row}", flush=True)
            rows.append(row)
            del graph
            gc.collect()
    write_report("model_report", COLUMNS, rows, args.out, warmup=args.warmup, repeats=args.repeats,
                 testbed="local:2 (one core per worker)" if isolation_available() else "unavailable")


def _measure_tiny(name: str, graph, config: MeasureConfig) -> dict:
    times = {}
    with Measurer("inprocess:1", config) as measurer:
        times["inprocess_single_ms"] = _median_ms(measurer, graph, make_heuristic("single-device", graph, measurer.devices))
    if isolation_available():
        with Measurer(LocalTestbed(workers=2), config) as measurer:
            times["testbed_single_ms"] = _median_ms(measurer, graph, make_heuristic("single-device", graph, measurer.devices))
            times["testbed_expert_ms"] = _median_ms(measurer, graph, make_heuristic("expert", graph, measurer.devices,
                                                                                    model=name))
    return times


def _median_ms(measurer: Measurer, graph, placement) -> float | str:
    result = measurer.measure(graph, placement)
    return result.median * 1e3 if result.ok else f"failed ({result.failure.kind})"


if __name__ == "__main__":
    main()
