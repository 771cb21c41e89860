"""Can the hierarchical planner express what the refinement finds? The refined placement, carried to the planner's
grain, priced again.

    python experiments/probes/policy_grain.py [--setups nmt-4:paper@4xH100 ...] [--refine-seconds 90]
        [--grains 1 4 16] [--out results/policy_grain.json]

The planner's grouper starts from a METIS partition of the graph into G groups (min(256, 20 x devices)) and its
placer gives each group one device: a placement it samples keeps every group on one device. Per setup: METIS's
placement refined on the simulator for --refine-seconds (`placer.heuristics.refine`, down to single units), then
carried to k x G partition groups for each k of --grains (each group on the device most of its units are on, as
imitating the refined placement with that grouping would at best give), and priced again. Reported: each step
time, and the share of METIS's gap to the placements' bound each closes: what a policy with that grain could keep
of the refinement's gain, if it learned the refined placement perfectly. Simulated; nothing is measured.
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

COLUMNS = ["setup", "units", "bound_ms", "metis_ms", "refined_ms", "refined_closed_pct", "groups", "carried_ms",
           "carried_closed_pct", "units_moved_pct"]


def carried_to(assignment: np.ndarray, parts: np.ndarray, devices: int) -> np.ndarray:
    """`assignment` ([U] device per unit) with each part's units on the device most of them are on."""
    carried = assignment.copy()
    for part in np.unique(parts):
        members = parts == part
        carried[members] = np.bincount(assignment[members], minlength=devices).argmax()
    return carried


def setup_rows(setup: str, refine_seconds: float, grains: list[int]) -> list[dict]:
    from agents.hierarchical import Args
    from placer.cost import open_target
    from placer.heuristics import time_heuristics
    from placer.heuristics.partitioners import unit_partition
    from placer.heuristics.refine import refine_placement
    from placer.models import load_model
    from placer.simulate.bound import gap_closed, step_time_bound

    model_size, _, machine = setup.partition("@")
    model, _, size = model_size.partition(":")
    graph = load_model(model, size or "paper")
    with open_target(graph, f"modeled:{machine}") as target:
        simulator = target.simulator
        devices = len(simulator.devices)
        bound = step_time_bound(simulator, simulated_on=machine)
        metis = time_heuristics(target, ["metis"], model=model)["metis"]
        start = metis.placement.group_device_array
        refined = refine_placement(graph, simulator, start, deadline=time.monotonic() + refine_seconds)
        base = dict(setup=setup, units=len(graph.groups), bound_ms=bound.value * 1e3,
                    metis_ms=metis.step_time.seconds * 1e3, refined_ms=refined.seconds * 1e3,
                    refined_closed_pct=_percent(gap_closed(metis.step_time.seconds, refined.seconds, bound)))
        rows = []
        for grain in grains:
            groups = grain * Args().groups_for(devices)
            carried = carried_to(refined.group_devices, unit_partition(graph, groups), devices)
            result = simulator.simulate(carried)
            seconds = result.step_time if result.ok else float("inf")
            rows.append({**base, "groups": groups, "carried_ms": seconds * 1e3,
                         "carried_closed_pct": _percent(gap_closed(metis.step_time.seconds, seconds, bound)),
                         "units_moved_pct": 100 * float(np.mean(carried != refined.group_devices))})
    return rows


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", default=["nmt-4:paper@4xH100", "gpt2:paper@4xH100"])
    parser.add_argument("--refine-seconds", type=float, default=90.0)
    parser.add_argument("--grains", nargs="+", type=int, default=[1, 4, 16],
                        help="group counts as multiples of the planner's default")
    parser.add_argument("--out", default="results/policy_grain.json")
    args = parser.parse_args(argv)
    rows = []
    for setup in args.setups:
        rows += setup_rows(setup, args.refine_seconds, args.grains)
    command = "python experiments/probes/policy_grain.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("policy_grain", COLUMNS, rows, args.out, command=command.strip(), refine_seconds=args.refine_seconds,
                 caveat="simulated on modeled machines; the carried placement is what a perfect imitation at that "
                        "grain could give, not what a trained policy gives")
    return 0


if __name__ == "__main__":
    sys.exit(main())
