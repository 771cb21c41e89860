"""Does a policy over moves, trained on rewards, go past the refinement's local optimum? The graph policy's
"moves" head anchored at a refined placement, against the refinement going on for as long.

    python experiments/probes/move_policy.py [--setups nmt-4:paper@4xH100 ...] [--refine-seconds 60]
        [--policy-seconds 60] [--samples 16] [--moves 8] [--out results/move_policy.json]

Per setup, on the modeled machine's simulator:
- start: the fastest heuristic placement (`placer.heuristics.time_heuristics`), refined for --refine-seconds
  (`placer.heuristics.refine.Refiner`): the refined placement, a local optimum of single moves where the
  refinement converged;
- the refinement alone: the same refinement resumed for --policy-seconds more;
- the move policy: the graph policy (`agents.graph_policy`, head "moves": each sample moves --moves units of its
  anchor, which starts at the refined placement and follows the best placement sampled; its inputs are the
  units' features, the heuristics' votes and each unit's share of cut edges in the anchor) trained by REINFORCE
  on the simulated step time (-sqrt seconds) for --policy-seconds, --samples placements an update; its best
  sample is what a policy sampled, no refinement after.
Reported: each step time and the share of the best heuristic's gap to the placements' bound it closed, the
policy's updates and samples, and how many of its updates moved the anchor. Simulated; nothing is measured.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

import numpy as np  # noqa: E402

from experiments._report import write_report  # noqa: E402

COLUMNS = ["setup", "units", "bound_ms", "heuristic", "heuristic_ms", "refined_ms", "refined_closed_pct", "refine_s",
           "refinement_alone_ms", "refinement_alone_closed_pct", "policy_ms", "policy_closed_pct",
           "policy_vs_refinement_alone_pct", "policy_updates", "policy_samples", "anchor_moves", "policy_s"]


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def train_moves(agent, price, seconds: float, samples: int) -> tuple[np.ndarray, float, int, int, int]:
    """REINFORCE on -sqrt(step seconds) of `agent`'s samples (`price`: a placement's step seconds, inf when it
    fails) for `seconds`: (the fastest placement sampled, its seconds, updates, samples, updates that found a
    placement faster than every one before)."""
    until = time.monotonic() + seconds
    best, best_seconds, updates, drawn, improved = None, math.inf, 0, 0, 0
    while time.monotonic() < until:
        assignments = agent.propose(samples)
        timed = [price(a) for a in assignments]
        agent.learn(assignments, [-math.sqrt(t) if math.isfinite(t) else -1e3 for t in timed])
        updates, drawn = updates + 1, drawn + len(assignments)
        fastest = int(np.argmin(timed))
        if timed[fastest] < best_seconds:
            improved += best is not None
            best, best_seconds = np.asarray(assignments[fastest]).copy(), timed[fastest]
    return best, best_seconds, updates, drawn, improved


def setup_row(setup: str, refine_seconds: float, policy_seconds: float, samples: int, moves_per_sample: int,
              seed: int = 0) -> dict:
    from agents.graph_policy.agent import GraphAgentConfig, GraphPolicyAgent
    from agents.graph_policy.pretrain import step_seconds
    from experiments.gpu_machines import fastest_heuristic, opened_setup
    from placer.heuristics.refine import Refiner
    from placer.simulate.bound import gap_closed

    with opened_setup(setup) as (model, graph, target, bound):
        simulator = target.simulator
        heuristic, timing = fastest_heuristic(target, model, seed=seed)
        best = timing.step_time.seconds

        def closed(seconds: float) -> float | None:
            return _percent(gap_closed(best, seconds, bound))

        refiner = Refiner(graph, simulator, timing.placement.group_device_array, seed=seed)
        refined = refiner.run(time.monotonic() + refine_seconds)
        refined_for = refined.wall_seconds
        mask = np.stack([~graph.groups_without_kernel(device.kind) for device in simulator.devices], axis=1)
        agent = GraphPolicyAgent(graph, mask, target.devices, GraphAgentConfig(
            head="moves", moves_per_sample=moves_per_sample, try_heuristics=False, seed=seed))
        agent.start = np.asarray(refined.group_devices, np.int64)  # the anchor: the refinement's local optimum
        agent._untried_starts = [agent.start]
        started = time.monotonic()
        placed, policy_best, updates, drawn, improved = train_moves(
            agent, lambda a: step_seconds(target, a), policy_seconds, samples)
        policy_for = time.monotonic() - started
        alone = refiner.run(time.monotonic() + policy_for)
    row = dict(setup=setup, units=len(graph.groups), bound_ms=bound.value * 1e3, heuristic=heuristic,
               heuristic_ms=best * 1e3, refined_ms=refined.seconds * 1e3, refined_closed_pct=closed(refined.seconds),
               refine_s=refined_for, refinement_alone_ms=alone.seconds * 1e3,
               refinement_alone_closed_pct=closed(alone.seconds), policy_ms=policy_best * 1e3,
               policy_closed_pct=closed(policy_best),
               policy_vs_refinement_alone_pct=100 * (1 - policy_best / alone.seconds),
               policy_updates=updates, policy_samples=drawn, anchor_moves=improved, policy_s=policy_for)
    print(f"{setup}: heuristic {heuristic} {best * 1e3:.2f} ms, refined {refined.seconds * 1e3:.2f} after "
          f"{refined_for:.0f} s; then {policy_for:.0f} s more: refinement {alone.seconds * 1e3:.2f}, move policy "
          f"{policy_best * 1e3:.2f} ({updates} updates, {drawn} samples, the anchor moved {improved} times)",
          flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", default=["nmt-4:paper@4xH100", "transformer:paper@4xH100",
                                                        "nmt-2:paper@2xV100"])
    parser.add_argument("--refine-seconds", type=float, default=60.0, help="refining before the policy starts")
    parser.add_argument("--policy-seconds", type=float, default=60.0,
                        help="the policy's training, and the refinement's going on beside it")
    parser.add_argument("--samples", type=int, default=16, help="placements per policy update")
    parser.add_argument("--moves", type=int, default=8, help="units each sample moves")
    parser.add_argument("--out", default="results/move_policy.json")
    args = parser.parse_args(argv)
    if args.samples < 2 or args.moves < 1 or not (args.refine_seconds > 0 and args.policy_seconds > 0):
        parser.error("--samples must be at least 2, --moves at least 1, the seconds positive")
    rows = [setup_row(setup, args.refine_seconds, args.policy_seconds, args.samples, args.moves)
            for setup in args.setups]
    command = "python experiments/probes/move_policy.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("move_policy", COLUMNS, rows, args.out, command=command.strip(), refine_seconds=args.refine_seconds,
                 policy_seconds=args.policy_seconds, samples=args.samples, moves=args.moves,
                 caveat="simulated on modeled machines; the policy's best is a placement it sampled, anchored at "
                        "the refined placement of the same graph")
    return 0


if __name__ == "__main__":
    sys.exit(main())
