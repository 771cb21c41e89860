"""`placer tune MODEL`: time the model's training step under TensorFlow's default thread pools, the recommended
setting and every (intra, inter) pair up to the cores, side by side, and print which is fastest; in-process
(`--target inprocess:1`) or on the local testbed (`--target local:...`, every worker with the setting). With
`--predict`, price every setting with the simulator from the model's op costs profiled once per width instead.
"""

from __future__ import annotations

import json


def add_tune_arguments(parser) -> None:
    from placer.models.loader import MODEL_HELP

    parser.add_argument("model", help=MODEL_HELP)
    parser.add_argument("--size", default="tiny", help="size of a built-in model: tiny, small or paper (default tiny)")
    from placer.commands.target_option import add_target_argument
    from placer.measure.config import MeasureConfig, add_measure_arguments

    add_target_argument(parser, "where to tune: inprocess:1, one CPU device in one process; or the local testbed, "
                        "local:N, local:widths=2+1 or local:cores=0-1+2, each setting giving every worker its pools "
                        "(default inprocess:1)", default="inprocess:1")
    parser.add_argument("--placement", default="single-device", help="on the testbed: the placement timed under each "
                        "setting, a baseline (single-device, round-robin, expert, ...) or a placement file "
                        "(default single-device)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds timing every setting once (default 3)")
    parser.add_argument("--predict", action="store_true",
                        help="in-process: price every setting with the simulator from the model's op costs profiled "
                        "once at each intra-op width (one measurement process per width), instead of timing each")
    add_measure_arguments(parser, MeasureConfig(warmup_steps=3, timed_steps=10))
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--allow-exposed-ports", action="store_true",
                        help="run the local testbed without a private network namespace (unsafe)")


def tune_command(args) -> int:
    from placer.concurrency import tune, tuning_candidates
    from placer.errors import PlacerError
    from placer.measure import InProcess, LocalTestbed, parse_target
    from placer.measure.config import measure_config
    from placer.models import load_model

    target = parse_target(args.target, allow_exposed_ports=args.allow_exposed_ports)  # refuses more cores than here
    if isinstance(target, InProcess):
        if target.logical_cpus != 1:
            raise PlacerError(f"placer tune sets the thread pools of one in-process CPU device: use --target "
                              f"inprocess:1, not {args.target!r}")
        fixed = target.intra_op_threads is not None or target.inter_op_threads is not None
    elif isinstance(target, LocalTestbed):
        fixed = target.intra_op_threads is not None or target.inter_op_threads is not None
    else:
        raise PlacerError(f"placer tune starts the processes whose thread pools it sets: use --target inprocess:1 or "
                          f"local:..., not {args.target!r} (a running cluster's workers have their pools already)")
    if fixed:
        raise PlacerError(f"{args.target!r} fixes the threads that placer tune is choosing: leave out intra= and "
                          "inter=")
    if args.predict and not isinstance(target, InProcess):
        raise PlacerError("--predict prices the thread settings of one in-process CPU device: use --target "
                          "inprocess:1 (on the testbed, time them)")
    if args.placement != "single-device" and not isinstance(target, LocalTestbed):
        raise PlacerError("--placement is for the testbed's workers (--target local:...); in-process there is one device")
    if args.rounds < 1:
        raise PlacerError(f"--rounds must be at least 1, got {args.rounds}")
    config = measure_config(args)
    place = None
    if isinstance(target, LocalTestbed):
        from placer.commands.placement_option import check_placement_name, placement_named

        check_placement_name(args.placement, args.model, "measured")
        place = lambda graph, devices: placement_named(args.placement, args.model, graph, devices)  # noqa: E731
    candidates = tuning_candidates(on=target)
    graph = load_model(args.model, args.size)
    where = f"on {target}" + (f", placement {args.placement}" if place else "")
    if args.predict:
        from placer.concurrency.choose import price_settings

        print(f"{graph.summary()}\nprofiling its ops at each intra-op width, then pricing {len(candidates)} thread "
              f"settings {where} by simulation", flush=True)
        result = price_settings(graph, candidates, measure_config=config)
    else:
        print(f"{graph.summary()}\ntiming {len(candidates)} thread settings {where} side by side in {args.rounds} "
              "rounds", flush=True)
        result = tune(graph, candidates, rounds=args.rounds, measure_config=config, on=target, place=place,
                      progress=_progress)
    if args.json:
        print(json.dumps({
            "graph": graph.name, "fingerprint": graph.fingerprint, "target": str(target), "best": result.best,
            "predicted": result.predicted, "seconds": result.seconds,
            "settings": {name: {"intra_op_threads": s.intra_op_threads, "inter_op_threads": s.inter_op_threads,
                                "target": result.targets[name], "rounds": result.rounds[name],
                                # the median round's record (the failure where one failed), as measure's rows
                                "step_time": result.step_times[name].to_dict()}
                         for name, s in result.settings.items()},
        }, indent=1))
    else:
        print(result.describe())
        best = result.settings[result.best]
        if isinstance(target, InProcess) and best.intra_op_threads is not None:
            print(f"use: ConfigProto(intra_op_parallelism_threads={best.intra_op_threads}, "
                  f"inter_op_parallelism_threads={best.inter_op_threads}), or --target {result.targets[result.best]}")
        elif isinstance(target, LocalTestbed):
            print(f"use: --target {result.targets[result.best]}")
    return 0 if not result.failures else 1


def _progress(rounds):
    from tqdm import tqdm

    return tqdm(rounds, desc="rounds", unit="round", leave=False)
