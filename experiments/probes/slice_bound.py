"""How much room is left past the GPU benchmark's plans, read against the bound of each count of slices?

    python experiments/probes/slice_bound.py [--results results/gpu_machines.json] [--setups SETUP ...]
        [--out results/slice_bound.json]

The machine's bound of `placer optimize` on a modeled machine used to pair the whole batch's work with the
chain of ops at the smallest slice of the batch searched: the least of each over every plan, from two different
plans. Every plan runs each op of the step at one slice of the batch (replicas times micro-batches), so it is
bounded by the bound of its own count of slices, k copies of the forward and backward at B/k samples and the
update at least once (`placer.simulate.bound.sliced_step_bound`), and the least of those over the counts the
search makes is the bound of the machine (`placer.simulate.bound.machine_bound`, as the search now reads it).

Per setup of a GPU machines benchmark's JSON: the bound of every count of slices the search makes there (the
whole batch; each degree of data parallelism; the micro-batch counts it scheduled; replicas of several GPUs as
pipelines over one and two micro-batches a GPU), the least of them, and the benchmark's plans read against it
beside the bound they were read against: the recommended plan's times the bound, the planner's share of the
best plan without it's gap, and the heuristics' refinement's. The plans are the JSON's; only the bound is new.
Simulated; nothing is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

COLUMNS = ["setup", "slices_bounds_ms", "machine_bound_ms", "slice_bound_ms", "binding_slices", "best",
           "best_x_machine_bound", "best_x_slice_bound", "planner_closed_pct", "planner_closed_now_pct",
           "heuristics_refined_closed_pct", "heuristics_refined_closed_now_pct", "wall_s"]

def searched_slices(gpus: int, batch: int, micro_batch_counts) -> list[int]:
    """The counts of slices of a batch of `batch` samples that the search on `gpus` GPUs makes plans of: each degree
    of data parallelism, the micro-batch counts it scheduled, and each replica of several GPUs as a pipeline."""
    from agents.optimize_modeled import REPLICA_MICRO_BATCHES
    from placer.replicas import replica_degrees

    degrees = replica_degrees(gpus, batch)
    counts = set(degrees) | {int(m) for m in micro_batch_counts or ()}
    for degree in degrees:
        group = gpus // degree
        if group > 1:
            counts |= {degree * group * factor for factor in REPLICA_MICRO_BATCHES
                       if (batch // degree) % (group * factor) == 0}
    return sorted(k for k in counts if k > 1 and batch % k == 0)


def setup_row(row: dict) -> dict:
    from placer.cost import open_target
    from placer.cost.spec import parse_target_spec
    from placer.models import build_model_apart, model_batch
    from placer.schedule.predict import slice_bound
    from placer.simulate.bound import gap_closed, machine_bound, step_time_bound

    started = time.monotonic()
    model, size = row["model"].split()
    spec = row["machine"]
    gpus = sum(1 for device in parse_target_spec(spec).devices.devices if device.kind == "GPU")
    batch = model_batch(model, size)
    with open_target(build_model_apart(model, size), spec) as target:
        bounds = {1: step_time_bound(target.simulator, simulated_on=spec)}
    for k in searched_slices(gpus, batch, row.get("micro_batch_counts")):
        bounds[k] = slice_bound(build_model_apart(model, size, batch=batch // k), k, spec)
        print(f"  {row['setup']}: {k} slices {bounds[k].value * 1e3:.2f} ms ({bounds[k].binding})", flush=True)
    least = machine_bound(bounds.values())
    baseline, planner, refined = row.get("baseline_ms"), row.get("planner_ms"), row.get("heuristics_refined_ms")
    ms = 1e-3

    def closed(learned):
        share = gap_closed(baseline * ms, learned * ms, least) if baseline and learned else None
        return None if share is None else 100 * share

    return {
        "setup": row["setup"], "slices_bounds_ms": {k: round(b.value * 1e3, 3) for k, b in bounds.items()},
        "machine_bound_ms": row["machine_bound_ms"], "slice_bound_ms": least.value * 1e3,
        "binding_slices": least.slices, "binding": least.binding, "best": row["best"], "best_ms": row["best_ms"],
        "best_x_machine_bound": row["best_ms"] / row["machine_bound_ms"],
        "best_x_slice_bound": row["best_ms"] * ms / least.value,
        "baseline": row.get("baseline"), "baseline_ms": baseline,
        "planner_closed_pct": row.get("planner_closed_pct"), "planner_closed_now_pct": closed(planner),
        "heuristics_refined_closed_pct": row.get("heuristics_refined_closed_pct"),
        "heuristics_refined_closed_now_pct": closed(refined), "wall_s": time.monotonic() - started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results/gpu_machines.json",
                        help="a JSON of experiments/gpu_machines.py whose plans are read against the new bound")
    parser.add_argument("--setups", nargs="+", help="only these setups of it (default: all)")
    parser.add_argument("--out", default="results/slice_bound.json")
    args = parser.parse_args(argv)
    with open(args.results) as f:
        rows = json.load(f)["rows"]
    known = [row["setup"] for row in rows]
    unknown = sorted(set(args.setups or ()) - set(known))
    if unknown:
        parser.error(f"{args.results} has no setup {', '.join(unknown)}; it has {', '.join(known)}")
    chosen = [row for row in rows if not args.setups or row["setup"] in args.setups]
    command = "python experiments/probes/slice_bound.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = [setup_row(row) for row in chosen]
    write_report("slice_bound", COLUMNS, out, args.out, command=command.strip(), results=args.results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
