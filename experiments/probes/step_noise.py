"""How many timed steps does a short step need? One placement timed again and again with several step counts.

    python experiments/probes/step_noise.py [--models placer.models.heldout:branchy_0_graph two-tower] [--size tiny]
        [--steps 10 30 100] [--calls 12] [--out results/step_noise.json]

A measurement is the median of its timed steps after a few warm-up steps, in a session of its own. Each model
runs with every op on worker 0 of `local:2`, timed `--calls` times with each count of `--steps`, the counts
alternating (each in its own session), after one measurement thrown away. Reported per model and count: the
median of the measurements, their 10th and 90th percentiles against it and the spread between the two, and,
within the sessions of the largest count, how far the medians of consecutive blocks of the smallest count
spread: when those spread as much as separate sessions do, the noise is the steps', and more steps cut it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402
from experiments.probes.machine_drift import spread  # noqa: E402


def block_spread(samples: Sequence[float], block: int) -> float | None:
    """(max - min) / median of the medians of consecutive `block`-step blocks of one session, as a percentage."""
    medians = [statistics.median(samples[start:start + block]) for start in range(0, len(samples) - block + 1, block)]
    if len(medians) < 2:
        return None
    return 100 * (max(medians) - min(medians)) / statistics.median(medians)


def noise_rows(model: str, medians: dict[int, list[float]], sessions: Sequence[Sequence[float]]) -> list[dict]:
    """One row per step count: the measurements' median and spread; the largest count's row also carries the
    median spread of its sessions' blocks of the smallest count."""
    rows = []
    smallest, largest = min(medians), max(medians)
    for count in sorted(medians):
        low, high = spread(medians[count])
        row = {"model": model, "timed_steps": count, "calls": len(medians[count]),
               "median_ms": 1e3 * statistics.median(medians[count]), "p10_pct": low, "p90_pct": high,
               "p10_p90_pct": high - low, "blocks_within_session_pct": None}
        if count == largest and largest > smallest:
            spreads = [s for s in (block_spread(samples, smallest) for samples in sessions) if s is not None]
            row["blocks_within_session_pct"] = statistics.median(spreads) if spreads else None
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["placer.models.heldout:branchy_0_graph", "two-tower"])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 30, 100], help="timed steps per measurement")
    parser.add_argument("--calls", type=int, default=12, help="measurements per step count")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", default="results/step_noise.json")
    args = parser.parse_args(argv)
    if len(set(args.steps)) < 2 or min(args.steps) < 1:
        parser.error("give at least two step counts of 1 or more")
    if args.calls < 5:
        parser.error("give at least 5 calls per step count: the spread is read from their percentiles")

    from tqdm.auto import tqdm

    from placer.measure import MeasureConfig, Measurer, parse_target
    from placer.models import load_model
    from placer.placement import Placement

    counts = sorted(set(args.steps))
    graphs = [load_model(model, args.size) for model in args.models]  # a bad spec fails before a testbed starts
    rows = []
    with Measurer(parse_target("local:2")) as measurer:
        for graph in graphs:
            placement = Placement.on_device(graph, measurer.devices, 0)
            measurer.measure(graph, placement)  # a graph's first measurement on a testbed is slower
            medians: dict[int, list[float]] = {count: [] for count in counts}
            sessions = []
            for call in tqdm(range(args.calls), desc=graph.name, unit="call"):
                for count in counts[::1 if call % 2 == 0 else -1]:  # each count first in turn
                    result = measurer.measure(graph, placement, MeasureConfig(warmup_steps=args.warmup,
                                                                              timed_steps=count))
                    if not result.ok:
                        raise SystemExit(f"{graph.name} failed ({result.failure.kind}): {result.failure.message}")
                    medians[count].append(result.median)
                    if count == counts[-1]:
                        sessions.append(list(result.samples))
            rows += noise_rows(graph.name, medians, sessions)
    columns = ["model", "timed_steps", "calls", "median_ms", "p10_pct", "p90_pct", "p10_p90_pct",
               "blocks_within_session_pct"]
    write_report("step_noise", columns, rows, args.out, models=args.models, size=args.size, steps=counts,
                 calls=args.calls, warmup=args.warmup,
                 command=" ".join(["python", "experiments/probes/step_noise.py", *(argv if argv is not None else sys.argv[1:])]))


if __name__ == "__main__":
    main()
