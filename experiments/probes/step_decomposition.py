"""Where does a split step's time go? Op time, ops a split adds, and time outside any op, on one worker and two.

    python experiments/probes/step_decomposition.py [--model two-tower] [--size tiny] [--placement expert [FILE ...]]
        [--targets local:2 [local:2,inter=1 ...]] [--calibration FILE] [--rounds 3] [--steps 5]
        [--out results/step_decomposition.json]

The model's step is measured on the first worker alone (single-device) and under `--placement`, alternately
for `--rounds` rounds, each measurement tracing `--steps` steps. Per layout: the step time (median), each
worker's busy time (the sum of its traced ops' compute times; not a sender's RecvTensor handler, which spans a
request's wait for its tensor), each worker process's CPU time per timed step (measured only: ops, sends,
receives and gRPC together), and the step time not covered by the busiest
worker's ops (the time a step spends outside ops on its longest worker: scheduling, waiting for transfers,
the step's own start and end). Per op type over the ops both layouts run: their compute time in each, and the
ops only the split runs (receives, cross-device control edges). A simulator whose op costs come from the
single-device profile predicts the split well only if the split's ops cost what they cost alone and its
time outside ops is what the calibration fits.

Each measurement's last traced step is also walked back along its critical path (`placer.timeline.critical_path`):
the ops on it, and the time between them, by cause: an edge on one device, a hop between devices (a tensor or
a control edge sent), or a wait for the device's core. With several `--targets` (testbeds that differ in one
setting, such as the workers' inter-op threads) every target measures both layouts in each round, in turn.

`--placement` takes heuristics' names and placement files (such as a run's `simulator/best_placement.json`),
each a split layout of its own. With `--calibration` the calibrated twin (`calibrated:FILE`) prices every
layout too, in the same columns from its simulated timeline, and every cross-device edge of each split is
listed with when its producer ended and its consumer started, traced (median and range over the rounds)
and simulated: the hops whose waits the twin misprices are where its prediction of the split goes wrong.

With `--sends` each hop also says whether its sender kept computing (an op of its worker running 50 us after
the producer ended, in most rounds), whether the producer was the consumer's last input to end (so the wait
is the hop's own, in most rounds) and how many other nodes read the sent tensor's producer in the graph
TensorFlow ran on that worker (`placer.measure.partitions.ops_beside_sends`, from one in-process step):
TensorFlow's executor runs a send inline only when nothing else became ready beside it. Per split, the hops
whose sender kept computing and whose producer was the last input are summed up by that count: none beside
it, or some.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
from dataclasses import replace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import print_table, write_report  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="two-tower")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--placement", nargs="+", default=["expert"], metavar="NAME_OR_FILE",
                        help="the split layouts: heuristics' names or placement files (default expert)")
    parser.add_argument("--targets", nargs="+", default=["local:2"],
                        help="measured targets, each measuring both layouts in every round (default local:2)")
    parser.add_argument("--calibration", metavar="FILE",
                        help="also price every layout on the calibrated twin of FILE and compare its hops")
    parser.add_argument("--executor-queues", action="store_true",
                        help="with --calibration: the twin orders sends and receives as TensorFlow's executor "
                             "queues them (`SimulatorConfig.executor_queues`)")
    parser.add_argument("--sends", action="store_true",
                        help="with --calibration: per hop, whether its sender kept computing and how many nodes read "
                             "its producer beside the send in the graph TensorFlow ran")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="traced steps per measurement (default 5)")
    parser.add_argument("--out", default="results/step_decomposition.json")
    args = parser.parse_args(argv)

    from placer.commands.placement_option import placement_named
    from placer.measure import Measurer, parse_target
    from placer.models import load_model
    from placer.placement import Placement

    from placer.commands.placement_option import check_placement_name
    from placer.cost import open_target
    from placer.timeline import RECEIVE_OPS

    if (args.sends or args.executor_queues) and not args.calibration:
        parser.error("--sends and --executor-queues are about the twin's hop tables: give --calibration FILE")
    for name in args.placement:
        check_placement_name(name, args.model, "simulated" if args.calibration else "measured")
    graph = load_model(args.model, args.size)
    targets = [parse_target(text) for text in args.targets]
    from placer.simulate import SimulatorConfig
    twin = open_target(graph, f"calibrated:{args.calibration}",
                       simulator_config=SimulatorConfig(executor_queues=args.executor_queues)) if args.calibration else None
    measured = {str(target): collections.defaultdict(list) for target in targets}
    with contextlib.ExitStack() as stack:
        measurers = [stack.enter_context(Measurer(target)) for target in targets]
        devices = measurers[0].devices
        layouts = {"single-device": Placement.on_device(graph, devices, 0)}
        for name in args.placement:
            layouts[name] = placement_named(name, args.model, graph, devices,
                                            simulator=twin.simulator if twin else None)
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
    hops = {}
    if twin is not None:
        from placer.timeline import read_chrome_trace

        simulated = {name: read_chrome_trace(twin.trace(placement)) for name, placement in layouts.items()}
        rows += [{"target": f"simulated ({args.calibration})", "layout": name,
                  **_timeline_row(twin.evaluate(layouts[name]).seconds, timeline, inputs)}
                 for name, timeline in simulated.items()]
        traced = measured[str(targets[0])]
        for name, placement in list(layouts.items())[1:]:
            hops[name] = cross_device_hops(
                placement.op_devices(graph), inputs,
                [read_chrome_trace(result.chrome_trace) for result in traced[name]], simulated[name])
            if args.sends:
                annotate_sends(hops[name], beside_sends(graph, placement, devices), inputs,
                               [read_chrome_trace(result.chrome_trace) for result in traced[name]])
    columns = ["target", "layout", "step_ms", "busy_ms", "cpu_ms", "outside_ops_ms", "path_ops_ms", "hop_wait_ms",
               "core_wait_ms", "slowest_hop_ms"]
    measured = measured[str(targets[0])]  # the op-type comparison: on the first target
    split = list(layouts)[1]
    common = set.intersection(*(set(r.op_times) for rs in measured.values() for r in rs))
    by_type = collections.defaultdict(lambda: [0.0, 0.0])
    for op in common:
        ran_as = measured["single-device"][0].op_times[op].ran_as or op
        for column, name in enumerate(("single-device", split)):
            by_type[ran_as][column] += statistics.median(r.op_times[op].seconds for r in measured[name])
    split_only = set.union(*(set(r.op_times) for r in measured[split])) - common - RECEIVE_OPS
    added = statistics.median(sum(r.op_times[op].seconds for op in split_only if op in r.op_times)
                              for r in measured[split])
    op_rows = [{"op_type": kind, "single_ms": single * 1e3, "split_ms": spread * 1e3,
                "ratio": spread / single if single else None}
               for kind, (single, spread) in sorted(by_type.items(), key=lambda item: -item[1][1])]
    print_table(["op_type", "single_ms", "split_ms", "ratio"], op_rows[:10])
    print(f"ops only the split runs ({len(split_only)}, e.g. {', '.join(sorted(split_only)[:4])}): {added * 1e3:.3f} ms\n")
    for name, hop_rows in hops.items():
        print(f"hops of {name} on {targets[0]}: when each cross-device edge's producer ended and its consumer started "
              "(ms from the step's first op), traced (median, and the range of the wait over the rounds) and simulated")
        print_table(HOP_COLUMNS + (SEND_COLUMNS if args.sends else []), hop_rows)
        print()
    send_rows = [row for name, hop_rows in hops.items() for row in sends_by_kind(name, hop_rows)] if args.sends else []
    if send_rows:
        print("hops whose sender kept computing and whose producer was the consumer's last input, by what read "
              "the sent tensor's producer beside the send (medians, ms)")
        print_table(["layout", "beside_send", "hops", "traced_wait_ms", "simulated_wait_ms"], send_rows)
        print()
    print("critical path: path_ops_ms is the traced step's ops on its critical path, then the time between them "
          "by cause (medians over the rounds' traced steps); slowest_hop_ms the longest hop, per round\n")
    command = "python experiments/probes/step_decomposition.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("step_decomposition", columns, rows, args.out, command=command.strip(), model=args.model,
                 size=args.size, targets=[str(t) for t in targets], rounds=args.rounds, op_types=op_rows,
                 split_only_ops=sorted(split_only), split_only_ms=added * 1e3, calibration=args.calibration,
                 executor_queues=args.executor_queues, hops=hops, sends=send_rows)
    return 0


def _layout_rows(by_layout: dict[str, list], inputs: dict[str, tuple[str, ...]]) -> list[dict]:
    """Per layout: the step, each worker's busy time, the time outside the busiest worker's ops, and the traced
    steps' critical paths (medians over the rounds)."""
    from placer.timeline import RECEIVE_OPS, read_chrome_trace

    rows = []
    for name, results in by_layout.items():
        busy = collections.defaultdict(list)
        paths = []
        for result in results:
            per_device = collections.Counter()
            for op_name, op_time in result.op_times.items():
                # A sender's RecvTensor handler spans from a request's arrival to its reply, waiting included:
                # not computing, and the simulator prices the transfers' core costs apart.
                if op_name not in RECEIVE_OPS:
                    per_device[op_time.device] += op_time.seconds
            for device, seconds in per_device.items():
                busy[device].append(seconds)
            paths.append(_path_stats(read_chrome_trace(result.chrome_trace), inputs))
        step = statistics.median(r.median for r in results)
        device_busy = {device: statistics.median(values) for device, values in busy.items()}
        # Each worker process's CPU time per timed step, all its threads (ops, sends, receives, gRPC): beside its
        # busy time, what the step's transfers and scheduling cost its core.
        cpu = [statistics.median(values) for values in zip(*(r.worker_cpu for r in results))]
        rows.append({"layout": name, "step_ms": step * 1e3, "busy_ms": _busy_text(device_busy),
                     "cpu_ms": " + ".join(f"worker {i} {seconds * 1e3:.2f}" for i, seconds in enumerate(cpu)) or "-",
                     "all_ops_ms": sum(device_busy.values()) * 1e3,
                     "outside_ops_ms": (step - max(device_busy.values())) * 1e3,
                     "path_ops_ms": statistics.median(p["path_ops"] for p in paths) * 1e3,
                     "hop_wait_ms": statistics.median(p["hop"] for p in paths) * 1e3,
                     "core_wait_ms": statistics.median(p["core"] for p in paths) * 1e3,
                     "slowest_hop_ms": "/".join(f"{p['slowest_hop'] * 1e3:.2f}" for p in paths),
                     "step_rounds_ms": [r.median * 1e3 for r in results]})
    return rows


HOP_COLUMNS = ["producer", "consumer", "hop", "traced_end_ms", "traced_start_ms", "traced_wait_ms", "wait_range_ms",
               "simulated_end_ms", "simulated_start_ms", "simulated_wait_ms"]


SEND_COLUMNS = ["sender_computing", "last_input", "beside_send"]

KEPT_COMPUTING = 50e-6
"""A sender kept computing if one of its worker's ops runs this long after the producer ended."""


def beside_sends(graph, placement, devices) -> dict[str, int]:
    """`placer.measure.partitions.ops_beside_sends` of `placement`, from one step on in-process CPUs standing
    for `devices` (the partitions are grappler's, whatever runs them)."""
    from placer.measure.partitions import ops_beside_sends, partition_graphs

    names = list(devices.names)
    in_process = {op: f"/job:localhost/replica:0/task:0/device:CPU:{names.index(device)}"
                  for op, device in placement.op_devices(graph).items()}
    return ops_beside_sends(partition_graphs(graph, in_process, local_cpus=len(names)))


def annotate_sends(hop_rows: list[dict], beside: dict[str, int], inputs: dict[str, tuple[str, ...]],
                   traced: list) -> None:
    """Adds to each hop whether its sender kept computing and whether its producer was the consumer's last
    traced input to end (each in most of the `traced` steps), and how many other nodes read its producer in
    the graph TensorFlow ran on the sender (`beside`; None: not a tensor TensorFlow sent from that op, e.g.
    one whose producer grappler folded)."""
    from placer.timeline import op_spans, traced_inputs

    spans = [op_spans(timeline) for timeline in traced]
    nearest = traced_inputs(inputs, set.intersection(*(set(s) for s in spans)))
    for row in hop_rows:
        sender = row["hop"].split(" -> ")[0]  # the timelines' short device names
        computing = last = 0
        for timeline, by_node in zip(traced, spans):
            made = by_node[row["producer"]].end
            computing += any(span.start <= made + KEPT_COMPUTING < span.end for span in timeline.on(sender, "op"))
            last += all(by_node[other].end <= made for other in nearest(row["consumer"]))
        row["sender_computing"] = 2 * computing > len(traced)
        row["last_input"] = 2 * last > len(traced)
        row["beside_send"] = beside.get(row["producer"])


def sends_by_kind(layout: str, hop_rows: list[dict]) -> list[dict]:
    """The hops of one split whose sender kept computing and whose producer was the consumer's last input, in
    two groups: nothing read the sent tensor's producer beside the send, or something did; each group's count
    and median waits."""
    rows = []
    for kind, keep in (("none", lambda n: n == 0), ("some", lambda n: n is not None and n > 0)):
        group = [row for row in hop_rows
                 if row.get("sender_computing") and row.get("last_input") and keep(row.get("beside_send"))]
        if group:
            rows.append({"layout": layout, "beside_send": kind, "hops": len(group),
                         "traced_wait_ms": statistics.median(row["traced_wait_ms"] for row in group),
                         "simulated_wait_ms": statistics.median(row["simulated_wait_ms"] for row in group)})
    return rows


def cross_device_hops(op_devices: dict[str, str], inputs: dict[str, tuple[str, ...]], traced: list,
                      simulated) -> list[dict]:
    """Each hop between ops on different devices that every traced step and the simulated one ran: when the
    producer ended and the consumer started, traced (medians over `traced`, and the wait's range) and
    simulated, in milliseconds from each step's first op, in the order the traced steps ran them. An edge
    through ops the traces lack (folded by grappler, such as an Identity) counts from the nearest op they
    ran."""
    from placer.devices import short_name
    from placer.timeline import op_spans, traced_inputs

    traced_spans = [op_spans(timeline) for timeline in traced]
    simulated_spans = op_spans(simulated)
    everywhere = set(simulated_spans).intersection(*traced_spans) if traced_spans else set()
    nearest = traced_inputs(inputs, everywhere)
    rows = []
    for consumer in sorted(everywhere & set(op_devices)):  # TensorFlow's own nodes (not the graph's) left out
        for producer in sorted(nearest(consumer)):
            if op_devices.get(producer, op_devices[consumer]) == op_devices[consumer]:
                continue
            ends = [spans[producer].end * 1e3 for spans in traced_spans]
            starts = [spans[consumer].start * 1e3 for spans in traced_spans]
            waits = [start - end for start, end in zip(starts, ends)]
            end, start = simulated_spans[producer].end * 1e3, simulated_spans[consumer].start * 1e3
            rows.append({"producer": producer, "consumer": consumer,
                         "hop": f"{short_name(op_devices[producer])} -> {short_name(op_devices[consumer])}",
                         "traced_end_ms": statistics.median(ends), "traced_start_ms": statistics.median(starts),
                         "traced_wait_ms": statistics.median(waits),
                         "wait_range_ms": f"{min(waits):.2f}-{max(waits):.2f}",
                         "simulated_end_ms": end, "simulated_start_ms": start, "simulated_wait_ms": start - end})
    return sorted(rows, key=lambda row: (row["traced_start_ms"], row["traced_end_ms"]))


def _timeline_row(step: float, timeline, inputs: dict[str, tuple[str, ...]]) -> dict:
    """A simulated layout in `_layout_rows`' columns: its predicted step (the timeline's span and the calibrated
    overheads of a step, as a timed step has them), busy time and critical path."""
    busy = {device: timeline.busy(device) for device in timeline.devices}
    path = _path_stats(timeline, inputs)
    return {"step_ms": step * 1e3, "busy_ms": _busy_text(busy), "cpu_ms": "-",
            "all_ops_ms": sum(busy.values()) * 1e3, "outside_ops_ms": (step - max(busy.values())) * 1e3,
            "path_ops_ms": path["path_ops"] * 1e3, "hop_wait_ms": path["hop"] * 1e3,
            "core_wait_ms": path["core"] * 1e3, "slowest_hop_ms": f"{path['slowest_hop'] * 1e3:.2f}"}


def _busy_text(busy: dict[str, float]) -> str:
    """Each device's busy milliseconds, by its short name, in device order: which worker carries the load."""
    from placer.devices import short_name

    return " + ".join(f"{short_name(device)} {busy[device] * 1e3:.2f}" for device in sorted(busy))


def _path_stats(timeline, inputs: dict[str, tuple[str, ...]]) -> dict[str, float]:
    """The critical path of one step: its ops' time, the waits between them by cause, and the longest hop."""
    from placer.timeline import critical_path

    links = critical_path(timeline, inputs)
    waits = {kind: sum(link.wait for link in links if link.kind == kind) for kind in ("data", "hop", "core")}
    path_ops = sum(link.after.duration for link in links) + (links[0].before.duration if links else 0.0)
    hops = [link.wait for link in links if link.kind == "hop"]
    return {"path_ops": path_ops, **waits, "slowest_hop": max(hops, default=0.0)}


if __name__ == "__main__":
    sys.exit(main())
