"""THE reader and writer of a run directory of `placer train`: one typed, frozen record per file, written
atomically, and every placement in it a placement file (`placer.placement`).

    runs/<model>/<timestamp>/
        config.json            the resolved configuration (`ExperimentConfig`; resume or re-run from it)
        log.txt                what happened, with times
        baselines.json         each baseline's step time on the run's target (`BaselineTiming`)
        baselines/NAME.json    each baseline's placement
        start_placement.json   the untrained policy's greedy placement, with its step time
        trainer_state.json     resume state and the metrics of every update (`TrainerState`)
        checkpoints/           the agent's weights and optimizer (tf.train checkpoints)
        best_placement.json    the best placement so far, rewritten whenever it improves
        simulator/             the simulator phase of a simulator-first run (trainer state, best placement)
        calibration.json       the target's calibration, when a simulator-first run made it
        timeline.json          Chrome trace of the best placement (simulated, or a traced real step)
        targets.json           a measured run: the kind of target it measures on, and where (`MeasuredTargets`)
        summary.json           what the run reached (`RunSummary`), written when it ends
        tensorboard/, wandb/   the dashboards' files
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from agents.experiment.config import ExperimentConfig, ExperimentError
from placer.files import write_atomically, write_json

if TYPE_CHECKING:
    from placer.cost import StepTime
    from placer.cost.kind import TargetKind
    from placer.devices import DeviceSet
    from placer.graph.opgraph import OpGraph
    from placer.heuristics import HeuristicTiming
    from placer.placement import Placement, PlacementFile
    from placer.timeline import StepTimeline

CONFIG = "config.json"
LOG = "log.txt"
CALIBRATION = "calibration.json"
REFIT_CALIBRATION = "calibration.refit.json"
"""The calibration refit to the run's measured baselines (`placer.cost.refit`), where the fit changed it."""
BASELINES = "baselines.json"
BASELINE_PLACEMENTS = "baselines"
START = "start_placement.json"
TRAINER_STATE = "trainer_state.json"
CHECKPOINTS = "checkpoints"
BEST_PLACEMENT = "best_placement.json"
SIMULATOR_PHASE = "simulator"
TIMELINE = "timeline.json"
SUMMARY = "summary.json"
TARGETS = "targets.json"

PRESET_BEFORE_PRESETS = "reference"
"""What a run directory written before presets existed ran with: the reference planner's settings."""


# -- the configuration ----------------------------------------------------------------------------


RUN_DIR_TIME = "%Y%m%d-%H%M%S"
"""A run directory's name: when it started."""


def new_run_dir(config: ExperimentConfig) -> Path:
    """RUNS/<model>/<timestamp>/ (a suffix when that exists); not created yet. A model function's runs are
    named after the function (`models.py:seq2seq` -> runs/seq2seq/), as its graph is."""
    stamp = datetime.datetime.now().strftime(RUN_DIR_TIME)
    model = config.model.rsplit(":", 1)[1] if ":" in config.model else config.model
    run_dir = Path(config.runs) / model / stamp
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = Path(config.runs) / model / f"{stamp}-{suffix}"
    return run_dir


def run_name(config: ExperimentConfig, run_dir: Path) -> str:
    """What the dashboards call a run: model, target and start time ("two-tower local:2 2026-11-27 14:05")."""
    try:
        started = datetime.datetime.strptime(run_dir.name[:len("20261127-140500")], RUN_DIR_TIME)
        start = started.strftime("%Y-%m-%d %H:%M") + run_dir.name[len("20261127-140500"):]
    except ValueError:  # a run directory named by hand
        start = run_dir.name
    return f"{config.model} {config.target} {start}"


def write_config(run_dir: Path, config: ExperimentConfig, versions: Mapping[str, str]) -> None:
    write_json(Path(run_dir) / CONFIG, {"experiment": config.to_dict(), "placer": dict(versions)})


def load_run_config(run_dir: str | Path) -> ExperimentConfig:
    """The configuration a run was started with; ExperimentError if `run_dir` is no run directory."""
    path = Path(run_dir) / CONFIG
    if not path.exists():
        raise ExperimentError(f"{run_dir} is not a run directory (no {CONFIG})")
    settings = json.loads(path.read_text())["experiment"]
    settings.setdefault("preset", PRESET_BEFORE_PRESETS)
    if settings.get("agent", "hierarchical") != "hierarchical":
        settings["preset"] = None  # runs once recorded a preset for agents it did nothing for
    return ExperimentConfig.from_dict(settings, source=str(path))


# -- the trainer's state --------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainerState:
    """Where training stands after its last completed update: what `agents.loop.train` resumes from."""

    updates: int = 0
    samples: int = 0
    """Placements evaluated, confirmations and greedy evaluations included."""
    elapsed: float = 0.0
    """Seconds of training, counted across resumptions."""
    best_reward: float = -math.inf
    best_step_time: float = math.inf
    best_assignment: tuple[int, ...] | None = None
    """Device per unit of the best placement (best_placement.json holds it as a placement file; this copy
    is the one consistent with the rest of the state when a run is killed between the two writes)."""
    best_retimings: int = 0
    """Times the best was timed again side by side with a would-be best (its step time may then rise)."""
    history: tuple[Mapping[str, Any], ...] = ()
    """The metrics of every update (`agents.loop` names them), step times in seconds."""
    measurements: tuple[Mapping[str, Any], ...] = ()
    """Where every measured evaluation ran, in order: its update (0: before the first), step time (None:
    failed), node (host, pid, ray_node) and target (spec, and `kind`: the fingerprint of the kind of target,
    described in targets.json). Empty on the simulator, and where the environment records no origin."""
    agent_state: Mapping[str, Any] = field(default_factory=dict)
    """The agent's plain-data state (`numpy_state()`)."""
    checkpoint: str | None = None
    """The tf.train checkpoint of the agent's variables after the last update."""

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["best_assignment"] = None if self.best_assignment is None else list(self.best_assignment)
        data["history"] = [dict(record) for record in self.history]
        data["measurements"] = [dict(record) for record in self.measurements]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainerState:
        data = dict(data)
        if data.get("best_assignment") is not None:
            data["best_assignment"] = tuple(int(a) for a in data["best_assignment"])
        data["history"] = tuple(data.get("history", ()))
        data["measurements"] = tuple(data.get("measurements", ()))
        return cls(**data)


def read_trainer_state(directory: str | Path) -> TrainerState:
    """The state in `directory` (a run directory or its simulator phase); a fresh one if none was written."""
    path = Path(directory) / TRAINER_STATE
    return TrainerState.from_dict(json.loads(path.read_text())) if path.exists() else TrainerState()


def write_trainer_state(directory: str | Path, state: TrainerState) -> None:
    write_json(Path(directory) / TRAINER_STATE, state.to_dict())


def write_best_placement(directory: str | Path, placement: Placement, graph: OpGraph) -> None:
    placement.save(Path(directory) / BEST_PLACEMENT, graph)  # atomic: an export never reads half a file


# -- where a measured run measures ----------------------------------------------------------------


@dataclass(frozen=True)
class MeasuredTargets:
    """Where a measured run measures: the one kind of target all its measurements come from, this process's
    target (the baselines, the start and the final comparison) and each worker's, as each measurement
    records its origin (`agents.loop.MEASURED_ON`: host, pid, ray_node, target, kind)."""

    kind: TargetKind
    driver: Mapping[str, Any]
    workers: tuple[Mapping[str, Any], ...] = ()
    """Empty when the run measures in its own process."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.to_dict(), "driver": dict(self.driver),
                "workers": [dict(worker) for worker in self.workers]}


def write_targets(run_dir: str | Path, targets: MeasuredTargets) -> None:
    write_json(Path(run_dir) / TARGETS, targets.to_dict())


def read_targets(run_dir: str | Path) -> MeasuredTargets | None:
    """Where the run measured when it last started; None for a simulated run (or one this old)."""
    from placer.cost.kind import TargetKind

    path = Path(run_dir) / TARGETS
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return MeasuredTargets(TargetKind.from_dict(data["kind"]), data["driver"], tuple(data.get("workers", ())))


def check_targets(run_dir: str | Path, targets: MeasuredTargets) -> None:
    """Refuse to go on measuring a run on another kind of target than it measured on before (its best step
    time and baselines came from that kind)."""
    recorded = read_targets(run_dir)
    if recorded is not None and recorded.kind.fingerprint != targets.kind.fingerprint:
        differences = "; ".join(recorded.kind.differences(targets.kind))
        raise ExperimentError(
            f"{run_dir} measured on another kind of target than this one (\"here\" is the run's, \"there\" "
            f"this machine's: {differences}): its step times cannot be compared with these. Resume it where it "
            "ran, or start a new run here")


# -- the baselines --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BaselineTiming:
    """One baseline's step time on the run's target, timed when the run started."""

    name: str
    step_time: float | None
    """Seconds per step; None when it failed."""
    failure: str | None = None
    """Why it failed (`StepTime.failure`)."""
    placement_seconds: float = 0.0
    """Seconds spent computing the placement."""
    placement: str | None = None
    """Its placement file, relative to the run directory."""
    assignment: tuple[int, ...] | None = None
    """Device per unit, for run directories written before baselines were kept as placement files."""

    @property
    def ok(self) -> bool:
        return self.step_time is not None and self.failure is None

    @property
    def seconds(self) -> float:
        """The step time, inf when it failed (what comparisons sort by)."""
        return self.step_time if self.ok else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {"step_time": self.step_time, "ok": self.ok, "failure": self.failure,
                "placement_seconds": self.placement_seconds, "placement": self.placement}


def write_baseline(run_dir: Path, timing: HeuristicTiming, graph: OpGraph) -> BaselineTiming:
    """Keep one timed baseline's placement file and return its record (`write_baselines` writes them all)."""
    relative = f"{BASELINE_PLACEMENTS}/{timing.name}.json"
    result = timing.step_time
    (Path(run_dir) / BASELINE_PLACEMENTS).mkdir(exist_ok=True)
    timing.placement.with_metadata(step_time=result.seconds if result.ok else None, backend=result.backend,
                                   target=result.target).save(Path(run_dir) / relative, graph)
    return BaselineTiming(timing.name, result.seconds if result.ok else None, result.failure,
                          timing.placing_seconds, relative)


def write_baselines(run_dir: Path, timings: Mapping[str, BaselineTiming]) -> None:
    write_json(Path(run_dir) / BASELINES, {name: timing.to_dict() for name, timing in timings.items()})


def read_baselines(run_dir: str | Path) -> dict[str, BaselineTiming] | None:
    """Each baseline's timing by name, in the order they were timed; None if they were not timed yet."""
    path = Path(run_dir) / BASELINES
    if not path.exists():
        return None
    timings = {}
    for name, record in json.loads(path.read_text()).items():
        ok = record.get("ok", record.get("step_time") is not None)
        assignment = record.get("assignment")
        timings[name] = BaselineTiming(
            name, record["step_time"] if ok else None, record.get("failure") or (None if ok else "runtime"),
            float(record.get("placement_seconds", 0.0)), record.get("placement"),
            None if assignment is None else tuple(int(a) for a in assignment))
    return timings


def baseline_assignment(run_dir: str | Path, timing: BaselineTiming, graph: OpGraph, devices: DeviceSet) -> list[int]:
    """The baseline's device per unit, from its placement file."""
    if timing.placement is None:
        if timing.assignment is None:
            raise ExperimentError(f"{run_dir}: baseline {timing.name} has no placement")
        return list(timing.assignment)
    return _assignment(Path(run_dir) / timing.placement, graph, devices)


# -- the start ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartPlacement:
    """A learned policy's greedy placement before its first update, and its step time (None: it failed)."""

    assignment: tuple[int, ...]
    step_time: float | None


def write_start(run_dir: Path, placement: Placement, graph: OpGraph, result: StepTime) -> StartPlacement:
    step_time = result.seconds if result.ok else None
    placement.with_metadata(method="start", step_time=step_time, backend=result.backend,
                            target=result.target).save(Path(run_dir) / START, graph)
    return StartPlacement(tuple(int(a) for a in placement.group_devices), step_time)


def read_start(run_dir: str | Path, graph: OpGraph, devices: DeviceSet) -> StartPlacement | None:
    path = Path(run_dir) / START
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if "assignment" in data:  # written before the start was kept as a placement file
        return StartPlacement(tuple(int(a) for a in data["assignment"]), data["step_time"])
    return StartPlacement(tuple(_assignment(path, graph, devices)), data.get("metadata", {}).get("step_time"))


def write_timeline(run_dir: Path, chrome_trace: str) -> str:
    """Keep one step of the best placement as a Chrome trace; returns its file name."""
    write_atomically(Path(run_dir) / TIMELINE, chrome_trace)
    return TIMELINE


# -- the summary ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulatorPhase:
    """What the simulator phase of a simulator-first run reached."""

    updates: int
    samples: int
    wall_time: float
    predicted_step_time: float
    """The simulator phase's best placement, as predicted."""
    calibration: str
    """The calibration file its simulator was built from."""
    step_time: float | None = None
    """That placement measured at the end, next to the others (None: not measured)."""


@dataclass(frozen=True)
class RunSummary:
    """What a run reached, written to summary.json when it ends."""

    model: str
    size: str
    backend: str
    cluster: str
    """The target placements were costed on."""
    agent: str
    updates: int
    samples: int
    wall_time: float
    best_step_time: float
    """The best sample's step time during training."""
    best_update: int | None
    step_time: float
    """The learned placement's step time that decides: measured again next to the baselines when the run
    has a final comparison, else the best sample's."""
    final_comparison: Mapping[str, float] | None
    """Medians of the final side-by-side comparison by contender (learned, start, simulator-best, baselines)."""
    best_placement: str | None
    baselines: Mapping[str, float | None]
    """The step time each baseline is judged by (the final comparison's when there is one)."""
    baselines_at_start: Mapping[str, float | None]
    best_baseline: str | None
    best_baseline_step_time: float
    improvement_over_best_baseline: float | None
    """(best baseline - learned) / best baseline: positive when the learned placement is faster."""
    beaten_baselines: tuple[str, ...]
    start_step_time: float | None = None
    simulator: SimulatorPhase | None = None
    timeline: str | None = None
    fastest: str | None = None
    """The fastest placement the run measured in the comparison that decides: "learned", "start",
    "simulator-best" or a baseline's name (ties go to the learned one). `placer export` writes it."""
    fastest_step_time: float | None = None
    batch_size: int | None = None
    """Examples per step of the model's training step, when its builder knew them (a Keras model's step)."""
    batch_note: str | None = None
    """Set when nothing fixed the batch: which batch the step was traced at, and how to choose one."""
    measured_start: str | None = None
    """Where the measured phase of a simulator-first run started: "simulator-best", or a baseline that measured
    faster than it side by side."""
    learned_is_start: bool = False
    """The measured phase confirmed nothing faster than its start, so the learned placement is that start."""
    calibration_poor_fit: str | None = None
    """Set when the calibration behind the simulator phase and the bound fits its probes poorly (its worst
    probes): those predictions are then unreliable."""
    bound: Mapping[str, Any] | None = None
    """The step time no placement of the run's graph can beat on its target (`placer.simulate.StepTimeBound`'s
    `to_dict`): simulated on the target's own simulator, or predicted on the calibrated twin of a measured one;
    None where the run has neither."""
    gap_closed: float | None = None
    """(best baseline - learned) / (best baseline - bound): the share of the best baseline's distance to the
    bound that the learned placement closed."""
    final_tied: tuple[str, ...] | None = None
    """The contenders of the final comparison within the noise of its fastest (`placer.cost.compare.tie_set`: a
    paired test over its rounds), fastest first; None without a final comparison."""
    final_rounds: int | None = None
    """Interleaved rounds of the final comparison."""

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["beaten_baselines"] = list(self.beaten_baselines)
        data["final_tied"] = None if self.final_tied is None else list(self.final_tied)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSummary:
        known = {f.name for f in dataclasses.fields(cls)}
        data = {key: value for key, value in data.items() if key in known}
        data["beaten_baselines"] = tuple(data.get("beaten_baselines", ()))
        if data.get("final_tied") is not None:
            data["final_tied"] = tuple(data["final_tied"])
        if data.get("simulator") is not None:
            phase = {f.name for f in dataclasses.fields(SimulatorPhase)}
            data["simulator"] = SimulatorPhase(**{k: v for k, v in data["simulator"].items() if k in phase})
        return cls(**data)


def write_summary(run_dir: Path, summary: RunSummary) -> None:
    write_json(Path(run_dir) / SUMMARY, summary.to_dict())


def contender_placement_file(run_dir: str | Path, name: str, baselines: Mapping[str, BaselineTiming]) -> Path | None:
    """The placement file of a contender of the final comparison ("learned", "start", "simulator-best" or a
    baseline's name); None where the run directory keeps none (baselines of runs written before they were)."""
    run_dir = Path(run_dir)
    if name == "learned":
        path = run_dir / BEST_PLACEMENT
    elif name == "start":
        path = run_dir / START
    elif name == "simulator-best":
        path = run_dir / SIMULATOR_PHASE / BEST_PLACEMENT
    elif name in baselines and baselines[name].placement is not None:
        path = run_dir / baselines[name].placement
    else:
        return None
    return path if path.exists() else None


def read_summary(run_dir: str | Path) -> RunSummary | None:
    """The run's summary; None while it is still training; ExperimentError for one this placer cannot read."""
    path = Path(run_dir) / SUMMARY
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    required = {f.name for f in dataclasses.fields(RunSummary) if f.default is dataclasses.MISSING}
    missing = sorted(required - set(data))
    if missing:
        raise ExperimentError(f"{path} lacks {', '.join(missing)}: an older placer wrote it; "
                              f"`placer train --resume {run_dir}` writes it again")
    return RunSummary.from_dict(data)


# -- a whole run, read at one moment --------------------------------------------------------------


@dataclass(frozen=True)
class RunFiles:
    """What a run directory holds, read at one moment; None (or empty) for what the run has not written yet:
    a run still training has no summary nor timeline, one before its first update no history either."""

    run_dir: Path
    config: ExperimentConfig
    history: Sequence[Mapping[str, Any]]
    """The metrics of every update (`TrainerState.history`)."""
    baselines: Mapping[str, BaselineTiming]
    summary: RunSummary | None
    placement: PlacementFile | None
    """best_placement.json."""
    timeline: StepTimeline | None
    """One traced step of the best placement (simulated, or a real one)."""
    state: TrainerState = field(default_factory=TrainerState)

    @property
    def finished(self) -> bool:
        return self.summary is not None


def read_run(run_dir: str | Path) -> RunFiles:
    """The files of a run of `placer train`, finished or still running; ExperimentError if it is no run."""
    from placer.placement import read_placement_file
    from placer.timeline import read_chrome_trace

    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    state = read_trainer_state(run_dir)
    timeline = run_dir / TIMELINE
    placement = run_dir / BEST_PLACEMENT
    return RunFiles(run_dir=run_dir, config=config, history=list(state.history),
                    baselines=read_baselines(run_dir) or {}, summary=read_summary(run_dir),
                    placement=read_placement_file(placement) if placement.exists() else None,
                    timeline=read_chrome_trace(timeline) if timeline.exists() else None, state=state)


def _assignment(path: Path, graph: OpGraph, devices: DeviceSet) -> list[int]:
    from placer.placement import read_placement_file

    return [int(a) for a in read_placement_file(path).to_placement(graph, devices).group_devices]
