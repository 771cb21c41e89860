"""One row per finished run: the learned placement's step time next to every baseline of that run.

    python experiments/reports/runs_report.py [RUNS_DIR ...] [--out FILE]

Reads RUNS_DIR/<model>/<timestamp>/summary.json (written by `placer train` and the launch scripts;
default RUNS_DIR: runs/results), newest run per model and backend. Each row carries the command that
regenerates it, read back from the run's config.json. `learned_ms` is the time the baselines were
compared with: on a measured run, the best placement measured again next to them at the end (the same
rounds give the baseline columns); `best_sampled_ms` is the best time seen while training.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from agents import run_files  # noqa: E402
from experiments._report import write_report  # noqa: E402

BASELINE_COLUMNS = ["single-device", "expert", "round-robin", "metis", "scotch", "m-topo", "m-etf", "m-sct", "exact"]


def command_of(config: dict) -> str:
    """The launch-script command line that reproduces a run's configuration."""
    script = Path(__file__).resolve().parents[1] / f"train_{config['model'].replace('-', '_')}.py"
    launcher = f"python experiments/{script.name}" if script.exists() else f"placer train {config['model']}"
    parts = [launcher, f"--size {config['size']}", f"--backend {config['backend']}"]
    if config.get("cluster"):
        parts.append(f"--cluster {config['cluster']}")
    if config.get("updates") is not None:
        parts.append(f"--updates {config['updates']}")
    if config.get("time_budget") is not None:
        parts.append(f"--time-budget {config['time_budget']}")
    if config.get("agent") != "hierarchical":
        parts.append(f"--agent {config['agent']}")
    if config.get("preset"):
        parts.append(f"--preset {config['preset']}")
    parts += [f"--set {key}={value}" for key, value in sorted(config.get("agent_options", {}).items())]
    return " ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", default=["runs/results"])
    parser.add_argument("--out")
    args = parser.parse_args()

    newest: dict[tuple[str, str], Path] = {}
    for root in args.runs:
        for summary_file in sorted(Path(root).glob(f"*/*/{run_files.SUMMARY}")):
            summary = run_files.read_summary(summary_file.parent)
            newest[(summary.model, summary.backend)] = summary_file.parent
    rows = []
    for (model, backend), run_dir in sorted(newest.items()):
        summary = run_files.read_summary(run_dir)
        config = run_files.load_run_config(run_dir).to_dict()
        row = {"model": model, "size": summary.size, "backend": backend, "cluster": summary.cluster,
               "samples": summary.samples, "wall_s": round(summary.wall_time),
               # The learned time the baselines were compared with: on a measured run, the best placement
               # measured again next to them at the end; the best sampled time is optimistic (max of noise).
               "learned_ms": summary.step_time * 1e3, "best_sampled_ms": summary.best_step_time * 1e3}
        for name in BASELINE_COLUMNS:
            value = summary.baselines.get(name)
            row[f"{name}_ms"] = None if value is None else value * 1e3
        row["best_baseline"] = summary.best_baseline
        improvement = summary.improvement_over_best_baseline
        row["vs_best_pct"] = None if improvement is None else 100 * improvement
        row["command"] = command_of(config)
        rows.append(row)
    columns = ["model", "size", "backend", "cluster", "samples", "wall_s", "learned_ms", "best_sampled_ms",
               *[f"{name}_ms" for name in BASELINE_COLUMNS], "best_baseline", "vs_best_pct"]
    write_report("runs_report", columns, rows, args.out)
    for row in rows:
        print(f"{row['model']}: {row['command']}")


if __name__ == "__main__":
    main()
