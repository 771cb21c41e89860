"""Does the hierarchical planner, rewarded with the refined outcome of each placement it samples, propose starts the
refinement takes further than the heuristics' in the same time?

    python experiments/probes/start_policy.py [--setups nmt-4:paper@8xH100 ...] [--seconds 300]
        [--policy-share 0.5] [--refine-each 3] [--samples 4] [--out results/start_policy.json]

The refinement's local optima differ by start, and the starts' own step times do not rank them
(docs/results/learned-placement.md). Here the policy proposes starts and the refinement finishes them: the
planner (`agents.hierarchical`, tuned preset) samples --samples placements an update, each is refined for
--refine-each seconds (`placer.heuristics.refine.Refiner`), and REINFORCE rewards it with -sqrt of the refined
step. After --policy-share of --seconds, the refinement of its best refined sample goes on for the rest. Against:
the heuristics' tournament (`refine_starts` from their four fastest placements, as `placer optimize` refines) for
the whole --seconds. For the learning signal: the heuristics' four starts each refined for --refine-each seconds,
beside the policy's samples refined as long in its first and last updates. Per setup, one arm after the other in
this process (pin it to a core of its own). Simulated; nothing is measured.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

import numpy as np  # noqa: E402

from experiments._report import write_report  # noqa: E402

COLUMNS = ["setup", "units", "bound_ms", "heuristic", "heuristic_ms", "heuristics_refined_each_ms",
           "policy_first_update_ms", "policy_last_update_ms", "policy_best_refined_each_ms", "updates", "samples",
           "policy_then_refined_ms", "policy_closed_pct", "tournament_ms", "tournament_closed_pct",
           "policy_vs_tournament_pct"]


def setup_row(setup: str, seconds: float, policy_share: float, refine_each: float, samples: int,
              seed: int = 0) -> dict:
    from agents.factory import make_agent
    from experiments.gpu_machines import opened_setup
    from placer.heuristics import applicable_heuristics, time_heuristics
    from placer.heuristics.refine import TOURNAMENT_STARTS, Refiner, refine_starts
    from placer.simulate.bound import gap_closed

    with opened_setup(setup) as (model, graph, target, bound):
        simulator = target.simulator
        names = applicable_heuristics(builtin_model=True, simulator=True, model=model)
        timed = {name: t for name, t in time_heuristics(target, names, model=model, seed=seed).items()
                 if t.placement is not None and t.ok}
        ranked = sorted(timed, key=lambda n: timed[n].step_time.seconds)
        heuristic, best = ranked[0], timed[ranked[0]].step_time.seconds
        starts = [timed[n].placement.group_device_array for n in ranked]

        def refined_for(start: np.ndarray, refine_seconds: float) -> Refiner:
            refiner = Refiner(graph, simulator, start, seed=seed)
            refiner.run(time.monotonic() + refine_seconds)
            return refiner

        each = [refined_for(s, refine_each).seconds for s in starts[:TOURNAMENT_STARTS]]

        mask = np.stack([~graph.groups_without_kernel(device.kind) for device in simulator.devices], axis=1)
        agent = make_agent("hierarchical", graph, mask.astype(np.int8), target.devices, seed=seed)
        started = time.monotonic()
        policy_until = started + policy_share * seconds
        updates, drawn, per_update, best_refiner = 0, 0, [], None
        while time.monotonic() < policy_until:
            assignments = agent.propose(samples)
            refiners = [refined_for(np.asarray(a, np.int64), refine_each) for a in assignments]
            outcomes = [r.seconds for r in refiners]
            agent.learn(assignments, [-math.sqrt(s) if math.isfinite(s) else -1e3 for s in outcomes])
            updates, drawn = updates + 1, drawn + len(assignments)
            per_update.append(statistics.median(outcomes))
            fastest = int(np.argmin(outcomes))
            if best_refiner is None or outcomes[fastest] < best_refiner.seconds:
                best_refiner = refiners[fastest]
            print(f"{setup}: update {updates}, refined samples {' '.join(f'{s * 1e3:.2f}' for s in outcomes)} ms",
                  flush=True)
        best_each = best_refiner.seconds
        best_refiner.run(started + seconds)
        tournament = refine_starts(graph, simulator, starts, deadline=time.monotonic() + seconds, seed=seed)
        tournament_best = min(r.seconds for r in tournament)
    closed = lambda s: None if (c := gap_closed(best, s, bound)) is None else 100 * c  # noqa: E731
    row = dict(setup=setup, units=len(graph.groups), bound_ms=bound.value * 1e3, heuristic=heuristic,
               heuristic_ms=best * 1e3, heuristics_refined_each_ms=" ".join(f"{s * 1e3:.2f}" for s in each),
               policy_first_update_ms=per_update[0] * 1e3, policy_last_update_ms=per_update[-1] * 1e3,
               policy_best_refined_each_ms=best_each * 1e3, updates=updates, samples=drawn,
               policy_then_refined_ms=best_refiner.seconds * 1e3, policy_closed_pct=closed(best_refiner.seconds),
               tournament_ms=tournament_best * 1e3, tournament_closed_pct=closed(tournament_best),
               policy_vs_tournament_pct=100 * (1 - best_refiner.seconds / tournament_best))
    print(f"{setup}: heuristics refined {refine_each:g} s each {row['heuristics_refined_each_ms']} ms; the policy's "
          f"samples refined as long: median {row['policy_first_update_ms']:.2f} ms in its first update, "
          f"{row['policy_last_update_ms']:.2f} in its last ({updates} updates); its best, refined on: "
          f"{row['policy_then_refined_ms']:.2f} ms; the heuristics' tournament for as long: {row['tournament_ms']:.2f}",
          flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", default=["nmt-4:paper@8xH100", "transformer:paper@8xH100"])
    parser.add_argument("--seconds", type=float, default=300, help="refining time of each arm")
    parser.add_argument("--policy-share", type=float, default=0.5,
                        help="share of --seconds the policy proposes starts in (the rest refines its best)")
    parser.add_argument("--refine-each", type=float, default=3.0, help="seconds each sampled start is refined")
    parser.add_argument("--samples", type=int, default=4, help="placements per policy update")
    parser.add_argument("--out", default="results/start_policy.json")
    args = parser.parse_args(argv)
    if not (0 < args.policy_share < 1 and args.seconds > 0 and args.refine_each > 0 and args.samples >= 2):
        parser.error("--policy-share in (0, 1), --seconds and --refine-each positive, --samples at least 2")
    rows = [setup_row(s, args.seconds, args.policy_share, args.refine_each, args.samples) for s in args.setups]
    command = "python experiments/probes/start_policy.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("start_policy", COLUMNS, rows, args.out, command=command.strip(), seconds=args.seconds,
                 policy_share=args.policy_share, refine_each=args.refine_each, samples=args.samples,
                 caveat="simulated on modeled machines; each arm refines for the same wall time on one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
