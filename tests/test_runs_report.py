"""experiments/reports/runs_report.py: one row per run, comparing what the run compared."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def write_run(root: Path, model: str, stamp: str, summary: dict, config: dict) -> None:
    from agents import run_files
    from agents.experiment.config import ExperimentConfig

    run_dir = root / model / stamp
    run_dir.mkdir(parents=True)
    defaults = {"agent": "hierarchical", "updates": 10, "best_update": None, "final_comparison": None,
                "best_placement": None, "baselines_at_start": summary["baselines"],
                "best_baseline_step_time": min(summary["baselines"].values()), "beaten_baselines": ()}
    run_files.write_summary(run_dir, run_files.RunSummary(**{"model": model, **defaults, **summary}))
    run_files.write_config(run_dir, ExperimentConfig(model=model, **config), {})


def test_measured_rows_show_the_re_measured_learned_time_next_to_the_best_sample_and_the_newest_run(tmp_path):
    measured = {"size": "tiny", "backend": "measured", "cluster": "local:2", "samples": 40, "wall_time": 360.0,
                "best_step_time": 0.0290, "step_time": 0.0320, "baselines": {"single-device": 0.0316, "expert": 0.0362},
                "best_baseline": "single-device", "improvement_over_best_baseline": (0.0316 - 0.0320) / 0.0316}
    config = {"size": "tiny", "backend": "measured", "cluster": "local:2", "time_budget": 6.0, "updates": None,
              "agent": "hierarchical", "preset": "reference", "agent_options": {"tanh_constant": 2.5}}
    write_run(tmp_path, "rnnlm", "20260101-000000", {**measured, "step_time": 0.5}, config)  # older: ignored
    write_run(tmp_path, "rnnlm", "20260102-000000", measured, config)
    out = tmp_path / "report.json"
    printed = subprocess.run([sys.executable, "experiments/reports/runs_report.py", str(tmp_path), "--out", str(out)], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
    [row] = json.loads(out.read_text())["rows"]
    assert row["learned_ms"] == 32.0 and row["best_sampled_ms"] == 29.0
    assert row["single-device_ms"] == 31.6 and round(row["vs_best_pct"], 2) == -1.27
    assert row["command"] == ("python experiments/train_rnnlm.py --size tiny --backend measured --cluster local:2 "
                              "--time-budget 6.0 --preset reference --set tanh_constant=2.5")
    assert row["command"] in printed
