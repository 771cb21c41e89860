"""placer/'s commands: measure and compare placements, calibrate, tune, schedule, apply, run the local testbed.

The `placer` console script (agents/cli.py) adds the commands of the layers above; this layer never imports them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from placer import tf_logs
from placer.errors import PlacerError
from placer.files import check_output_file, write_atomically


PLACER_COMMANDS = ("measure", "cluster", "calibrate", "models", "tune", "schedule", "dashboard", "apply")
"""The commands of this layer. The `placer` console script (agents/cli.py) adds those of the layers above."""


def new_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The `placer` parser without commands, and the subparsers to add them to."""
    parser = argparse.ArgumentParser(prog="placer", description="Learn where the ops of a TensorFlow training graph "
                                     "should run.")
    return parser, parser.add_subparsers(dest="command", required=True, metavar="COMMAND")


def add_placer_commands(sub: argparse._SubParsersAction) -> None:
    """Add this layer's commands (`PLACER_COMMANDS`) to `sub`; `run_placer_command` runs them."""
    from placer.commands.target_option import TARGET_HELP, add_target_argument
    from placer.measure.config import add_measure_arguments
    from placer.models.loader import MODEL_HELP

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", help="also show TensorFlow's own log lines")

    measure = sub.add_parser("measure", parents=[common], help="the step time of a placed training graph: measured "
                             "for real, or simulated on a modeled machine (--target modeled:2xV100)")
    measure.add_argument("model", help=MODEL_HELP)
    measure.add_argument("--size", default="tiny", help="size of a built-in model: tiny, small or paper (default tiny)")
    measure.add_argument("--placement", action="append", help="a placement file, or a baseline: single-device (the "
                         "default), round-robin, expert, cpu-only, random, and on a simulated target metis, scotch, "
                         "m-topo, m-etf, m-sct, exact, balanced-stages (language models); give it several times to "
                         "compare placements side by side")
    measure.add_argument("--rounds", type=int, default=1, help="with several placements: interleaved rounds, each timing "
                         "every placement once; each one's step time is the median over rounds (default 1)")
    add_target_argument(measure, f"where to cost the placement; {TARGET_HELP} (default inprocess:1)",
                        default="inprocess:1")
    add_measure_arguments(measure)
    measure.add_argument("--save-placement", metavar="FILE", help="write the measured placement, with its step time, to FILE")
    measure.add_argument("--timeline", metavar="FILE", help="write one step of the placement as a Chrome trace to FILE "
                         "(simulated, or a traced real step)")
    measure.add_argument("--json", action="store_true", help="print the result as JSON")
    measure.add_argument("--allow-exposed-ports", action="store_true", help="run the local testbed without a private network namespace (unsafe)")

    cluster = sub.add_parser("cluster", help="the local multi-device testbed")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    up = cluster_sub.add_parser("up", parents=[common], help="start N pinned gRPC workers in a private network namespace and run COMMAND (default: a shell) there")
    up.add_argument("--workers", type=int, default=2)
    up.add_argument("--cores-per-worker", type=int, default=1)
    up.add_argument("--link", metavar="RATE", help="join the 2 workers by a link shaped to RATE (tc's spelling: 1gbit, "
                    "100mbit), the second worker in a network namespace of its own, as local:2,link=RATE does")
    up.add_argument("--allow-exposed-ports", action="store_true", help="run without a private network namespace (unsafe)")
    up.add_argument("run", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... to run next to the workers ($PLACER_CLUSTER holds the spec)")

    calibrate = sub.add_parser("calibrate", parents=[common], help="fit a real target's links and per-step overheads "
                               "for its simulator (then simulate it with --target calibrated:FILE)")
    add_target_argument(calibrate, "the real target: local:N (local:2,link=1gbit: over a shaped link), inprocess:N, "
                        "env or a cluster spec (default local:2)", default="local:2")
    calibrate.add_argument("--out", required=True, metavar="FILE", help="where to write the calibration (JSON)")
    calibrate.add_argument("--rounds", type=int, default=5, help="interleaved rounds of every probe (default 5: with 3, "
                           "predictions from independent calibrations differed by up to 15 %%, see RESULTS.md)")
    calibrate.add_argument("--json", action="store_true", help="print the calibration as JSON")
    calibrate.add_argument("--allow-exposed-ports", action="store_true", help="run the local testbed without a private network namespace (unsafe)")

    sub.add_parser("models", parents=[common], help="list the built-in models")

    from placer.commands.tune import add_tune_arguments

    add_tune_arguments(sub.add_parser("tune", parents=[common], help="time a model's step under each thread setting "
                                      "(TensorFlow's default, the recommended one, every intra/inter pair) side by side"))

    from placer.commands.schedule import add_schedule_arguments

    add_schedule_arguments(sub.add_parser("schedule", parents=[common], help="schedule micro-batches of a placement "
                                          "shape or a placed model (Tessel's z3 search, GPipe, 1F1B); --measure runs "
                                          "the plans for real"))

    dashboard = sub.add_parser("dashboard", parents=[common],
                               help="serve the dashboard on localhost for a run, or every run under a folder side by side")
    dashboard.add_argument("run_dir", metavar="RUN_DIR",
                           help="a run directory (runs/<model>/<timestamp>), or runs/<model> or runs/ to compare runs")
    dashboard.add_argument("--port", type=int, default=6006, help="port on 127.0.0.1 (default 6006; 0: any free port)")

    apply = sub.add_parser("apply", parents=[common], help="run real training steps of MODEL with an exported placement "
                           "(and its schedule over micro-batches), or of a plan, and compare its step time")
    apply.add_argument("placement", metavar="PLACEMENT|PLAN", help="a placement file (placer.placement JSON), made for "
                       "MODEL at --size; or a plan file (placer.plan JSON: machine use, placement and schedule, from "
                       "`placer schedule --save-plan`), run on the machine use it was made for and compared with its "
                       "prediction; a plan for another model, size, target or calibration is refused")
    apply.add_argument("model", nargs="?", help=f"{MODEL_HELP} (default: the model `placer export` recorded in "
                                                "the file)")
    apply.add_argument("--size", help="size of a built-in model (default: the size the file records, else tiny)")
    add_target_argument(apply, "inprocess:N, local:N (testbed), env, or a cluster spec with the placement's devices "
                               "(default: the inprocess:N or local:N the file records, else inprocess:1)")
    from placer.apply.run import APPLY_CONFIG

    add_measure_arguments(apply, APPLY_CONFIG, old_repeats_flag="--steps")
    apply.add_argument("--schedule", metavar="PLAN", help="a schedule plan (`placer schedule --model MODEL --placement PLACEMENT.json "
                                                        "--target inprocess:2 --micro-batches M --save PLAN`): run the steps over its "
                                                        "M micro-batches (the model rebuilt at batch/M, one update per step), each "
                                                        "device running its blocks in the plan's order; print measured against the "
                                                        "plan's predicted step time and whether the traced step kept the order. A "
                                                        "plan made for another model, placement or micro-batch count is refused")
    apply.add_argument("--json", action="store_true", help="print the run as JSON")
    apply.add_argument("--allow-exposed-ports", action="store_true", help="run the local testbed without a private network namespace (unsafe)")


def run_placer_command(args: argparse.Namespace) -> int:
    """Run one of `PLACER_COMMANDS` from its parsed arguments; its exit status."""
    if args.command == "measure":
        return _measure(args)
    if args.command == "cluster":
        return _cluster_up(args)
    if args.command == "calibrate":
        return _calibrate(args)
    if args.command == "dashboard":
        return _dashboard(args)
    if args.command == "models":
        return _list_models()
    if args.command == "tune":
        from placer.commands.tune import tune_command

        return tune_command(args)
    if args.command == "schedule":
        from placer.commands.schedule import schedule_command

        return schedule_command(args)
    if args.command == "apply":
        from placer.commands.apply import apply_command

        return apply_command(args)
    raise ValueError(f"{args.command!r} is not one of placer/'s commands {PLACER_COMMANDS}")


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None, run) -> int:
    """Parse `argv`, quiet TensorFlow's logs unless -v, and `run(args)`; a PlacerError becomes its message and
    exit status 2."""
    args = parser.parse_args(argv)
    tf_logs.configure(verbose=getattr(args, "verbose", False))  # commands without the flag: quiet
    try:
        return run(args)
    except PlacerError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    """placer/'s own commands (`python -m placer.cli`); the `placer` console script is agents/cli.py's."""
    parser, sub = new_parser()
    add_placer_commands(sub)
    return run_command(parser, argv, run_placer_command)


def _measure(args) -> int:
    """One placement costed on the target (measured, or simulated on a modeled machine), or several compared."""
    from placer.commands.placement_option import check_placement_name, placement_named
    from placer.cost import open_target, parse_target_spec
    from placer.measure.config import measure_config
    from placer.models import load_model

    names = args.placement or ["single-device"]
    if len(names) > 1 and args.save_placement:
        raise PlacerError("--save-placement writes one placement: give a single --placement")
    if len(names) > 1 and args.timeline:
        raise PlacerError("--timeline traces one placement: give a single --placement")
    if len(names) == 1 and args.rounds != 1:
        raise PlacerError("--rounds interleaves several placements: give --placement more than once")
    if args.rounds < 1:
        raise PlacerError(f"--rounds must be at least 1, got {args.rounds}")
    check_output_file(args.save_placement, "--save-placement")
    check_output_file(args.timeline, "--timeline")
    spec = parse_target_spec(args.target, allow_exposed_ports=args.allow_exposed_ports)  # refuse a bad target early
    config = measure_config(args)
    for name in names:
        check_placement_name(name, args.model, spec.backend)
    _say_if_busy(spec.backend)
    graph = load_model(args.model, args.size)
    with open_target(graph, spec, measure_config=config) as target:
        placements = [placement_named(name, args.model, graph, target.devices, target.simulator) for name in names]
        if len(names) > 1:
            return _compare(args, names, placements, graph, target)
        placement = placements[0]
        result = target.evaluate(placement)
        if args.timeline and result.ok:
            write_atomically(args.timeline, target.trace(placement))
    if args.save_placement:
        placement.with_metadata(step_time=result.seconds if result.ok else None, step_time_kind=result.backend,
                                target=str(spec), measured=result.to_dict()).save(args.save_placement, graph)
    if args.json:
        print(json.dumps({"graph": graph.name, "fingerprint": graph.fingerprint, "target": str(spec),
                          "backend": result.backend, "placement": names[0], "result": result.to_dict(),
                          "op_costs": getattr(target, "op_cost_sources", None)}, indent=1))
    else:
        print(graph.summary())
        print(f"target {spec} ({result.backend}), placement {names[0]}")
        for kind, source in (target.simulator and target.op_cost_sources or {}).items():
            print(f"  op costs on {kind}: {source}")
        print(placement.summary(graph, target.devices))
        print(result.describe())
        if args.timeline and result.ok:
            print(f"timeline of one step: {args.timeline} (open it in https://ui.perfetto.dev or chrome://tracing)")
    return 0 if result.ok else 1


def _say_if_busy(backend: str) -> None:
    """Before timing anything real: a busy or noisy machine named on stderr with what ran (nothing when quiet)."""
    if backend != "measured":
        return
    from placer.measure.machine_check import check_machine

    check = check_machine()
    if not check.quiet:
        print(f"placer: {check.describe()}", file=sys.stderr, flush=True)


def _compare(args, names: list[str], placements: list, graph, target) -> int:
    """Several placements timed side by side in interleaved rounds (`placer.cost.compare`)."""
    from placer.cost import compare

    compared = compare(target.evaluate, dict(zip(names, placements)), args.rounds)
    rows = []
    for name in names:
        result = compared[name]
        rows.append({"placement": name, "ok": result.ok, "median": result.median if result.ok else None,
                     "rounds": result.rounds, "failure": None if result.ok else result.failure.describe(),
                     "step_time": result.median_timing.to_dict() if result.timings else None})
    if args.json:
        print(json.dumps({"graph": graph.name, "fingerprint": graph.fingerprint, "target": str(target.spec),
                          "backend": target.backend, "rounds": args.rounds, "placements": rows}, indent=1))
    else:
        print(graph.summary())
        print(f"target {target.spec} ({target.backend}), {args.rounds} interleaved round(s)"
              + (f" of {args.repeats} timed steps each" if target.backend == "measured" else ""))
        first = rows[0]["median"]
        for row in rows:
            if not row["ok"]:
                print(f"  {row['placement']}: failed: {row['failure']}")
                continue
            ratio = f"  {row['median'] / first:.3f}x the first" if first else ""
            rounds = ", ".join(f"{t * 1e3:.2f}" for t in row["rounds"])
            print(f"  {row['placement']}: median {row['median'] * 1e3:.2f} ms{ratio}  (rounds: {rounds})")
    return 0 if all(row["ok"] for row in rows) else 1


def _calibrate(args) -> int:
    """Probe a real target side by side in interleaved rounds, fit, save, and say how well it fits."""
    from placer.calibrate import calibrate
    from placer.cost import parse_target_spec
    from placer.measure import Measurer

    if args.rounds < 2:
        raise PlacerError(f"--rounds must be at least 2 (the fit's intervals resample rounds), got {args.rounds}")
    check_output_file(args.out, "--out")
    spec = parse_target_spec(args.target, "measured", allow_exposed_ports=args.allow_exposed_ports)
    _say_if_busy(spec.backend)
    with Measurer(spec.measured) as measurer:
        calibration = calibrate(measurer, rounds=args.rounds, progress=_progress_bar("calibration probes", "round"))
    calibration.save(args.out)
    if args.json:
        print(json.dumps({"file": str(args.out), "poor_fit": calibration.poor_fit,
                          "model_limits": calibration.model_limits,
                          **json.loads(Path(args.out).read_text())}, indent=1))
    else:
        print(calibration.describe())
        print(f"wrote {args.out}; simulate this target with --target calibrated:{args.out}")
    return 0


def _progress_bar(description: str, unit: str):
    from tqdm.auto import tqdm

    return lambda items: tqdm(items, desc=description, unit=unit, leave=False, dynamic_ncols=True)


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
    link = []
    if args.link is not None:  # refused here, in one line, before any namespace or worker is made
        from placer.measure.targets import check_shaped_link, parse_rate

        bits = parse_rate(args.link, "--link")
        check_shaped_link(args.workers, bits, args.allow_exposed_ports, spelled=f"--link {args.link}")
        link = ["--link-bits", str(bits)]
    command = [sys.executable, "-m", "placer.testbed", "up", "--workers", str(args.workers),
               "--cores-per-worker", str(args.cores_per_worker), *link, "--", *run]
    command, isolated = isolated_command(command, allow_exposed_ports=args.allow_exposed_ports)
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    if not isolated:
        env["PLACER_TESTBED_EXPOSED"] = "1"
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    sys.exit(main())
