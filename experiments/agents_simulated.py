"""Learned placements against every baseline, on the simulator: the hierarchical planner, random search
and the cross-entropy method under the same budget of sampled placements.

    python experiments/agents_simulated.py [--setups nmt-2:2 nmt-2:4 nmt-4:2 nmt-4:4 inception-v3:2]
                                           [--size paper] [--updates 200] [--samples-per-update 4]
                                           [--agents hierarchical random cem] [--out FILE]
                                           [planner hyper-parameters: --learning-rate, --entropy-weight, ...]

Each setup is MODEL:GPUS on a modeled machine (host CPU + GPUS x V100, NVLink between GPUs, roofline op
costs). Per setup: the step time of every baseline of experiments/baselines_report.py that a learned
placement should beat (single GPU, expert, METIS, Scotch, m-TOPO, m-ETF, m-SCT; out-of-memory counts as
infinite), which one is best, then per agent the best placement it found, its reduction against that
best baseline, the samples it used, its wall time, and for the planner where it started (its greedy
placement before any update) and the median wall time of one policy update, propose + learn, without the
simulator. Every --greedy-every updates the planner's greedy placement is evaluated too, as a sample.
The planner's hyper-parameters default to `HierarchicalConfig`'s (the reference planner's) and are all
recorded in the JSON.
Runs go to runs/agents_simulated/<setup>/<agent>/ (checkpoints and best placements); training resumes
from an existing run directory, so give each configuration its own --runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import asdict, replace
from typing import Any, Mapping, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from agents.reinforce import HierarchicalConfig, HierarchicalPlanner  # noqa: E402
from agents.search import CrossEntropyMethod, RandomSearch  # noqa: E402
from agents.training import TrainingConfig, train  # noqa: E402
from envs.placement import PlacementEnv  # noqa: E402
from experiments._report import write_report  # noqa: E402
from experiments.baselines_report import baselines  # noqa: E402
from placer.errors import PlacerError  # noqa: E402

BASELINES = ("single GPU", "expert", "METIS", "Scotch", "m-TOPO", "m-ETF", "m-SCT")
"""The baselines a learned placement is compared with (the trivial and random ones never win)."""

COLUMNS = ["setup", "units", "agent", "start_ms", "best_ms", "best_baseline", "best_baseline_ms", "reduction_vs_best_baseline_pct",
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
    makers = baselines(model, env.graph, env.devices, env.backend.simulator, np.random.default_rng(seed))
    results = {}
    for name in BASELINES:
        started = time.perf_counter()
        try:
            placement = makers[name]()
        except PlacerError as error:
            print(f"  {name}: not placeable ({error})", flush=True)
            results[name] = {"step_time": math.inf, "placement_s": time.perf_counter() - started}
            continue
        took = time.perf_counter() - started
        results[name] = {"step_time": env.backend.evaluate(placement.group_devices).step_time, "placement_s": took}
    return results


def planner_config(args: argparse.Namespace) -> HierarchicalConfig:
    return replace(HierarchicalConfig(), seed=args.seed, learning_rate=args.learning_rate,
                   tanh_constant=args.tanh_constant, temperature=args.temperature, entropy_weight=args.entropy_weight,
                   entropy_normalization=args.entropy_normalization, normalize_advantages=args.normalize_advantages,
                   algorithm=args.algorithm, ppo_epochs=args.ppo_epochs, logits_noise_std=args.logits_noise_std,
                   noise_updates=args.noise_updates, lr_decay_start=args.lr_decay_start,
                   samples_per_update=args.samples_per_update, num_groups=args.num_groups,
                   grouping_prior=args.grouping_prior, grouping_prior_weight=args.grouping_prior_weight,
                   grouper_learning_rate=args.grouper_learning_rate,
                   placement_prior_weight=args.placement_prior_weight, imitation_weight=args.imitation_weight)


def main() -> None:
    defaults = HierarchicalConfig()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", nargs="+", default=["nmt-2:2", "nmt-2:4", "nmt-4:2", "nmt-4:4", "inception-v3:2"])
    parser.add_argument("--size", default="paper")
    parser.add_argument("--agents", nargs="+", default=["hierarchical", "random", "cem"],
                        choices=["hierarchical", "random", "cem"])
    parser.add_argument("--updates", type=int, default=200, help="updates for every agent")
    parser.add_argument("--samples-per-update", type=int, default=defaults.samples_per_update,
                        help="placements per update, for every agent")
    planner = parser.add_argument_group("hierarchical planner (defaults: HierarchicalConfig's)")
    planner.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    planner.add_argument("--lr-decay-start", type=int, default=defaults.lr_decay_start)
    planner.add_argument("--tanh-constant", type=float, default=defaults.tanh_constant)
    planner.add_argument("--temperature", type=float, default=defaults.temperature)
    planner.add_argument("--logits-noise-std", type=float, default=defaults.logits_noise_std)
    planner.add_argument("--noise-updates", type=int, default=defaults.noise_updates)
    planner.add_argument("--entropy-weight", type=float, default=defaults.entropy_weight)
    planner.add_argument("--entropy-normalization", default=defaults.entropy_normalization,
                         choices=["sum", "per-decision"])
    planner.add_argument("--normalize-advantages", action=argparse.BooleanOptionalAction,
                         default=defaults.normalize_advantages)
    planner.add_argument("--algorithm", default=defaults.algorithm, choices=["reinforce", "ppo"])
    planner.add_argument("--ppo-epochs", type=int, default=defaults.ppo_epochs)
    planner.add_argument("--num-groups", type=int, default=defaults.num_groups, help="default: min(256, 20 x devices)")
    planner.add_argument("--grouping-prior", default=defaults.grouping_prior, choices=["none", "partition"])
    planner.add_argument("--grouping-prior-weight", type=float, default=defaults.grouping_prior_weight)
    planner.add_argument("--placement-prior-weight", type=float, default=defaults.placement_prior_weight,
                         help="with --grouping-prior partition: bias the placer towards the partition's K-way cut")
    planner.add_argument("--grouper-learning-rate", type=float, default=defaults.grouper_learning_rate,
                         help="default: the placer's (one optimizer); 0 freezes the grouper")
    planner.add_argument("--imitation-weight", type=float, default=defaults.imitation_weight,
                         help="self-imitation: also raise the log-probability of the best sample so far (0: off)")
    parser.add_argument("--greedy-every", type=int, default=10,
                        help="the planner's greedy placement is also evaluated every N updates, as a sample (0: never)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", default="runs/agents_simulated")
    parser.add_argument("--out")
    args = parser.parse_args()

    config = planner_config(args)
    training = TrainingConfig(updates=args.updates, samples_per_update=args.samples_per_update)
    # Random search's best guess is a placement it has already evaluated; the planner's greedy decoding is new.
    planner_training = replace(training, greedy_every=args.greedy_every)
    rows = []
    for setup in args.setups:
        model, gpus = setup.split(":")
        env = PlacementEnv(model=model, size=args.size, devices=f"modeled:{gpus}xV100")
        env.reset(seed=args.seed)
        mask = env._graph_obs["device_mask"]
        reference = baseline_step_times(model, env, args.seed)
        best_name = min(BASELINES, key=lambda name: reference[name]["step_time"])
        best_baseline = reference[best_name]["step_time"]
        listed = ", ".join(f"{name} {reference[name]['step_time'] * 1e3:.1f} ms" for name in BASELINES)
        print(f"{setup}: {len(env.graph.step_ops)} step ops, {env.num_units} units; {listed}; "
              f"best baseline: {best_name} ({best_baseline * 1e3:.1f} ms)", flush=True)
        agents = {
            "hierarchical": lambda: HierarchicalPlanner(env.graph, mask, config, devices=env.devices),
            "random": lambda: RandomSearch(mask, seed=args.seed),
            "cem": lambda: CrossEntropyMethod(mask, seed=args.seed),
        }
        for name in args.agents:
            run_dir = os.path.join(args.runs, setup.replace(":", "x"), name)
            agent = TimedAgent(agents[name]())
            # Where the planner starts: its greedy placement before any update (the partition's cut with the priors).
            start = env.backend.evaluate(agent.best_guess()).step_time if name == "hierarchical" else math.nan
            started = time.perf_counter()
            state = train(agent, env, run_dir, planner_training if name == "hierarchical" else training)
            wall = time.perf_counter() - started
            rows.append({
                "setup": setup, "units": env.num_units, "agent": name, "best_ms": state.best_step_time * 1e3,
                "best_baseline": best_name, "best_baseline_ms": best_baseline * 1e3,
                "reduction_vs_best_baseline_pct": 100 * (best_baseline - state.best_step_time) / best_baseline,
                "start_ms": start * 1e3, "samples": state.samples, "wall_s": wall,
                "update_s_median": float(np.median(agent.update_seconds)) if agent.update_seconds else None,
                **{f"{baseline}_ms": reference[baseline]["step_time"] * 1e3 for baseline in BASELINES},
                "baseline_placement_s": {baseline: reference[baseline]["placement_s"] for baseline in BASELINES},
            })
            print({key: value for key, value in rows[-1].items() if key != "baseline_placement_s"}, flush=True)
        env.close()
    write_report("agents_simulated", COLUMNS, rows, args.out, size=args.size, updates=args.updates,
                 samples_per_update=args.samples_per_update, greedy_every=args.greedy_every, agents=args.agents,
                 baselines=list(BASELINES),
                 machine="host CPU + N x V100 (modeled), roofline costs", hierarchical_config=asdict(config),
                 command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
