"""Does the refinement go further in the same time when each piece is tried only on the devices next to it?

    python experiments/probes/refine_devices.py [--setups nmt-4:paper@8xH100 ...] [--seconds 120]
        [--checkpoints 15 30 60 120] [--out results/refine_devices.json]

The refinement (`placer.heuristics.refine.Refiner`) tries every piece of the graph on every other device and
keeps the move that shortens the simulated step most. On 8 GPUs that is 7 simulations a piece, a few
milliseconds each at paper size, and in `placer optimize`'s budget the refinement of the 8-GPU setups ends at
coarse pieces (144 or 576 pieces of 12-18k units, docs/results/learned-placement.md). A move that takes a piece
to a device none of its neighbours is on adds cuts; one that proposed fewer, better moves would let the
refinement go further in the same time, which is what a learned proposal of moves (GiPH's, DOPPLER's) would
have to beat. Here the rule without learning: `devices_tried="neighbours"`, the devices holding a unit the piece
exchanges tensors with, and the device with the least compute.

Per setup, from its fastest heuristic placement (`placer.heuristics.time_heuristics`), each rule refines for
--seconds, one after the other in this process (pin it to a core of its own: the rules are compared by what
they reach in wall time). Reported: the step time each reached at every checkpoint, the finest pieces reached,
the simulations run, and the share of the best heuristic's gap to the placements' bound closed at the end.
Simulated; nothing is measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Mapping

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

COLUMNS = ["setup", "units", "devices_tried", "heuristic", "heuristic_ms", "at_checkpoints_ms", "refined_ms",
           "closed_pct", "finest_pieces", "evaluations", "moves", "wall_s"]


def refine_with_checkpoints(refiner, checkpoints: list[float]) -> list[float]:
    """Step seconds of `refiner`'s placement at each of `checkpoints` (seconds of refining, ascending)."""
    at, spent = [], 0.0
    for checkpoint in checkpoints:
        refiner.run(time.monotonic() + checkpoint - spent)
        spent = checkpoint
        at.append(refiner.seconds)
    return at


def checkpoint_rows(setup: str, graph, target, bound, heuristic: str, timing, checkpoints: list[float], column: str,
                    choices: Mapping[str, Mapping], seed: int = 0) -> list[dict]:
    """A row per choice (`choices`: its value of `column` -> the `Refiner` arguments it sets): each refined from
    `heuristic`'s placement (`timing`) on the open `target` for the last checkpoint, one after the other, its step
    time read at every checkpoint."""
    from placer.heuristics.refine import Refiner
    from placer.simulate.bound import gap_closed

    rows, best = [], timing.step_time.seconds
    for choice, arguments in choices.items():
        refiner = Refiner(graph, target.simulator, timing.placement.group_device_array, seed=seed, **arguments)
        at = refine_with_checkpoints(refiner, checkpoints)
        done = refiner.refinement()
        closed = gap_closed(best, done.seconds, bound)
        rows.append({"setup": setup, "units": len(graph.groups), column: choice, "heuristic": heuristic,
                     "heuristic_ms": best * 1e3, "at_checkpoints_ms": " ".join(f"{s * 1e3:.2f}" for s in at),
                     "refined_ms": done.seconds * 1e3, "closed_pct": None if closed is None else 100 * closed,
                     "finest_pieces": done.finest_pieces, "evaluations": done.evaluations, "moves": done.moves,
                     "wall_s": done.wall_seconds})
        print(f"{setup}, {choice}: {heuristic} {best * 1e3:.2f} ms -> "
              + ", ".join(f"{c:g} s {s * 1e3:.2f}" for c, s in zip(checkpoints, at))
              + f" ({done.finest_pieces} pieces, {done.evaluations} simulated, {done.moves} kept)", flush=True)
    return rows


def setup_rows(setup: str, checkpoints: list[float], seed: int = 0) -> list[dict]:
    from experiments.gpu_machines import fastest_heuristic, opened_setup
    from placer.heuristics.refine import DEVICE_CHOICES

    with opened_setup(setup) as (model, graph, target, bound):
        heuristic, timing = fastest_heuristic(target, model, seed=seed)
        return checkpoint_rows(setup, graph, target, bound, heuristic, timing, checkpoints, "devices_tried",
                               {choice: {"devices_tried": choice} for choice in DEVICE_CHOICES}, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", default=["nmt-4:paper@8xH100", "transformer:paper@8xH100"])
    parser.add_argument("--checkpoints", type=float, nargs="+", default=[15, 30, 60, 120],
                        help="seconds of refining at which each rule's step time is read (ascending; the last is "
                        "how long each rule refines)")
    parser.add_argument("--out", default="results/refine_devices.json")
    args = parser.parse_args(argv)
    if any(b <= a for a, b in zip(args.checkpoints, args.checkpoints[1:])) or min(args.checkpoints) <= 0:
        parser.error("give positive --checkpoints in ascending order")
    rows = [row for setup in args.setups for row in setup_rows(setup, args.checkpoints)]
    command = "python experiments/probes/refine_devices.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("refine_devices", COLUMNS, rows, args.out, command=command.strip(), checkpoints=args.checkpoints,
                 caveat="simulated on modeled machines; each rule refined for the same wall time on one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
