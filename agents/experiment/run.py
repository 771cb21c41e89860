"""One experiment, end to end: place a model with an agent, time the baselines, train, compare side by side.

`run_experiment(ExperimentConfig(...))` builds the environment (measured or simulated), times the
baselines on the same target, trains the agent with `agents.loop.train`, and leaves a run directory
(`agents.run_files` lists its files and is their only reader and writer).
"""

from __future__ import annotations

import logging
import math
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from agents import run_files
from agents.experiment.config import ExperimentConfig, ExperimentError
from agents.experiment.results import summarize
from agents.run_files import (
    BaselineTiming, MeasuredTargets, RunSummary, SimulatorPhase, StartPlacement, new_run_dir,
)
from agents.worker_envs import (EnvOnWorkers, EnvRecipe, FasterOfHereAndWorkers, RecordedEnv, describe_target,
                                evaluation_log, target_owned)
from placer.errors import PlacerError


@dataclass(frozen=True)
class ExperimentResult:
    run_dir: Path
    summary: RunSummary


def run_experiment(config: ExperimentConfig, run_dir: str | Path | None = None) -> ExperimentResult:
    """Train `config.agent` on `config.model` and fill `run_dir` (default: a new RUNS/<model>/<timestamp>).

    Called again with an existing run directory, it resumes where that run stopped."""
    from agents.factory import make_agent
    from agents.loop import TrainingConfig, train

    env = _make_env(config)  # builds the graph and opens the target: a model that fails leaves no run behind
    workers = ExitStack()
    try:
        # the workers open their targets, and targets of different kinds are refused, before the run exists
        engine = workers.enter_context(_evaluation_engine(config))
        evaluated_on, targets = _evaluated_on(config, env, engine)
        run_dir = Path(run_dir) if run_dir is not None else new_run_dir(config)
        if targets is not None:
            run_files.check_targets(run_dir, targets)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ExperimentError(f"cannot make the run directory {run_dir}: {error.strerror}") from None
    except BaseException:
        workers.close()
        env.close()
        raise
    log = _run_logger(run_dir)
    run_files.write_config(run_dir, config, _versions())
    log.info("run directory %s", run_dir.resolve())
    try:
        workers.enter_context(_workers_logged_to(log))
        if engine is not None:
            log.info("evaluating placements on %s", engine.description)
            for warning in engine.warnings:
                log.warning("%s", warning)
        if targets is not None:
            run_files.write_targets(run_dir, targets)
            for who, where in (("this process (baselines, final comparison)", targets.driver),
                               *((f"worker {slot}", worker) for slot, worker in enumerate(targets.workers))):
                log.info("%s measures on %s on host %s (pid %s%s), a target of kind %s", who, where["target"],
                         where["host"], where["pid"],
                         f", Ray node {where['ray_node']}" if where.get("ray_node") else "", where["kind"])
        graph, devices = env.graph, env.devices
        log.info("%s (%s): %d ops in the step, %d colocation groups%s; %s on %s (%s)",
                 graph.name, config.size, len(graph.step_ops), len(graph.groups),
                 f", batch {graph.batch.size}" if graph.batch is not None else "", config.backend, config.target,
                 ", ".join(d.short_name for d in devices))
        if graph.batch_note is not None:
            log.warning("%s", graph.batch_note)
        # a run with a simulator phase calibrates first, so that the heuristics that read op costs are placed
        # with its calibrated simulator and measured beside the others
        calibration = _calibrate_target(config, env, run_dir, log) if config.simulator_updates else None
        baselines = _load_or_time_baselines(config, env, run_dir, log, calibration)
        if calibration is not None:  # the simulator phase learns on the twin refit to the measured baselines
            calibration = _refit_calibration(env, run_dir, log, calibration, baselines)
        best_baseline = min(((b.seconds, name) for name, b in baselines.items() if b.ok), default=(math.inf, None))
        agent = make_agent(config.agent, graph, env.device_mask, devices, options=config.agent_settings, seed=config.seed,
                           init=config.init)
        trackers = _make_trackers(config, run_dir, agent, {name: b.step_time for name, b in baselines.items() if b.ok})
        weights = np.array([len(g.ops) for g in graph.groups], dtype=np.float64)

        training = TrainingConfig(updates=config.updates, samples_per_update=config.samples_per_update,
                                  greedy_every=config.greedy_every, confirm_repeats=config.repeats_to_confirm,
                                  time_budget=None if config.time_budget is None else 60.0 * config.time_budget,
                                  progress=config.progress)
        log.info("training %s: %s updates of %d samples, time budget %s", agent.name, config.updates,
                 config.samples_per_update, f"{config.time_budget} min" if config.time_budget else "none")
        start = _start_placement(agent, env, run_dir, log)
        simulator = _train_on_simulator(config, env, agent, run_dir, log, calibration,
                                        _tracked(trackers, first_update=0, simulated=True)) if calibration else None
        # the dashboards draw both phases as one curve: the measured updates follow the simulated ones
        first_update = simulator.phase.updates if simulator else 0
        measured = _tracked(trackers, first_update, simulated=False if simulator else None)
        logged = {"best": math.inf}

        def on_update(update: int, metrics: Mapping[str, Any]) -> None:
            if metrics["step_time_best"] < logged["best"]:
                logged["best"] = metrics["step_time_best"]
                _log_best_placement(trackers, first_update + update, run_dir, graph, devices, weights,
                                    metrics["step_time_best"])
                log.info("update %d: new best %.3f ms", update, metrics["step_time_best"] * 1e3)

        measured_start = _measured_start(config, env, run_dir, simulator, baselines, log)
        state = train(agent, evaluated_on, run_dir, training, callbacks=[measured, on_update],
                      start_from=None if measured_start is None else measured_start.assignment)
        workers.close()  # the baselines' final comparison and the timeline are this process's own
        final, final_tied = _final_comparison(config, env, run_dir, state.best_assignment, baselines, log, start,
                                              simulator)
        if measured_start is not None and measured_start.best_baseline is not None:
            best_baseline = (baselines[measured_start.best_baseline].seconds, measured_start.best_baseline)
        summary = summarize(config, run_dir, state, baselines, best_baseline, agent.name, final,
                            _step_time_bound(env, calibration, log))
        summary = replace(
            summary,
            simulator=None if simulator is None else replace(simulator.phase,
                                                             step_time=(final or {}).get("simulator-best")),
            start_step_time=None if start is None else (final or {}).get("start", start.step_time),
            timeline=_save_timeline(env, run_dir, state.best_assignment, log),
            batch_size=graph.batch.size if graph.batch is not None else None, batch_note=graph.batch_note,
            calibration_poor_fit=_poor_fit(calibration),
            measured_start=None if measured_start is None else measured_start.name,
            learned_is_start=measured_start is not None and state.best_assignment is not None
            and [int(a) for a in state.best_assignment] == measured_start.assignment,
            final_tied=final_tied, final_rounds=config.final_rounds if final is not None else None)
        run_files.write_summary(run_dir, summary)
        best_file = run_dir / run_files.BEST_PLACEMENT
        trackers.finish(summary.to_dict(), best_file if best_file.exists() else None,
                        _best_table(state.best_assignment, graph, devices))
        # the summary's best baseline: the final comparison's when there is one, as in the printed table
        log.info("best step time %.3f ms after %d samples (%.0f s); best baseline %s %.3f ms; beat: %s; "
                 "fastest measured: %s", summary.best_step_time * 1e3, summary.samples, summary.wall_time,
                 summary.best_baseline, summary.best_baseline_step_time * 1e3,
                 ", ".join(summary.beaten_baselines) or "none", summary.fastest)
        return ExperimentResult(run_dir, summary)
    finally:
        workers.close()
        env.close()
        _close_logger(log)


def _make_env(config: ExperimentConfig):
    from envs.placement import PlacementEnv

    env = PlacementEnv(model=config.model, size=config.size, backend=config.backend, devices=config.target,
                       reward=config.reward, failing_step_time=config.failing_step_time,
                       measure_config=config.measure_config)
    env.reset(seed=config.seed)
    return env


def _recipe(config: ExperimentConfig) -> EnvRecipe:
    """How a worker builds its own copy of the run's environment, on its own target: as `_make_env` does."""
    options = (("reward", config.reward), ("failing_step_time", config.failing_step_time))
    if config.measure_config is not None:
        options += (("measure_config", config.measure_config),)
    return EnvRecipe(config.model, config.size, config.target, config.backend, options=options, seed=config.seed)


@contextmanager
def _evaluation_engine(config: ExperimentConfig):
    """The workers that evaluate the run's placements (`--workers`, `--ray`), or None: this process. A
    measured target's Ray has one actor pinned to each node, which measures on its own machine."""
    if config.workers == 1 and config.ray is None:
        yield None
        return
    from agents.workers import open_workers

    with open_workers(config.workers, config.ray, per_node=config.backend == "measured") as engine:
        yield engine


@contextmanager
def _workers_logged_to(log):
    """A worker's death and the work sent again (an evaluation worker's, or a measurement worker's), in the run's
    log too; where the evaluate step runs; and Ray's own log lines (a Ray engine keeps them off the console)."""
    loggers = [logging.getLogger("placer.workers"), logging.getLogger("placer.measure"), logging.getLogger("ray"),
               evaluation_log]
    for logger in loggers:
        for handler in log.handlers:
            logger.addHandler(handler)
    try:
        yield
    finally:
        for logger in loggers:
            for handler in log.handlers:
                logger.removeHandler(handler)


def _evaluated_on(config: ExperimentConfig, env, engine) -> tuple[Any, MeasuredTargets | None]:
    """The environment training evaluates on (`env` itself, or the workers' copies of it), and, for a measured
    target, where it measures. Every worker's target must be the kind of this process's, where the baselines
    and the final comparison are measured: a TargetKindError names what differs."""
    from agents.workers import Task
    from placer.cost.kind import check_same_kind

    if config.backend != "measured":
        if engine is None:
            return env, None
        return FasterOfHereAndWorkers(EnvOnWorkers(_recipe(config), engine, local=env)), None
    here = describe_target(env)
    if engine is None:
        return RecordedEnv(env, here), MeasuredTargets(here.kind, here.origin)
    recipe = _recipe(config)
    workers = engine.run([Task(target_owned, (recipe,), worker=slot) for slot in range(engine.count)])
    check_same_kind((f"this process ({here.describe()})", here.kind),
                    {f"worker {slot} ({worker.describe()})": worker.kind for slot, worker in enumerate(workers)})
    return (EnvOnWorkers(recipe, engine, local=env, kind=here.kind.fingerprint),
            MeasuredTargets(here.kind, here.origin, tuple(worker.origin for worker in workers)))


# -- baselines ------------------------------------------------------------------------------------


def _load_or_time_baselines(config: ExperimentConfig, env, run_dir: Path, log,
                            calibration: Path | None = None) -> dict[str, BaselineTiming]:
    """Each baseline's placement and step time on the run's target, kept in the run directory. The heuristics
    that read op costs take them from the target's own simulator, else from its calibrated simulator
    (`calibration`, a measured run with a simulator phase)."""
    from contextlib import nullcontext

    from placer.cost import open_target
    from placer.cost.calibrated import PREFIX
    from placer.heuristics import HeuristicError, applicable_heuristics, time_heuristics
    from placer.models import is_builtin_model

    timings = run_files.read_baselines(run_dir)
    if timings is not None:  # resuming: the baselines were timed when the run started
        return timings
    model = config.model if is_builtin_model(config.model) else None
    wanted = list(config.baselines) if config.baselines is not None else applicable_heuristics(
        builtin_model=model is not None, simulator=config.has_simulator, model=model)
    with open_target(env.graph, f"{PREFIX}{calibration}") if calibration is not None else nullcontext() as twin:
        if twin is not None:
            log.info("baselines that read op costs are placed with the calibrated simulator of %s (%s)",
                     config.target, calibration)
        try:  # baselines the user named must be made; of the default ones, those that cannot be are left out
            made = time_heuristics(env.target, wanted, model=model, seed=config.seed,
                                   strict=config.baselines is not None,
                                   simulator=None if twin is None else twin.simulator,
                                   progress=lambda names: _progress(names, config.progress, "baselines"))
        except HeuristicError as error:
            raise ExperimentError(str(error)) from None
    timings = {}
    for name, timing in made.items():
        if timing.placement is None:  # a library missing or raising, a list scheduler out of memory
            log.warning("baseline %s skipped: %s", name, timing.error)
            continue
        timings[name] = run_files.write_baseline(run_dir, timing, env.graph)
        result = timing.step_time
        log.info("baseline %-13s %s (placement computed in %.2f s)", name,
                 f"{result.seconds * 1e3:.3f} ms" if result.ok else f"FAILED ({result.failure})",
                 timing.placing_seconds)
    run_files.write_baselines(run_dir, timings)
    return timings


def _start_placement(agent, env, run_dir: Path, log) -> StartPlacement | None:
    """A learned policy's greedy placement before its first update, and its step time: what training started
    from (with a partition prior, a heuristic's placement), so that what learning added can be told apart.
    Kept in the run directory, so that a resumed run compares against the same start."""
    from placer.placement import Placement

    start = run_files.read_start(run_dir, env.graph, env.devices)
    if start is not None:
        return start
    if not hasattr(agent, "policy") or (run_dir / run_files.TRAINER_STATE).exists():
        return None  # search agents have no policy to start from; an older run never recorded its start
    placement = Placement.from_assignment(env.graph, env.devices, [int(a) for a in agent.best_guess()],
                                          {"method": "start"})
    result = env.target.evaluate(placement)
    log.info("start (the untrained policy's greedy placement): %s",
             f"{result.seconds * 1e3:.3f} ms" if result.ok else f"failed ({result.failure}: {result.message})")
    return run_files.write_start(run_dir, placement, env.graph, result)


@dataclass(frozen=True)
class MeasuredStart:
    """Where the measured phase of a simulator-first run starts, and what the comparison that chose it found."""

    name: str
    """"simulator-best", or the baseline that measured fastest."""
    assignment: list[int]
    best_baseline: str | None
    """The baseline that measured fastest in that comparison: the run's best baseline, judged by the final
    comparison's timings but not chosen by them (`summarize`)."""


def _measured_start(config: ExperimentConfig, env, run_dir: Path, simulator: SimulatorResult | None,
                    baselines: Mapping[str, BaselineTiming], log) -> MeasuredStart | None:
    """Where the measured phase of a simulator-first run starts: the fastest, measured side by side, of the
    simulator phase's best and every baseline, those close to the fastest timed again (`compare_and_retime_leaders`).
    Started from a heuristic that beats what the simulator found, training keeps that heuristic unless it confirms
    something faster, so the learned placement ends no slower than it. Every baseline, not only those fastest when
    the run timed them once: baselines within the noise of each other swap places from one timing to the next.
    None without a simulator phase, or when resuming (the run kept its best)."""
    from placer.cost.compare import LEADERS_WITHIN

    if simulator is None or simulator.best_assignment is None or (run_dir / run_files.TRAINER_STATE).exists():
        return None
    contenders = {"simulator-best": [int(a) for a in simulator.best_assignment]}
    for timing in sorted((timing for timing in baselines.values() if timing.ok), key=lambda timing: timing.seconds):
        contenders.setdefault(timing.name, run_files.baseline_assignment(run_dir, timing, env.graph, env.devices))
    if len(contenders) == 1:
        return MeasuredStart("simulator-best", contenders["simulator-best"], None)
    rounds = max(config.final_rounds, 1)
    compared = _compare_distinct(env.target.evaluate, contenders, rounds, retime_leaders=True)
    ran = [contender for contender in compared if compared[contender].ok]
    name = min(ran, key=lambda contender: compared[contender].median, default="simulator-best")
    best_baseline = min((contender for contender in ran if contender in baselines),
                        key=lambda contender: compared[contender].median, default=None)
    log.info("the measured phase starts from %s, the fastest of %s measured side by side (%d rounds, %d for those "
             "within %.0f%% of the fastest)", name,
             ", ".join(f"{other} {compared[other].median * 1e3:.3f} ms" for other in contenders
                       if compared[other].ok), rounds, 2 * rounds, 100 * LEADERS_WITHIN)
    return MeasuredStart(name, contenders[name], best_baseline)


def _compare_distinct(evaluate, contenders: Mapping[str, Sequence[int]], rounds: int, progress=None, *,
                      retime_leaders: bool = False) -> dict:
    """`placer.cost.compare` of named assignments (`compare_and_retime_leaders` with `retime_leaders`), each
    distinct assignment measured once: names that share one (the learned placement that kept a heuristic's, two
    heuristics that agree) get the same timings, so that no placement is reported faster or slower than itself
    by the noise of two timings."""
    from placer.cost import compare, compare_and_retime_leaders

    first_of: dict[tuple[int, ...], str] = {}
    same_as = {name: first_of.setdefault(tuple(int(a) for a in assignment), name)
               for name, assignment in contenders.items()}
    distinct = {name: contenders[name] for name in contenders if same_as[name] == name}
    compared = (compare_and_retime_leaders if retime_leaders else compare)(evaluate, distinct, rounds, progress=progress)
    return {name: replace(compared[same_as[name]], name=name) for name in contenders}


def _final_comparison(config: ExperimentConfig, env, run_dir: Path, assignment, baselines: Mapping[str, BaselineTiming],
                      log, start: StartPlacement | None = None,
                      simulator: SimulatorResult | None = None
                      ) -> tuple[dict[str, float] | None, tuple[str, ...] | None]:
    """Median step time of the learned placement, the start, the simulator phase's best and every baseline,
    measured again side by side (each distinct placement once), and the names within the noise of the fastest
    (`placer.cost.compare.tie_set`); (None, None) where there is no final comparison."""
    from placer.cost.compare import tie_set

    if config.backend != "measured" or config.final_rounds < 1 or assignment is None:
        return None, None
    contenders = {"learned": list(assignment)}
    if start is not None and start.step_time is not None:
        contenders["start"] = list(start.assignment)
    if simulator is not None and simulator.best_assignment is not None:
        contenders["simulator-best"] = list(simulator.best_assignment)
    contenders.update({name: run_files.baseline_assignment(run_dir, timing, env.graph, env.devices)
                       for name, timing in baselines.items() if timing.ok})
    progress = (lambda rounds: _progress(rounds, True, "final comparison", "round")) if config.progress else None
    compared = _compare_distinct(env.target.evaluate, contenders, config.final_rounds, progress=progress)
    final = {name: c.median for name, c in compared.items()}
    tied = tuple(tie_set(compared))
    log.info("final comparison (%d interleaved rounds): %s; within the noise of the fastest: %s", config.final_rounds,
             ", ".join(f"{name} {seconds * 1e3:.3f} ms" for name, seconds in final.items()), ", ".join(tied))
    return final, tied


def _step_time_bound(env, calibration: Path | None, log):
    """The bound of the run's graph on its target: from the target's simulator, or predicted on the calibrated
    twin of a measured target (a run with a simulator phase); None for a measured run without one."""
    from placer.cost import open_target
    from placer.cost.calibrated import PREFIX
    from placer.simulate.bound import step_time_bound

    if env.target.simulator is not None:
        bound = step_time_bound(env.target.simulator, simulated_on=str(env.target.spec))
    elif calibration is not None:
        with open_target(env.graph, f"{PREFIX}{calibration}") as twin:
            bound = step_time_bound(twin.simulator, simulated_on=str(twin.spec))
    else:
        log.info("no step time bound: a measured run has one from its calibrated simulator (--simulator-updates)")
        return None
    log.info("%s", bound.describe())
    return bound


# -- simulator, then real -------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulatorResult:
    """What the simulator phase reached: its summary record and its best placement."""

    phase: SimulatorPhase
    best_assignment: tuple[int, ...] | None


def _poor_fit(calibration_path: Path | None) -> str | None:
    """The worst probes of a calibration that fits them poorly, else None (also without a calibration)."""
    from placer.calibration import load_calibration

    if calibration_path is None:
        return None
    calibration = load_calibration(calibration_path)
    return calibration.describe_residuals() if calibration.poor_fit else None


def _calibrate_target(config: ExperimentConfig, env, run_dir: Path, log) -> Path:
    """The calibration of a measured run's target (`config.calibration`, else made now into the run directory)
    with the run's op costs profiled there and cached beside it: what `calibrated:PATH` opens as the target's
    simulator. Returns its path."""
    from placer.calibrate import calibrate
    from placer.calibration import load_calibration
    from placer.cost.calibrated import profiled_costs

    calibration_path = Path(config.calibration) if config.calibration else run_dir / run_files.CALIBRATION
    if calibration_path.exists():
        calibration = load_calibration(calibration_path)
    else:
        log.info("calibrating %s for its simulator (links and step overheads)", config.target)
        progress = (lambda rounds: _progress(rounds, True, "calibrating", "round")) if config.progress else None
        calibration = calibrate(env.target.measurer, progress=progress)
        calibration.save(calibration_path)
        log.info("%s", calibration.describe())
    profiled_costs(env.graph, calibration, calibration_path, measurer=env.target.measurer)
    return calibration_path


def _refit_calibration(env, run_dir: Path, log, calibration_path: Path,
                       baselines: Mapping[str, BaselineTiming]) -> Path:
    """The calibration refit to the baselines the run measured on its target (`placer.cost.refit`: the core time
    per transfer, against a one-device baseline's step), kept in the run directory: what the simulator phase
    trains on. The calibration itself where the fit keeps it, or too few baselines span devices."""
    from placer.calibration import load_calibration
    from placer.cost import open_target
    from placer.cost.calibrated import PREFIX, calibration_variant
    from placer.cost.refit import fit_transfer_factor, refit_changes
    from placer.placement import Placement

    refit_path = run_dir / run_files.REFIT_CALIBRATION
    if refit_path.exists():  # resuming: refit when the run started
        return refit_path
    measured, reference = {}, None
    for name, timing in baselines.items():
        if not timing.ok:
            continue
        placement = Placement.from_assignment(env.graph, env.devices,
                                              run_files.baseline_assignment(run_dir, timing, env.graph, env.devices))
        if placement.devices_used == 1:
            reference = reference or (name, placement, timing.seconds)
        else:
            measured[name] = (placement, timing.seconds)
    with open_target(env.graph, f"{PREFIX}{calibration_path}") as twin:
        fit = fit_transfer_factor(twin.simulator, measured, reference)
    if fit is None:
        return calibration_path
    log.info("%s", fit.describe())
    if not fit.changed:
        return calibration_path
    return calibration_variant(calibration_path, refit_changes(load_calibration(calibration_path), fit), refit_path)


def _train_on_simulator(config: ExperimentConfig, env, agent, run_dir: Path, log,
                        calibration_path: Path, on_update) -> SimulatorResult:
    """The first phase of a measured run with `simulator_updates`: train `agent` on the calibrated simulator
    of the run's target (`calibration_path`; in RUN_DIR/simulator/, resumable like the run), and return what
    it reached. The measured phase then continues from the same agent and starts from this phase's best
    placement."""
    from agents.loop import TrainingConfig, train
    from envs.placement import PlacementEnv
    from placer.cost.calibrated import PREFIX

    simulated = PlacementEnv(model=env.graph, backend="simulated", devices=f"{PREFIX}{calibration_path}",
                             reward=config.reward, failing_step_time=config.failing_step_time)
    try:
        simulated.reset(seed=config.seed)
        training = TrainingConfig(updates=config.simulator_updates, samples_per_update=config.samples_per_update,
                                  greedy_every=config.greedy_every, confirm_repeats=0, progress=config.progress)
        log.info("training %s on the simulator of %s first: %d updates of %d samples", agent.name, config.target,
                 config.simulator_updates, config.samples_per_update)
        state = train(agent, simulated, run_dir / run_files.SIMULATOR_PHASE, training, callbacks=[on_update])
    finally:
        simulated.close()
    log.info("simulator phase: best predicted %.3f ms after %d samples (%.1f s); now on measured rewards",
             state.best_step_time * 1e3, state.samples, state.elapsed)
    phase = SimulatorPhase(updates=state.updates, samples=state.samples, wall_time=state.elapsed,
                           predicted_step_time=state.best_step_time, calibration=str(calibration_path))
    return SimulatorResult(phase, state.best_assignment)


# -- outputs --------------------------------------------------------------------------------------


def _tracked(trackers, first_update: int, simulated: bool | None):
    """A training callback logging each update's metrics as update `first_update` + its number, marked simulated
    or measured in a run that has both phases (`simulated` None: a run of one phase)."""
    phase = {} if simulated is None else {"simulated": float(simulated)}

    def log_update(update: int, metrics: Mapping[str, Any]) -> None:
        trackers.log_update(first_update + update, {**metrics, **phase})

    return log_update


def _log_best_placement(trackers, update, run_dir: Path, graph, devices, weights, step_time: float) -> None:
    from agents.tracking import placement_markdown, placement_matrix, placement_table

    assignment = np.asarray(run_files.read_trainer_state(run_dir).best_assignment)
    matrix = placement_matrix(assignment, weights, len(devices))
    names = [d.short_name for d in devices]
    rows = placement_table(names, assignment, graph)
    trackers.log_placement(update, matrix, names, placement_markdown(
        f"Best placement at update {update}: {step_time * 1e3:.3f} ms per step", rows))


def _best_table(assignment, graph, devices):
    if assignment is None:
        return None
    from agents.tracking import placement_table

    return placement_table([d.short_name for d in devices], np.asarray(assignment), graph)


def _save_timeline(env, run_dir: Path, assignment, log) -> str | None:
    """A Chrome trace of the best placement: simulated, or one traced real step."""
    if assignment is None:
        return None
    try:
        trace = env.target.trace(list(assignment))
    except PlacerError as error:
        log.warning("no timeline: %s", error)
        return None
    return run_files.write_timeline(run_dir, trace)


def _make_trackers(config: ExperimentConfig, run_dir: Path, agent, baselines: Mapping[str, float]):
    import dataclasses

    from agents.tracking import TensorBoardTracker, Trackers, WandbTracker

    hparams = {key: value for key, value in config.to_dict().items()
               if key not in ("agent_options", "baselines", "runs", "progress", "wandb", "wandb_project")}
    agent_config = getattr(agent, "config", None)
    if dataclasses.is_dataclass(agent_config):
        hparams.update({f"agent.{k}": v for k, v in dataclasses.asdict(agent_config).items()})
    name = run_files.run_name(config, run_dir)
    trackers = [TensorBoardTracker(run_dir, hparams, name, baselines)]
    if config.wandb != "off":
        trackers.append(WandbTracker(run_dir, {**config.to_dict(), **hparams}, name, config.wandb_project,
                                     config.wandb, baselines))
    return Trackers(trackers)


def _progress(items, enabled: bool, description: str, unit: str = "placement"):
    if not enabled:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=description, unit=unit, leave=False, dynamic_ncols=True)


def _run_logger(run_dir: Path) -> logging.Logger:
    log = logging.getLogger(f"placer.run.{run_dir.resolve()}")
    log.setLevel(logging.INFO)
    log.propagate = False
    handler = logging.FileHandler(run_dir / run_files.LOG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    return log


def _close_logger(log: logging.Logger) -> None:
    for handler in list(log.handlers):
        handler.close()
        log.removeHandler(handler)


def _versions() -> dict[str, str]:
    import tensorflow as tf

    from placer import __version__

    return {"placer": __version__, "tensorflow": tf.__version__}
