"""Every baseline on every benchmark model: simulated on modeled 2- and 4-GPU machines, or measured on
the local testbed.

    python experiments/baselines_report.py [--models ...] [--size paper] [--gpus 2 4] [--out FILE]
    python experiments/baselines_report.py --measured [--models ...] [--size tiny] [--out FILE]

Simulated, per model and machine (host CPU + N x V100, NVLink, roofline costs): the simulated step time
of each baseline, whether it fits in memory, and how long computing the placement took. Baselines:
every one in `placer.heuristics` (single-device, round-robin, expert, cpu-only, random, metis, scotch,
m-topo, m-etf, m-sct).

Measured (`--measured`), on `local:2` (two gRPC workers pinned to one core each): the links and
overheads are calibrated and each model's op costs profiled on the testbed, the heuristics place from
that calibrated simulator, and every baseline is then measured for real (median of the timed steps).
"Fits" is whether the real run finished without running out of memory or failing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from experiments._report import write_report  # noqa: E402
from placer.cost import open_target  # noqa: E402
from placer.errors import PlacerError  # noqa: E402
from placer.heuristics import heuristics, make_heuristic, time_heuristics  # noqa: E402
from placer.models import build_model, model_names  # noqa: E402
from placer.simulate import Simulator  # noqa: E402


def measured_report(args) -> list[dict]:
    from placer.calibrate import calibrate
    from placer.measure import MeasureConfig, Measurer
    from placer.measure.targets import LocalTestbed
    from placer.profile import profile_costs
    from placer.simulate import SimulatorConfig

    rows = []
    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)
    with Measurer(LocalTestbed(workers=2), config) as measurer:
        calibration = calibrate(measurer)
        devices, sim_config = calibration.apply(measurer.devices, SimulatorConfig(cpu_slots=1))
        for name in args.models:
            graph = build_model(name, args.size)
            costs = profile_costs(graph, measurer, steps=args.profile_steps, step_overhead=calibration.step_overhead)
            simulator = Simulator(graph, devices, costs, sim_config)
            for baseline in heuristics():
                if baseline == "cpu-only":
                    continue  # every testbed device is a CPU: it is single-device here
                started = time.perf_counter()
                try:
                    placement = make_heuristic(baseline, graph, measurer.devices, model=name, simulator=simulator)
                except PlacerError as error:
                    rows.append({"model": name, "baseline": baseline, "error": str(error)[:80]})
                    continue
                took = time.perf_counter() - started
                measured = measurer.measure(graph, placement)
                rows.append({"model": name, "baseline": baseline,
                             "step_ms": measured.median * 1e3 if measured.ok else None,
                             "iqr_ms": measured.spread * 1e3 if measured.ok else None,
                             "fits": measured.ok, "placement_s": took,
                             "simulated_ms": simulator.simulate(placement).step_time * 1e3,
                             "moved_ops": len(measured.moved_ops),
                             "error": measured.failure.message[:80] if measured.failure else None})
                print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=model_names(benchmarks_only=True))
    parser.add_argument("--size", default="paper")
    parser.add_argument("--gpus", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--measured", action="store_true", help="measure on the local testbed (local:2) instead")
    parser.add_argument("--warmup", type=int, default=3, help="measured: warm-up steps per placement")
    parser.add_argument("--repeats", type=int, default=10, help="measured: timed steps per placement")
    parser.add_argument("--profile-steps", type=int, default=5, help="measured: traced steps to profile op costs")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.measured:
        if args.size == "paper":
            args.size = "tiny"
        rows = measured_report(args)
        write_report("baselines_report_measured", ["model", "baseline", "step_ms", "iqr_ms", "fits", "placement_s",
                                                   "simulated_ms", "moved_ops", "error"], rows, args.out,
                     size=args.size, machine="local:2 testbed (2 gRPC workers, 1 core each)",
                     warmup=args.warmup, repeats=args.repeats)
        return

    rows = []
    for name in args.models:
        graph = build_model(name, args.size)
        for gpus in args.gpus:
            target = open_target(graph, f"modeled:{gpus}xV100")
            for baseline, timing in time_heuristics(target, heuristics(), model=name).items():
                result = timing.step_time
                if result is None:
                    rows.append({"model": name, "gpus": gpus, "baseline": baseline, "error": timing.error[:80]})
                else:
                    rows.append({"model": name, "gpus": gpus, "baseline": baseline,
                                 "step_ms": result.samples[0] * 1e3 if result.samples else None,
                                 "fits": result.ok, "placement_s": timing.placing_seconds,
                                 "max_peak_gib": max(result.peak_memory.values()) / 2**30 if result.peak_memory else None,
                                 "error": result.message[:80] if not result.ok else None})
                print(rows[-1], flush=True)
    write_report("baselines_report", ["model", "gpus", "baseline", "step_ms", "fits", "max_peak_gib", "placement_s", "error"],
                 rows, args.out, size=args.size, machine="host CPU + N x V100 (modeled), roofline costs")


if __name__ == "__main__":
    main()
