"""Is a split slower against single-device when one-process candidates run between them, as in `placer optimize`'s
comparison, than when the two run back to back, as at the twin's check?

    python experiments/probes/check_against_comparison.py [--model experiments.model_coverage:mobilenetv3small]
        [--size tiny] [--placement metis] --calibration FILE [--rounds 6] [--out results/check_against_comparison.json]

On MobileNetV3Small and EfficientNetB0 the splits came about 10 % slower against single-device in
`placer optimize`'s comparison than at the twin's check a minute before (docs/results/keras-models.md). Both
measure through the same `evaluate`; what differs is the minute, and the other candidates' processes (one process
under each thread setting) that run between the placements in the comparison. Each round here times, on one
testbed (`local:2`):
- back to back: single-device, then the split (as the check does);
- interleaved: a one-process step at intra 2 / inter 1 (both cores), single-device, the same one-process step,
  the split (as the comparison does).
The two orders alternate from round to round, so the minute's drift falls on both. Reported: each order's
split / single-device ratio per round, their medians, and the paired difference. `--calibration` is a
calibration of `local:2` whose twin gives METIS its op costs (cached with it, or profiled once).

With `--idle-others`, the question is what is alive rather than what ran just before: at the check only the
testbed runs, in the comparison the other candidates' processes are up and idle (a second testbed under other
pools, one process per thread setting). Phases of `--rounds` back-to-back pairs alternate with those processes
closed and open (closed, open, closed, open, closed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="experiments.model_coverage:mobilenetv3small")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--placement", default="metis", help="a heuristic's name: the split")
    parser.add_argument("--calibration", required=True, metavar="FILE")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--idle-others", action="store_true",
                        help="compare back-to-back pairs with the comparison's other processes closed and open, idle")
    parser.add_argument("--out", default="results/check_against_comparison.json")
    args = parser.parse_args(argv)

    from placer.commands.placement_option import placement_named
    from placer.cost import open_target
    from placer.models import load_model
    from placer.placement import Placement

    graph = load_model(args.model, args.size)
    with open_target(graph, f"calibrated:{args.calibration}") as twin, open_target(graph, "local:2") as testbed, \
            open_target(graph, "inprocess:1,intra=2,inter=1") as one_process:
        single = Placement.on_device(graph, testbed.devices, 0)
        split = placement_named(args.placement, args.model, graph, testbed.devices, simulator=twin.simulator)
        alone = Placement.on_device(graph, one_process.devices, 0)

        def step(target, placement) -> float:
            timed = target.evaluate(placement)
            if not timed.ok:
                raise SystemExit(f"a measurement failed: {timed.message}")
            return timed.seconds

        for _ in range(2):  # warm: the first measurement of a graph on a testbed is slower than the later ones
            step(testbed, single), step(testbed, split), step(one_process, alone)
        rows = []
        if args.idle_others:
            orders = ("others closed", "others open")
            for phase, order in enumerate(("others closed", "others open") * 2 + ("others closed",)):
                others = [] if order == "others closed" else [
                    open_target(graph, spec) for spec in ("local:widths=1+1,intra=1+1,inter=1+1",
                                                          "inprocess:1,intra=1,inter=2", "inprocess:1,intra=1,inter=1")]
                try:
                    for other in others:  # each set up and run once, then left idle, as in the comparison
                        step(other, Placement.on_device(graph, other.devices, 0))
                    for index in range(args.rounds):
                        first, second = step(testbed, single), step(testbed, split)
                        rows.append({"round": f"{phase}.{index}", "order": order, "single_device_ms": first * 1e3,
                                     "split_ms": second * 1e3, "ratio": second / first})
                finally:
                    for other in others:
                        other.close()
        else:
            orders = ("back to back", "interleaved")
            for index in range(args.rounds):
                for order in (orders if index % 2 == 0 else orders[::-1]):
                    if order == "back to back":
                        first, second = step(testbed, single), step(testbed, split)
                    else:
                        step(one_process, alone)
                        first = step(testbed, single)
                        step(one_process, alone)
                        second = step(testbed, split)
                    rows.append({"round": index, "order": order, "single_device_ms": first * 1e3,
                                 "split_ms": second * 1e3, "ratio": second / first})
    ratios = {order: [r["ratio"] for r in rows if r["order"] == order] for order in orders}
    summary = {order: statistics.median(values) for order, values in ratios.items()}
    if args.idle_others:  # phases, not pairs: each open phase against the closed phases on either side of it
        by_phase = {}
        for r in rows:
            by_phase.setdefault(r["round"].split(".")[0], []).append(r["ratio"])
        medians = [statistics.median(by_phase[str(k)]) for k in range(5)]
        paired = [medians[k] / ((medians[k - 1] * medians[k + 1]) ** 0.5) for k in (1, 3)]
    else:
        paired = [i / b for b, i in zip(ratios["back to back"], ratios["interleaved"])]
    print(f"split / single-device, median: {orders[0]} {summary[orders[0]]:.3f}, {orders[1]} {summary[orders[1]]:.3f}; "
          f"{orders[1]} over {orders[0]}, paired: median {statistics.median(paired):.3f}, "
          f"{min(paired):.3f}-{max(paired):.3f}")
    write_report("check_against_comparison", ["round", "order", "single_device_ms", "split_ms", "ratio"], rows,
                 args.out, model=args.model, size=args.size, placement=args.placement, rounds=args.rounds,
                 idle_others=args.idle_others,
                 medians=summary, paired_median=statistics.median(paired), paired_range=[min(paired), max(paired)],
                 command=" ".join(["python", *sys.argv]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
