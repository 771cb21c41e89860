"""Does placement matter on the local testbed? A two-tower model, one tower per worker vs one worker.

    python experiments/probes/two_tower_testbed.py [--size small] [--rounds 3] [--out results/two_tower_testbed.json]

Both placements are measured alternately in one run on `local:2` (two gRPC workers, one core each).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from experiments._report import write_report  # noqa: E402
from placer.cost import compare, open_target  # noqa: E402
from placer.measure import MeasureConfig  # noqa: E402
from placer.models import build_model  # noqa: E402
from placer.models.two_tower import tower_of  # noqa: E402
from placer.placement import Placement  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out")
    args = parser.parse_args()

    graph = build_model("two-tower", args.size)
    print(graph.summary())
    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)
    with open_target(graph, "local:2", measure_config=config) as target:
        devices = target.devices
        placements = {
            "one worker": Placement.on_device(graph, devices, 0),
            "tower per worker": Placement.from_groups(
                graph, devices, {g.name: devices[1 if tower_of(g.ops[0]) == "tower_b" else 0].name for g in graph.groups}
            ),
        }
        compared = compare(target.evaluate, placements, args.rounds)
    for name, result in compared.items():
        if not result.ok:
            raise SystemExit(f"{name}: {result.failure.describe()}")
    base = compared["one worker"].median
    rows = [
        {"placement": name, "median_ms": result.median * 1e3, "rounds_ms": [round(t * 1e3, 2) for t in result.rounds],
         "speedup": base / result.median, "moved_ops": max(len(t.moved_ops) for t in result.timings)}
        for name, result in compared.items()
    ]
    write_report("two_tower_testbed", ["placement", "median_ms", "speedup", "moved_ops", "rounds_ms"], rows, args.out,
                 graph=graph.name, ops=len(graph.ops), target="local:2", warmup=args.warmup, repeats=args.repeats)


if __name__ == "__main__":
    main()
