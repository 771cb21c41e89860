"""Does the calibration's own uncertainty explain why the twin believes the learned placement? Each placement of a
`placer optimize` run priced on its calibrated twin with every fitted parameter at its point value, then with each
one, and all at once, at the costly end of its 90 % bootstrap interval; beside what the run measured.

    python experiments/probes/twin_uncertainty.py --runs results/recommendation_stability_learned.json
        [--calibration results/recommendation_stability_learned.plan.calibration.json] [--model two-tower]
        [--out results/twin_uncertainty.json]

`--runs` is the JSON of `experiments/probes/recommendation_stability.py` (each run's measured medians); the learned
placement is `--learned FILE` (a placement file), else found again as `placer optimize` finds it (the hierarchical
planner, its default updates and seed, on the same twin: deterministic, but only the placement the runs measured
while the simulator is the one they ran with); the heuristics by name. Simulated against measured; run the runs on
a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

COLUMNS = ["placement", "measured_ms", "predicted_ms", "error_pct", "costliest_ms", "costliest_error_pct",
           "widest_parameter", "widest_pct"]

COSTLY_END = {"bandwidth": 0, "latency": 1, "send_cpu": 1, "send_cpu_per_byte": 1, "recv_cpu": 1,
              "recv_cpu_per_byte": 1, "spanning_overhead": 1, "remote_overhead": 1, "request_delay": 1,
              "step_overhead": 1}
"""Which end of each parameter's interval makes a step slower: the low end of a bandwidth, the high end of a cost."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", required=True, help="recommendation_stability.py's JSON")
    parser.add_argument("--calibration", help="the calibration the runs used (default: beside --runs' plan)")
    parser.add_argument("--model", default="two-tower")
    parser.add_argument("--learned", help="the placement file the runs measured as `learned` (default: found again)")
    parser.add_argument("--out", default="results/twin_uncertainty.json")
    args = parser.parse_args(argv)
    runs = json.loads(Path(args.runs).read_text())
    calibration = Path(args.calibration or Path(args.runs).with_suffix(".plan.calibration.json"))
    if not calibration.exists():
        parser.error(f"no calibration at {calibration}: give --calibration")

    from placer.calibration import load_calibration
    from placer.cost import open_target
    from placer.cost.calibrated import calibration_variant
    from placer.heuristics import time_heuristics
    from placer.models import load_model

    from agents.candidates import learned_placement
    from agents.optimize import OptimizeArgs

    warnings.simplefilter("ignore", RuntimeWarning)  # a stranger's or poorly fitting calibration is said below
    defaults = OptimizeArgs(args.model)
    graph = load_model(args.model, defaults.size)
    spec = f"calibrated:{calibration.resolve()}"
    measured = {}
    for row in runs["rows"]:
        for name, ms in row["medians_ms"].items():
            measured.setdefault(name, []).append(ms)
    with open_target(graph, spec) as twin:
        if args.learned:
            from placer.placement import read_placement_file

            placements = {"learned": read_placement_file(args.learned).to_placement(graph, twin.devices)}
        else:
            placements = {"learned": learned_placement(graph, spec, updates=defaults.learn_updates, seconds=None,
                                                       seed=defaults.seed)}
        names = [n for n in measured if n in ("expert", "metis", "scotch", "single-device", "exact", "round-robin")]
        for name, timing in time_heuristics(twin, names, model=args.model).items():
            if timing.placement is not None:
                placements[name] = timing.placement
        point = {n: twin.evaluate(p).seconds for n, p in placements.items()}
    fitted = load_calibration(calibration)
    moved: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        variants = {par: {par: fitted.intervals[par][end]} for par, end in COSTLY_END.items()
                    if par in fitted.intervals and fitted.intervals[par][end] is not None
                    and math.isfinite(fitted.intervals[par][end])}
        variants["all at once"] = {k: v for change in variants.values() for k, v in change.items()}
        for label, changes in variants.items():
            path = calibration_variant(calibration, changes, Path(scratch) / f"{label.replace(' ', '-')}.json")
            with open_target(graph, f"calibrated:{path}") as twin:
                moved[label] = {n: twin.evaluate(p).seconds for n, p in placements.items()}
    rows = []
    for name, placement in placements.items():
        seen = statistics.median(measured[name]) if name in measured else None
        single = {par: moved[par][name] / point[name] - 1 for par in moved if par != "all at once"}
        widest = max(single, key=lambda par: single[par])
        costliest = moved["all at once"][name]
        rows.append({"placement": name, "measured_ms": seen, "measured_runs_ms": measured.get(name),
                     "predicted_ms": point[name] * 1e3,
                     "error_pct": None if seen is None else 100 * (point[name] * 1e3 / seen - 1),
                     "costliest_ms": costliest * 1e3,
                     "costliest_error_pct": None if seen is None else 100 * (costliest * 1e3 / seen - 1),
                     "widest_parameter": widest, "widest_pct": 100 * single[widest],
                     "each_parameter_pct": {par: 100 * x for par, x in single.items()}})
    write_report("twin_uncertainty", COLUMNS, rows, args.out,
                 command="python experiments/probes/twin_uncertainty.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                 runs=args.runs, calibration=str(calibration), model=args.model,
                 intervals={k: list(v) for k, v in fitted.intervals.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
