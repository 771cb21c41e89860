"""How many steps until a placement's step time settles? Step times after short and long warm-ups, side by side.

    python experiments/probes/executor_warmup.py [--model two-tower] [--size tiny] [--placement single-device expert]
        [--target local:2] [--warmups 2 50 100 200] [--rounds 3] [--out results/executor_warmup.json]

TensorFlow's executor treats every op as expensive until its running cost estimate falls under a threshold: the
estimate starts at 10^8 cycles and moves a tenth of the way to each run's measured cost, so a cheap op needs
about 90 runs of a session before it counts as cheap. Until then, when an op finishes and several ops become
ready, the executor runs one on the same thread and queues the others on the inter-op pool, where on a
one-core worker they compete with the running chain for the core; afterwards cheap ops run inline. placer's measurements time a
handful of steps after a few warm-up steps in a fresh session, so they see the first regime, a long training
run the second.

Per layout (`--placement`: heuristics' names or placement files) and warm-up length (`--warmups`), one fresh
session on `--target` runs that many warm-up steps, then the timed steps (median) and one traced step; every
layout and warm-up is measured once per round, in turn, for `--rounds` interleaved rounds. Reported: the
median step time, its ratio to the shortest warm-up's, and the traced step's longest wait for a tensor from
another device on its critical path (`placer.timeline.critical_path`).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
from dataclasses import replace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="two-tower")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--placement", nargs="+", default=["single-device", "expert"], metavar="NAME_OR_FILE",
                        help="layouts: heuristics' names or placement files (default single-device expert)")
    parser.add_argument("--target", default="local:2", help="a measured target (default local:2)")
    parser.add_argument("--warmups", type=int, nargs="+", default=[2, 50, 100, 200],
                        help="warm-up steps before the timed steps, one fresh session each (default 2 50 100 200)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="results/executor_warmup.json")
    args = parser.parse_args(argv)
    if any(warmup < 0 for warmup in args.warmups) or args.rounds < 1:
        parser.error("give warm-ups of 0 steps or more and at least one round")

    from placer.commands.placement_option import check_placement_name, placement_named
    from placer.measure import Measurer, parse_target
    from placer.models import load_model
    from placer.timeline import critical_path, read_chrome_trace

    for name in args.placement:
        check_placement_name(name, args.model, "measured")
    graph = load_model(args.model, args.size)
    inputs = {op.name: (*op.producers, *op.control_inputs) for op in graph.ops}
    steps = collections.defaultdict(list)
    hops = collections.defaultdict(list)
    with Measurer(parse_target(args.target)) as measurer:
        layouts = {name: placement_named(name, args.model, graph, measurer.devices) for name in args.placement}
        for round_index in range(args.rounds):
            for warmup in args.warmups:
                for name, placement in layouts.items():
                    config = replace(measurer.config, warmup_steps=warmup, profile_steps=1)
                    result = measurer.measure(graph, placement, config)
                    if not result.ok:
                        raise SystemExit(f"{name} after {warmup} warm-up steps failed: {result.failure.describe()}")
                    steps[name, warmup].append(result.median)
                    links = critical_path(read_chrome_trace(result.chrome_trace), inputs)
                    hops[name, warmup].append(max((link.wait for link in links if link.kind == "hop"), default=0.0))
                    print(f"round {round_index + 1}: {name} after {warmup} warm-up steps: {result.median * 1e3:.3f} ms",
                          file=sys.stderr, flush=True)
    shortest = min(args.warmups)
    rows = []
    for name in layouts:
        for warmup in args.warmups:
            step = statistics.median(steps[name, warmup])
            rows.append({"layout": name, "warmup_steps": warmup, "step_ms": step * 1e3,
                         "vs_shortest_warmup": step / statistics.median(steps[name, shortest]),
                         "slowest_hop_ms": statistics.median(hops[name, warmup]) * 1e3,
                         "rounds_ms": [s * 1e3 for s in steps[name, warmup]]})
    command = "python experiments/probes/executor_warmup.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("executor_warmup", ["layout", "warmup_steps", "step_ms", "vs_shortest_warmup", "slowest_hop_ms"],
                 rows, args.out, command=command.strip(), model=args.model, size=args.size, target=args.target,
                 rounds=args.rounds, timed_steps=measurer.config.timed_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
