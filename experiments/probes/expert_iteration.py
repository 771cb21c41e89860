"""Can a per-unit policy hold what the refinement finds, and go past it? Expert iteration with the graph policy,
against the refinement alone at the same time spent.

    python experiments/probes/expert_iteration.py [--setups nmt-4:paper@4xH100 ...] [--refine-seconds 60]
        [--rounds 2] [--imitation-steps 150] [--samples 16] [--out results/expert_iteration.json]

The hierarchical planner cannot express a refined placement (its groups each sit on one device:
experiments/probes/policy_grain.py); the graph policy (`agents.graph_policy`) scores every unit against every
device from a graph network over the unit graph and the heuristics' votes, so it can. Per setup, on the modeled
machine's simulator:
- start: the fastest heuristic placement (`placer.heuristics.time_heuristics`);
- each round: the round's start refined for --refine-seconds (`placer.heuristics.refine`), the policy trained
  --imitation-steps steps to place as the refined placement does (`GraphPolicyAgent.imitate`: cross-entropy of
  every unit's device; interchangeable GPUs relabelled to the policy's own naming first), then sampled: its greedy placement and the fastest of --samples draws, priced with no
  refinement after (the policy alone); the next round starts from the policy's fastest sample;
- against: the same start refined for as long as all rounds refined (one refinement, resumed), the refinement
  alone at the same refining time; the policy's own seconds (imitation, sampling) are reported beside.
Reported per round: each step time, the share of the best heuristic's gap to the placements' bound it closed,
and the policy's agreement with the placement it imitated (units whose likeliest device is the refined one).
Simulated; nothing is measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

import numpy as np  # noqa: E402

from experiments._report import write_report  # noqa: E402

COLUMNS = ["setup", "units", "round", "bound_ms", "heuristic", "heuristic_ms", "round_refined_ms",
           "round_refined_closed_pct", "agreement_pct", "imitation_loss", "policy_greedy_ms", "policy_greedy_closed_pct",
           "policy_best_ms", "policy_best_closed_pct", "refinement_alone_ms", "refinement_alone_closed_pct",
           "refine_s", "policy_s"]


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def setup_rows(setup: str, refine_seconds: float, rounds: int, imitation_steps: int, samples: int,
               seed: int = 0) -> list[dict]:
    from agents.graph_policy.agent import GraphAgentConfig, GraphPolicyAgent
    from agents.graph_policy.pretrain import step_seconds
    from agents.graph_policy.priors import align_to
    from experiments.gpu_machines import fastest_heuristic, parse_setup
    from placer.cost import open_target
    from placer.heuristics.refine import Refiner
    from placer.models import load_model
    from placer.simulate.bound import gap_closed, step_time_bound

    model, size, spec = parse_setup(setup)
    machine = spec.split(":", 1)[1]
    graph = load_model(model, size)
    with open_target(graph, spec) as target:
        simulator = target.simulator
        bound = step_time_bound(simulator, simulated_on=machine)
        heuristic, timing = fastest_heuristic(target, model, seed=seed)
        best = timing.step_time.seconds
        start = timing.placement.group_device_array

        def closed(seconds: float) -> float | None:
            return _percent(gap_closed(best, seconds, bound))

        mask = np.stack([~graph.groups_without_kernel(device.kind) for device in simulator.devices], axis=1)
        agent = GraphPolicyAgent(graph, mask, target.devices, GraphAgentConfig(head="one-shot", seed=seed))
        alone = Refiner(graph, simulator, start, seed=seed)
        rows, round_start, refined_for = [], start, 0.0
        for round_index in range(rounds):
            refiner = Refiner(graph, simulator, round_start, seed=seed + round_index)
            refined = refiner.run(time.monotonic() + refine_seconds)
            refined_for += refined.wall_seconds
            policy_started = time.monotonic()
            # Interchangeable GPUs named as the policy names them now: the same placement, one the policy can
            # reach without relabelling every unit.
            imitated = align_to(refined.group_devices, agent.sample(1, greedy=True)[0].assignment, target.devices)
            for _ in range(imitation_steps):
                loss = agent.imitate(imitated)
            greedy = agent.sample(1, greedy=True)[0].assignment
            agreement = float(np.mean(greedy == imitated))
            drawn = [greedy] + [s.assignment for s in agent.sample(samples)]
            timed = [step_seconds(target, d) for d in drawn]
            fastest = int(np.argmin(timed))
            policy_seconds = time.monotonic() - policy_started
            comparison = alone.run(_until(alone, refined_for))
            rows.append(dict(setup=setup, units=len(graph.groups), round=round_index + 1, bound_ms=bound.value * 1e3,
                             heuristic=heuristic, heuristic_ms=best * 1e3, round_refined_ms=refined.seconds * 1e3,
                             round_refined_closed_pct=closed(refined.seconds), agreement_pct=100 * agreement,
                             imitation_loss=loss,
                             policy_greedy_ms=timed[0] * 1e3, policy_greedy_closed_pct=closed(timed[0]),
                             policy_best_ms=timed[fastest] * 1e3, policy_best_closed_pct=closed(timed[fastest]),
                             refinement_alone_ms=comparison.seconds * 1e3,
                             refinement_alone_closed_pct=closed(comparison.seconds), refine_s=refined_for,
                             policy_s=policy_seconds))
            print(f"{setup} round {round_index + 1}: heuristic {heuristic} {best * 1e3:.2f} ms, round refined "
                  f"{refined.seconds * 1e3:.2f}, policy greedy {timed[0] * 1e3:.2f} (agreement {100 * agreement:.1f} %, "
                  f"loss {loss:.3f}), "
                  f"best of {len(drawn)} {timed[fastest] * 1e3:.2f}; refinement alone {comparison.seconds * 1e3:.2f} "
                  f"after {comparison.wall_seconds:.0f} s; policy {policy_seconds:.0f} s", flush=True)
            round_start = drawn[fastest] if timed[fastest] < refined.seconds else refined.group_devices
    return rows


def _until(refiner, seconds: float) -> float:
    """The `time.monotonic()` at which `refiner` will have refined `seconds` in all."""
    return time.monotonic() + max(0.0, seconds - refiner.wall_seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", default=["nmt-4:paper@4xH100", "transformer:paper@4xH100",
                                                        "nmt-2:paper@2xV100"])
    parser.add_argument("--refine-seconds", type=float, default=60.0, help="refining per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--imitation-steps", type=int, default=150)
    parser.add_argument("--samples", type=int, default=16, help="draws of the policy per round, besides its greedy one")
    parser.add_argument("--out", default="results/expert_iteration.json")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.imitation_steps < 1 or args.samples < 0 or not args.refine_seconds > 0:
        parser.error("--rounds and --imitation-steps must be at least 1, --samples 0 or more, --refine-seconds positive")
    rows = []
    for setup in args.setups:
        rows += setup_rows(setup, args.refine_seconds, args.rounds, args.imitation_steps, args.samples)
    command = "python experiments/probes/expert_iteration.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("expert_iteration", COLUMNS, rows, args.out, command=command.strip(),
                 refine_seconds=args.refine_seconds, rounds=args.rounds, imitation_steps=args.imitation_steps,
                 samples=args.samples, caveat="simulated on modeled machines; the policy alone is sampled with no "
                                              "refinement after, but it learned from refined placements of this graph")
    return 0


if __name__ == "__main__":
    sys.exit(main())
