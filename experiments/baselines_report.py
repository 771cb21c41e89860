"""Every baseline on every benchmark model: simulated on modeled 2- and 4-GPU machines, or measured on
the local testbed.

    python experiments/baselines_report.py [--models ...] [--size paper] [--gpus 2 4] [--out FILE]
    python experiments/baselines_report.py --measured [--models ...] [--size tiny] [--out FILE]

Simulated, per model and machine (host CPU + N x V100, NVLink, roofline costs): the simulated step time
of each baseline, whether it fits in memory, and how long computing the placement took. Baselines:
every one in `placer.heuristics` (single-device, round-robin, expert, cpu-only, random, metis, scotch,
m-topo, m-etf, m-sct, exact).

Measured (`--measured`), on `local:2` (two gRPC workers pinned to one core each, started afresh per
model): the links and overheads are calibrated once and each model's op costs profiled on the testbed,
the heuristics place from that calibrated simulator, and every baseline is then measured for real
(median of the timed steps).
"Fits" is whether the real run finished without running out of memory or failing.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from experiments._report import write_report  # noqa: E402
from placer.cost import open_target  # noqa: E402
from placer.heuristics import heuristics, time_heuristics  # noqa: E402
from placer.models import build_model, model_names  # noqa: E402
from placer.simulate import Simulator  # noqa: E402


def measured_report(args) -> list[dict]:
    from placer.calibrate import calibrate
    from placer.measure import MeasureConfig
    from placer.profile import profile_costs
    from placer.simulate import SimulatorConfig

    rows = []
    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)
    calibrated = None
    # every testbed device is a CPU: cpu-only is single-device here
    names = [name for name in heuristics() if name != "cpu-only"]
    for name in args.models:
        graph = build_model(name, args.size)
        with open_target(graph, "local:2", measure_config=config) as target:
            if calibrated is None:  # the testbed's links and overheads, the same for every model
                calibration = calibrate(target.measurer)
                calibrated = calibration.apply(target.devices, SimulatorConfig(cpu_slots=1))
            devices, sim_config = calibrated
            costs = profile_costs(graph, target.measurer, steps=args.profile_steps,
                                  step_overhead=calibration.step_overhead)
            simulator = Simulator(graph, devices, costs, sim_config)
            for baseline, timing in time_heuristics(target, names, model=name, simulator=simulator).items():
                measured = timing.step_time
                if measured is None:
                    rows.append({"model": name, "baseline": baseline, "error": timing.error[:80]})
                    continue
                rows.append({"model": name, "baseline": baseline,
                             "step_ms": measured.seconds * 1e3 if measured.ok else None,
                             "iqr_ms": measured.spread * 1e3 if measured.ok else None,
                             "fits": measured.ok, "placement_s": timing.placing_seconds,
                             "simulated_ms": simulator.simulate(timing.placement).step_time * 1e3,
                             "moved_ops": len(measured.moved_ops),
                             "error": measured.message[:80] if not measured.ok else None})
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
