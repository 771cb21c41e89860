"""Learned placements against the baselines, on the simulator: the hierarchical planner, random search
and the cross-entropy method under the same budget of sampled placements.

    python experiments/agents_simulated.py [--setups nmt-2:2 nmt-2:4 nmt-4:2 nmt-4:4 inception-v3:2]
                                           [--size paper] [--updates 200] [--out FILE]

Each setup is MODEL:GPUS on a modeled machine (host CPU + GPUS x V100, NVLink between GPUs, roofline op
costs). Per setup: step time of the single-GPU and expert placements, of the best placement each agent
found, its reduction against the best of the two baselines, the samples it used and its wall time.
Runs go to runs/agents_simulated/<setup>/<agent>/ (checkpoints and best placements).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from agents.reinforce import HierarchicalConfig, HierarchicalPlanner  # noqa: E402
from agents.search import CrossEntropyMethod, RandomSearch  # noqa: E402
from agents.training import TrainingConfig, train  # noqa: E402
from envs.placement import PlacementEnv  # noqa: E402
from experiments._report import write_report  # noqa: E402
from placer.models import reference_placements  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", nargs="+", default=["nmt-2:2", "nmt-2:4", "nmt-4:2", "nmt-4:4", "inception-v3:2"])
    parser.add_argument("--size", default="paper")
    parser.add_argument("--updates", type=int, default=200, help="updates of 4 samples each, for every agent")
    parser.add_argument("--learning-rate", type=float, default=HierarchicalConfig.learning_rate)
    parser.add_argument("--tanh-constant", type=float, default=HierarchicalConfig.tanh_constant)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", default="runs/agents_simulated")
    parser.add_argument("--out")
    args = parser.parse_args()

    training = TrainingConfig(updates=args.updates, samples_per_update=4)
    rows = []
    for setup in args.setups:
        model, gpus = setup.split(":")
        env = PlacementEnv(model=model, size=args.size, devices=f"modeled:{gpus}xV100")
        env.reset(seed=args.seed)
        mask = env._graph_obs["device_mask"]
        baselines = {name: env.backend.evaluate(p.group_devices).step_time
                     for name, p in reference_placements(model, env.graph, env.devices).items() if name != "cpu-only"}
        best_baseline = min(baselines.values())
        print(f"{setup}: {len(env.graph.step_ops)} step ops, {env.num_units} units; single-GPU "
              f"{baselines['single-device'] * 1e3:.1f} ms, expert {baselines['expert'] * 1e3:.1f} ms", flush=True)
        agents = {
            "hierarchical": lambda: HierarchicalPlanner(env.graph, mask, replace(
                HierarchicalConfig(), seed=args.seed, learning_rate=args.learning_rate, tanh_constant=args.tanh_constant)),
            "random": lambda: RandomSearch(mask, seed=args.seed),
            "cem": lambda: CrossEntropyMethod(mask, seed=args.seed),
        }
        for name, make in agents.items():
            run_dir = os.path.join(args.runs, setup.replace(":", "x"), name)
            started = time.perf_counter()
            state = train(make(), env, run_dir, training)
            wall = time.perf_counter() - started
            rows.append({
                "setup": setup, "units": env.num_units, "single_gpu_ms": baselines["single-device"] * 1e3,
                "expert_ms": baselines["expert"] * 1e3, "agent": name, "best_ms": state.best_step_time * 1e3,
                "reduction_vs_best_baseline_pct": 100 * (best_baseline - state.best_step_time) / best_baseline,
                "samples": state.samples, "wall_s": wall,
            })
            print(rows[-1], flush=True)
        env.close()
    write_report("agents_simulated", ["setup", "units", "single_gpu_ms", "expert_ms", "agent", "best_ms",
                                      "reduction_vs_best_baseline_pct", "samples", "wall_s"], rows, args.out,
                 size=args.size, updates=args.updates, samples_per_update=4, machine="host CPU + N x V100 (modeled)",
                 learning_rate=args.learning_rate, tanh_constant=args.tanh_constant)


if __name__ == "__main__":
    main()
