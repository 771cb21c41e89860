"""What one measured placement costs besides its steps (graph rewrite, session, init, first step), before and after
the worker kept the imported graph and its placement checks between placements.

    python experiments/probes/measure_overhead.py [--inception-batch 2] [--placements 3] [--target inprocess:2]
                                           [--out results/measure_overhead.json]

For a small graph (the tiny MLP) and a ~10k-node Inception-V3 training step (tf-keras, 299x299, synthetic batch), on
inprocess:2 (or another target) with round-robin and single-device placements alternating. Each placement is measured by two workers, one
per path, in alternating order: "before" imports the placed GraphDef anew and traces the first step of every placement
(`reimport_graph`, `trace_every_placement`); "after" changes the devices of the graph it imported once and traces only
placements with a (colocation group, device) pair no earlier trace confirmed. The overhead ratio is the whole placement
(wall time of the request) over its steps ((warm-up + timed steps) x the median step).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from experiments._report import write_report  # noqa: E402
from placer.graph import SyntheticTensor, graph_from_keras  # noqa: E402
from placer.heuristics import single_device_placement  # noqa: E402
from placer.measure import MeasureConfig, Measurer  # noqa: E402
from placer.models import build_model  # noqa: E402
from placer.placement import Placement  # noqa: E402

AFTER = MeasureConfig(warmup_steps=1, timed_steps=3)
PATHS = {"before": replace(AFTER, reimport_graph=True, trace_every_placement=True), "after": AFTER}


def inception_v3(batch: int):
    import tf_keras

    return graph_from_keras(
        lambda: tf_keras.applications.InceptionV3(weights=None),
        inputs=SyntheticTensor((batch, 299, 299, 3)),
        targets=SyntheticTensor((batch,), "int32", maxval=1000),
        loss="sparse_categorical_crossentropy",
        optimizer="sgd",
        name=f"inception-v3-b{batch}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inception-batch", type=int, default=2)
    parser.add_argument("--placements", type=int, default=3, help="placements measured per graph and path")
    parser.add_argument("--target", default="inprocess:2", help="inprocess:N or local:N (the gRPC testbed)")
    parser.add_argument("--same-worker", action="store_true",
                        help="both paths in one worker, to compare their step times without two processes' noise "
                             "(the after path then also reuses the before path's traces)")
    parser.add_argument("--out")
    args = parser.parse_args()

    rows = []
    if args.same_worker:
        shared = Measurer(args.target)
        measurers = {path: shared for path in PATHS}
    else:
        measurers = {path: Measurer(args.target, config) for path, config in PATHS.items()}
    try:
        for build in (lambda: build_model("mlp", "tiny"), lambda: inception_v3(args.inception_batch)):
            started = time.perf_counter()
            graph = build()
            build_seconds = time.perf_counter() - started
            print(graph.summary(), f"(built in {build_seconds:.1f} s)")
            devices = measurers["after"].devices
            kinds = [Placement.round_robin, single_device_placement]
            per_placement = {path: [] for path in PATHS}
            for i in range(args.placements):
                placement = kinds[i % 2](graph, devices)
                order = list(PATHS) if i % 2 == 0 else list(PATHS)[::-1]
                for path in order:
                    started = time.perf_counter()
                    result = measurers[path].measure(graph, placement, PATHS[path])
                    wall = time.perf_counter() - started
                    if not result.ok:
                        raise SystemExit(f"{graph.name} ({path}): {result.failure.kind}: {result.failure.message}")
                    print(f"  {path:6s} {kinds[i % 2].__name__:14s} {wall:.3f} s, step {result.median:.4f} s, "
                          f"check {result.placement_check}, {len(result.moved_ops)} moved")
                    per_placement[path].append((wall, result))
            steps = AFTER.warmup_steps + AFTER.timed_steps
            med = statistics.median
            for path in PATHS:
                # The first request also ships the graph to the worker; report it apart.
                steady = per_placement[path][1:] or per_placement[path]
                whole = med([w for w, _ in steady])
                step = med([r.median for _, r in steady])
                rows.append({
                    "graph": graph.name, "path": path, "ops": len(graph.ops), "groups": len(graph.groups),
                    "build_s": build_seconds, "first_request_s": per_placement[path][0][0],
                    "rewrite_s": med([r.overhead["graph_rewrite"] for _, r in steady]),
                    "session_s": med([r.overhead["session"] for _, r in steady]),
                    "init_s": med([r.overhead["init"] for _, r in steady]),
                    "first_step_s": med([r.overhead["first_step"] for _, r in steady]),
                    "step_s": step, "steps_s": steps * step, "per_placement_s": whole,
                    "overhead_ratio": whole / (steps * step),
                    "traced": sum(r.placement_check == "traced" for _, r in per_placement[path]),
                    "reused": sum(r.placement_check == "reused" for _, r in per_placement[path]),
                    # the same placements on both paths: their step times must agree within noise
                    "step_vs_before": med([r.median / b.median for (_, r), (_, b)
                                           in zip(per_placement[path], per_placement["before"])]),
                })
    finally:
        for measurer in set(measurers.values()):
            measurer.close()
    write_report("measure_overhead", list(rows[0]), rows, args.out, target=args.target,
                 warmup=AFTER.warmup_steps, repeats=AFTER.timed_steps, placements=args.placements,
                 same_worker=args.same_worker)


if __name__ == "__main__":
    main()
