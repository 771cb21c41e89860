"""Simulator, then real: three ways to spend one wall-time budget on learning a placement for a real target.

    python experiments/probes/simulator_then_real.py [--model two-tower] [--size small] [--cluster local:2]
        [--minutes 4] [--rounds 5] [--runs runs/simulator_then_real] [--out results/simulator_then_real.json]

- measured only: `placer train` with measured rewards for the whole budget;
- simulator only: the same agent on the target's calibrated simulator for the whole budget;
- simulator, then measured: half the budget's worth of simulated updates (as many as the simulator-only run
  made in its first half), then measured rewards for the other half.

The target is calibrated once first (not counted in the budgets; every regime that simulates uses the same
file), and every run uses the default preset. At the end, the best placement of each regime and every
baseline are measured again side by side in `--rounds` interleaved rounds on the real target: those medians
are the result, not the runs' own (optimistic) best samples.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from agents import run_files  # noqa: E402
from agents.experiment.config import ExperimentConfig  # noqa: E402
from agents.experiment.run import run_experiment  # noqa: E402
from experiments._report import write_report  # noqa: E402
from placer.cost import compare, open_target  # noqa: E402
from placer.measure import MeasureConfig  # noqa: E402
from placer.models import build_model  # noqa: E402


def calibrate_target(cluster: str, path: Path) -> Path:
    from placer.calibrate import calibrate
    from placer.measure import Measurer, parse_target

    if not path.exists():
        with Measurer(parse_target(cluster)) as measurer:
            calibration = calibrate(measurer)
        calibration.save(path)
        print(calibration.describe())
    return path


def updates_within(history: list, seconds: float) -> int:
    """How many updates a run had completed `seconds` into its training."""
    return max([1] + [record["update"] for record in history if record["wall_time"] <= seconds])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="two-tower")
    parser.add_argument("--size", default="small")
    parser.add_argument("--cluster", default="local:2")
    parser.add_argument("--minutes", type=float, default=4.0, help="training budget of each regime")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the final comparison")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", default="runs/simulator_then_real")
    parser.add_argument("--out")
    args = parser.parse_args()

    runs = Path(args.runs)
    runs.mkdir(parents=True, exist_ok=True)
    calibration = calibrate_target(args.cluster, runs / "calibration.json")
    common = dict(model=args.model, size=args.size, updates=None, time_budget=args.minutes, seed=args.seed,
                  runs=str(runs), progress=False)
    results, wall = {}, {}

    started = time.monotonic()
    results["simulator only"] = run_experiment(ExperimentConfig(
        **common, backend="simulated", cluster=f"calibrated:{calibration}"))
    wall["simulator only"] = time.monotonic() - started
    history = run_files.read_trainer_state(results["simulator only"].run_dir).history
    simulated_updates = updates_within(history, 60.0 * args.minutes / 2)

    started = time.monotonic()
    results["measured only"] = run_experiment(ExperimentConfig(
        **common, backend="measured", cluster=args.cluster, final_rounds=0))
    wall["measured only"] = time.monotonic() - started

    started = time.monotonic()
    results["simulator, then measured"] = run_experiment(ExperimentConfig(
        **{**common, "time_budget": args.minutes / 2}, backend="measured", cluster=args.cluster, final_rounds=0,
        simulator_updates=simulated_updates, calibration=str(calibration)))
    wall["simulator, then measured"] = time.monotonic() - started

    graph = build_model(args.model, args.size)
    contenders = {name: _best_assignment(result.run_dir) for name, result in results.items()}
    with open_target(graph, args.cluster, measure_config=MeasureConfig(warmup_steps=3, timed_steps=10)) as target:
        baselines = _baseline_assignments(results["measured only"].run_dir, graph, target.devices)
        contenders.update(baselines)
        compared = compare(target.evaluate, contenders, args.rounds)
    best_baseline = min((compared[name].median, name) for name in baselines if compared[name].ok)
    rows = []
    for name, result in compared.items():
        regime = results.get(name)
        rows.append({
            "placement": name,
            "measured_ms": result.median * 1e3 if result.ok else None,
            "vs_best_baseline_pct": 100 * (best_baseline[0] - result.median) / best_baseline[0] if result.ok else None,
            "samples": regime.summary.samples + (regime.summary.simulator.samples if regime.summary.simulator else 0)
            if regime else None,
            "measured_samples": (regime.summary.samples if regime.summary.backend == "measured" else 0) if regime else None,
            "wall_s": round(wall[name]) if regime else None,
            "run": str(regime.run_dir) if regime else None,
        })
    write_report("simulator_then_real", ["placement", "measured_ms", "vs_best_baseline_pct", "samples", "measured_samples",
                                         "wall_s"], rows, args.out, model=args.model, size=args.size,
                 cluster=args.cluster, minutes=args.minutes, rounds=args.rounds, simulated_updates=simulated_updates,
                 best_baseline=best_baseline[1], calibration=str(calibration))


def _best_assignment(run_dir: Path) -> list[int]:
    return list(run_files.read_trainer_state(run_dir).best_assignment)


def _baseline_assignments(run_dir: Path, graph, devices) -> dict[str, list[int]]:
    return {name: run_files.baseline_assignment(run_dir, timing, graph, devices)
            for name, timing in run_files.read_baselines(run_dir).items() if timing.ok}


if __name__ == "__main__":
    main()
