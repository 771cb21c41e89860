"""How far does the testbed's speed move in minutes? The same placements measured again and again.

    python experiments/probes/machine_drift.py [--models two-tower nmt-2 placer.models.heldout:branchy_0_graph]
        [--size tiny] [--minutes 15] [--interval 20] [--lags 1 2 4 8] [--request-rounds 0]
        [--out results/machine_drift.json]

Every prediction of the calibrated simulator rests on measurements made before it: the calibration's probes and
each graph's profile, minutes before the steps it is compared with. Here each model runs on `local:2` with all
its ops on worker 0, with its groups alternated between the workers (round-robin: the most transfers) and split
in two halves, one after another, every `--interval` seconds for `--minutes` on one testbed (after one pass
thrown away: a graph's first measurements on a testbed are slower). Reported per
placement: the spread of its step time over the run (10th and 90th percentiles against the median), and the
drift at each lag of `--lags` minutes: the median |change| between two of its measurements that far apart. The
same for each cut placement's ratio to the single worker measured beside it in the same sample, which is what
the machine's drift leaves of a comparison made side by side. A prediction made from measurements taken a lag
before its check carries about that lag's drift on top of the model's own error.

With `--request-rounds N`, each sample also runs `placer calibrate`'s request probe for N rounds: the share of its
busy-sender hops that were late (`placer.calibration.LATE_HOP`) and its delay (`placer.calibration.request_delay`)
become series of their own, and each cut placement's ratio is set against the late share over the samples
(Spearman's rank correlation): does a split's cost move with the share the calibration's request delay drifts with?
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from typing import Mapping, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

PLACEMENTS = ("worker 0", "round-robin", "split 0.50")
REFERENCE = "worker 0"
REQUEST_PROBE = "request probe"


def lag_drift(samples: Sequence[tuple[float, float]], lag: float, tolerance: float) -> float | None:
    """Median |b / a - 1| over pairs of (seconds, value) samples whose times are `lag` ± `tolerance` apart, as a
    percentage; None without such a pair."""
    changes = [abs(b / a - 1) for i, (t_a, a) in enumerate(samples) for t_b, b in samples[i + 1:]
               if abs(t_b - t_a - lag) <= tolerance and a > 0]
    return 100 * statistics.median(changes) if changes else None


def spread(values: Sequence[float]) -> tuple[float, float]:
    """The 10th and 90th percentiles of `values` against their median, as percentages (nan about a median of 0,
    as a request probe whose hops were mostly prompt has)."""
    ordered = sorted(values)
    median = statistics.median(ordered)
    if median == 0:
        return math.nan, math.nan

    def percentile(q: float) -> float:
        position = q * (len(ordered) - 1)
        low, high = math.floor(position), math.ceil(position)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return 100 * (percentile(0.1) / median - 1), 100 * (percentile(0.9) / median - 1)


def drift_rows(series: Mapping[tuple[str, str], Sequence[tuple[float, float]]], lags_minutes: Sequence[float],
               tolerance: float) -> list[dict]:
    """One row per (model, what was measured): samples, spread and the drift at each lag."""
    rows = []
    for (model, measured), samples in series.items():
        low, high = spread([value for _, value in samples])
        row = {"model": model, "measured": measured, "samples": len(samples),
               "median": statistics.median(value for _, value in samples), "p10_pct": low, "p90_pct": high}
        for lag in lags_minutes:
            row[f"drift_{lag:g}min_pct"] = lag_drift(samples, 60 * lag, tolerance)
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["two-tower", "nmt-2", "placer.models.heldout:branchy_0_graph"])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--interval", type=float, default=20.0, help="seconds from one sample's start to the next's")
    parser.add_argument("--lags", type=float, nargs="+", default=[1, 2, 4, 8], help="minutes")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--request-rounds", type=int, default=0,
                        help="rounds of the request probe in each sample (default 0: none)")
    parser.add_argument("--out", default="results/machine_drift.json")
    args = parser.parse_args(argv)
    if args.request_rounds < 0:
        parser.error("--request-rounds must be 0 (none) or more")
    if args.interval <= 0 or args.minutes * 60 < 3 * args.interval:
        parser.error("give a positive --interval and --minutes for at least three samples")
    if min(args.lags) <= 0 or max(args.lags) * 60 > args.minutes * 60 - args.interval:
        parser.error(f"--lags must be positive and leave room in the run: at most "
                     f"{(args.minutes * 60 - args.interval) / 60:g} minutes")

    from tqdm.auto import tqdm

    from experiments.simulator_fidelity import split_assignment
    from placer.calibrate import measure_request_delay
    from placer.calibration import LATE_HOP
    from placer.measure import MeasureConfig, Measurer, parse_target
    from placer.models import load_model
    from placer.placement import Placement
    from placer.simulate.fidelity import spearman

    graphs = [load_model(model, args.size) for model in args.models]  # a bad spec fails before a testbed starts
    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)
    steps: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with Measurer(parse_target("local:2"), config) as measurer:
        placements = {g.name: {"worker 0": Placement.on_device(g, measurer.devices, 0),
                               "round-robin": Placement.round_robin(g, measurer.devices),
                               "split 0.50": Placement.from_assignment(g, measurer.devices,
                                                                       split_assignment(len(g.groups), 0.5))}
                      for g in graphs}
        for graph in graphs:  # a graph's first measurements on a testbed are slower: one pass thrown away
            for placement in placements[graph.name].values():
                measurer.measure(graph, placement)
        started = time.monotonic()
        count = math.floor(args.minutes * 60 / args.interval)
        for index in tqdm(range(count), desc="samples", unit="sample"):
            wait = started + index * args.interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            at = time.monotonic() - started
            for graph in graphs:
                for label, placement in placements[graph.name].items():
                    result = measurer.measure(graph, placement)
                    if not result.ok:  # the machinery's failure, not a drift: left out of this sample
                        print(f"{graph.name} {label} at {at:.0f} s failed ({result.failure.kind}): "
                              f"{result.failure.message}", flush=True)
                        continue
                    steps.setdefault((graph.name, label), []).append((at, result.median))
            if args.request_rounds:
                delay, hops = measure_request_delay(measurer, args.request_rounds)
                late = sum(hop > LATE_HOP for hop in hops["busy"]) / len(hops["busy"])
                steps.setdefault((REQUEST_PROBE, "late share"), []).append((at, late))
                steps.setdefault((REQUEST_PROBE, "delay"), []).append((at, delay))

    series: dict[tuple[str, str], list[tuple[float, float]]] = {key: value for key, value in steps.items()}
    for graph in graphs:
        reference = dict(steps.get((graph.name, REFERENCE), []))
        for label in PLACEMENTS:
            if label == REFERENCE:
                continue
            series[(graph.name, f"{label} / {REFERENCE}")] = [
                (at, value / reference[at]) for at, value in steps.get((graph.name, label), []) if at in reference]
    rows = drift_rows({key: value for key, value in series.items() if len(value) >= 3}, args.lags,
                      tolerance=args.interval / 2)
    late = dict(series.get((REQUEST_PROBE, "late share"), []))
    for row in rows:
        if "/" not in row["measured"] and row["model"] != REQUEST_PROBE or row["measured"] == "delay":
            row["median"] *= 1e3  # step times and the delay in ms; ratios and shares stay as they are
        if late and "/" in row["measured"]:
            pairs = [(late[at], value) for at, value in series[(row["model"], row["measured"])] if at in late]
            row["spearman_with_late_share"] = spearman(*zip(*pairs)) if len(pairs) >= 3 else None
    columns = ["model", "measured", "samples", "median", "p10_pct", "p90_pct",
               *(f"drift_{lag:g}min_pct" for lag in args.lags), *(["spearman_with_late_share"] * bool(late))]
    write_report("machine_drift", columns, rows, args.out, models=args.models, size=args.size, minutes=args.minutes,
                 interval=args.interval, lags=args.lags, warmup=args.warmup, repeats=args.repeats,
                 samples={f"{model} | {label}": values for (model, label), values in steps.items()},
                 command=" ".join(["python", "experiments/probes/machine_drift.py",
                                   *(argv if argv is not None else sys.argv[1:])]))


if __name__ == "__main__":
    main()
