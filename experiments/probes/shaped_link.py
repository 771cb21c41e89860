"""Two testbed workers over a shaped link: does calibrating recover the link's rate, and does the calibrated twin
predict placements whose tensors cross it?

    python experiments/probes/shaped_link.py [--rates 1gbit 100mbit] [--model two-tower] [--size small]
        [--placements round-robin metis expert single-device] [--rounds 3] [--calibration-rounds 3]
        [--out results/shaped_link.json]

Per rate: the testbed `local:2,link=RATE` (the second worker in a network namespace of its own, joined to the first
by a veth pair that `tc` shapes to RATE; `placer.testbed`) is calibrated (`placer calibrate`, into
results/shaped_link/RATE.calibration.json; reused when present), and the calibrated bandwidth is set beside the
shaping. Then every placement is timed on the linked testbed in interleaved rounds and predicted by its calibrated
twin (`calibrated:FILE`): measured and predicted step time, their error, and the bytes each step sends across.
Run it on a quiet machine: nothing else may time meanwhile.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import print_table, write_report  # noqa: E402
from placer.measure.targets import format_rate, parse_rate  # noqa: E402

CALIBRATION_COLUMNS = ("target", "shaped_MBps", "calibrated_MBps", "calibrated_interval_MBps", "error_pct",
                       "fit_misses")
PLACEMENT_COLUMNS = ("target", "placement", "crossing_MB", "measured_ms", "spread_pct", "predicted_ms", "error_pct")


def calibrated(target: str, path: Path, rounds: int):
    """The calibration of `target` at `path`, made there first when missing."""
    from placer.calibrate import calibrate
    from placer.calibration import load_calibration
    from placer.measure import Measurer

    if path.exists():
        calibration = load_calibration(path)
        if calibration.target != target:
            raise SystemExit(f"{path} calibrates {calibration.target}, not {target}: delete it to calibrate again")
        return calibration
    print(f"calibrating {target} ({rounds} rounds)", flush=True)
    with Measurer(target) as measurer:
        calibration = calibrate(measurer, rounds=rounds)
    path.parent.mkdir(parents=True, exist_ok=True)
    calibration.save(path)
    return calibration


def link_rows(model: str, size: str, rate: int, placements: list[str], rounds: int, calibration_rounds: int,
              directory: Path) -> tuple[dict, list[dict]]:
    from placer.cost import compare, open_target
    from placer.heuristics import make_heuristic
    from placer.models import build_model

    target = f"local:2,link={format_rate(rate)}"
    path = directory / f"{format_rate(rate)}.calibration.json"
    calibration = calibrated(target, path, calibration_rounds)
    low, high = calibration.intervals.get("bandwidth", (calibration.bandwidth, calibration.bandwidth))
    shaped = rate / 8
    calibration_row = {
        "target": target, "shaped_MBps": shaped / 1e6, "calibrated_MBps": calibration.bandwidth / 1e6,
        "calibrated_interval_MBps": f"{low / 1e6:.1f}-{high / 1e6:.1f}",
        "error_pct": 100 * (calibration.bandwidth / shaped - 1),
        "fit_misses": ", ".join(f"{name} {r * 100:+.0f}%" for name, r in sorted(calibration.misses.items())) or "none",
    }
    graph = build_model(model, size)
    rows = []
    with open_target(graph, f"calibrated:{path}") as twin, open_target(graph, target) as linked:
        chosen = {name: make_heuristic(name, graph, twin.devices, model=model, simulator=twin.simulator)
                  for name in placements}
        predicted = {name: twin.evaluate(placement) for name, placement in chosen.items()}
        crossing = {name: sum(twin.simulator.simulate(placement.group_device_array).link_bytes.values())
                    for name, placement in chosen.items()}
        measured = compare(linked.evaluate, chosen, rounds)
    for name in placements:
        median = measured[name].median if measured[name].ok else None
        timings = sorted(t.seconds for t in measured[name].timings if t.ok)
        rows.append({
            "target": target, "placement": name, "crossing_MB": crossing[name] / 1e6,
            "measured_ms": None if median is None else median * 1e3,
            "spread_pct": 100 * (timings[-1] - timings[0]) / median if median and len(timings) > 1 else None,
            "predicted_ms": predicted[name].seconds * 1e3 if predicted[name].ok else None,
            "error_pct": (100 * (predicted[name].seconds / median - 1)
                          if median and predicted[name].ok else None),
        })
    return calibration_row, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", nargs="+", default=["1gbit", "100mbit"], help="link rates, as tc writes them")
    parser.add_argument("--model", default="two-tower")
    parser.add_argument("--size", default="small")
    parser.add_argument("--placements", nargs="+", default=["round-robin", "metis", "expert", "single-device"])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds timing every placement once")
    parser.add_argument("--calibration-rounds", type=int, default=3)
    parser.add_argument("--out", default="results/shaped_link.json")
    args = parser.parse_args(argv)
    rates = [parse_rate(rate) for rate in args.rates]  # a bad rate is refused before anything runs
    directory = Path(args.out).with_suffix("")
    calibrations, placements = [], []
    for rate in rates:
        calibration_row, rows = link_rows(args.model, args.size, rate, args.placements, args.rounds,
                                          args.calibration_rounds, directory)
        calibrations.append(calibration_row)
        placements += rows
    print_table(CALIBRATION_COLUMNS, calibrations)
    print()
    write_report("shaped_link", PLACEMENT_COLUMNS, placements, args.out, calibrations=calibrations,
                 model=args.model, size=args.size, rounds=args.rounds, calibration_rounds=args.calibration_rounds,
                 command=" ".join(["python", "experiments/probes/shaped_link.py", *(argv if argv is not None else sys.argv[1:])]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
