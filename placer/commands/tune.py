"""`placer tune MODEL`: time the model's training step under TensorFlow's default thread pools, the recommended
setting and every (intra, inter) pair up to the cores, side by side, and print which is fastest.
"""

from __future__ import annotations

import json


def add_tune_arguments(parser) -> None:
    parser.add_argument("model", help="a built-in model (see `placer models`), or module:function / file.py:function")
    parser.add_argument("--size", default="tiny", help="size of a built-in model: tiny, small or paper (default tiny)")
    parser.add_argument("--cluster", default="inprocess:1", help="where to tune: inprocess:1, one CPU device in one "
                        "process (the only target whose thread pools placer sets today)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds timing every setting once (default 3)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up steps per timing (default 3)")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps per timing (default 10)")
    parser.add_argument("--step-timeout", type=float, default=60.0, help="seconds before a step counts as hung (default 60)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def tune_command(args) -> int:
    from placer.concurrency import tune, tuning_candidates
    from placer.errors import PlacerError
    from placer.measure import InProcess, MeasureConfig, parse_target
    from placer.models import load_model

    target = parse_target(args.cluster)
    if not isinstance(target, InProcess) or target.logical_cpus != 1:
        raise PlacerError(f"placer tune sets the thread pools of one in-process CPU device: use --cluster inprocess:1, "
                          f"not {args.cluster!r} (testbed workers get their threads when they start)")
    if target.intra_op_threads is not None or target.inter_op_threads is not None:
        raise PlacerError(f"{args.cluster!r} fixes the threads that placer tune is choosing: give inprocess:1")
    if args.rounds < 1:
        raise PlacerError(f"--rounds must be at least 1, got {args.rounds}")
    candidates = tuning_candidates()
    graph = load_model(args.model, args.size)
    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats, step_timeout=args.step_timeout)
    print(f"{graph.summary()}\ntiming {len(candidates)} thread settings side by side in {args.rounds} rounds", flush=True)
    result = tune(graph, candidates, rounds=args.rounds, measure_config=config, progress=_progress)
    if args.json:
        print(json.dumps({
            "graph": graph.name, "fingerprint": graph.fingerprint, "best": result.best, "seconds": result.seconds,
            "settings": {name: {"intra_op_threads": s.intra_op_threads, "inter_op_threads": s.inter_op_threads,
                                "median": result.medians[name], "rounds": result.rounds[name]}
                         for name, s in result.settings.items()},
        }, indent=1))
    else:
        print(result.describe())
        best = result.settings[result.best]
        if best.intra_op_threads is not None:
            print(f"use: ConfigProto(intra_op_parallelism_threads={best.intra_op_threads}, "
                  f"inter_op_parallelism_threads={best.inter_op_threads}), or --cluster {best.target()}")
    return 0 if not result.failures else 1


def _progress(rounds):
    from tqdm import tqdm

    return tqdm(rounds, desc="rounds", unit="round", leave=False)
