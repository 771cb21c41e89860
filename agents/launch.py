"""The command line of an experiment, shared by `placer train` and the launch scripts in experiments/.

Settings come, each layer overriding the one before: the caller's defaults (the paper's setting for a
launch script), a config file (`--config run.yaml`), then command-line flags and `--set KEY=VALUE`
for the agent's hyper-parameters (any field of its config dataclass, e.g. `--set learning_rate=0.01`).
`--resume RUN_DIR` continues a run from its own config.json (only the budget may change).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from placer.errors import PlacerError
from placer.files import check_output_directory, check_output_file
from placer.models.loader import MODEL_HELP

from agents.experiment.config import ExperimentConfig, ExperimentError, load_config_file, parse_override
from agents.run_files import load_run_config
from agents.flags import add_dataclass_arguments

_NOT_FLAGS = ("model", "agent_options", "progress")
"""ExperimentConfig fields set otherwise: the positional MODEL, --set KEY=VALUE, --no-progress."""
_RESUMABLE = ("updates", "time_budget", "workers", "ray")
"""What --resume may change: the budget, and where evaluations run (the results do not depend on it)."""


def add_arguments(parser: argparse.ArgumentParser, *, model_positional: bool = True) -> None:
    """The flags of `placer train` and the launch scripts: one per ExperimentConfig field, plus these."""
    if model_positional:
        parser.add_argument("model", nargs="?", help=MODEL_HELP)
    parser.add_argument("--config", metavar="FILE", help="YAML/JSON file of settings (the fields of "
                                                         "agents.experiment.ExperimentConfig)")
    add_dataclass_arguments(parser, ExperimentConfig, skip=_NOT_FLAGS)
    parser.add_argument("--set", dest="agent_options", action="append", default=[], metavar="KEY=VALUE",
                        help="an agent hyper-parameter, e.g. --set learning_rate=0.01 --set num_groups=64")
    parser.add_argument("--run-dir", metavar="DIR", help="use exactly this run directory")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue this run (its config; --updates/--time-budget may extend it)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--print-config", action="store_true", help="print the resolved configuration and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="also show TensorFlow's own log lines")


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The ExperimentConfig fields the command line set."""
    import dataclasses

    given = {}
    for field in dataclasses.fields(ExperimentConfig):
        value = getattr(args, field.name, None) if field.name not in _NOT_FLAGS else None
        if value is not None:
            given[field.name] = value
    if isinstance(given.get("baselines"), str):
        given["baselines"] = [b.strip() for b in given["baselines"].split(",") if b.strip()]
    return given


def _backend_of(cluster: str) -> str:
    from placer.cost import parse_target_spec

    try:
        return parse_target_spec(cluster).backend
    except PlacerError as error:
        raise ExperimentError(str(error)) from None


def config_from_args(args: argparse.Namespace, defaults: Mapping[str, Any] | None = None) -> tuple[ExperimentConfig, Path | None]:
    """The resolved configuration and the run directory to use (None: a new one). Every setting is checked
    here, before any work: a bad value stops the command with the reason."""
    given = _given(args)
    check_output_directory(args.resume, "--resume")
    check_output_directory(args.run_dir, "--run-dir")
    if args.resume:
        config = load_run_config(args.resume)
        others = [name for name in given if name not in _RESUMABLE] + [
            name for name in ("config", "model") if getattr(args, name, None)] + (["set"] if args.agent_options else [])
        if others:
            raise ExperimentError(f"--resume continues a run with its own settings; only --updates, --time-budget, "
                                  f"--workers and --ray may change (got --{', --'.join(o.replace('_', '-') for o in others)})")
        budget = {name: given[name] for name in _RESUMABLE if name in given}
        if "time_budget" in budget and "updates" not in budget:
            budget["updates"] = None
        return _replace(config, budget, args.no_progress), Path(args.resume)
    settings: dict[str, Any] = dict(defaults or {})
    if args.config:
        settings.update(load_config_file(args.config))
    if "backend" in given and "cluster" not in given and settings.get("backend", "simulated") != given["backend"]:
        settings.pop("cluster", None)  # a modeled machine means nothing to real execution, and vice versa
    if "cluster" in given and "backend" not in given:
        given["backend"] = _backend_of(given["cluster"])  # --target local:2 alone means real execution
    if getattr(args, "model", None):
        settings["model"] = args.model
    settings.update(given)
    if args.agent_options:
        settings["agent_options"] = {**settings.get("agent_options", {}), **dict(parse_override(o) for o in args.agent_options)}
    if "time_budget" in given and "updates" not in given:
        settings["updates"] = None  # a time budget alone: train until it runs out
    if "init" in given and "agent" not in given:
        settings["agent"] = "graph"  # only the graph agent starts from a pre-trained policy
    if args.no_progress:
        settings["progress"] = False
    if "model" not in settings:
        raise ExperimentError("which model? give MODEL (see `placer models`) or `model:` in --config")
    config = ExperimentConfig.from_dict(settings, source="settings")
    if not args.run_dir:
        check_output_directory(config.runs, "--runs" if "runs" in given else "runs (from --config)")
    return config, Path(args.run_dir) if args.run_dir else None


def run(args: argparse.Namespace, defaults: Mapping[str, Any] | None = None) -> int:
    """Run the experiment the arguments describe, print where its results are; exit status."""
    from agents.experiment.results import describe
    from agents.experiment.run import run_experiment

    config, run_dir = config_from_args(args, defaults)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=1))
        return 0
    result = run_experiment(config, run_dir)
    print(describe(result.summary, result.run_dir))
    return 0


def _replace(config: ExperimentConfig, budget: Mapping[str, Any], no_progress: bool) -> ExperimentConfig:
    import dataclasses

    changes = dict(budget)
    if no_progress:
        changes["progress"] = False
    return dataclasses.replace(config, **changes)


def export(args: argparse.Namespace) -> int:
    from agents.experiment.results import export_run

    check_output_file(args.out, "--out")
    metadata = export_run(args.run_dir, args.out)
    beaten = ", ".join(metadata["beaten_baselines"]) or "none"
    source = metadata["source"]
    which = "the learned placement" if source == "learned" else f"{source}'s placement"
    print(f"wrote {args.out}: {which} of {metadata['model']} ({metadata['size']}) on {metadata['cluster']}, "
          f"{metadata['step_time'] * 1e3:.3f} ms per step ({metadata['step_time_kind']}); beat: {beaten}")
    if source != "learned":
        print(f"  the fastest placement the run measured is {source}'s, not the learned one "
              f"({metadata['learned_step_time'] * 1e3:.3f} ms): that is what the file holds")
    if args.keras:
        from placer.keras import add_layer_placement
        from placer.keras.device_map import DeviceMap, describe_default_map

        layers = add_layer_placement(args.out, metadata["model"], metadata["size"], device_map=args.device_map)
        print(f"  with a device per layer of the Keras model, for placer.keras.place(model, {str(args.out)!r}):")
        print("\n".join(f"    {line}" for line in layers.describe().splitlines()))
        if layers.device_map:
            mapping = DeviceMap(layers.device_map).describe()
            print("  placement devices -> devices of the process that fits (--device-map):")
        else:
            mapping = describe_default_map(layers.devices_in_order)
            print("  placement devices -> devices of the process that fits (the default; choose with --device-map "
                  "or place(..., device_map=)):")
        print("\n".join(f"    {line}" for line in mapping.splitlines()))
    elif args.device_map is not None:
        raise ExperimentError("--device-map maps the devices of a Keras layer placement: give --keras too")
    return 0


def _add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--out", required=True, metavar="FILE", help="where to write the placement file")
    parser.add_argument("--keras", action="store_true",
                        help="also write a device per layer of the run's Keras model (a model function returning a "
                             "keras.Model), for placer.keras.place(model, FILE) before model.fit")
    parser.add_argument("--device-map", metavar="MAP",
                        help="with --keras: which device of the process that fits runs each device of the placement, "
                             "as PLACEMENT_DEVICE=DEVICE pairs by index or name, e.g. 0=GPU:0,1=GPU:1 or "
                             "worker:1/CPU:0=CPU:1 (default: placement device i -> GPU:i, or CPU:i without GPUs)")


@dataclass(frozen=True)
class Command:
    """A `placer` subcommand of this layer (agents/cli.py adds it to the console script)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


train_command = Command("learn a placement for MODEL: a run in runs/<model>/<timestamp>/ with curves, checkpoints "
                        "and the best placement", add_arguments, run)
export_command = Command("write the fastest placement a run measured (the learned one, or a heuristic that "
                         "beat it), with its step time and the baselines it beat", _add_export_arguments, export)


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
