"""Where the hierarchical planner's time goes: samples per second of simulated training at NMT-4 paper size.

    python experiments/probes/planner_speed.py [--setup nmt-4:4] [--size paper] [--samples 4 16 64]
        [--updates 5] [--paths compiled eager] [--settings defaults hidden_size=256,attention=dot]
        [--out results/planner_speed.json]

The planner (`agents.hierarchical.Args`' defaults, or each of `--settings`, seed 0) on the papers' modeled machine (host CPU +
GPUS x V100, roofline costs), turning the training loop (`agents.loop.update`) by hand so each part is timed:
sampling (`propose`), pricing on the simulator (`agents.loop.evaluate`), scoring and learning (`learn`), and
the rest of the turn. Per path (`compiled`: the update as one traced function; `eager`: the same update with
its gradient taped op by op), per setting and per samples-per-update count: the first update alone (where tracing goes)
and then `--updates` updates, the rows taking turns update by update so a machine whose speed
drifts charges them alike. Reported per row: the median seconds of each part, samples per second over the
timed updates, and each part's share. `--paths default` leaves the planner as `make_agent` builds it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

PARTS = ("sample_s", "price_s", "learn_s", "other_s")
COLUMNS = ["path", "setting", "samples_per_update", "first_update_s", "update_s", *PARTS, "samples_per_s",
           "sample_pct", "price_pct", "learn_pct"]


def timed_update(agent, env, count: int) -> dict[str, float]:
    """One turn of `agents.loop.update`, its parts timed."""
    from agents.loop import evaluate

    started = time.perf_counter()
    assignments = agent.propose(count)
    sampled = time.perf_counter()
    evaluations = evaluate(env, assignments)
    priced = time.perf_counter()
    agent.learn(assignments, [e.reward for e in evaluations])
    learned = time.perf_counter()
    total = time.perf_counter() - started
    return {"sample_s": sampled - started, "price_s": priced - sampled, "learn_s": learned - priced,
            "other_s": total - (learned - started), "update_s": total}


def planner_options(setting: str) -> dict:
    """{field: value} of `agents.hierarchical.Args` from "field=value,field=value" ("defaults": none), checked."""
    from agents.experiment.config import parse_override
    from agents.factory import check_agent_options

    options = dict(parse_override(item) for item in setting.split(",") if item and item != "defaults")
    check_agent_options("hierarchical", options)
    return options


def planner(env, path: str, setting: str, seed: int):
    from agents.factory import make_agent

    agent = make_agent("hierarchical", env.graph, env.device_mask, env.devices, seed=seed,
                       options=planner_options(setting))
    if path != "default":
        agent.compiled_update = path == "compiled"
    return agent


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setup", default="nmt-4:4", help="MODEL:GPUS on modeled V100s")
    parser.add_argument("--size", default="paper")
    parser.add_argument("--samples", type=int, nargs="+", default=[4, 16, 64], help="samples per update")
    parser.add_argument("--updates", type=int, default=5, help="timed updates per path and count, after the first")
    parser.add_argument("--paths", nargs="+", default=["compiled", "eager"], choices=["compiled", "eager", "default"])
    parser.add_argument("--settings", nargs="+", default=["defaults"],
                        help="planner settings, a row each: 'defaults' or FIELD=VALUE[,FIELD=VALUE] of "
                             "agents.hierarchical.Args (e.g. hidden_size=256,attention=dot)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/planner_speed.json")
    args = parser.parse_args(argv)
    from placer.errors import PlacerError

    for setting in args.settings:  # a bad setting fails before the model is built
        try:
            planner_options(setting)
        except PlacerError as error:
            parser.error(f"--settings {setting}: {error}")

    from envs.placement import PlacementEnv

    model, gpus = args.setup.split(":")
    env = PlacementEnv(model=model, size=args.size, devices=f"modeled:{gpus}xV100")
    env.reset(seed=args.seed)
    # The simulator's first pricings fill its caches; they are the environment's start-up, not a turn's cost.
    from agents.loop import evaluate

    evaluate(env, [[0] * env.num_units, [1] * env.num_units])
    runs = [(path, setting, count) for path in args.paths for setting in args.settings for count in args.samples]
    agents, first, timings = {}, {}, {run: [] for run in runs}
    for run in runs:
        agents[run] = planner(env, run[0], run[1], args.seed)
        first[run] = timed_update(agents[run], env, run[2])["update_s"]
        print(f"{run[0]}, {run[1]}, {run[2]} samples: first update {first[run]:.1f} s", flush=True)
    for _ in range(args.updates):
        for run in runs:
            timings[run].append(timed_update(agents[run], env, run[2]))
    rows = []
    for (path, setting, count), turns in timings.items():
        row = {"path": path, "setting": setting, "samples_per_update": count,
               "first_update_s": first[(path, setting, count)]}
        for part in ("update_s", *PARTS):
            row[part] = statistics.median(turn[part] for turn in turns)
        row["samples_per_s"] = count * len(turns) / sum(turn["update_s"] for turn in turns)
        for part in ("sample", "price", "learn"):
            row[f"{part}_pct"] = 100 * sum(t[f"{part}_s"] for t in turns) / sum(t["update_s"] for t in turns)
        rows.append(row)
    write_report("planner_speed", COLUMNS, rows, args.out, setup=args.setup, size=args.size, units=env.num_units,
                 updates=args.updates, seed=args.seed, command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
