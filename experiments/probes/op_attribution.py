"""Whose time is it when two ops' spans overlap on one core? Op costs from traces attributed two ways, against
spans that cannot overlap.

    python experiments/probes/op_attribution.py [--models two-tower nmt-2] [--size tiny] [--rounds 6]
        [--min-us 50] [--out results/op_attribution.json]

The calibrated simulator prices each op at the cost profiled with the whole graph on one testbed worker: one
core, two inter-op threads (`placer.profile.profile_costs`). Two threads on one core overlap their ops' traced
spans, so a span is not the op's compute: it has to be attributed. Here each model's step runs on worker 0 of
`local:2` (the testbed as the simulator's profiles see it) and of `local:2,inter=1` (one inter-op thread, so no
two spans overlap and each span is its op's time), side by side in `--rounds` interleaved rounds, one traced step
per round each. From the two-thread traces every op's time is attributed by

- `started_last`: of more ops in progress than cores, the ones that started last hold them
  (`placer.measure.runner.core_seconds`, what profiles use);
- `even`: every op in progress advances at cores / k while k are (processor sharing);

and compared, as the median over rounds per op, with its one-thread span. Reported per model: the median and
root-mean-square relative error of each attribution over ops of at least `--min-us` µs (by their one-thread
span), the summed op time each gives, the steps' medians on both targets, and the ops the two attributions
disagree on most. Any model spec of `placer.models.load_model` works (e.g. a held-out graph:
placer.models.heldout:branchy_0_graph).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections import defaultdict
from typing import Iterable, Mapping, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import print_table, write_report  # noqa: E402

TWO_THREADS = "local:2"
ONE_THREAD = "local:2,inter=1"
ATTRIBUTIONS = ("started_last", "even")


def trace_spans(chrome_trace: Mapping) -> dict[str, list[tuple[str, float, float]]]:
    """(node, start µs, end µs) of every op a Chrome trace shows, per device process."""
    spans: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for event in chrome_trace.get("traceEvents", ()):
        if event.get("ph") == "X" and "name" in event.get("args", {}):
            begin = float(event["ts"])
            spans[str(event["pid"])].append((event["args"]["name"], begin, begin + float(event.get("dur", 0.0))))
    return dict(spans)


def even_seconds(spans: Sequence[tuple[str, float, float]], cores: int) -> dict[str, float]:
    """Processor sharing: while k ops are in progress, each advances at min(1, cores / k)."""
    points = sorted({t for _, begin, end in spans for t in (begin, end)})
    totals: dict[str, float] = defaultdict(float)
    for left, right in zip(points, points[1:]):
        active = [name for name, begin, end in spans if begin <= left and end >= right and end > begin]
        for name in active:
            totals[name] += (right - left) * min(1.0, cores / len(active)) * 1e-6
    return dict(totals)


def span_seconds(spans: Sequence[tuple[str, float, float]], cores: int) -> dict[str, float]:
    """Each op's span, which is its time where no two spans overlap (one inter-op thread)."""
    totals: dict[str, float] = defaultdict(float)
    for name, begin, end in spans:
        totals[name] += (end - begin) * 1e-6
    return dict(totals)


def op_medians(traces: Iterable[Mapping], attribute) -> dict[str, float]:
    """Median over traced steps of each op's seconds, attributed per device by `attribute(spans, cores=1)`."""
    values: dict[str, list[float]] = defaultdict(list)
    for trace in traces:
        for spans in trace_spans(trace).values():
            for name, seconds in attribute(spans, 1).items():
                values[name].append(seconds)
    return {name: statistics.median(seconds) for name, seconds in values.items()}


def compare_attributions(two_threads: Sequence[Mapping], one_thread: Sequence[Mapping], min_seconds: float) -> dict:
    """Each attribution of the two-thread traces against the one-thread spans: errors over ops of at least
    `min_seconds`, summed times, and per op the three times (for the ops the attributions disagree on most)."""
    from placer.measure.runner import core_seconds

    truth = op_medians(one_thread, span_seconds)
    attributed = {"started_last": op_medians(two_threads, core_seconds), "even": op_medians(two_threads, even_seconds)}
    ops = sorted(name for name, seconds in truth.items() if seconds >= min_seconds)
    if not ops:
        raise ValueError(f"no op took {min_seconds * 1e6:g} µs or more on one thread: lower --min-us")
    summary = {"ops": len(ops), "one_thread_ms": 1e3 * sum(truth.values())}
    for name, times in attributed.items():
        errors = [times.get(op, 0.0) / truth[op] - 1 for op in ops]
        summary[f"{name}_median_abs_error_pct"] = 100 * statistics.median(abs(e) for e in errors)
        summary[f"{name}_rms_error_pct"] = 100 * math.sqrt(sum(e * e for e in errors) / len(errors))
        summary[f"{name}_ms"] = 1e3 * sum(times.values())
    per_op = [{"op": op, "one_thread_us": 1e6 * truth[op],
               **{f"{name}_us": 1e6 * times.get(op, 0.0) for name, times in attributed.items()}} for op in ops]
    per_op.sort(key=lambda row: -abs(row["started_last_us"] - row["even_us"]))
    return {"summary": summary, "ops": per_op}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["two-tower", "nmt-2"])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds, one traced step per target each")
    parser.add_argument("--min-us", type=float, default=50.0, help="ops compared: at least this long on one thread")
    parser.add_argument("--out", default="results/op_attribution.json")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("give at least 3 rounds: each op's time is a median over them")
    if args.min_us <= 0:
        parser.error("--min-us must be positive")

    from dataclasses import replace

    from tqdm.auto import tqdm

    from placer.measure import Measurer, parse_target
    from placer.models import load_model
    from placer.placement import Placement

    graphs = [load_model(model, args.size) for model in args.models]  # a bad spec fails before a testbed starts
    traces: dict[str, dict[str, list]] = {g.name: {TWO_THREADS: [], ONE_THREAD: []} for g in graphs}
    steps: dict[str, dict[str, list]] = {g.name: {TWO_THREADS: [], ONE_THREAD: []} for g in graphs}
    with Measurer(parse_target(TWO_THREADS)) as two, Measurer(parse_target(ONE_THREAD)) as one:
        measurers = {TWO_THREADS: two, ONE_THREAD: one}
        for index in tqdm(range(args.rounds), desc="rounds", unit="round"):
            order = list(measurers.items())[::1 if index % 2 == 0 else -1]  # each target first in turn
            for graph in graphs:
                for spec, measurer in order:
                    config = replace(measurer.config, profile_steps=1)
                    result = measurer.measure(graph, Placement.on_device(graph, measurer.devices, 0), config)
                    if not result.ok:
                        raise SystemExit(f"{graph.name} on {spec} failed ({result.failure.kind}): "
                                         f"{result.failure.message}")
                    traces[graph.name][spec].append(json.loads(result.chrome_trace))
                    steps[graph.name][spec].append(result.median)

    rows, disagreements = [], {}
    for graph in graphs:
        compared = compare_attributions(traces[graph.name][TWO_THREADS], traces[graph.name][ONE_THREAD],
                                        args.min_us * 1e-6)
        rows.append({"model": graph.name, **compared["summary"],
                     "step_two_threads_ms": 1e3 * statistics.median(steps[graph.name][TWO_THREADS]),
                     "step_one_thread_ms": 1e3 * statistics.median(steps[graph.name][ONE_THREAD])})
        disagreements[graph.name] = compared["ops"]
    columns = ["model", "ops", "started_last_median_abs_error_pct", "even_median_abs_error_pct",
               "started_last_rms_error_pct", "even_rms_error_pct", "one_thread_ms", "started_last_ms", "even_ms",
               "step_two_threads_ms", "step_one_thread_ms"]
    for graph in graphs:
        print(f"\n{graph.name}: the ops the attributions disagree on most (µs)")
        print_table(["op", "one_thread_us", "started_last_us", "even_us"], disagreements[graph.name][:8])
    print()
    write_report("op_attribution", columns, rows, args.out, models=args.models, size=args.size, rounds=args.rounds,
                 min_us=args.min_us, targets=[TWO_THREADS, ONE_THREAD], ops=disagreements,
                 command=" ".join(["python", "experiments/probes/op_attribution.py",
                                   *(argv if argv is not None else sys.argv[1:])]))


if __name__ == "__main__":
    main()
