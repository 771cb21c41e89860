"""Operation scheduling on one CPU device: TensorFlow's own order against enforced op orders.

    python experiments/probes/op_order.py [--models nmt-2 rnnlm inception-v3 two-tower] [--size tiny]
        [--target inprocess:1,intra=1,inter=2] [--corun 2] [--min-op-us 0] [--longest N] [--rounds 5]
        [--out results/op_order.json]

Per model: op times are profiled on the target (whole step on its device), then each strategy of
`placer.concurrency.op_order` (default, critical-path, complementary) orders the step's ops, and the
ordered steps are timed side by side in interleaved rounds. The traced step after the timed ones says
whether the order was kept. Two inter-op threads let TensorFlow co-run ops, which the order then decides.
--min-op-us and --longest order only the long ops (every link costs a barrier); the rest run when ready.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from experiments._report import write_report  # noqa: E402
from placer.concurrency.op_order import STRATEGIES, ordered_step  # noqa: E402
from placer.cost import StepTime, compare  # noqa: E402
from placer.graph.order import order_violations  # noqa: E402
from placer.measure import MeasureConfig, Measurer, parse_target  # noqa: E402
from placer.models import build_model  # noqa: E402
from placer.placement import Placement  # noqa: E402
from placer.profile import profile_costs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["nmt-2", "rnnlm", "inception-v3", "two-tower"])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--target", default="inprocess:1,intra=1,inter=2")
    parser.add_argument("--corun", type=int, default=2, help="ops per link (ops a device may run side by side)")
    parser.add_argument("--min-op-us", type=float, default=0.0,
                        help="order only ops whose profiled time is at least this many microseconds")
    parser.add_argument("--longest", type=int, help="order only each device's N longest ops")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out")
    args = parser.parse_args()

    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)
    rows = []
    with Measurer(parse_target(args.target), config) as measurer:
        devices = measurer.devices
        for model in args.models:
            graph = build_model(model, args.size)
            placement = Placement.on_device(graph, devices, 0)
            costs = profile_costs(graph, measurer, steps=3)
            seconds = dict(costs.op_seconds)
            steps = {strategy: ordered_step(graph, placement, devices, seconds, strategy, args.corun,
                                            min_op_seconds=args.min_op_us * 1e-6, longest=args.longest)
                     for strategy in STRATEGIES}

            def evaluate(step) -> StepTime:
                result = measurer.measure(step.graph, step.placement)
                if not result.ok:
                    return StepTime.failed(result.failure.kind, result.failure.message, "measured", args.target)
                return StepTime(result.median, "measured", args.target)

            compared = compare(evaluate, steps, args.rounds)
            default = compared["default"].median
            for strategy, step in steps.items():
                chains = step.order.chains
                traced = measurer.measure(step.graph, step.placement,
                                          dataclasses.replace(config, timed_steps=1, profile_steps=1))
                kept = None if not chains or not traced.chrome_trace else not order_violations(traced.chrome_trace, chains)
                result = compared[strategy]
                rows.append({"model": model, "strategy": strategy, "links": step.order.links,
                             "ordered_ops": step.order.ordered_ops, "left_free": len(step.order.left_free),
                             "median_ms": result.median * 1e3 if result.ok else None,
                             "vs_default_pct": 100 * (default - result.median) / default if result.ok else None,
                             "order_kept": kept, "failure": None if result.ok else result.failure.message})
                print(step.order.describe(), flush=True)
            print(rows[-3:], flush=True)
    write_report("op_order", ["model", "strategy", "links", "ordered_ops", "left_free", "median_ms", "vs_default_pct",
                              "order_kept", "failure"], rows,
                 args.out, size=args.size, target=args.target, corun=args.corun, min_op_us=args.min_op_us,
                 longest=args.longest, rounds=args.rounds,
                 warmup=args.warmup, repeats=args.repeats)


if __name__ == "__main__":
    main()
