"""One experiment, end to end: place a model with an agent, log the curves, keep what a researcher needs.

`run_experiment(ExperimentConfig(...))` builds the environment (measured or simulated), times the
baselines on the same backend, trains the agent with `agents.training.train`, and leaves a run
directory behind:

    runs/<model>/<timestamp>/
        config.json            the resolved configuration (re-run or resume from it)
        log.txt                what happened, with times
        baselines.json         step time of every baseline on this backend
        tensorboard/           curves, hyper-parameters, best placement image and table
        wandb/                 the W&B run (offline unless an account is configured), when enabled
        checkpoints/, trainer_state.json   resume state (`placer train --resume RUN_DIR`)
        best_placement.json    the best placement so far, rewritten whenever it improves
        timeline.json          Chrome trace of the best placement (simulated, or a traced real step)
        summary.json           best step time, the baselines it beat, samples, wall time

The launch scripts in experiments/ and `placer train` are thin layers over this module.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from placer.errors import PlacerError

AGENTS = ("hierarchical", "colocation", "random", "cem")

# The papers' setting per benchmark model: paper-size graph and GPU count of the hierarchical planner's
# experiments, on the project's reference modeled machine (V100s over NVLink, see placer.hardware), and
# 1,000 updates of 4 samples (the reference planner trains for thousands of samples). The agent's own
# hyper-parameters default to the reference planner's (agents/policy_gradient.py).
PAPER_UPDATES = 1000
PAPER_SETTINGS: dict[str, dict[str, Any]] = {
    "inception-v3": {"size": "paper", "backend": "simulated", "cluster": "modeled:2xV100"},
    "resnet-50": {"size": "paper", "backend": "simulated", "cluster": "modeled:2xV100"},
    "rnnlm": {"size": "paper", "backend": "simulated", "cluster": "modeled:2xV100"},
    "nmt-2": {"size": "paper", "backend": "simulated", "cluster": "modeled:2xV100"},
    "nmt-4": {"size": "paper", "backend": "simulated", "cluster": "modeled:4xV100"},
    "nmt-8": {"size": "paper", "backend": "simulated", "cluster": "modeled:8xV100"},
    "transformer": {"size": "paper", "backend": "simulated", "cluster": "modeled:2xV100"},
}


def paper_setting(model: str) -> dict[str, Any]:
    """The defaults of a benchmark model's launch script."""
    if model not in PAPER_SETTINGS:
        raise ExperimentError(f"no paper setting for {model!r}; benchmark models: {', '.join(PAPER_SETTINGS)}")
    return {"model": model, "updates": PAPER_UPDATES, **PAPER_SETTINGS[model]}


class ExperimentError(PlacerError):
    """A run directory or configuration that cannot be used (the message says what to change)."""


@dataclass(frozen=True)
class ExperimentConfig:
    model: str = "two-tower"
    """A built-in model (`placer models`) or module:function / file.py:function returning an OpGraph."""
    size: str = "tiny"
    """tiny, small or paper (built-in models)."""
    backend: str = "simulated"
    """"simulated" (calibrated simulator on a modeled machine) or "measured" (real execution)."""
    cluster: str | None = None
    """Simulated: a modeled machine ("modeled:2xV100"); measured: a target ("local:2", "inprocess:2",
    a cluster spec). None: modeled:2xV100, or the local 2-worker testbed."""
    agent: str = "hierarchical"
    """hierarchical (grouper + placer), colocation (placer over colocation groups), random or cem."""
    agent_options: Mapping[str, Any] = field(default_factory=dict)
    """Fields of the agent's config dataclass (e.g. learning_rate, num_groups, hidden_size)."""
    updates: int | None = 100
    """Policy updates to run (None: only the time budget stops training)."""
    time_budget: float | None = None
    """Minutes of training (counted across resumptions); with `updates`, whichever comes first."""
    samples_per_update: int = 4
    """Placements sampled and evaluated per update."""
    greedy_every: int = 10
    """Every this many updates, the agent's current best guess (the policy's greedy decoding, the
    cross-entropy method's mode) is evaluated too, counted as a sample, and kept if it is the best. 0: never."""
    confirm_repeats: int | None = None
    """A placement that would become the best is timed this many more times, side by side with the best,
    and becomes the best only if its median wins (the fastest of many noisy single timings is mostly
    luck). Each timing counts as a sample. None: 2 on the measured backend, 0 on the simulator, whose step
    times do not vary."""
    seed: int = 0
    reward: str = "neg_sqrt"
    """neg_sqrt (the papers': -sqrt(step time)), neg_time or improvement."""
    failing_step_time: float = 100.0
    """Seconds charged to a placement that fails (OOM, no kernel, timeout)."""
    warmup_steps: int = 2
    """Measured backend: steps discarded before timing each placement."""
    timed_steps: int = 5
    """Measured backend: steps timed per placement (the median is the step time)."""
    step_timeout: float = 60.0
    """Measured backend: seconds before a step counts as hung."""
    final_rounds: int = 3
    """Measured backend: at the end, the best placement and every baseline are measured again, interleaved,
    this many rounds, and the medians decide what was beaten (the best of many noisy samples is
    optimistic, and a baseline timed once at the start may have met a busy machine). 0: skip."""
    baselines: Sequence[str] | None = None
    """Baselines timed on the same backend; None: single-device, round-robin and expert, plus METIS,
    Scotch, m-TOPO, m-ETF and m-SCT on the simulator (where their libraries are installed)."""
    wandb: str = "off"
    """off, auto (online with an account, else offline), offline, online or disabled."""
    wandb_project: str = "placer"
    runs: str = "runs"
    """Runs go to RUNS/<model>/<timestamp>/."""
    progress: bool = True
    """Show a progress bar with the current and best step time."""

    def __post_init__(self):
        if self.backend not in ("simulated", "measured"):
            raise ExperimentError(f"unknown backend {self.backend!r}: 'simulated' or 'measured'")
        if self.agent not in AGENTS:
            raise ExperimentError(f"unknown agent {self.agent!r}: one of {', '.join(AGENTS)}")
        if self.updates is None and self.time_budget is None:
            raise ExperimentError("give a number of updates or a time budget (or both), else training never stops")
        if self.samples_per_update < 1:
            raise ExperimentError(f"samples_per_update must be at least 1, got {self.samples_per_update}")
        if self.greedy_every < 0:
            raise ExperimentError(f"greedy_every must be 0 (never) or a number of updates, got {self.greedy_every}")
        if self.confirm_repeats is not None and self.confirm_repeats < 0:
            raise ExperimentError(f"confirm_repeats must be 0 (trust one evaluation) or more, got {self.confirm_repeats}")

    @property
    def target(self) -> str:
        if self.cluster:
            return self.cluster
        return "modeled:2xV100" if self.backend == "simulated" else "local:2"

    @property
    def repeats_to_confirm(self) -> int:
        if self.confirm_repeats is not None:
            return self.confirm_repeats
        return 2 if self.backend == "measured" else 0

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["agent_options"] = dict(self.agent_options)
        data["baselines"] = list(self.baselines) if self.baselines is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "configuration") -> ExperimentConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ExperimentError(f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Settings from a YAML or JSON file (a mapping of ExperimentConfig fields)."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ExperimentError(f"cannot read config file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ExperimentError(f"config file {path} is not valid YAML/JSON: {error}") from None
    if not isinstance(data, dict):
        raise ExperimentError(f"config file {path} must hold a mapping of settings, not {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """"key=value" with a YAML value ("learning_rate=0.01", "baselines=[expert, metis]")."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ExperimentError(f"override {text!r} is not KEY=VALUE")
    return key.strip(), yaml.safe_load(value)


# -- running --------------------------------------------------------------------------------------


@dataclass
class ExperimentResult:
    run_dir: Path
    summary: dict[str, Any]


def new_run_dir(config: ExperimentConfig) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    model = config.model.replace("/", "_").replace(":", "_")
    run_dir = Path(config.runs) / model / stamp
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = Path(config.runs) / model / f"{stamp}-{suffix}"
    return run_dir


def load_run_config(run_dir: str | Path) -> ExperimentConfig:
    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise ExperimentError(f"{run_dir} is not a run directory (no config.json)")
    return ExperimentConfig.from_dict(json.loads(path.read_text())["experiment"], source=str(path))


def run_experiment(config: ExperimentConfig, run_dir: str | Path | None = None) -> ExperimentResult:
    """Train `config.agent` on `config.model` and fill `run_dir` (default: a new RUNS/<model>/<timestamp>).

    Called again with an existing run directory, it resumes where that run stopped."""
    from agents.training import TrainingConfig, train

    run_dir = Path(run_dir) if run_dir is not None else new_run_dir(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = _run_logger(run_dir)
    _write_json(run_dir / "config.json", {"experiment": config.to_dict(), "placer": _versions()})
    log.info("run directory %s", run_dir.resolve())

    env = _make_env(config)
    try:
        graph, devices = env.graph, env.devices
        log.info("%s (%s): %d ops in the step, %d colocation groups; %s backend on %s",
                 graph.name, config.size, len(graph.step_ops), len(graph.groups), config.backend,
                 ", ".join(d.short_name for d in devices))
        baselines = _load_or_time_baselines(config, env, run_dir, log)
        best_baseline = min(((r["step_time"], name) for name, r in baselines.items() if r["ok"]), default=(math.inf, None))
        agent = make_agent(config, env)
        trackers = _make_trackers(config, run_dir, agent)
        weights = np.array([len(g.ops) for g in graph.groups], dtype=np.float64)
        logged = {"best": math.inf}

        def on_update(update: int, metrics: Mapping[str, Any]) -> None:
            metrics = {**metrics, "best_baseline_step_time": best_baseline[0]}
            trackers.log_update(update, metrics)
            if metrics["step_time_best"] < logged["best"]:
                logged["best"] = metrics["step_time_best"]
                _log_best_placement(trackers, update, run_dir, graph, devices, weights, metrics["step_time_best"])
                log.info("update %d: new best %.3f ms", update, metrics["step_time_best"] * 1e3)

        training = TrainingConfig(updates=config.updates, samples_per_update=config.samples_per_update,
                                  greedy_every=config.greedy_every, confirm_repeats=config.repeats_to_confirm,
                                  time_budget=None if config.time_budget is None else 60.0 * config.time_budget,
                                  progress=config.progress)
        log.info("training %s: %s updates of %d samples, time budget %s", agent.name, config.updates,
                 config.samples_per_update, f"{config.time_budget} min" if config.time_budget else "none")
        start = _start_placement(agent, env, run_dir, log)
        state = train(agent, env, run_dir, training, on_update=on_update)
        final = _final_comparison(config, env, state.best_assignment, baselines, log, start)
        summary = _summarize(config, run_dir, state, baselines, best_baseline, agent.name, final)
        summary["start_step_time"] = None if start is None else (final or {}).get("start", start["step_time"])
        summary["timeline"] = _save_timeline(env, run_dir, state.best_assignment, log)
        _write_json(run_dir / "summary.json", summary)
        best_file = run_dir / "best_placement.json"
        trackers.finish(summary, best_file if best_file.exists() else None,
                        _best_table(state.best_assignment, graph, devices))
        log.info("best step time %.3f ms after %d samples (%.0f s); best baseline %s %.3f ms; beat: %s",
                 summary["best_step_time"] * 1e3, summary["samples"], summary["wall_time"], best_baseline[1],
                 best_baseline[0] * 1e3, ", ".join(summary["beaten_baselines"]) or "none")
        return ExperimentResult(run_dir, summary)
    finally:
        env.close()
        _close_logger(log)


def make_agent(config: ExperimentConfig, env):
    """The agent `config.agent`, with `config.agent_options` applied to its config dataclass."""
    mask = env._graph_obs["device_mask"]
    options = dict(config.agent_options)
    if config.agent in ("random", "cem"):
        from agents.search import CrossEntropyMethod, RandomSearch

        cls = RandomSearch if config.agent == "random" else CrossEntropyMethod
        try:
            return cls(mask, seed=config.seed, **options)
        except TypeError as error:
            raise ExperimentError(f"agent {config.agent}: {error}") from None
    if config.agent == "hierarchical":
        from agents.reinforce import HierarchicalConfig as AgentConfig, HierarchicalPlanner as Agent
    else:
        from agents.colocation import ColocationConfig as AgentConfig, ColocationPlacer as Agent
    known = {f.name for f in dataclasses.fields(AgentConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ExperimentError(f"agent {config.agent} has no option(s) {', '.join(unknown)}; "
                              f"its options: {', '.join(sorted(known))}")
    try:
        agent_config = AgentConfig(**{"seed": config.seed, "samples_per_update": config.samples_per_update, **options})
    except ValueError as error:
        raise ExperimentError(f"agent {config.agent}: {error}") from None
    if config.agent == "hierarchical":
        return Agent(env.graph, mask, agent_config, devices=env.devices)
    return Agent(env.graph, mask, agent_config)


def _make_env(config: ExperimentConfig):
    from envs.placement import PlacementEnv
    from placer.measure import MeasureConfig

    measure_config = None
    if config.backend == "measured":
        measure_config = MeasureConfig(warmup_steps=config.warmup_steps, timed_steps=config.timed_steps,
                                       step_timeout=config.step_timeout)
    env = PlacementEnv(model=config.model, size=config.size, backend=config.backend, devices=config.target,
                       reward=config.reward, failing_step_time=config.failing_step_time, measure_config=measure_config)
    env.reset(seed=config.seed)
    return env


# -- baselines ------------------------------------------------------------------------------------

SIMULATOR_BASELINES = ("metis", "scotch", "m-topo", "m-etf", "m-sct")


def baseline_placements(config: ExperimentConfig, env) -> dict[str, Any]:
    """name -> a function making that baseline's Placement for the environment's graph and devices."""
    from placer.models import MODELS, reference_placements
    from placer.models.expert import single_device_placement
    from placer.placement import Placement

    graph, devices = env.graph, env.devices
    makers = {"single-device": lambda: single_device_placement(graph, devices),
              "round-robin": lambda: Placement.round_robin(graph, devices)}
    if config.model in MODELS:
        makers["expert"] = lambda: reference_placements(config.model, graph, devices)["expert"]
    simulator = getattr(env.backend, "simulator", None)
    if simulator is not None:
        from agents.baselines import m_etf, m_sct, m_topo
        from agents.partitioners import metis_placement, scotch_placement

        makers.update({"metis": lambda: metis_placement(graph, devices, simulator),
                       "scotch": lambda: scotch_placement(graph, devices, simulator),
                       "m-topo": lambda: m_topo(graph, devices, simulator),
                       "m-etf": lambda: m_etf(graph, devices, simulator),
                       "m-sct": lambda: m_sct(graph, devices, simulator)})
    return makers


def _load_or_time_baselines(config: ExperimentConfig, env, run_dir: Path, log) -> dict[str, dict[str, Any]]:
    path = run_dir / "baselines.json"
    if path.exists():  # resuming: the baselines were timed when the run started
        return json.loads(path.read_text())
    makers = baseline_placements(config, env)
    wanted = list(config.baselines) if config.baselines is not None else list(makers)
    unknown = [name for name in wanted if name not in makers]
    if unknown:
        raise ExperimentError(f"unknown or unavailable baseline(s) {', '.join(unknown)} for this run; "
                              f"available: {', '.join(makers)}")
    results = {}
    for name in _progress(wanted, config.progress, "baselines"):
        started = time.perf_counter()
        try:
            placement = makers[name]()
        except ImportError as error:  # a partitioner's library is not installed: say so, go on without it
            log.warning("baseline %s skipped: %s", name, error)
            continue
        seconds = time.perf_counter() - started
        evaluation = env.backend.evaluate(placement.group_devices)
        results[name] = {"step_time": evaluation.step_time, "ok": evaluation.ok, "failure": evaluation.failure,
                         "placement_seconds": seconds, "assignment": list(placement.group_devices)}
        log.info("baseline %-13s %s (placement computed in %.2f s)", name,
                 f"{evaluation.step_time * 1e3:.3f} ms" if evaluation.ok else f"FAILED ({evaluation.failure})", seconds)
    _write_json(path, results)
    return results


# -- export ---------------------------------------------------------------------------------------


def export_run(run_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the run's best placement to `out`, with what a user needs to trust it: the model, graph
    fingerprint, devices, step time and backend, and the baselines it beat. Works on a finished run and
    on one still training or killed (from its last completed update). Returns the file's metadata."""
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    best_file = run_dir / "best_placement.json"
    if not best_file.exists():
        raise ExperimentError(f"{run_dir} has no best placement yet (no update has completed)")
    data = json.loads(best_file.read_text())
    state = json.loads((run_dir / "trainer_state.json").read_text())
    baselines = json.loads((run_dir / "baselines.json").read_text()) if (run_dir / "baselines.json").exists() else {}
    best = state["best_step_time"]
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
    final = summary.get("final_comparison") if summary else None
    step_time = final["learned"] if final else best
    data["metadata"] = {
        **data.get("metadata", {}),
        "model": config.model, "size": config.size, "backend": config.backend, "cluster": config.target,
        "agent": config.agent, "step_time": step_time,
        "step_time_kind": ("measured median, re-measured next to the baselines" if final else
                           "measured median" if config.backend == "measured" else "simulated"),
        "updates": state["updates"], "samples": state["samples"],
        "baselines": summary["baselines"] if summary else
        {name: (r["step_time"] if r["ok"] else None) for name, r in baselines.items()},
        "beaten_baselines": summary["beaten_baselines"] if summary else
        sorted(name for name, r in baselines.items() if not r["ok"] or best < r["step_time"]),
        "run_dir": str(run_dir.resolve()),
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_json(out, data)
    return data["metadata"]


# -- outputs --------------------------------------------------------------------------------------


def _start_placement(agent, env, run_dir: Path, log) -> dict[str, Any] | None:
    """A learned policy's greedy placement before its first update, and its step time: what training started
    from (with a partition prior, a heuristic's placement), so that what learning added can be told apart.
    Kept in start_placement.json, so that a resumed run compares against the same start."""
    path = run_dir / "start_placement.json"
    if path.exists():
        return json.loads(path.read_text())
    if not hasattr(agent, "policy") or (run_dir / "trainer_state.json").exists():
        return None  # search agents have no policy to start from; an older run never recorded its start
    assignment = [int(a) for a in agent.best_guess()]
    result = env.backend.evaluate(assignment)
    start = {"assignment": assignment, "step_time": result.step_time if result.ok else None}
    _write_json(path, start)
    log.info("start (the untrained policy's greedy placement): %s",
             f"{result.step_time * 1e3:.3f} ms" if result.ok else f"failed ({result.failure}: {result.message})")
    return start


def _final_comparison(config: ExperimentConfig, env, assignment, baselines, log,
                      start: Mapping[str, Any] | None = None) -> dict[str, float] | None:
    """Median step time of the learned placement, the start and every baseline, measured again side by side."""
    if config.backend != "measured" or config.final_rounds < 1 or assignment is None:
        return None
    contenders = {"learned": list(assignment)}
    if start is not None and start["step_time"] is not None:
        contenders["start"] = start["assignment"]
    contenders.update({name: r["assignment"] for name, r in baselines.items() if r["ok"]})
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in _progress(range(config.final_rounds), config.progress, "final comparison", "round"):
        for name, placement in contenders.items():
            samples[name].append(env.backend.evaluate(placement).step_time)
    final = {name: float(np.median(values)) for name, values in samples.items()}
    log.info("final comparison (%d interleaved rounds): %s", config.final_rounds,
             ", ".join(f"{name} {seconds * 1e3:.3f} ms" for name, seconds in final.items()))
    return final


def _summarize(config, run_dir: Path, state, baselines, best_baseline, agent_name: str,
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


def _log_best_placement(trackers, update, run_dir: Path, graph, devices, weights, step_time: float) -> None:
    from agents.tracking import placement_markdown, placement_matrix, placement_table

    state = json.loads((run_dir / "trainer_state.json").read_text())
    assignment = np.asarray(state["best_assignment"])
    matrix = placement_matrix(assignment, weights, len(devices))
    rows = placement_table([d.short_name for d in devices], assignment, graph)
    trackers.log_placement(update, matrix, placement_markdown(
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
    path = run_dir / "timeline.json"
    simulator = getattr(env.backend, "simulator", None)
    if simulator is not None:
        simulator.simulate(list(assignment), timeline=True).save_chrome_trace(path)
        return path.name
    from placer.placement import Placement

    placement = Placement.from_assignment(env.graph, env.devices, assignment)
    measurer = env.backend.measurer
    measurement = measurer.measure(env.graph, placement,
                                   dataclasses.replace(measurer.config, timed_steps=1, profile_steps=1))
    if not measurement.ok or not measurement.chrome_trace:
        log.warning("no timeline: tracing the best placement failed (%s)",
                    measurement.failure.message if measurement.failure else "empty trace")
        return None
    path.write_text(measurement.chrome_trace)
    return path.name


def _make_trackers(config: ExperimentConfig, run_dir: Path, agent):
    from agents.tracking import TensorBoardTracker, Trackers, WandbTracker

    hparams = {key: value for key, value in config.to_dict().items()
               if key not in ("agent_options", "baselines", "runs", "progress", "wandb", "wandb_project")}
    agent_config = getattr(agent, "config", None)
    if dataclasses.is_dataclass(agent_config):
        hparams.update({f"agent.{k}": v for k, v in dataclasses.asdict(agent_config).items()})
    name = f"{config.model}-{run_dir.name}"
    trackers = [TensorBoardTracker(run_dir, hparams, name)]
    if config.wandb != "off":
        trackers.append(WandbTracker(run_dir, {**config.to_dict(), **hparams}, name, config.wandb_project,
                                     config.wandb))
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
    handler = logging.FileHandler(run_dir / "log.txt")
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


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=_json_default))
    tmp.replace(path)


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)
