"""Does the C allocator's moving threshold change step times? The same placements under glibc's default and
with its thresholds fixed, side by side.

    python experiments/probes/allocator.py [--models two-tower ...] [--size tiny] [--rounds 7] [--fresh]
                                           [--out results/allocator.json]

glibc serves a block above its mmap threshold with fresh pages, faulted in on first touch (about 2 µs per 4 KB
page), and moves that threshold as such blocks are freed: whether a step's large buffers cost page faults
depends on the process's allocation history (docs/results/calibration.md, "The sender's per-byte cost moves
with page faults"). `MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_` fix both thresholds, so that freed
blocks are reused; the testbed's workers run so (`placer.testbed.FIXED_ALLOCATOR_THRESHOLDS`). Each setting gets
its own measurement processes (one process with the recommended pools, the measuring process itself under the
setting; and the `local:2` testbed, its workers under it), all open at once; every placement under both settings
is timed once per round, in the same order each round. With `--fresh`, one process only, each timing in a
measuring process of its own. Reported per placement: the median step under each, and the median of the rounds'
ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from contextlib import ExitStack
from dataclasses import dataclass, replace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402
from placer.cost import compare  # noqa: E402
from placer.measure import InProcess, LocalTestbed, Measurer  # noqa: E402
from placer.models import MODELS, build_model  # noqa: E402
from placer.models.heldout import HELDOUT_MODELS, heldout_model  # noqa: E402
from placer.placement import Placement  # noqa: E402
from placer.testbed import FIXED_ALLOCATOR_THRESHOLDS  # noqa: E402


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
    """A started measurer whose testbed workers run under glibc's thresholds `environment` ({}: the moving
    default); for one process (`InProcess`), the measuring process itself runs under them."""
    if isinstance(target, LocalTestbed):
        measurer = Measurer(replace(target, allocator_thresholds=tuple(environment.items())))
        measurer.start()
        return measurer
    saved = {name: os.environ.pop(name) for name in FIXED_ALLOCATOR_THRESHOLDS if name in os.environ}
    os.environ.update(environment)  # the measuring process reads it when it starts
    try:
        measurer = Measurer(target)
        measurer.start()
    finally:
        for name in FIXED_ALLOCATOR_THRESHOLDS:
            os.environ.pop(name, None)
        os.environ.update(saved)
    return measurer


def fresh_one_process(graph, rounds: int) -> dict[str, list[float]]:
    """One process with the recommended pools, under each setting in a measurement process started for that one
    timing and closed after it, the settings' order alternating round by round: a process's own state (where
    its threads landed) counts once per timing, not once per setting. Milliseconds per round and setting."""
    times = {setting: [] for setting in SETTINGS}
    for index in range(rounds):
        for setting in (list(SETTINGS) if index % 2 == 0 else list(SETTINGS)[::-1]):
            with start_with(SETTINGS[setting], InProcess(1, 1, 2)) as measurer:
                result = measurer.measure(graph, Placement.on_device(graph, measurer.devices, 0))
            if not result.ok:
                raise SystemExit(f"one process failed under {setting} ({result.failure.kind}): {result.failure.message}")
            times[setting].append(result.median * 1e3)
    return times


def load(model: str, size: str):
    return heldout_model(model, size) if model in HELDOUT_MODELS else build_model(model, size)


def row(model: str, placement: str, rounds: dict[str, list[float]]) -> dict:
    """One placement's report: each setting's median over rounds and the median of the rounds' ratios."""
    ratios = [f / d for d, f in zip(rounds["default"], rounds["fixed"])]
    return {"model": model, "placement": placement, "default_ms": statistics.median(rounds["default"]),
            "fixed_ms": statistics.median(rounds["fixed"]), "fixed_over_default": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)], "rounds": rounds}


def side_by_side(graphs: dict, rounds: int) -> list[dict]:
    """Every placement of each model's graph under both settings, in processes open together, timed once per
    round."""
    rows = []
    with ExitStack() as stack:
        measurers = {setting: (stack.enter_context(start_with(env, InProcess(1, 1, 2))),
                               stack.enter_context(start_with(env, LocalTestbed(workers=2))))
                     for setting, env in SETTINGS.items()}
        for model, graph in graphs.items():
            items = {}
            for setting, (one_process, testbed) in measurers.items():
                for name, (measurer, placement) in placements_of(graph, one_process, testbed).items():
                    items[f"{name}|{setting}"] = (measurer, placement)

            def evaluate(item) -> StepTiming:
                measurer, placement = item
                result = measurer.measure(graph, placement)
                if not result.ok:
                    raise SystemExit(f"a placement failed on {measurer.target} ({result.failure.kind}): "
                                     f"{result.failure.message}")
                return StepTiming(result.median)

            compared = compare(evaluate, items, rounds)
            for name in dict.fromkeys(key.split("|")[0] for key in items):
                rows.append(row(model, name, {s: [t.seconds * 1e3 for t in compared[f"{name}|{s}"].timings]
                                              for s in SETTINGS}))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["two-tower"],
                        help="built-in or held-out models (placer.models.heldout)")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--fresh", action="store_true",
                        help="one process only, each timing in a measurement process of its own")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("give at least 2 rounds: each ratio is read over rounds")
    unknown = [m for m in args.models if m not in MODELS and m not in HELDOUT_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; built-in: {', '.join(MODELS)}; held out: "
                     f"{', '.join(HELDOUT_MODELS)}")
    graphs = {model: load(model, args.size) for model in args.models}  # built before any process starts

    rows = []
    if args.fresh:
        for model, graph in graphs.items():
            rows.append(row(model, "one process (intra 1 / inter 2), fresh processes",
                            fresh_one_process(graph, args.rounds)))
    else:
        rows = side_by_side(graphs, args.rounds)
    write_report("allocator", ["model", "placement", "default_ms", "fixed_ms", "fixed_over_default"], rows, args.out,
                 size=args.size, rounds=args.rounds, fixed=FIXED_ALLOCATOR_THRESHOLDS,
                 command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
