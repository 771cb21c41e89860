"""`placer pretrain` and `placer place`: pre-train a generalizing policy, and place a model with it zero-shot."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from placer.commands.target_option import add_target_argument
from placer.files import check_output_file

from agents.launch import Command
from agents.workers import add_worker_arguments


def add_pretrain_arguments(parser: argparse.ArgumentParser) -> None:
    from agents.graph_policy import training_set as defaults

    parser.add_argument("--models", nargs="+", default=list(defaults.MODELS), metavar="MODEL",
                        help=f"models to train on (default: {' '.join(defaults.MODELS)})")
    parser.add_argument("--sizes", nargs="+", default=list(defaults.SIZES), metavar="SIZE",
                        help=f"every model at each size (default: {' '.join(defaults.SIZES)})")
    add_target_argument(parser, "simulated targets to train on: modeled machines, or calibrated:FILE, the simulator "
                        "of a real target (`placer calibrate`; each graph's op costs are profiled there on first use "
                        f"and cached) (default: {' '.join(defaults.MACHINES)})", default=list(defaults.MACHINES),
                        several=True)
    parser.add_argument("--generated", type=int, default=defaults.GENERATED, metavar="N",
                        help=f"also train on N generated branchy graphs, seeds 0..N-1 at each size (default "
                        f"{defaults.GENERATED}; seeds from {defaults.HELD_OUT_SEED} on are held out for evaluation)")
    parser.add_argument("--updates", type=int, default=defaults.UPDATES, help="updates in all, one graph-machine "
                        f"pair each, in turn (default {defaults.UPDATES})")
    parser.add_argument("--samples-per-update", type=int, default=defaults.SAMPLES_PER_UPDATE)
    parser.add_argument("--imitation-updates", type=int, default=defaults.IMITATION_UPDATES, metavar="N",
                        help="first, N updates of imitating each pair's best voting heuristic, one pair each, in turn "
                        f"(default {defaults.IMITATION_UPDATES})")
    parser.add_argument("--set", dest="agent_options", action="append", default=[], metavar="KEY=VALUE",
                        help="a GraphAgentConfig option, e.g. --set hidden_size=32 --set learning_rate=0.01")
    parser.add_argument("--seed", type=int, default=0)
    add_worker_arguments(parser, "the graph-machine pairs (each worker builds its pairs' graphs and targets, and "
                         "evaluates their placements; the policy learns here)")
    parser.add_argument("--out", required=True, metavar="POLICY", help="where to write the policy (.npz)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def pretrain_command_run(args: argparse.Namespace) -> int:
    from agents.experiment.config import parse_override
    from agents.factory import check_agent_options
    from agents.graph_policy.pretrain import PretrainConfig, pretrain

    from placer.cost import parse_target_spec

    check_output_file(args.out, "--out")
    for target in args.targets:  # a calibrated:FILE is read here, not first in a worker
        parse_target_spec(target, "simulated")
    if args.ray is not None:
        from agents.workers import check_ray_address

        check_ray_address(args.ray)
    options = dict(parse_override(o) for o in args.agent_options)
    agent = check_agent_options("graph", options, seed=args.seed)
    config = PretrainConfig(models=tuple(args.models), sizes=tuple(args.sizes), machines=tuple(args.targets),
                            generated=args.generated, updates=args.updates,
                            samples_per_update=args.samples_per_update, imitation_updates=args.imitation_updates,
                            agent=agent,
                            progress=not args.no_progress)
    from agents.workers import open_workers

    ray_log = ray_log_path(args.out) if args.ray is not None else None
    with open_workers(args.workers, args.ray, log_path=ray_log) as workers:
        if workers.count > 1 or args.ray is not None:
            print(f"pre-training on {workers.description}" + (f"; Ray's log: {ray_log}" if ray_log else ""),
                  flush=True)
        result = pretrain(config, args.out, workers)
    print(f"wrote {result.path}: {result.samples} placements over {len(result.best_step_times)} graph-machine "
          f"pairs in {result.seconds:.0f} s; best sampled step times:")
    for pair, seconds in result.best_step_times.items():
        imitated = f"   (imitated {result.imitated[pair]})" if pair in result.imitated else ""
        if not result.updates.get(pair, 1):
            shown = "not sampled"
        else:
            shown = f"{seconds * 1e3:10.3f} ms" if math.isfinite(seconds) else "    failed"
        print(f"  {pair:<40} {shown}{imitated}")
    unsampled = sum(1 for count in result.updates.values() if not count)
    if unsampled:
        print(f"{unsampled} of {len(result.updates)} pairs got no update (pairs take turns, one per update): give "
              f"--updates {len(result.updates)} or more to train on every pair")
    return 0


def ray_log_path(policy: str | Path) -> Path:
    """Where `placer pretrain --ray` writes Ray's own log lines: beside the policy, POLICY with .log."""
    return Path(policy).with_suffix(".log")


def add_place_arguments(parser: argparse.ArgumentParser) -> None:
    from placer.models.loader import MODEL_HELP

    parser.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    parser.add_argument("--policy", required=True, metavar="POLICY", help="a policy file from `placer pretrain`")
    parser.add_argument("--size", default="tiny")
    add_target_argument(parser, "where to place and evaluate (a modeled machine, calibrated:FILE, or a real target "
                        "such as local:2) (default modeled:2xV100)", default="modeled:2xV100")
    parser.add_argument("--policy-only", action="store_true",
                        help="place the policy's own placement, without timing the voting heuristics' placements "
                        "against it on the target (by default the fastest of them is kept)")
    parser.add_argument("--out", metavar="FILE", help="write the placement file")
    parser.add_argument("--json", action="store_true")


def place_command_run(args: argparse.Namespace) -> int:
    from agents.graph_policy.policy_file import check_devices, load_policy
    from agents.graph_policy.pretrain import place_with_policy, step_seconds
    from envs.placement import PlacementEnv
    from placer.cost import parse_target_spec
    from placer.placement import Placement

    check_output_file(args.out, "--out")
    policy, record = load_policy(args.policy)
    spec = parse_target_spec(args.target)
    if spec.devices is not None:
        check_devices(record, spec.devices, source=args.policy)  # before the graph is built
    env = PlacementEnv(model=args.model, size=args.size, backend=spec.backend, devices=args.target)
    try:
        check_devices(record, env.devices, source=args.policy)
        started = time.perf_counter()
        placed = place_with_policy(policy, env.graph, env.devices, env.device_mask,
                                   str(record["head"].get("head", "one-shot")),
                                   judge=None if args.policy_only else lambda a: step_seconds(env.target, a))
        seconds = time.perf_counter() - started
        result = env.target.evaluate(list(placed.assignment))  # timed again: the pick's own time is its luckiest
        placement = Placement.from_assignment(env.graph, env.devices, placed.assignment, {
            "method": "graph policy, zero-shot", "policy": str(args.policy), "backend": spec.backend,
            "source": placed.source, "step_time": result.seconds if result.ok else None})
        if args.out:
            placement.save(args.out, env.graph)
    finally:
        env.close()
    summary = {"model": args.model, "size": args.size, "target": args.target, "policy": str(args.policy),
               "placing_seconds": seconds, "source": placed.source,
               "candidates": {name: (t if math.isfinite(t) else None) for name, t in placed.step_times.items()},
               "step_time": result.seconds if result.ok else None, "result": result.to_dict(), "out": args.out}
    if args.json:
        print(json.dumps(summary, indent=1))
    elif result.ok:
        if placed.step_times:
            timed = ", ".join(f"{name} {t * 1e3:.3f} ms" if math.isfinite(t) else f"{name} failed"
                              for name, t in placed.step_times.items())
            print(f"timed on {args.target}: {timed}; kept {placed.source}'s")
        print(f"{args.model} ({args.size}) on {args.target}: placed by {args.policy} in {seconds:.2f} s; "
              f"{result.seconds * 1e3:.3f} ms per step ({spec.backend})" + (f"; wrote {args.out}" if args.out else ""))
    else:
        print(f"the policy's placement failed: {result.failure}")
    return 0 if result.ok else 1


pretrain_command = Command("pre-train a generalizing graph policy on many models and machines (simulated)",
                            add_pretrain_arguments, pretrain_command_run)
place_command = Command("place MODEL zero-shot with a pre-trained policy and report its step time",
                         add_place_arguments, place_command_run)
