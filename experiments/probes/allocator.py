"""Does the C allocator's moving threshold change step times? The same placements under glibc's default and
with its thresholds fixed, side by side.

    python experiments/probes/allocator.py [--models two-tower ...] [--size tiny] [--rounds 7]
                                           [--out results/allocator.json]

glibc serves a block above its mmap threshold with fresh pages, faulted in on first touch (about 2 µs per 4 KB
page), and moves that threshold as such blocks are freed: whether a step's large buffers cost page faults
depends on the process's allocation history (docs/results/calibration.md, "The sender's per-byte cost moves
with page faults"). `MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_` fix both thresholds, so that freed
blocks are reused. Each setting gets its own measurement processes (one process with the recommended pools,
and the `local:2` testbed), all open at once; every placement under both settings is timed once per round,
in the same order each round. Reported per placement: the median step under each, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from contextlib import ExitStack
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402
from placer.cost import compare  # noqa: E402
from placer.measure import InProcess, LocalTestbed, Measurer  # noqa: E402
from placer.testbed import FIXED_ALLOCATOR_THRESHOLDS  # noqa: E402
from placer.models import build_model  # noqa: E402
from placer.models.heldout import HELDOUT_MODELS, heldout_model  # noqa: E402
from placer.placement import Placement  # noqa: E402

@dataclass(frozen=True)
class StepTiming:
    seconds: float
    ok: bool = True


SETTINGS = {"default": {}, "fixed": FIXED_ALLOCATOR_THRESHOLDS}


def placements_of(graph, one_process, testbed) -> dict[str, tuple]:
    """Placements to time: one process with the recommended pools, and on the testbed one worker, round-robin
    and contiguous splits of the op groups at a quarter and a half."""
    chosen = {"one process (intra 1 / inter 2)": (one_process, Placement.on_device(graph, one_process.devices, 0))}
    chosen["local:2 single-device"] = (testbed, Placement.on_device(graph, testbed.devices, 0))
    chosen["local:2 round-robin"] = (testbed, Placement.round_robin(graph, testbed.devices))
    groups = len(graph.groups)
    for share in (0.25, 0.5):
        cut = int(groups * share)
        chosen[f"local:2 split {share:.2f}"] = (testbed, Placement.from_assignment(
            graph, testbed.devices, [0] * cut + [1] * (groups - cut)))
    return chosen


def start_with(environment: dict[str, str], target) -> Measurer:
    """A measurer whose processes (and the testbed's workers, which inherit its environment) run under
    `environment` on top of this one's. Where `environment` is empty, the fixed thresholds are unset."""
    measurer = Measurer(target, allocator_thresholds=environment)
    measurer.start()
    return measurer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["two-tower"],
                        help="built-in or held-out models (placer.models.heldout)")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.rounds < 2:
        raise SystemExit("give at least 2 rounds")

    rows = []
    with ExitStack() as stack:
        measurers = {setting: (stack.enter_context(start_with(env, InProcess(1, 1, 2))),
                               stack.enter_context(start_with(env, LocalTestbed(workers=2))))
                     for setting, env in SETTINGS.items()}
        for model in args.models:
            graph = heldout_model(model, args.size) if model in HELDOUT_MODELS else build_model(model, args.size)
            items = {}
            for setting, (one_process, testbed) in measurers.items():
                for name, (measurer, placement) in placements_of(graph, one_process, testbed).items():
                    items[(name, setting)] = (measurer, placement)

            def evaluate(item) -> StepTiming:
                measurer, placement = item
                result = measurer.measure(graph, placement)
                if not result.ok:
                    raise SystemExit(f"a placement failed under {measurer.allocator_thresholds or 'the default'} "
                                     f"({result.failure.kind}): {result.failure.message}")
                return StepTiming(result.median)

            compared = compare(evaluate, {f"{n}|{s}": item for (n, s), item in items.items()}, args.rounds)
            for name in dict.fromkeys(n for n, _ in items):
                medians = {s: compared[f"{name}|{s}"].median for s in SETTINGS}
                rounds = {s: [t.seconds * 1e3 for t in compared[f"{name}|{s}"].timings] for s in SETTINGS}
                ratios = [f / d for d, f in zip(rounds["default"], rounds["fixed"])]
                rows.append({"model": model, "placement": name, "default_ms": medians["default"] * 1e3,
                             "fixed_ms": medians["fixed"] * 1e3, "fixed_over_default": statistics.median(ratios),
                             "ratio_range": [min(ratios), max(ratios)], "rounds": rounds})
    write_report("allocator", ["model", "placement", "default_ms", "fixed_ms", "fixed_over_default"], rows, args.out,
                 size=args.size, rounds=args.rounds, fixed=FIXED_ALLOCATOR_THRESHOLDS,
                 command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
