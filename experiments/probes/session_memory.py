"""What one measured placement of a big graph costs the testbed in memory and in setting-up time.

    python experiments/probes/session_memory.py [--model experiments/model_coverage.py:inceptionresnetv2]
        [--size tiny] [--target local:2] [--placements 3] [--out results/session_memory.json]

One `Measurer`, several placements of the graph one after the other (single device on each device in turn, then
round-robin): per placement, the GraphDef's size, the session's setting-up seconds (the worker's `overhead`:
rewriting the graph, creating the session, initializing the variables, the first step), the measured step, what
the worker's processes hold beyond a fresh start after it (`Measurer.held_bytes`) and how many times the worker
was started afresh to give memory back. Memory and setting-up time only: the step times are one measurement each,
not a comparison.
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

COLUMNS = ["placement", "graph_mb", "setup_s", "step_ms", "held_gib", "largest_process_gib", "memory_restarts",
           "wall_s"]
GIB = 2 ** 30


def placements_to_measure(graph, devices, count: int) -> list[tuple[str, object]]:
    from placer.placement import Placement

    candidates = [(f"single-device {device}", Placement.on_device(graph, devices, device))
                  for device in devices.names]
    candidates.append(("round-robin", Placement.round_robin(graph, devices)))
    return [candidates[i % len(candidates)] for i in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="experiments/model_coverage.py:inceptionresnetv2")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--target", default="local:2")
    parser.add_argument("--placements", type=int, default=3)
    parser.add_argument("--out", default="results/session_memory.json")
    args = parser.parse_args(argv)
    if args.placements < 1:
        parser.error("--placements must be at least 1")

    from placer.measure import Measurer
    from placer.models import load_model

    graph = load_model(args.model, args.size)
    graph_mb = len(graph.graph_def) / 1e6
    print(f"{graph.name}: {len(graph.ops):,} ops, GraphDef {graph_mb:.1f} MB", flush=True)
    rows = []
    with Measurer(args.target) as measurer:
        for name, placement in placements_to_measure(graph, measurer.devices, args.placements):
            started = time.perf_counter()
            result = measurer.measure(graph, placement)
            wall = time.perf_counter() - started
            setup = sum(result.overhead.get(key, 0.0) for key in ("graph_rewrite", "session", "init", "first_step"))
            row = dict(placement=name, graph_mb=graph_mb, setup_s=setup,
                       step_ms=None if result.failure else 1e3 * result.median,
                       held_gib=measurer.held_bytes / GIB, largest_process_gib=measurer.process_bytes(graph) / GIB,
                       memory_restarts=measurer.memory_restarts, wall_s=wall)
            rows.append(row)
            print(f"{name}: set up {setup:.1f} s, step {row['step_ms'] or result.failure.message} ms, held "
                  f"{row['held_gib']:.2f} GiB, largest process {row['largest_process_gib']:.2f} GiB, memory restarts "
                  f"{row['memory_restarts']}, {wall:.0f} s", flush=True)
    command = "python experiments/probes/session_memory.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("session_memory", COLUMNS, rows, args.out, command=command.strip(), model=args.model,
                 size=args.size, target=args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
