"""The `placer` command line: measure placements, run the local testbed, list models."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import statistics
import sys
from pathlib import Path

from placer import tf_logs
from placer.errors import PlacerError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="placer", description="Learn where the ops of a TensorFlow training graph should run.")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", help="also show TensorFlow's own log lines")

    measure = sub.add_parser("measure", parents=[common], help="measure the step time of a placed training graph")
    measure.add_argument("model", help="a built-in model (see `placer models`), or module:function / file.py:function returning an OpGraph")
    measure.add_argument("--size", default="tiny", help="size of a built-in model: tiny, small or paper (default tiny)")
    measure.add_argument("--placement", action="append", help="a placement file, or one of: " + ", ".join(_NAMED_PLACEMENTS)
                         + " (default single); give it several times to compare placements side by side")
    measure.add_argument("--rounds", type=int, default=1, help="with several placements: interleaved rounds, each timing "
                         "every placement once; each one's step time is the median over rounds (default 1)")
    measure.add_argument("--cluster", default="inprocess:1", help="inprocess:N, local:N (testbed), env, or a cluster spec (JSON or file)")
    measure.add_argument("--warmup", type=int, default=2, help="warm-up steps discarded (default 2)")
    measure.add_argument("--repeats", type=int, default=5, help="timed steps (default 5)")
    measure.add_argument("--step-timeout", type=float, default=60.0, help="seconds before a step counts as hung (default 60)")
    measure.add_argument("--save-placement", metavar="FILE", help="write the measured placement, with its step time, to FILE")
    measure.add_argument("--json", action="store_true", help="print the result as JSON")
    measure.add_argument("--allow-exposed-ports", action="store_true", help="run the local testbed without a private network namespace (unsafe)")

    cluster = sub.add_parser("cluster", help="the local multi-device testbed")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    up = cluster_sub.add_parser("up", parents=[common], help="start N pinned gRPC workers in a private network namespace and run COMMAND (default: a shell) there")
    up.add_argument("--workers", type=int, default=2)
    up.add_argument("--cores-per-worker", type=int, default=1)
    up.add_argument("--allow-exposed-ports", action="store_true", help="run without a private network namespace (unsafe)")
    up.add_argument("run", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... to run next to the workers ($PLACER_CLUSTER holds the spec)")

    sub.add_parser("models", parents=[common], help="list the built-in models")

    plugins = _plugin_commands()
    for name, command in plugins.items():
        command.add_arguments(sub.add_parser(name, help=command.help))

    dashboard = sub.add_parser("dashboard", parents=[common], help="serve TensorBoard on localhost for a run (or a folder of runs)")
    dashboard.add_argument("run_dir", metavar="RUN_DIR", help="a run directory, or runs/ to compare runs")
    dashboard.add_argument("--port", type=int, default=6006, help="port on 127.0.0.1 (default 6006; 0: any free port)")

    apply = sub.add_parser("apply", parents=[common], help="run real training steps of MODEL with an exported placement and compare its step time")
    apply.add_argument("placement", help="a placement file (placer.placement JSON), made for MODEL at --size")
    apply.add_argument("model", nargs="?", help="a built-in model, or module:function / file.py:function returning an OpGraph "
                                                "(default: the model `placer export` recorded in the file)")
    apply.add_argument("--size", help="size of a built-in model (default: the size the file records, else tiny)")
    apply.add_argument("--cluster", help="inprocess:N, local:N (testbed), env, or a cluster spec with the placement's devices "
                                          "(default: the inprocess:N or local:N the file records, else inprocess:1)")
    apply.add_argument("--steps", type=int, default=10, help="timed training steps (default 10)")
    apply.add_argument("--warmup", type=int, default=2, help="untimed training steps first (default 2)")
    apply.add_argument("--step-timeout", type=float, default=60.0, help="seconds before a step counts as hung (default 60)")
    apply.add_argument("--json", action="store_true", help="print the run as JSON")
    apply.add_argument("--allow-exposed-ports", action="store_true", help="run the local testbed without a private network namespace (unsafe)")

    args = parser.parse_args(argv)
    tf_logs.configure(verbose=getattr(args, "verbose", False))  # plugins without the flag: quiet
    try:
        if args.command == "measure":
            return _measure(args)
        if args.command == "cluster":
            return _cluster_up(args)
        if args.command in plugins:
            return plugins[args.command].run(args)
        if args.command == "dashboard":
            return _dashboard(args)
        if args.command == "models":
            return _list_models()
        if args.command == "apply":
            from placer.apply import apply_command

            return apply_command(args)
    except PlacerError as error:
        print(f"placer: error: {error}", file=sys.stderr)
        return 2
    return 1


def load_graph(spec: str, size: str = "tiny"):
    """A built-in model name, `package.module:function`, or `path/to/file.py:function` returning an OpGraph."""
    from placer.errors import GraphBuildError
    from placer.models import MODELS, build_model

    if spec in MODELS:
        return build_model(spec, size)
    module_name, _, function_name = spec.rpartition(":")
    if not module_name:
        raise GraphBuildError(f"{spec!r} is neither a built-in model ({', '.join(sorted(MODELS))}) nor module:function")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise GraphBuildError(f"no such file: {path}")
        loader_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(loader_spec)
        loader_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise GraphBuildError(f"cannot import {module_name!r}: {error}") from None
    builder = getattr(module, function_name, None)
    if not callable(builder):
        raise GraphBuildError(f"{module_name!r} has no function {function_name!r}")
    graph = builder()
    from placer.graph.opgraph import OpGraph

    if not isinstance(graph, OpGraph):
        raise GraphBuildError(f"{spec} returned {type(graph).__name__}, not an OpGraph (build it with placer.graph builders)")
    return graph


def _measure(args) -> int:
    from placer.measure import Measurer, MeasureConfig, parse_target

    names = args.placement or ["single"]
    if len(names) > 1:
        if args.save_placement:
            raise PlacerError("--save-placement writes one placement: give a single --placement")
        return _compare(args, names)
    if args.rounds != 1:
        raise PlacerError("--rounds interleaves several placements: give --placement more than once")
    graph = load_graph(args.model, args.size)
    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats, step_timeout=args.step_timeout)
    target = parse_target(args.cluster, allow_exposed_ports=args.allow_exposed_ports)
    with Measurer(target, config) as measurer:
        devices = measurer.devices
        placement = _placement_named(names[0], args.model, graph, devices)
        result = measurer.measure(graph, placement)
    if args.save_placement:
        placement.with_metadata(measured=result.to_dict(), target=str(target)).save(args.save_placement, graph)
    if args.json:
        print(json.dumps({"graph": graph.name, "fingerprint": graph.fingerprint, "target": str(target),
                          "placement": names[0], "result": result.to_dict()}, indent=1))
    else:
        print(graph.summary())
        print(f"target {target}, placement {names[0]}")
        print(placement.summary(graph, devices))
        print(result.describe())
    return 0 if result.ok else 1


def _compare(args, names: list[str]) -> int:
    """Several placements timed side by side in interleaved rounds: the machine's speed drifts over
    minutes, so only timings taken together compare."""
    from placer.measure import Measurer, MeasureConfig, parse_target

    if args.rounds < 1:
        raise PlacerError(f"--rounds must be at least 1, got {args.rounds}")
    graph = load_graph(args.model, args.size)
    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats, step_timeout=args.step_timeout)
    target = parse_target(args.cluster, allow_exposed_ports=args.allow_exposed_ports)
    with Measurer(target, config) as measurer:
        placements = [_placement_named(name, args.model, graph, measurer.devices) for name in names]
        results: list[list] = [[] for _ in names]
        for _ in range(args.rounds):
            for placement, rounds in zip(placements, results):
                if all(r.ok for r in rounds):  # a failed placement (OOM, timeout) is not retried every round
                    rounds.append(measurer.measure(graph, placement))
    rows = []
    for name, rounds in zip(names, results):
        failed = next((r for r in rounds if not r.ok), None)
        rows.append({"placement": name, "ok": failed is None,
                     "median": None if failed else statistics.median(r.median for r in rounds),
                     "rounds": [r.median if r.ok else None for r in rounds],
                     "failure": None if failed is None else failed.describe()})
    if args.json:
        print(json.dumps({"graph": graph.name, "fingerprint": graph.fingerprint, "target": str(target),
                          "rounds": args.rounds, "placements": rows}, indent=1))
    else:
        print(graph.summary())
        print(f"target {target}, {args.rounds} interleaved round(s) of {args.repeats} timed steps each")
        first = rows[0]["median"]
        for row in rows:
            if not row["ok"]:
                print(f"  {row['placement']}: failed: {row['failure']}")
                continue
            ratio = f"  {row['median'] / first:.3f}x the first" if first else ""
            rounds = ", ".join(f"{t * 1e3:.2f}" for t in row["rounds"])
            print(f"  {row['placement']}: median {row['median'] * 1e3:.2f} ms{ratio}  (rounds: {rounds})")
    return 0 if all(row["ok"] for row in rows) else 1


def _placement_named(name: str, model: str, graph, devices):
    from placer.measure import named_placement
    from placer.placement import load_placement

    if name in ("single", "round-robin"):
        return named_placement(name, graph, devices)
    if name in _NAMED_PLACEMENTS:
        return _reference_placement(name, model, graph, devices)
    return load_placement(name, graph, devices)


_NAMED_PLACEMENTS = {
    "single": "every op on device 0",
    "round-robin": "colocation groups dealt over the devices in topological order",
    "expert": "the papers' human-expert placement (built-in models only)",
    "single-device": "every op on the first GPU, else the first device",
    "cpu-only": "every op on the first CPU",
}


def _reference_placement(name: str, model: str, graph, devices):
    from placer.models import MODELS, reference_placements
    from placer.models.expert import cpu_only_placement, single_device_placement

    if name == "expert":
        if model not in MODELS:
            raise PlacerError(f"--placement expert needs a built-in model; {model!r} is not one (see `placer models`)")
        return reference_placements(model, graph, devices)["expert"]
    return single_device_placement(graph, devices) if name == "single-device" else cpu_only_placement(graph, devices)


def _plugin_commands() -> dict:
    """Commands of the layers above the core (`placer train`, `placer export` from agents/), registered as
    `placer.commands` entry points so that this core package never imports them. Each entry point is an
    object with `help`, `add_arguments(parser)` and `run(args) -> exit status`."""
    from importlib.metadata import entry_points

    return {entry.name: entry.load() for entry in sorted(entry_points(group="placer.commands"), key=lambda e: e.name)}


def _dashboard(args) -> int:
    from placer.dashboard import serve

    serve(args.run_dir, port=args.port)
    return 0


def _list_models() -> int:
    from placer.models import MODELS, SIZES

    width = max(len(name) for name in MODELS)
    for title, benchmark in (("Benchmark models", True), ("Built-in models for quick runs", False)):
        print(f"{title}:")
        for spec in MODELS.values():
            if spec.benchmark == benchmark:
                print(f"  {spec.name:<{width}}  {spec.description}")
    print(f"Sizes: {', '.join(SIZES)} (e.g. `placer measure nmt-2 --size tiny --placement expert`).")
    return 0


def _cluster_up(args) -> int:
    from placer.testbed import isolated_command

    run = args.run[1:] if args.run[:1] == ["--"] else args.run
    command = [sys.executable, "-m", "placer.testbed", "up", "--workers", str(args.workers),
               "--cores-per-worker", str(args.cores_per_worker), "--", *run]
    command, isolated = isolated_command(command, allow_exposed_ports=args.allow_exposed_ports)
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    if not isolated:
        env["PLACER_TESTBED_EXPOSED"] = "1"
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    sys.exit(main())
