"""What a finished (or interrupted) run reports: its summary, the table `placer train` prints, and the
exported placement file with the facts a user needs to trust it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from agents import run_files
from agents.experiment.config import ExperimentError
from agents.run_files import BaselineTiming, RunSummary, TrainerState


def summarize(config, run_dir: Path, state: TrainerState, baselines: Mapping[str, BaselineTiming], best_baseline,
              agent_name: str, final: Mapping[str, float] | None = None) -> RunSummary:
    best = state.best_step_time
    if final is not None:  # measured side by side at the end: these numbers decide, not the first timings
        compared = final["learned"]
        baseline_times = {name: final.get(name, math.inf) for name in baselines}
        best_baseline = min(((t, name) for name, t in baseline_times.items()), default=(math.inf, None))
    else:
        compared = best
        baseline_times = {name: timing.seconds for name, timing in baselines.items()}
    return RunSummary(
        model=config.model, size=config.size, backend=config.backend, cluster=config.target, agent=agent_name,
        updates=state.updates, samples=state.samples, wall_time=state.elapsed, best_step_time=best,
        best_update=_best_update(state), step_time=compared,
        final_comparison=dict(final) if final is not None else None,
        best_placement=run_files.BEST_PLACEMENT if (run_dir / run_files.BEST_PLACEMENT).exists() else None,
        baselines={name: (t if math.isfinite(t) else None) for name, t in baseline_times.items()},
        baselines_at_start={name: timing.step_time for name, timing in baselines.items()},
        best_baseline=best_baseline[1], best_baseline_step_time=best_baseline[0],
        improvement_over_best_baseline=(best_baseline[0] - compared) / best_baseline[0]
        if math.isfinite(best_baseline[0]) and math.isfinite(compared) else None,
        beaten_baselines=tuple(sorted(name for name, t in baseline_times.items() if compared < t)),
    )


def _best_update(state) -> int | None:
    for record in state.history:
        if record.get("step_time_best") == state.best_step_time:
            return record["update"]
    return None


def describe(summary: RunSummary, run_dir: Path) -> str:
    """The table `placer train` prints at the end, and where the results are."""
    lines = [f"{summary.model} ({summary.size}), {summary.backend} on {summary.cluster}: {summary.agent} ran "
             f"{summary.updates} updates, {summary.samples} placements in {summary.wall_time:.0f} s",
             f"  {'learned (' + summary.agent + ')':<24} {_ms(summary.step_time)}"]
    if summary.start_step_time is not None:
        lines.append(f"  {'start (before training)':<24} {_ms(summary.start_step_time)}")
    if summary.simulator is not None:
        phase = summary.simulator
        lines.append(f"  {'simulator phase best':<24} {_ms(phase.step_time)}  (predicted "
                     f"{_ms(phase.predicted_step_time).strip()} after {phase.updates} simulated updates)")
    if summary.final_comparison:
        lines[0] += (f"; best sample {_ms(summary.best_step_time).strip()}, then measured again next to the "
                     "baselines (medians below)")
    for name, step_time in sorted(summary.baselines.items(), key=lambda item: _sort_key(item[1])):
        mark = "  beaten" if name in summary.beaten_baselines else ""
        lines.append(f"  {name:<24} {_ms(step_time)}{mark}")
    if summary.improvement_over_best_baseline is not None:
        lines.append(f"  vs best baseline ({summary.best_baseline}): "
                     f"{100 * summary.improvement_over_best_baseline:+.1f}% (positive: learned is faster)")
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
    from placer.errors import PlacementFileError

    run = run_files.read_run(run_dir)
    if run.placement is None:
        raise ExperimentError(f"{run_dir} has no best placement yet (no update has completed)")
    config, summary, best = run.config, run.summary, run.state.best_step_time
    final = summary.final_comparison if summary else None
    metadata = {
        "model": config.model, "size": config.size, "backend": config.backend, "cluster": config.target,
        "agent": config.agent, "step_time": final["learned"] if final else best,
        "step_time_kind": ("measured median, re-measured next to the baselines" if final else
                           "measured median" if config.backend == "measured" else "simulated"),
        "updates": run.state.updates, "samples": run.state.samples,
        "baselines": dict(summary.baselines) if summary else
        {name: timing.step_time for name, timing in run.baselines.items()},
        "beaten_baselines": list(summary.beaten_baselines) if summary else
        sorted(name for name, timing in run.baselines.items() if best < timing.seconds),
        "run_dir": str(Path(run_dir).resolve()),
    }
    exported = run.placement.with_metadata(**metadata)
    try:
        exported.save(out)
    except PlacementFileError as error:
        raise ExperimentError(f"{run_dir}'s best placement cannot be exported: {error}") from None
    return dict(exported.metadata)
