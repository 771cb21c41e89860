"""`placer optimize`, the command: a real target's search (agents/optimize.py) or a modeled GPU machine's
(agents/optimize_modeled.py), chosen by --target."""

from __future__ import annotations

import dataclasses
import json

from agents.flags import add_dataclass_arguments, field_docs
from agents.launch import Command
from agents.optimize import MEASURE_CONFIG, OptimizeArgs, is_modeled_target, optimize
from agents.optimize_modeled import optimize_modeled


def add_optimize_arguments(parser) -> None:
    from placer.measure.config import add_measure_arguments

    parser.add_argument("model", metavar="MODEL", help=field_docs(OptimizeArgs)["model"])
    add_dataclass_arguments(parser, OptimizeArgs, defaults={f.name: f.default for f in dataclasses.fields(OptimizeArgs)})
    add_measure_arguments(parser, MEASURE_CONFIG)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--allow-exposed-ports", action="store_true",
                        help="run the local testbed without a private network namespace (unsafe)")
    parser.add_argument("-v", "--verbose", action="store_true", help="also show TensorFlow's own log lines")


def optimize_command_run(args) -> int:
    from placer.measure.config import measure_config

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(OptimizeArgs)}
    config = measure_config(args, MEASURE_CONFIG)  # refuses bad --warmup/--repeats before any work
    if is_modeled_target(args.target):  # nothing to measure: the search is the simulator's alone
        result = optimize_modeled(OptimizeArgs(**values))
    else:
        result = optimize(OptimizeArgs(**values), measure_config=config, allow_exposed_ports=args.allow_exposed_ports)
    print(json.dumps(result.to_json_dict(), indent=1) if args.json else result.describe())
    return 0


optimize_command = Command(
    "search how to run MODEL's step here (one process and its thread pools, the target's workers and a placement, "
    "a micro-batch schedule) on the target's calibrated simulator, measure the best side by side, and write the "
    "fastest measured (the simplest of those within its noise) as a plan; on a modeled GPU machine (--target "
    "modeled:4xH100), search placement, schedule and replicas on its simulator alone and write the fastest simulated "
    "(the simplest of those tied with it) as a plan for that machine", add_optimize_arguments,
    optimize_command_run)
