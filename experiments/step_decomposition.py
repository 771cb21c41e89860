"""Where does a split step's time go? Op time, ops a split adds, and time outside any op, on one worker and two.

    python experiments/step_decomposition.py [--model two-tower] [--size tiny] [--placement expert]
        [--targets local:2 [local:2,inter=1 ...]] [--rounds 3] [--steps 5] [--out results/step_decomposition.json]

The model's step is measured on the first worker alone (single-device) and under `--placement`, alternately
for `--rounds` rounds, each measurement tracing `--steps` steps. Per layout: the step time (median), each
worker's busy time (the sum of its traced ops' compute times), and the step time not covered by the busiest
worker's ops (the time a step spends outside ops on its longest worker: scheduling, waiting for transfers,
the step's own start and end). Per op type over the ops both layouts run: their compute time in each, and the
ops only the split runs (receives, cross-device control edges). A simulator whose op costs come from the
single-device profile predicts the split well only if the split's ops cost what they cost alone and its
time outside ops is what the calibration fits.

Each measurement's last traced step is also walked back along its critical path (`placer.timeline.critical_path`):
the ops on it, and the time between them, by cause: an edge on one device, a hop between devices (a tensor or
a control edge sent), or a wait for the device's core. With several `--targets` (testbeds that differ in one
setting, such as the workers' inter-op threads) every target measures both layouts in each round, in turn.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
from dataclasses import replace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import print_table, write_report  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="two-tower")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--placement", default="expert", help="the split layout: a heuristic's name (default expert)")
    parser.add_argument("--targets", nargs="+", default=["local:2"],
                        help="measured targets, each measuring both layouts in every round (default local:2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="traced steps per measurement (default 5)")
    parser.add_argument("--out", default="results/step_decomposition.json")
    args = parser.parse_args(argv)

    from placer.commands.placement_option import placement_named
    from placer.measure import Measurer, parse_target
    from placer.models import load_model
    from placer.placement import Placement

    graph = load_model(args.model, args.size)
    targets = [parse_target(text) for text in args.targets]
    measured = {str(target): collections.defaultdict(list) for target in targets}
    with contextlib.ExitStack() as stack:
        measurers = [stack.enter_context(Measurer(target)) for target in targets]
        layouts = {"single-device": Placement.on_device(graph, measurers[0].devices, 0),
                   args.placement: placement_named(args.placement, args.model, graph, measurers[0].devices)}
        for _ in range(args.rounds):
            for target, measurer in zip(targets, measurers):
                config = replace(measurer.config, profile_steps=args.steps)
                for name, placement in layouts.items():
                    result = measurer.measure(graph, placement, config)
                    if not result.ok:
                        raise SystemExit(f"{name} on {target} failed: {result.failure.describe()}")
                    measured[str(target)][name].append(result)

    inputs = {op.name: (*op.producers, *op.control_inputs) for op in graph.ops}
    rows = []
    for target, by_layout in measured.items():
        rows += [{"target": target, **row} for row in _layout_rows(by_layout, inputs)]
    columns = ["target", "layout", "step_ms", "busy_ms", "outside_ops_ms", "path_ops_ms", "hop_wait_ms",
               "core_wait_ms", "slowest_hop_ms"]
    measured = measured[str(targets[0])]  # the op-type comparison: on the first target
    split = args.placement
    common = set.intersection(*(set(r.op_times) for rs in measured.values() for r in rs))
    by_type = collections.defaultdict(lambda: [0.0, 0.0])
    for op in common:
        ran_as = measured["single-device"][0].op_times[op].ran_as or op
        for column, name in enumerate(("single-device", split)):
            by_type[ran_as][column] += statistics.median(r.op_times[op].seconds for r in measured[name])
    split_only = set.union(*(set(r.op_times) for r in measured[split])) - common
    added = statistics.median(sum(r.op_times[op].seconds for op in split_only if op in r.op_times)
                              for r in measured[split])
    op_rows = [{"op_type": kind, "single_ms": single * 1e3, "split_ms": spread * 1e3,
                "ratio": spread / single if single else None}
               for kind, (single, spread) in sorted(by_type.items(), key=lambda item: -item[1][1])]
    print_table(["op_type", "single_ms", "split_ms", "ratio"], op_rows[:10])
    print(f"ops only the split runs ({len(split_only)}, e.g. {', '.join(sorted(split_only)[:4])}): {added * 1e3:.3f} ms\n")
    print("critical path: path_ops_ms is the traced step's ops on its critical path, then the time between them "
          "by cause (medians over the rounds' traced steps); slowest_hop_ms the longest hop, per round\n")
    command = "python experiments/step_decomposition.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("step_decomposition", columns, rows, args.out, command=command.strip(), model=args.model,
                 size=args.size, targets=[str(t) for t in targets], rounds=args.rounds, op_types=op_rows,
                 split_only_ops=sorted(split_only), split_only_ms=added * 1e3)
    return 0


def _layout_rows(by_layout: dict[str, list], inputs: dict[str, tuple[str, ...]]) -> list[dict]:
    """Per layout: the step, each worker's busy time, the time outside the busiest worker's ops, and the traced
    steps' critical paths (medians over the rounds)."""
    from placer.timeline import critical_path, read_chrome_trace

    rows = []
    for name, results in by_layout.items():
        busy = collections.defaultdict(list)
        paths = []
        for result in results:
            per_device = collections.Counter()
            for op_time in result.op_times.values():
                per_device[op_time.device] += op_time.seconds
            for device, seconds in per_device.items():
                busy[device].append(seconds)
            links = critical_path(read_chrome_trace(result.chrome_trace), inputs)
            waits = {kind: sum(link.wait for link in links if link.kind == kind) for kind in ("data", "hop", "core")}
            path_ops = sum(link.after.duration for link in links) + (links[0].before.duration if links else 0.0)
            hops = [link.wait for link in links if link.kind == "hop"]
            paths.append({"path_ops": path_ops, **waits, "slowest_hop": max(hops, default=0.0)})
        step = statistics.median(r.median for r in results)
        device_busy = {device: statistics.median(values) for device, values in busy.items()}
        rows.append({"layout": name, "step_ms": step * 1e3, "busy_ms": "+".join(f"{b * 1e3:.2f}" for b in device_busy.values()),
                     "all_ops_ms": sum(device_busy.values()) * 1e3,
                     "outside_ops_ms": (step - max(device_busy.values())) * 1e3,
                     "path_ops_ms": statistics.median(p["path_ops"] for p in paths) * 1e3,
                     "hop_wait_ms": statistics.median(p["hop"] for p in paths) * 1e3,
                     "core_wait_ms": statistics.median(p["core"] for p in paths) * 1e3,
                     "slowest_hop_ms": "/".join(f"{p['slowest_hop'] * 1e3:.2f}" for p in paths),
                     "step_rounds_ms": [r.median * 1e3 for r in results]})
    return rows


if __name__ == "__main__":
    sys.exit(main())
