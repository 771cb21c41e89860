"""What a finished (or interrupted) run reports: its summary, the table `placer train` prints, and the
exported placement file with the facts a user needs to trust it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from agents.experiment.config import ExperimentConfig, ExperimentError

if TYPE_CHECKING:
    from placer.placement import PlacementFile
    from placer.timeline import StepTimeline


def summarize(config, run_dir: Path, state, baselines, best_baseline, agent_name: str,
              final: Mapping[str, float] | None = None) -> dict[str, Any]:
    best = state.best_step_time
    if final is not None:  # measured side by side at the end: these numbers decide, not the first timings
        compared = final["learned"]
        baseline_times = {name: final.get(name, math.inf) for name in baselines}
        best_baseline = min(((t, name) for name, t in baseline_times.items()), default=(math.inf, None))
    else:
        compared = best
        baseline_times = {name: (r["step_time"] if r["ok"] else math.inf) for name, r in baselines.items()}
    beaten = sorted(name for name, t in baseline_times.items() if compared < t)
    return {
        "model": config.model, "size": config.size, "backend": config.backend, "cluster": config.target,
        "agent": agent_name, "updates": state.updates, "samples": state.samples, "wall_time": state.elapsed,
        "best_step_time": best, "best_update": _best_update(state),
        "step_time": compared,
        "final_comparison": dict(final) if final is not None else None,
        "best_placement": "best_placement.json" if (run_dir / "best_placement.json").exists() else None,
        "baselines": {name: (t if math.isfinite(t) else None) for name, t in baseline_times.items()},
        "baselines_at_start": {name: (r["step_time"] if r["ok"] else None) for name, r in baselines.items()},
        "best_baseline": best_baseline[1], "best_baseline_step_time": best_baseline[0],
        "improvement_over_best_baseline": (best_baseline[0] - compared) / best_baseline[0]
        if math.isfinite(best_baseline[0]) and math.isfinite(compared) else None,
        "beaten_baselines": beaten,
    }


def _best_update(state) -> int | None:
    for record in state.history:
        if record.get("step_time_best") == state.best_step_time:
            return record["update"]
    return None


def describe(summary: Mapping[str, Any], run_dir: Path) -> str:
    """The table `placer train` prints at the end, and where the results are."""
    lines = [f"{summary['model']} ({summary['size']}), {summary['backend']} on {summary['cluster']}: "
             f"{summary['agent']} ran {summary['updates']} updates, {summary['samples']} placements in "
             f"{summary['wall_time']:.0f} s",
             f"  {'learned (' + summary['agent'] + ')':<24} {_ms(summary['step_time'])}"]
    if summary.get("start_step_time") is not None:
        lines.append(f"  {'start (before training)':<24} {_ms(summary['start_step_time'])}")
    simulator = summary.get("simulator")
    if simulator:
        lines.append(f"  {'simulator phase best':<24} {_ms(simulator.get('step_time'))}  (predicted "
                     f"{_ms(simulator['predicted_step_time']).strip()} after {simulator['updates']} simulated updates)")
    if summary.get("final_comparison"):
        lines[0] += (f"; best sample {_ms(summary['best_step_time']).strip()}, then measured again next to the "
                     "baselines (medians below)")
    for name, step_time in sorted(summary["baselines"].items(), key=lambda item: _sort_key(item[1])):
        mark = "  beaten" if name in summary["beaten_baselines"] else ""
        lines.append(f"  {name:<24} {_ms(step_time)}{mark}")
    if summary.get("improvement_over_best_baseline") is not None:
        lines.append(f"  vs best baseline ({summary['best_baseline']}): "
                     f"{100 * summary['improvement_over_best_baseline']:+.1f}% (positive: learned is faster)")
    lines += [f"Results in {run_dir}/ (summary.json, best_placement.json, timeline.json, log.txt)",
              f"  curves:  placer dashboard {run_dir}",
              f"  export:  placer export {run_dir} --out placement.json"]
    return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "failed"
    return f"{seconds * 1e3:10.3f} ms"


def _sort_key(seconds: float | None) -> float:
    return math.inf if seconds is None else seconds


def export_run(run_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the run's best placement to `out`, with what a user needs to trust it: the model, graph
    fingerprint, devices, step time and backend, and the baselines it beat. Works on a finished run and
    on one still training or killed (from its last completed update). Returns the file's metadata."""
    from agents.experiment.run import load_run_config
    from placer.errors import PlacementFileError
    from placer.placement import read_placement_file

    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    best_file = run_dir / "best_placement.json"
    if not best_file.exists():
        raise ExperimentError(f"{run_dir} has no best placement yet (no update has completed)")
    try:
        placement_file = read_placement_file(best_file)
    except PlacementFileError as error:
        raise ExperimentError(f"{run_dir}'s best placement cannot be exported: {error}") from None
    state = json.loads((run_dir / "trainer_state.json").read_text())
    baselines = json.loads((run_dir / "baselines.json").read_text()) if (run_dir / "baselines.json").exists() else {}
    best = state["best_step_time"]
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
    final = summary.get("final_comparison") if summary else None
    metadata = {
        "model": config.model, "size": config.size, "backend": config.backend, "cluster": config.target,
        "agent": config.agent, "step_time": final["learned"] if final else best,
        "step_time_kind": ("measured median, re-measured next to the baselines" if final else
                           "measured median" if config.backend == "measured" else "simulated"),
        "updates": state["updates"], "samples": state["samples"],
        "baselines": summary["baselines"] if summary else
        {name: (r["step_time"] if r["ok"] else None) for name, r in baselines.items()},
        "beaten_baselines": summary["beaten_baselines"] if summary else
        sorted(name for name, r in baselines.items() if not r["ok"] or best < r["step_time"]),
        "run_dir": str(run_dir.resolve()),
    }
    exported = placement_file.with_metadata(**metadata)
    exported.save(out)
    return dict(exported.metadata)


@dataclass(frozen=True)
class RunFiles:
    """What a run directory holds, read at one moment; None (or empty) for what the run has not written yet:
    a run still training has no summary nor timeline, one before its first update no history either."""

    run_dir: Path
    config: ExperimentConfig
    """config.json: model, size, backend, target, agent, ..."""
    history: list[Mapping[str, Any]]
    """trainer_state.json's metrics of every update (`agents.training`), step times in seconds."""
    baselines: Mapping[str, Mapping[str, Any]]
    """baselines.json: each baseline's step time on the run's target, timed when the run started."""
    summary: Mapping[str, Any] | None
    placement: PlacementFile | None
    """best_placement.json."""
    timeline: StepTimeline | None
    """timeline.json: one traced step of the best placement (simulated, or a real one)."""

    @property
    def finished(self) -> bool:
        return self.summary is not None


def read_run(run_dir: str | Path) -> RunFiles:
    """The files of a run of `placer train`, finished or still running; ExperimentError if it is no run."""
    from agents.experiment.run import load_run_config
    from placer.placement import read_placement_file
    from placer.timeline import read_chrome_trace

    run_dir = Path(run_dir)
    config = load_run_config(run_dir)

    def load(name: str) -> Any:
        path = run_dir / name
        return json.loads(path.read_text()) if path.exists() else None

    state = load("trainer_state.json") or {}
    timeline = run_dir / "timeline.json"
    placement = run_dir / "best_placement.json"
    return RunFiles(run_dir=run_dir, config=config,
                    history=list(state.get("history", [])), baselines=load("baselines.json") or {},
                    summary=load("summary.json"),
                    placement=read_placement_file(placement) if placement.exists() else None,
                    timeline=read_chrome_trace(timeline) if timeline.exists() else None)


def write_json(path: Path, data: Any) -> None:
    """Atomically: a reader (the dashboard, an export of a running run) never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=_json_default))
    tmp.replace(path)


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)
