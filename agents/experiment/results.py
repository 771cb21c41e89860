"""What a finished (or interrupted) run reports: its summary, the table `placer train` prints, and the
exported placement file with the facts a user needs to trust it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from agents import run_files
from agents.experiment.config import ExperimentError
from agents.run_files import BaselineTiming, RunSummary, TrainerState
from placer.simulate.bound import StepTimeBound, gap_closed, times_bound


def summarize(config, run_dir: Path, state: TrainerState, baselines: Mapping[str, BaselineTiming], best_baseline,
              agent_name: str, final: Mapping[str, float] | None = None,
              bound: StepTimeBound | None = None) -> RunSummary:
    """The run's record: what decides (the final comparison's medians when there is one), the baselines, and
    each against the `bound` when the run has one.

    best_baseline: (seconds, name) of the baseline the learned placement is judged against, chosen before the
    final comparison (the fastest side by side when the measured phase chose its start, else at the first
    timings). The final comparison times it again but does not choose it: of several baselines as fast as each
    other, the one whose timings came out lowest is optimistic by the noise, and the learned placement (often one
    of them, kept as its start) would be judged against that luck. Only where the chosen baseline failed there
    does the final comparison's fastest stand in."""
    best = state.best_step_time
    if final is not None:  # measured side by side at the end: these numbers decide, not the first timings
        compared = final["learned"]
        baseline_times = {name: final.get(name, math.inf) for name in baselines}
        chosen = best_baseline[1]
        best_baseline = ((baseline_times[chosen], chosen) if math.isfinite(baseline_times.get(chosen, math.inf))
                         else min(((t, name) for name, t in baseline_times.items()), default=(math.inf, None)))
    else:
        compared = best
        baseline_times = {name: timing.seconds for name, timing in baselines.items()}
    contenders = {"learned": compared, **{name: t for name, t in (final or {}).items() if name != "learned"},
                  **baseline_times}
    measured = {name: t for name, t in contenders.items() if math.isfinite(t)}
    fastest = min(measured, key=lambda name: (measured[name], name != "learned")) if measured else None
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
        fastest=fastest, fastest_step_time=measured.get(fastest),
        bound=None if bound is None else bound.to_dict(),
        gap_closed=None if bound is None else gap_closed(best_baseline[0], compared, bound),
    )


def _best_update(state) -> int | None:
    for record in state.history:
        if record.get("step_time_best") == state.best_step_time:
            return record["update"]
    return None


def describe(summary: RunSummary, run_dir: Path) -> str:
    """The table `placer train` prints at the end, and where the results are."""
    batch = f", batch {summary.batch_size}" if summary.batch_size is not None else ""
    bound = (summary.bound or {}).get("seconds")

    def against_bound(seconds: float | None) -> str:
        ratio = times_bound(seconds, bound)
        return "" if ratio is None else f" {ratio:6.2f}x bound"

    lines = [f"{summary.model} ({summary.size}{batch}), {summary.backend} on {summary.cluster}: {summary.agent} ran "
             f"{summary.updates} updates, {summary.samples} placements in {summary.wall_time:.0f} s",
             f"  {'learned (' + summary.agent + ')':<24} {_ms(summary.step_time)}{against_bound(summary.step_time)}"]
    if summary.start_step_time is not None:
        lines.append(f"  {'untrained policy':<24} {_ms(summary.start_step_time)}"
                     f"{against_bound(summary.start_step_time)}  (its greedy placement before training)")
    if summary.simulator is not None:
        phase = summary.simulator
        unreliable = "; UNRELIABLE" if summary.calibration_poor_fit else ""
        lines.append(f"  {'simulator phase best':<24} {_ms(phase.step_time)}{against_bound(phase.step_time)}  "
                     f"(predicted {_ms(phase.predicted_step_time).strip()} after {phase.updates} simulated "
                     f"updates{unreliable})")
    if summary.calibration_poor_fit:
        lines.append(f"  {'':<24} the calibration fits its probes poorly ({summary.calibration_poor_fit}): the "
                     "simulator phase's predictions and the bound are unreliable; calibrate again on a quiet machine")
    if summary.measured_start == "simulator-best":
        lines.append(f"  {'':<24} the measured phase started from the simulator phase's best, which measured "
                     "fastest of it and the baselines")
    elif summary.measured_start is not None:
        lines.append(f"  {'':<24} the measured phase started from {summary.measured_start}, which measured faster "
                     "than the simulator phase's best")
    if summary.learned_is_start:
        lines.append(f"  {'':<24} training confirmed nothing faster than its start "
                     f"({summary.measured_start or 'the start'}): the learned placement is that start")
    if summary.final_comparison:
        lines[0] += (f"; best sample {_ms(summary.best_step_time).strip()}, then measured again next to the "
                     "baselines (medians below)")
    for name, step_time in sorted(summary.baselines.items(), key=lambda item: _sort_key(item[1])):
        mark = "  beaten" if name in summary.beaten_baselines else ""
        lines.append(f"  {name:<24} {_ms(step_time)}{against_bound(step_time)}{mark}")
    if summary.bound is not None:
        lines.append(f"  {'bound':<24} {_ms(bound)}  {bound_source(summary.bound, summary.backend)}")
    tied = set(summary.final_tied or ())
    rounds = f"a paired test over {summary.final_rounds} rounds" if summary.final_rounds else "a paired test"
    if summary.improvement_over_best_baseline is not None:
        # improvement = (best - learned) / best, so learned / best = 1 - improvement
        noise = ""
        if summary.final_tied is not None and {"learned", summary.best_baseline} <= tied:
            noise = f"; both within the noise of the fastest ({rounds})"
        lines.append(f"  learned: {times_as_fast(1 - summary.improvement_over_best_baseline)} the best baseline "
                     f"({summary.best_baseline}){noise}")
        if summary.final_comparison:
            lines.append(f"  {'':<9}{summary.best_baseline}: the fastest baseline before the final comparison, "
                         "timed again there, not chosen there (of equally fast placements, the lowest timings "
                         "are luck)")
    if summary.gap_closed is not None:
        lines.append(f"  gap closed: {100 * summary.gap_closed:+.1f}% of the best baseline's distance to the bound")
    if summary.fastest not in (None, "learned"):
        beyond = ""
        if summary.final_tied is not None:
            beyond = (", within the noise of the learned one" if "learned" in tied else
                      f", faster than the learned one beyond the noise ({rounds})")
        lines.append(f"  the fastest placement measured is {summary.fastest}'s "
                     f"({_ms(summary.fastest_step_time).strip()}){beyond}: `placer export` writes that one")
    if summary.batch_note is not None:
        lines.append(summary.batch_note)
    lines += [f"Results in {run_dir}/ (summary.json, best_placement.json, timeline.json, log.txt)",
              f"  curves:  placer dashboard {run_dir}",
              f"  export:  placer export {run_dir} --out placement.json"]
    return "\n".join(lines)


def times_as_fast(ratio: float) -> str:
    """A step time against a reference's, `ratio` = step time / reference, as a person reads it once:
    "3.1× slower than", "1.25× faster than", "as fast as"."""
    if not math.isfinite(ratio) or ratio <= 0:
        return "not comparable with"
    factor = max(ratio, 1 / ratio)
    digits = 2 if factor < 2 else 1
    if round(factor, digits) == 1:
        return "as fast as"
    return f"{factor:.{digits}f}× {'slower' if ratio > 1 else 'faster'} than"


def bound_source(bound: Mapping[str, Any], backend: str) -> str:
    """Where a run's bound comes from, in words: simulated, and a prediction where the step times are measured."""
    where = bound.get("simulated_on") or "the simulator"
    if not bound.get("seconds"):
        return f"(no placement fits in memory on {where})"
    kind = "predicted on" if backend == "measured" else "simulated on"
    return f"({kind} {where}; {bound['binding']} binds; no placement's step is shorter there)"


def _ms(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "failed"
    return f"{seconds * 1e3:10.3f} ms"


def _sort_key(seconds: float | None) -> float:
    return math.inf if seconds is None else seconds


def export_run(run_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the fastest placement the run measured to `out` (the learned one, unless the comparison that
    decides found the start, the simulator phase's best or a baseline faster), with what a user needs to trust
    it: the model, graph fingerprint, devices, step time and backend, where it came from (`source`), the
    learned placement's step time, and the baselines it beat. Works on a finished run and on one still
    training or killed (from its last completed update: the learned placement). Returns the file's metadata."""
    from placer.errors import PlacementFileError
    from placer.placement import read_placement_file

    run = run_files.read_run(run_dir)
    if run.placement is None:
        raise ExperimentError(f"{run_dir} has no best placement yet (no update has completed)")
    config, summary, best = run.config, run.summary, run.state.best_step_time
    final = summary.final_comparison if summary else None
    learned = final["learned"] if final else best
    source, placement_file, step_time = "learned", run.placement, learned
    if summary is not None and summary.fastest not in (None, "learned"):
        path = run_files.contender_placement_file(run_dir, summary.fastest, run.baselines)
        if path is not None:
            source, placement_file, step_time = summary.fastest, read_placement_file(path), summary.fastest_step_time
    baselines = dict(summary.baselines) if summary else {name: t.step_time for name, t in run.baselines.items()}
    metadata = {
        "model": config.model, "size": config.size, "backend": config.backend, "cluster": config.target,
        "agent": config.agent, "source": source, "step_time": step_time, "learned_step_time": learned,
        "step_time_kind": ("measured median, re-measured next to the baselines" if final else
                           "measured median" if config.backend == "measured" else "simulated"),
        "updates": run.state.updates, "samples": run.state.samples, "baselines": baselines,
        "beaten_baselines": sorted(name for name, t in baselines.items()
                                   if name != source and (t is None or step_time < t)),
        "run_dir": str(Path(run_dir).resolve()),
    }
    exported = placement_file.with_metadata(**metadata)
    try:
        exported.save(out)
    except PlacementFileError as error:
        raise ExperimentError(f"{run_dir}'s placement cannot be exported: {error}") from None
    return dict(exported.metadata)
