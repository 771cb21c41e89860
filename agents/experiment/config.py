"""An experiment's settings (`ExperimentConfig`), every one checked when the config is made, before any work.

The command line (`agents/launch.py`) derives its flags from these fields; a config file holds the same
fields; `PAPER_SETTINGS` are the launch scripts' defaults.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

from agents.factory import AGENTS, AgentOptionError, check_agent_options
from agents.flags import setting
from agents.presets import PRESETS, PresetError, with_preset
from placer.errors import PlacerError

# The papers' setting per benchmark model: paper-size graph and GPU count of the hierarchical planner's
# experiments, on the project's reference modeled machine (V100s over NVLink, see placer.hardware), and
# 1,000 updates of 4 samples (the reference planner trains for thousands of samples). The agent runs the
# hierarchical planner's defaults (the tuned setting; `--preset reference` for the reference planner's).
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


class ExperimentError(PlacerError):
    """A run directory or configuration that cannot be used (the message says what to change)."""


def paper_setting(model: str) -> dict[str, Any]:
    """The defaults of a benchmark model's launch script."""
    if model not in PAPER_SETTINGS:
        raise ExperimentError(f"no paper setting for {model!r}; benchmark models: {', '.join(PAPER_SETTINGS)}")
    return {"model": model, "updates": PAPER_UPDATES, **PAPER_SETTINGS[model]}


WANDB_MODES = ("off", "auto", "offline", "online")
WANDB_ALIASES = {"disabled": "off"}
"""Earlier spellings of --wandb values."""


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    model: str = setting("two-tower", cli=False)
    """A built-in model (`placer models`) or module:function / file.py:function returning an OpGraph or a
    compiled keras.Model."""
    size: str = setting("tiny", choices=("tiny", "small", "paper"))
    """tiny, small or paper (built-in models; passed to a user's function that takes `size`)."""
    backend: str = setting("simulated", choices=("simulated", "measured"))
    """"simulated" (the simulator on a modeled machine) or "measured" (real execution)."""
    cluster: str | None = setting(None, flag="--target", flags=("--cluster",), metavar="TARGET")
    """Simulated: a modeled machine (modeled:2xV100, modeled:4xA100-nvlink3, a machine file); measured: a
    target (local:2, inprocess:2, a cluster spec). None: modeled:2xV100, or the local 2-worker testbed."""
    agent: str = setting("hierarchical", choices=AGENTS)
    """hierarchical (grouper + placer), colocation (placer over colocation groups), random or cem."""
    init: str | None = setting(None, metavar="POLICY")
    """A pre-trained policy file (`placer pretrain --out POLICY`) that the graph agent starts from, to
    fine-tune it on this model (sets --agent graph)."""
    preset: str | None = setting(None, choices=PRESETS)
    """The hierarchical planner's settings: tuned (its defaults, the best-known setting) or reference (the
    reference planner's, grappler's hierarchical_controller.py); None: the agent's own defaults. Other agents
    have no presets. --set KEY=VALUE overrides single options."""
    agent_options: Mapping[str, Any] = setting(default_factory=dict, cli=False)
    """Fields of the agent's config dataclass (e.g. learning_rate, num_groups, hidden_size) on top of the
    preset's; --set KEY=VALUE."""
    updates: int | None = setting(100, hidden_flags=("--steps",), metavar="N")
    """Policy updates to run (None: only the time budget stops training)."""
    time_budget: float | None = setting(None, metavar="MIN")
    """Minutes of training (counted across resumptions); with `updates`, whichever comes first."""
    simulator_updates: int = setting(0, metavar="N")
    """Measured backend: first train this many updates on the target's calibrated simulator, where a sample
    costs milliseconds, then go on with measured rewards from the policy and the best placement it reached
    (that placement is measured first). 0: measured rewards only."""
    calibration: str | None = setting(None, metavar="FILE")
    """With simulator_updates: the target's calibration (`placer calibrate --target TARGET --out FILE`).
    None: the run calibrates its target when it starts (about a minute on local:2) into RUN_DIR/calibration.json;
    either way op costs are profiled on the target once and cached next to the calibration."""
    samples_per_update: int = setting(4, metavar="K")
    """Placements sampled and evaluated per update."""
    greedy_every: int = setting(10, metavar="N")
    """Every this many updates, the agent's current best guess (the policy's greedy decoding, the
    cross-entropy method's mode) is evaluated too, counted as a sample, and kept if it is the best. 0: never."""
    confirm_repeats: int | None = setting(None, metavar="N")
    """A placement that would become the best is timed this many more times, side by side with the best,
    and becomes the best only if it is faster in every round (the fastest of many noisy single timings is
    mostly luck, and of two equally fast placements the faster median is a coin toss). Each timing counts as
    a sample. None: 3 on the measured backend, 0 on the simulator, whose step times do not vary."""
    seed: int = setting(0)
    """Seeds the agent and the random baseline."""
    reward: str = setting("neg_sqrt", choices=("neg_sqrt", "neg_time", "improvement"))
    """neg_sqrt (the papers': -sqrt(step time)), neg_time or improvement."""
    failing_step_time: float = setting(100.0, metavar="SECONDS")
    """Seconds charged to a placement that fails (OOM, no kernel, timeout)."""
    warmup_steps: int = setting(2, flag="--warmup", flags=("--warmup-steps",), metavar="N")
    """Measured backend: steps discarded before timing each placement."""
    timed_steps: int = setting(5, flag="--repeats", flags=("--timed-steps",), metavar="N")
    """Measured backend: steps timed per placement (the median is the step time)."""
    step_timeout: float = setting(60.0, metavar="SECONDS")
    """Measured backend: seconds before a step counts as hung."""
    final_rounds: int = setting(3, metavar="N")
    """Measured backend: at the end, the best placement and every baseline are measured again, interleaved,
    this many rounds, and the medians decide what was beaten (the best of many noisy samples is
    optimistic, and a baseline timed once at the start may have met a busy machine). 0: skip."""
    baselines: Sequence[str] | None = setting(None, metavar="A,B,...")
    """Baselines timed on the same target, and measured again in the final comparison (comma-separated); None:
    every heuristic the run can compute, that is single-device, round-robin, expert (built-in models), and
    with a simulator (a simulated target, or simulator_updates) METIS, Scotch, m-TOPO, m-ETF and m-SCT. On a
    measured target those five are placed with its calibrated simulator's op costs; a heuristic that fails
    to place the graph is logged and left out."""
    wandb: str = setting("off", choices=WANDB_MODES, value_aliases=WANDB_ALIASES)
    """Also log to Weights & Biases: auto (online with an account, else offline), offline, online; off."""
    wandb_project: str = setting("placer")
    """The W&B project runs are logged to."""
    workers: int = setting(1, metavar="N")
    """Simulated backend: evaluate each update's placements on N local worker processes, each with its own
    simulator, where that is faster than in this process (both are timed; the log says which ran); the policy's
    updates stay in this process, so the results are the same as with 1 (this process, no workers); refused on
    a measured target, where N testbeds on one machine's cores would skew each other's timings
    (docs/scale-out.md)."""
    ray: str | None = setting(None, metavar="auto|ADDRESS")
    """Evaluate on Ray actors instead of local processes: "auto" (a private Ray of this machine's CPUs, in a
    loopback-only network namespace) or a cluster's ADDRESS (host:port of its head); simulated: --workers N
    counts the actors (default: one per CPU of the cluster); measured: one actor pinned to each node measures
    on that node's own target, which must be the kind of this process's (devices, processor, cores,
    TensorFlow). Needs the `distributed` extra."""
    runs: str = setting("runs", metavar="DIR")
    """Runs go to RUNS/<model>/<timestamp>/."""
    progress: bool = setting(True, cli=False)
    """Show a progress bar with the current and best step time."""

    def __post_init__(self):
        object.__setattr__(self, "wandb", WANDB_ALIASES.get(self.wandb, self.wandb))  # a config file's old spelling
        self._check_numbers()
        from placer.cost import parse_target_spec
        from placer.models import absolute_model_spec, check_model_spec

        try:
            parse_target_spec(self.cluster, self.backend)
            check_model_spec(self.model, self.size)
        except PlacerError as error:
            raise ExperimentError(str(error)) from None
        # a run started here can be resumed, exported and applied from anywhere
        object.__setattr__(self, "model", absolute_model_spec(self.model))
        try:
            check_agent_options(self.agent, self.agent_settings, seed=self.seed)
        except PresetError as error:
            raise ExperimentError(str(error)) from None
        except AgentOptionError as error:
            raise ExperimentError(f"{error} (set agent options with --set KEY=VALUE)") from None
        if self.baselines is not None:
            object.__setattr__(self, "baselines", tuple(self._checked_baselines()))
        self._check_simulator_first()
        self._check_init()

    def _check_init(self) -> None:
        if self.init is None:
            return
        if self.agent != "graph":
            raise ExperimentError(f"--init starts the graph agent from a pre-trained policy; --agent is {self.agent}: "
                                  "use --agent graph")
        from agents.graph_policy.policy_file import PolicyFileError, check_devices, load_policy
        from placer.cost import parse_target_spec

        try:
            _, record = load_policy(self.init)
            devices = parse_target_spec(self.cluster, self.backend).devices  # known now on a simulated target
            if devices is not None:
                check_devices(record, devices, source=self.init)
        except PolicyFileError as error:
            raise ExperimentError(str(error)) from None
        object.__setattr__(self, "init", str(Path(self.init).resolve()))  # resumable from anywhere

    def _check_simulator_first(self) -> None:
        if self.simulator_updates and self.backend != "measured":
            raise ExperimentError("simulator_updates trains on the simulator of a real target before measuring "
                                  "there: it needs the measured backend (e.g. --target local:2)")
        if self.calibration is None:
            return
        object.__setattr__(self, "calibration", str(Path(self.calibration).resolve()))  # resumable from anywhere
        if not self.simulator_updates:
            raise ExperimentError("a calibration is used to train on the target's simulator first: give "
                                  "--simulator-updates N with it")
        from placer.calibration import load_calibration

        try:
            calibration = load_calibration(self.calibration)
        except (OSError, PlacerError) as error:
            raise ExperimentError(f"calibration {self.calibration}: {error}") from None
        if calibration.target and calibration.target != self.target:
            raise ExperimentError(f"{self.calibration} was made on {calibration.target}, not on {self.target}: "
                                  f"calibrate this target with `placer calibrate --target {self.target} --out FILE`")

    def _check_numbers(self) -> None:
        if self.backend not in ("simulated", "measured"):
            raise ExperimentError(f"unknown backend {self.backend!r}: 'simulated' or 'measured'")
        if self.wandb not in WANDB_MODES:
            raise ExperimentError(f"unknown wandb setting {self.wandb!r}: one of {', '.join(WANDB_MODES)}")
        if self.agent not in AGENTS:
            raise ExperimentError(f"unknown agent {self.agent!r}: one of {', '.join(AGENTS)}")
        if self.updates is None and self.time_budget is None:
            raise ExperimentError("give a number of updates or a time budget (or both), else training never stops")
        at_least = [("updates", self.updates, 1), ("simulator_updates", self.simulator_updates, 0),
                    ("samples_per_update", self.samples_per_update, 1),
                    ("greedy_every", self.greedy_every, 0), ("confirm_repeats", self.confirm_repeats, 0),
                    ("warmup_steps", self.warmup_steps, 0), ("timed_steps", self.timed_steps, 1),
                    ("final_rounds", self.final_rounds, 0)]
        for name, value, low in at_least:
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                meaning = {"greedy_every": " (0: never)", "confirm_repeats": " (0: trust one evaluation)",
                           "final_rounds": " (0: skip)"}.get(name, "")
                raise ExperimentError(f"{name} must be a whole number of at least {low}{meaning}, got {value!r}")
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1:
            raise ExperimentError(f"workers must be a whole number of at least 1, got {self.workers!r}")
        if self.ray is not None:
            from agents.workers import check_ray_address
            from agents.workers import WorkerError

            try:
                check_ray_address(self.ray)
            except WorkerError as error:
                raise ExperimentError(str(error)) from None
        if self.backend == "measured" and self.workers > 1:
            # Worker processes of one machine would measure at once on its cores, each skewing the others' step
            # times; a Ray node per machine measures alone on its own.
            raise ExperimentError(
                f"--workers {self.workers} with a measured target would run {self.workers} testbeds at once on this "
                "machine's cores, each skewing the others' step times: measure from this process (drop "
                "--workers), or spread over machines with --ray ADDRESS, one Ray node per machine, each measuring "
                "on its own target (docs/scale-out.md)" if self.ray is None else
                "with a measured target, --ray runs one actor on each node of the cluster, each measuring on its "
                "own machine: drop --workers")
        for name, value in (("time_budget", self.time_budget), ("step_timeout", self.step_timeout),
                            ("failing_step_time", self.failing_step_time)):
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
                raise ExperimentError(f"{name} must be a positive number, got {value!r}")

    def _checked_baselines(self) -> list[str]:
        from placer.heuristics import canonical_name, check_heuristic, heuristics, is_heuristic_name
        from placer.models import is_builtin_model

        if isinstance(self.baselines, str) or not all(isinstance(b, str) for b in self.baselines):
            raise ExperimentError(f"baselines must be a list of names, got {self.baselines!r}")
        checked = []
        for name in self.baselines:
            try:
                checked.append(check_heuristic(name, builtin_model=is_builtin_model(self.model),
                                               simulator=self.has_simulator))
            except PlacerError as error:
                needs_simulator = is_heuristic_name(name) and heuristics()[canonical_name(name)].needs_simulator
                hint = ("; or give --simulator-updates N: the run then places it with the op costs of its "
                        "target's calibrated simulator" if needs_simulator and self.backend == "measured" else "")
                raise ExperimentError(f"{error}{hint}") from None
        return checked

    @property
    def agent_settings(self) -> dict[str, Any]:
        """The options the agent is built with: the preset's, then `agent_options` over them."""
        return with_preset(self.preset, self.agent, self.agent_options)

    @property
    def has_simulator(self) -> bool:
        """The run has a simulator whose op costs the cost-reading heuristics (METIS, Scotch, Baechi's) place
        from: a simulated target, or the calibrated simulator of a measured one (simulator_updates)."""
        return self.backend == "simulated" or self.simulator_updates > 0

    @property
    def target(self) -> str:
        from placer.cost import DEFAULT_TARGETS

        return self.cluster or DEFAULT_TARGETS[self.backend]

    @property
    def measure_config(self):
        """How the measured backend times a placement (a `placer.measure.MeasureConfig`); None on the simulator."""
        if self.backend != "measured":
            return None
        from placer.measure import MeasureConfig

        return MeasureConfig(warmup_steps=self.warmup_steps, timed_steps=self.timed_steps,
                             step_timeout=self.step_timeout)

    @property
    def repeats_to_confirm(self) -> int:
        if self.confirm_repeats is not None:
            return self.confirm_repeats
        return 3 if self.backend == "measured" else 0

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
    except (OSError, UnicodeDecodeError) as error:
        raise ExperimentError(f"cannot read config file {path}: {getattr(error, 'strerror', None) or error}") from None
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
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError:
        return key.strip(), value
