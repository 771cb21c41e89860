"""Does `placer optimize --budget B` end within B? Several models through it, each in a fresh process as a user runs
it; per model the search's own seconds (from its start: building the graph, calibrating, profiling, the search and
the measured comparison), the process's wall time, how far over B each went, and the notes that say what the
budget cut.

    python experiments/probes/budget_holds.py [--models two-tower experiments.model_coverage:gru ...]
        [--target local:2] [--budget 180] [--out results/budget_holds.json]

The first model calibrates the target inside its budget, as a first run on a new machine does; the others reuse
that calibration. Measured: run it on a quiet machine, nothing else timing beside it.
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

COLUMNS = ["model", "budget_s", "search_s", "over_pct", "wall_s", "measured", "cut_short", "cuts"]
DEFAULT_MODELS = ["two-tower", "experiments.model_coverage:gru", "experiments.model_coverage:lstm",
                  "experiments.model_coverage:attention_encoder", "experiments.model_coverage:mobilenetv3small"]
CUT_WORDS = ("--budget", "raise --budget")


def one_model(model: str, target: str, budget: float, directory: Path) -> dict:
    """`placer optimize MODEL --budget B --json` in a fresh process: its row."""
    plan = directory / f"{model.replace(':', '-').replace('.', '-')}.plan.json"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "agents.cli", "optimize", model, "--target", target, "--budget",
                           str(budget), "--calibration", str(directory / "calibration.json"), "--no-progress", "--json",
                           "--out", str(plan)], capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        return {"model": model, "budget_s": budget, "wall_s": wall, "cuts": f"failed: {done.stderr.strip()[-300:]}"}
    result = json.loads(done.stdout)
    cuts = [note for note in result["notes"] if any(word in note for word in CUT_WORDS)]
    return {"model": model, "budget_s": budget, "search_s": result["seconds"],
            "over_pct": 100 * (result["seconds"] / budget - 1), "wall_s": wall,
            "measured": sum(1 for row in result["measured"] if row["measured"]),
            "cut_short": sum(1 for row in result["measured"] if row["measured"] and len(row["rounds"]) < result["rounds"]),
            "cuts": " | ".join(cuts) or "none", "phase_seconds": result["phase_seconds"],
            "machine_check": result.get("machine_check")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--target", default="local:2")
    parser.add_argument("--budget", type=float, default=180.0)
    parser.add_argument("--out", default="results/budget_holds.json")
    args = parser.parse_args(argv)
    directory = Path(args.out).with_suffix("")
    directory.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in args.models:
        rows.append(one_model(model, args.target, args.budget, directory))
        row = rows[-1]
        print(f"{model}: {row.get('search_s') or float('nan'):.0f} s of search for --budget {args.budget:g} "
              f"({row['wall_s']:.0f} s wall); cuts: {row['cuts']}", flush=True)
    command = "python experiments/probes/budget_holds.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("budget_holds", COLUMNS, rows, args.out, command=command.strip(), target=args.target,
                 budget=args.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
