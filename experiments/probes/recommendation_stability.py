"""Does `placer optimize` give the same answer run after run? The same command several times in a row, each in a
fresh process as a user runs it; per run the recommended plan, the plans tied with the fastest (within the noise of
its rounds), each plan's median and what the calibrated twin predicted for it (the learned candidate's error
apart: does the twin believe the placement it taught the planner?); then whether every run recommended the same
plan, or a plan of every other run's tie set.

    python experiments/probes/recommendation_stability.py [--model two-tower] [--target local:2] [--runs 5]
        [--budget 180] [--out results/recommendation_stability.json]

Measured: run it on a quiet machine, nothing else timing beside it. The calibration is made by the first run and
reused by the others (as the README's main job reuses it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from experiments._report import write_report  # noqa: E402

COLUMNS = ["run", "recommended", "recommended_ms", "tied_with_fastest", "fastest", "fastest_ms", "learned_ms",
           "learned_predicted_ms", "learned_error_pct", "seconds"]


def one_run(model: str, target: str, budget: float, out: Path) -> dict:
    """`placer optimize MODEL --target TARGET --budget B --json` in a fresh process: its row of the table."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "agents.cli", "optimize", model, "--target", target, "--budget",
                           str(budget), "--no-progress", "--json", "--out", str(out)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"placer optimize failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout)
    rows = [r for r in result["measured"] if r["ok"]]
    fastest = min(rows, key=lambda r: r["median"])
    recommended = next(r for r in rows if r["name"] == result["recommended"])
    predicted = {r["name"]: r["predicted"]["seconds"] * 1e3 for r in rows
                 if r["predicted"] is not None and r["predicted"].get("ok", True)}
    learned = next((r for r in rows if r["name"] == "learned"), None)
    learned_ms = None if learned is None else learned["median"] * 1e3
    learned_predicted = predicted.get("learned")
    return {"recommended": result["recommended"], "recommended_ms": recommended["median"] * 1e3,
            "learned_ms": learned_ms, "learned_predicted_ms": learned_predicted,
            "learned_error_pct": None if learned_ms is None or learned_predicted is None
            else 100 * (learned_predicted / learned_ms - 1),
            "predicted_ms": predicted, "calibration_poor_fit": result["calibration_poor_fit"],
            "tied_with_fastest": [r["name"] for r in rows if r["tied_with_fastest"]],
            "fastest": fastest["name"], "fastest_ms": fastest["median"] * 1e3,
            "medians_ms": {r["name"]: r["median"] * 1e3 for r in rows},
            "rounds": {r["name"]: len(r["rounds"]) for r in rows},
            "twin_refit": next((note for note in result.get("notes", ())
                                if note.startswith("the twin's core time per transfer")), None),
            "seconds": time.monotonic() - started}


def agreement(rows: list[dict]) -> dict:
    """Whether the runs agree: the same recommendation in every run, or every run's recommendation within every
    run's tie set."""
    recommended = {r["recommended"] for r in rows}
    within_every_tie = all(r["recommended"] in other["tied_with_fastest"] for r in rows for other in rows)
    return {"same_recommendation": len(recommended) == 1, "recommendations": sorted(recommended),
            "every_recommendation_in_every_tie_set": within_every_tie}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="two-tower")
    parser.add_argument("--target", default="local:2")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--budget", type=float, default=180.0)
    parser.add_argument("--out", default="results/recommendation_stability.json")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error("--runs must be at least 2: one run agrees with itself")
    rows = []
    plan = Path(args.out).with_suffix(".plan.json")
    for run in range(1, args.runs + 1):
        row = {"run": run, **one_run(args.model, args.target, args.budget, plan)}
        rows.append(row)
        learned = ("" if row["learned_error_pct"] is None else
                   f"; learned measured {row['learned_ms']:.2f} ms, predicted {row['learned_predicted_ms']:.2f} "
                   f"({row['learned_error_pct']:+.1f} %)")
        print(f"run {run}: recommended {row['recommended']} ({row['recommended_ms']:.2f} ms); tied with the fastest: "
              f"{', '.join(row['tied_with_fastest'])}{learned}; {row['seconds']:.0f} s", flush=True)
    verdict = agreement(rows)
    print(json.dumps(verdict))
    write_report("recommendation_stability", COLUMNS, rows, args.out,
                 command="python experiments/probes/recommendation_stability.py "
                         + " ".join(argv if argv is not None else sys.argv[1:]),
                 model=args.model, target=args.target, budget=args.budget, **verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())
