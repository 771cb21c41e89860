"""How much do Tessel's schedules gain over sequential, GPipe and 1F1B? Every shape on modeled devices.

    python experiments/schedules.py [--shapes v-shape k-shape] [--devices 2 4 8] [--micro-batches 4 8 16]
                                    [--memory-limits 1x none] [--time-limit 10] [--out FILE]

Per shape x devices x micro-batches x memory limit: makespan and bubble rate of each method, its peak
memory, and the search time of Tessel and Tessel-fast. A memory limit "Nx" is N units per device for each
device (1x: what 1F1B keeps on a plain pipeline's first stage); "none" is unlimited. GPipe ignores the limit
(as GPipe does): its row says whether it stayed under it. Spans are Tessel's unit spans (forward 1, backward 2).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from experiments._report import write_report  # noqa: E402
from placer.errors import BlockTemplateError, ScheduleInfeasibleError  # noqa: E402
from placer.schedule.methods import METHODS, make_schedule  # noqa: E402
from placer.schedule.shapes import SHAPES, shape_template  # noqa: E402


def memory_limit(spec: str, devices: int) -> int | None:
    if spec == "none":
        return None
    if not spec.endswith("x") or not spec[:-1].isdigit():
        raise SystemExit(f"--memory-limits takes values like 1x, 2x or none, got {spec!r}")
    return int(spec[:-1]) * devices


def run(shapes, device_counts, micro_batch_counts, limits, time_limit: float) -> list[dict]:
    rows = []
    for shape in shapes:
        for devices in device_counts:
            try:
                template = shape_template(shape, devices)
            except BlockTemplateError as error:  # e.g. k-shape on an odd number of devices
                print(f"skipped {shape} on {devices} devices: {error}", file=sys.stderr)
                continue
            for micro_batches in micro_batch_counts:
                for spec in limits:
                    limit = memory_limit(spec, devices)
                    row = {"shape": shape, "devices": devices, "micro_batches": micro_batches, "memory_limit": spec}
                    for method in METHODS:
                        try:
                            plan = make_schedule(method, template, micro_batches, limit, time_limit=time_limit)
                        except ScheduleInfeasibleError:
                            row[f"{method}_makespan"] = "infeasible"
                            continue
                        row[f"{method}_makespan"] = plan.makespan
                        row[f"{method}_bubbles"] = round(plan.bubble_rate, 4)
                        row[f"{method}_peak"] = max(plan.peak_memory().values())
                        if method.startswith("tessel"):
                            row[f"{method}_seconds"] = round(plan.search_seconds, 2)
                            row[f"{method}_status"] = plan.search_status
                    rows.append(row)
                    print(f"  {shape} {devices} devices {micro_batches} micro-batches {spec}: " + ", ".join(
                        f"{m} {row.get(f'{m}_makespan')}" for m in METHODS), file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--devices", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--micro-batches", nargs="+", type=int, default=[4, 8, 16])
    parser.add_argument("--memory-limits", nargs="+", default=["1x", "none"])
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per Tessel search (default 10)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    rows = run(args.shapes, args.devices, args.micro_batches, args.memory_limits, args.time_limit)
    columns = ["shape", "devices", "micro_batches", "memory_limit"]
    columns += [f"{m}_makespan" for m in METHODS] + [f"{m}_bubbles" for m in METHODS]
    columns += ["gpipe_peak", "tessel_seconds", "tessel_status", "tessel-fast_seconds"]
    write_report("schedules", columns, rows, args.out, time_limit=args.time_limit,
                 note="makespan in time units (forward 1, backward 2); bubbles: idle fraction of device time")


if __name__ == "__main__":
    main()
