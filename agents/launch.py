"""The command line of an experiment, shared by `placer train` and the launch scripts in experiments/.

Settings come, each layer overriding the one before: the caller's defaults (the paper's setting for a
launch script), a config file (`--config run.yaml`), then command-line flags and `--set KEY=VALUE`
for the agent's hyper-parameters (any field of its config dataclass, e.g. `--set learning_rate=0.01`).
`--resume RUN_DIR` continues a run from its own config.json (only the budget may change).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from placer.errors import PlacerError

from agents.experiment import AGENTS, ExperimentConfig, ExperimentError, load_config_file, load_run_config, parse_override

# flag -> ExperimentConfig field, for the flags that set a field directly
_FLAGS = {
    "size": "size", "backend": "backend", "cluster": "cluster", "agent": "agent", "updates": "updates",
    "time_budget": "time_budget", "samples_per_update": "samples_per_update",
    "greedy_every": "greedy_every", "confirm_repeats": "confirm_repeats", "seed": "seed", "reward": "reward",
    "wandb": "wandb", "wandb_project": "wandb_project", "runs": "runs", "warmup": "warmup_steps",
    "repeats": "timed_steps", "step_timeout": "step_timeout",
}


def add_arguments(parser: argparse.ArgumentParser, *, model_positional: bool = True) -> None:
    if model_positional:
        parser.add_argument("model", nargs="?", help="a built-in model (`placer models`) or module:function returning an OpGraph")
    parser.add_argument("--config", metavar="FILE", help="YAML/JSON file of settings (the fields of agents.experiment.ExperimentConfig)")
    parser.add_argument("--size", help="tiny, small or paper")
    parser.add_argument("--backend", choices=["simulated", "measured"], help="simulated step times or real execution")
    parser.add_argument("--cluster", help="simulated: modeled:2xV100, modeled:4xA100-nvlink3, a machine file; "
                                          "measured: local:2 (testbed), inprocess:2, a cluster spec")
    parser.add_argument("--agent", choices=AGENTS)
    budget = parser.add_argument_group("budget (whichever ends first)")
    budget.add_argument("--updates", "--steps", dest="updates", type=int, metavar="N", help="policy updates to run")
    budget.add_argument("--time-budget", type=float, metavar="MIN", help="minutes of training")
    parser.add_argument("--samples-per-update", type=int, metavar="K", help="placements evaluated per update")
    parser.add_argument("--greedy-every", type=int, metavar="N",
                        help="also evaluate the policy's greedy placement every N updates (default 10; 0: never)")
    parser.add_argument("--confirm-repeats", type=int, metavar="N",
                        help="time a would-be best placement N more times, alternating with the best so far, and keep "
                             "it only if its median wins (default 2 measured, 0 simulated)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--reward", choices=["neg_sqrt", "neg_time", "improvement"])
    parser.add_argument("--set", dest="agent_options", action="append", default=[], metavar="KEY=VALUE",
                        help="an agent hyper-parameter, e.g. --set learning_rate=0.01 --set num_groups=64")
    parser.add_argument("--baselines", help="comma-separated baselines to time (default: all that apply)")
    parser.add_argument("--warmup", type=int, help="measured: warm-up steps per placement")
    parser.add_argument("--repeats", type=int, help="measured: timed steps per placement")
    parser.add_argument("--step-timeout", type=float, help="measured: seconds before a step counts as hung")
    parser.add_argument("--wandb", choices=["off", "auto", "offline", "online", "disabled"],
                        help="also log to Weights & Biases (auto: online with an account, else offline)")
    parser.add_argument("--wandb-project")
    parser.add_argument("--runs", metavar="DIR", help="runs go to DIR/<model>/<timestamp>/ (default runs)")
    parser.add_argument("--run-dir", metavar="DIR", help="use exactly this run directory")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue this run (its config; --updates/--time-budget may extend it)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--print-config", action="store_true", help="print the resolved configuration and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="also show TensorFlow's own log lines")


def config_from_args(args: argparse.Namespace, defaults: Mapping[str, Any] | None = None) -> tuple[ExperimentConfig, Path | None]:
    """The resolved configuration and the run directory to use (None: a new one)."""
    if args.resume:
        config = load_run_config(args.resume)
        budget = {key: getattr(args, key) for key in ("updates", "time_budget") if getattr(args, key) is not None}
        others = [flag for flag in ("config", "size", "backend", "cluster", "agent", "samples_per_update", "greedy_every",
                                    "confirm_repeats", "seed")
                  if getattr(args, flag, None) is not None] + (["set"] if args.agent_options else [])
        if others:
            raise ExperimentError(f"--resume continues a run with its own settings; only --updates and --time-budget "
                                  f"may change (got --{', --'.join(o.replace('_', '-') for o in others)})")
        return _replace(config, budget, args.no_progress), Path(args.resume)
    settings: dict[str, Any] = dict(defaults or {})
    if args.config:
        settings.update(load_config_file(args.config))
    if args.backend is not None and args.cluster is None and settings.get("backend", "simulated") != args.backend:
        settings.pop("cluster", None)  # a modeled machine means nothing to real execution, and vice versa
    if getattr(args, "model", None):
        settings["model"] = args.model
    for flag, name in _FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            settings[name] = value
    if args.baselines is not None:
        settings["baselines"] = [b.strip() for b in args.baselines.split(",") if b.strip()]
    if args.agent_options:
        settings["agent_options"] = {**settings.get("agent_options", {}), **dict(parse_override(o) for o in args.agent_options)}
    if args.time_budget is not None and args.updates is None:
        settings["updates"] = None  # a time budget alone: train until it runs out
    if args.no_progress:
        settings["progress"] = False
    if "model" not in settings:
        raise ExperimentError("which model? give MODEL (see `placer models`) or `model:` in --config")
    config = ExperimentConfig.from_dict(settings, source="settings")
    return config, Path(args.run_dir) if args.run_dir else None


def run(args: argparse.Namespace, defaults: Mapping[str, Any] | None = None) -> int:
    """Run the experiment the arguments describe, print where its results are; exit status."""
    from agents.experiment import run_experiment

    config, run_dir = config_from_args(args, defaults)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=1))
        return 0
    result = run_experiment(config, run_dir)
    print(describe(result.summary, result.run_dir))
    return 0


def describe(summary: Mapping[str, Any], run_dir: Path) -> str:
    lines = [f"{summary['model']} ({summary['size']}), {summary['backend']} on {summary['cluster']}: "
             f"{summary['agent']} ran {summary['updates']} updates, {summary['samples']} placements in "
             f"{summary['wall_time']:.0f} s",
             f"  {'learned (' + summary['agent'] + ')':<24} {_ms(summary['step_time'])}"]
    if "start_step_time" in summary and summary.get("start_step_time") is not None:
        lines.append(f"  {'start (before training)':<24} {_ms(summary['start_step_time'])}")
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


def _replace(config: ExperimentConfig, budget: Mapping[str, Any], no_progress: bool) -> ExperimentConfig:
    import dataclasses

    changes = dict(budget)
    if no_progress:
        changes["progress"] = False
    return dataclasses.replace(config, **changes)


def export(args: argparse.Namespace) -> int:
    from agents.experiment import export_run

    metadata = export_run(args.run_dir, args.out)
    beaten = ", ".join(metadata["beaten_baselines"]) or "none"
    print(f"wrote {args.out}: {metadata['model']} ({metadata['size']}) on {metadata['cluster']}, "
          f"{metadata['step_time'] * 1e3:.3f} ms per step ({metadata['step_time_kind']}); beat: {beaten}")
    return 0


def _add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--out", required=True, metavar="FILE", help="where to write the placement file")


@dataclass(frozen=True)
class Command:
    """A `placer` subcommand contributed by this layer (see setup.cfg's `placer.commands` entry points)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


train_command = Command("learn a placement for MODEL: a run in runs/<model>/<timestamp>/ with curves, checkpoints "
                        "and the best placement", add_arguments, run)
export_command = Command("write a run's best placement, with its step time and the baselines it beat",
                         _add_export_arguments, export)


def main(argv: list[str] | None = None, *, defaults: Mapping[str, Any] | None = None, prog: str | None = None,
         description: str | None = None) -> int:
    """Entry point of a launch script: `defaults` are its model's paper setting."""
    import sys

    from placer import tf_logs

    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, model_positional=defaults is None or "model" not in defaults)
    args = parser.parse_args(argv)
    tf_logs.configure(verbose=args.verbose)
    try:
        return run(args, defaults)
    except PlacerError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
