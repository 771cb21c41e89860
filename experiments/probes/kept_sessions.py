"""What a measurement of a big graph spends besides its steps, and what keeping its session saves.

    python experiments/probes/kept_sessions.py MODEL [--size tiny] [--target local:2] [--rounds 3]
        [--out results/kept_sessions.json]

MODEL is any model spec (`experiments/model_coverage.py:efficientnetb0` for a 16,448-op Keras EfficientNetB0).
Two placements (every op on the first device; round-robin) are measured in `--rounds` interleaved rounds with
`MeasureConfig.kept_sessions`: the first round sets each up (graph import, session, variable initialization,
TensorFlow's optimization and partitioning on the first step), later rounds reuse its session. Per measurement:
its wall time, the set-up parts, and the step time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from experiments._report import write_report  # noqa: E402

COLUMNS = ["round", "placement", "wall_s", "graph_rewrite_s", "init_s", "first_step_s", "step_ms", "check"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--target", default="local:2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="results/kept_sessions.json")
    args = parser.parse_args(argv)

    from placer.cost import open_target
    from placer.models import load_model
    from placer.placement import Placement

    graph = load_model(args.model, args.size)
    rows = []
    with open_target(graph, args.target) as target:
        config = replace(target.measurer.config, kept_sessions=2)
        placements = {"first device": Placement.on_device(graph, target.devices, 0),
                      "round-robin": Placement.round_robin(graph, target.devices)}
        for round_index in range(args.rounds):
            for name, placement in placements.items():
                started = time.monotonic()
                result = target.measurer.measure(graph, placement, config)
                overhead = result.overhead
                rows.append({"round": round_index, "placement": name, "wall_s": time.monotonic() - started,
                             "graph_rewrite_s": overhead.get("graph_rewrite"), "init_s": overhead.get("init"),
                             "first_step_s": overhead.get("first_step"),
                             "step_ms": result.median * 1e3 if result.ok else None, "check": result.placement_check})
    write_report("kept_sessions", COLUMNS, rows, args.out, model=args.model, ops=len(graph.ops), target=args.target)


if __name__ == "__main__":
    main()
