"""Learned placements against every baseline, on the simulator: the hierarchical planner, random search
and the cross-entropy method under the same budget of sampled placements.

    python experiments/agents_simulated.py [--setups nmt-2:2 nmt-2:4 nmt-4:2 nmt-4:4 inception-v3:2]
                                           [--size paper] [--updates 200 | --seconds S] [--samples-per-update 4]
                                           [--agents hierarchical random cem] [--out FILE]
                                           [planner hyper-parameters: --learning-rate, --entropy-weight, ...]

Each setup is MODEL:GPUS on a modeled machine (host CPU + GPUS x V100, NVLink between GPUs, roofline op
costs). Per setup: the step time of every baseline of experiments/baselines_report.py that a learned
placement should beat (single-device, expert, metis, scotch, m-topo, m-etf, m-sct, exact; out-of-memory counts as
infinite), which one is best, then per agent the best placement it found, its reduction against that
best baseline, its step time over the step time bound of the setup (`placer.simulate.bound`) and the share of the
best baseline's gap to the bound it closed, the samples it used, its wall time, and for the planner where it started (its greedy
placement before any update) and the median wall time of one policy update, propose + learn, without the
simulator. Every --greedy-every updates the planner's greedy placement is evaluated too, as a sample.
The planner's hyper-parameters are the --preset's (tuned by default, `agents.hierarchical.Args`' defaults;
reference: `REFERENCE`, the reference planner's) with any flag over them, all recorded in the JSON.
Runs go to runs/agents_simulated/<setup>/<agent>/ (checkpoints and best placements); training resumes
from an existing run directory, so give each configuration its own --runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import asdict, fields, replace
from typing import Any, Mapping, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from agents.factory import check_agent_options, make_agent  # noqa: E402
from agents.flags import add_dataclass_arguments  # noqa: E402
from agents.hierarchical import Args  # noqa: E402
from agents.loop import TrainingConfig, train  # noqa: E402
from agents.presets import DEFAULT_PRESET, PRESETS, with_preset  # noqa: E402
from envs.placement import PlacementEnv  # noqa: E402
from experiments._report import write_report  # noqa: E402
from placer.errors import PlacerError  # noqa: E402
from placer.heuristics import time_heuristics  # noqa: E402
from placer.simulate.bound import gap_closed, step_time_bound, times_bound  # noqa: E402

BASELINES = ("single-device", "expert", "metis", "scotch", "m-topo", "m-etf", "m-sct", "exact")
"""The baselines a learned placement is compared with (the trivial and random ones never win)."""

COLUMNS = ["setup", "units", "agent", "start_ms", "best_ms", "best_baseline", "best_baseline_ms", "reduction_vs_best_baseline_pct",
           "bound_ms", "best_x_bound", "best_baseline_x_bound", "gap_closed_pct",
           "samples", "wall_s", "update_s_median", *[f"{name}_ms" for name in BASELINES]]


class TimedAgent:
    """Wraps an agent and records the wall time of each propose() + learn() pair: the cost of one update
    without the environment's evaluations."""

    def __init__(self, agent):
        self.agent = agent
        self.name = agent.name
        self.update_seconds: list[float] = []
        self._proposed = 0.0

    def propose(self, count: int) -> list[np.ndarray]:
        started = time.perf_counter()
        proposals = self.agent.propose(count)
        self._proposed = time.perf_counter() - started
        return proposals

    def learn(self, assignments: Sequence[np.ndarray], rewards: Sequence[float]) -> Mapping[str, float]:
        started = time.perf_counter()
        metrics = self.agent.learn(assignments, rewards)
        self.update_seconds.append(self._proposed + time.perf_counter() - started)
        return metrics

    def __getattr__(self, name: str) -> Any:
        return getattr(self.agent, name)


def baseline_step_times(model: str, env: PlacementEnv, seed: int) -> dict[str, dict[str, float]]:
    """Step time (inf when out of memory or not placeable) and placement time of each of BASELINES."""
    timings = time_heuristics(env.target, BASELINES, model=model, seed=seed)
    for name, timing in timings.items():
        if timing.placement is None:
            print(f"  {name}: not placeable ({timing.error})", flush=True)
    return {name: {"step_time": timing.seconds, "placement_s": timing.placing_seconds}
            for name, timing in timings.items()}


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", nargs="+", default=["nmt-2:2", "nmt-2:4", "nmt-4:2", "nmt-4:4", "inception-v3:2"])
    parser.add_argument("--size", default="paper")
    parser.add_argument("--agents", nargs="+", default=["hierarchical", "random", "cem"],
                        choices=["hierarchical", "random", "cem"])
    parser.add_argument("--updates", type=int, help="updates for every agent (default 200; none with --seconds)")
    parser.add_argument("--seconds", type=float,
                        help="wall time for every agent instead (with --updates: whichever ends first): compares "
                             "settings that sample at different speeds, e.g. a narrower planner or more samples "
                             "per update")
    parser.add_argument("--samples-per-update", type=int, default=4, help="placements per update, for every agent")
    # Every field of the planner's Args is a flag (--learning-rate, --num-groups, ...), defaulting to its value.
    parser.add_argument("--preset", default=DEFAULT_PRESET, choices=PRESETS,
                        help=f"the planner's hyper-parameters before the flags below (default {DEFAULT_PRESET}: "
                             "Args' defaults; reference: the reference planner's)")
    add_dataclass_arguments(parser.add_argument_group("hierarchical planner (over the preset's)"),
                            Args, skip=("seed",))
    parser.add_argument("--greedy-every", type=int, default=10,
                        help="the planner's greedy placement is also evaluated every N updates, as a sample (0: never)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", default="runs/agents_simulated")
    parser.add_argument("--out")
    args = parser.parse_args()

    planner_options = with_preset(args.preset, "hierarchical", {
        f.name: getattr(args, f.name) for f in fields(Args)
        if f.name != "seed" and getattr(args, f.name) is not None})
    try:
        config = check_agent_options("hierarchical", planner_options, seed=args.seed)
    except PlacerError as error:
        parser.error(str(error))
    if args.updates is None and args.seconds is None:
        args.updates = 200
    training = TrainingConfig(updates=args.updates, time_budget=args.seconds, samples_per_update=args.samples_per_update)
    # Random search's best guess is a placement it has already evaluated; the planner's greedy decoding is new.
    planner_training = replace(training, greedy_every=args.greedy_every)
    rows = []
    for setup in args.setups:
        model, gpus = setup.split(":")
        env = PlacementEnv(model=model, size=args.size, devices=f"modeled:{gpus}xV100")
        env.reset(seed=args.seed)
        reference = baseline_step_times(model, env, args.seed)
        best_name = min(BASELINES, key=lambda name: reference[name]["step_time"])
        best_baseline = reference[best_name]["step_time"]
        bound = step_time_bound(env.target.simulator, simulated_on=str(env.target.spec))
        listed = ", ".join(f"{name} {reference[name]['step_time'] * 1e3:.1f} ms" for name in BASELINES)
        print(f"{setup}: {len(env.graph.step_ops)} step ops, {env.num_units} units; {listed}; "
              f"best baseline: {best_name} ({best_baseline * 1e3:.1f} ms); {bound.describe()}", flush=True)
        for name in args.agents:
            run_dir = os.path.join(args.runs, setup.replace(":", "x"), name)
            options = planner_options if name == "hierarchical" else {}
            agent = TimedAgent(make_agent(name, env.graph, env.device_mask, env.devices, options=options, seed=args.seed))
            # Where the planner starts: its greedy placement before any update (the partition's cut with the priors).
            start = env.target.evaluate(agent.best_guess()).seconds if name == "hierarchical" else math.nan
            started = time.perf_counter()
            state = train(agent, env, run_dir, planner_training if name == "hierarchical" else training)
            wall = time.perf_counter() - started
            rows.append({
                "setup": setup, "units": env.num_units, "agent": name, "best_ms": state.best_step_time * 1e3,
                "best_baseline": best_name, "best_baseline_ms": best_baseline * 1e3,
                "reduction_vs_best_baseline_pct": 100 * (best_baseline - state.best_step_time) / best_baseline,
                "bound_ms": bound.value * 1e3, "best_x_bound": times_bound(state.best_step_time, bound),
                "best_baseline_x_bound": times_bound(best_baseline, bound),
                "gap_closed_pct": _percent(gap_closed(best_baseline, state.best_step_time, bound)),
                "bound": bound.to_dict(),
                "start_ms": start * 1e3, "samples": state.samples, "wall_s": wall,
                "update_s_median": float(np.median(agent.update_seconds)) if agent.update_seconds else None,
                **{f"{baseline}_ms": reference[baseline]["step_time"] * 1e3 for baseline in BASELINES},
                "baseline_placement_s": {baseline: reference[baseline]["placement_s"] for baseline in BASELINES},
            })
            print({key: value for key, value in rows[-1].items() if key not in ("baseline_placement_s", "bound")},
                  flush=True)
        env.close()
    write_report("agents_simulated", COLUMNS, rows, args.out, size=args.size, updates=args.updates, seconds=args.seconds,
                 samples_per_update=args.samples_per_update, greedy_every=args.greedy_every, agents=args.agents,
                 baselines=list(BASELINES),
                 machine="host CPU + N x V100 (modeled), roofline costs", hierarchical_config=asdict(config),
                 caveat="simulated step times and simulated bounds on modeled machines, not measurements",
                 command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
