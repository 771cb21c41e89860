"""Does the calibration hold still? Several independent calibrations of the local testbed, side by side.

    python experiments/probes/calibration_stability.py [--calibrations 3] [--rounds 5] [--model two-tower]
                                                [--size small] [--out results/calibration_stability.json]

Each calibration starts its own testbed (`local:2`) and probes it as `placer calibrate` does. The model's op
costs are profiled once, and a fixed set of its placements (one worker, the expert, round-robin,
contiguous splits at 25/50/75 %) is predicted with every calibration. Reported: each parameter per
calibration, its largest deviation from the median over calibrations (aim: within 20 %), the same for what a
transfer between idle workers costs per byte (the slowest of the two cores and the wire), and each
placement's predictions and their largest deviation from their median (aim: within 10 %). With `--out`,
each calibration is also saved beside the report (`NAME.calibration-K.json`, its raw probe timings included),
so that what moved a parameter can be read afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402
from placer.heuristics import make_heuristic  # noqa: E402
from placer.calibrate import calibrate  # noqa: E402
from placer.calibration import PARAMETERS  # noqa: E402
from placer.measure import LocalTestbed, Measurer  # noqa: E402
from placer.models import build_model  # noqa: E402
from placer.placement import Placement  # noqa: E402
from placer.profile import profile_costs  # noqa: E402
from placer.simulate import Simulator, SimulatorConfig  # noqa: E402


def fixed_placements(model: str, graph, devices) -> dict[str, Placement]:
    chosen = {name: make_heuristic(name, graph, devices, model=model) for name in ("single-device", "expert", "round-robin")}
    groups = len(graph.groups)
    for share in (0.25, 0.5, 0.75):
        cut = int(groups * share)
        chosen[f"split {share:.2f}"] = Placement.from_assignment(graph, devices, [0] * cut + [1] * (groups - cut))
    return chosen


def free_transfer_per_byte(calibration) -> float:
    """Seconds per byte of a transfer between idle workers, as the twin prices it: the slowest of the sender's
    core, the receiver's and the wire (calibrations before 2026-11-30 left the wire infinite where the free
    transfers grew less than 5 % faster than the busier core: near that edge it flipped between calibrations
    while this barely moved)."""
    wire = 1.0 / calibration.bandwidth if calibration.bandwidth > 0 else 0.0
    return max(calibration.send_cpu_per_byte, calibration.recv_cpu_per_byte, wire)


def deviation(values: list[float]) -> float:
    """Largest relative deviation from the median."""
    middle = statistics.median(values)
    return max(abs(v - middle) / abs(middle) for v in values) if middle else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calibrations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="two-tower")
    parser.add_argument("--size", default="small")
    parser.add_argument("--out")
    args = parser.parse_args()

    graph = build_model(args.model, args.size)
    calibrations = []
    costs = None
    for index in range(args.calibrations):
        with Measurer(LocalTestbed(workers=2)) as measurer:  # a fresh testbed each time: independent
            calibration = calibrate(measurer, rounds=args.rounds, seed=index)
            print(calibration.describe(), flush=True)
            if args.out:
                out = Path(args.out)
                print(f"saved {calibration.save(out.with_name(f'{out.stem}.calibration-{index}.json'))}", flush=True)
            calibrations.append(calibration)
            devices = measurer.devices
            if costs is None:
                costs = profile_costs(graph, measurer, steps=5, step_overhead=calibration.step_overhead)
    placements = fixed_placements(args.model, graph, devices)
    predictions = {name: [] for name in placements}
    for calibration in calibrations:
        linked, config = calibration.apply(devices, SimulatorConfig(cpu_slots=1))
        simulator = Simulator(graph, linked, {"CPU": costs}, config)
        for name, placement in placements.items():
            predictions[name].append(simulator.simulate(placement.group_devices).step_time)

    rows = []
    for parameter in (*PARAMETERS, "remote_overhead", "request_delay"):
        values = [getattr(c, parameter) for c in calibrations]
        rows.append({"what": parameter, "values": [f"{v:.4g}" for v in values], "median": statistics.median(values),
                     "max_deviation_pct": 100 * deviation(values), "aim_pct": 20,
                     "met": deviation(values) <= 0.20})
    values = [free_transfer_per_byte(c) for c in calibrations]
    rows.append({"what": "free transfer per byte", "values": [f"{v:.4g}" for v in values],
                 "median": statistics.median(values), "max_deviation_pct": 100 * deviation(values), "aim_pct": 20,
                 "met": deviation(values) <= 0.20})
    for name, values in predictions.items():
        rows.append({"what": f"{args.model} {name} (ms)", "values": [f"{v * 1e3:.2f}" for v in values],
                     "median": statistics.median(values) * 1e3, "max_deviation_pct": 100 * deviation(values),
                     "aim_pct": 10, "met": deviation(values) <= 0.10})
    write_report("calibration_stability", ["what", "median", "max_deviation_pct", "aim_pct", "met", "values"], rows,
                 args.out, target="local:2", rounds=args.rounds, model=args.model, size=args.size,
                 poor_fits=[c.poor_fit for c in calibrations],
                 residuals=[dict(c.residuals) for c in calibrations],
                 intervals=[{k: list(v) for k, v in c.intervals.items()} for c in calibrations],
                 command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
