"""What one measured placement costs besides the step itself: graph rewrite, session, init, first step.

    python experiments/measure_overhead.py [--inception-batch 2] [--placements 3] [--out results/measure_overhead.json]

For a small graph (the tiny MLP) and a ~10k-node Inception-V3 training step (tf-keras, 299x299,
synthetic batch), on inprocess:2 with round-robin and single-device placements alternating.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from experiments._report import write_report  # noqa: E402
from placer.graph import SyntheticTensor, graph_from_keras  # noqa: E402
from placer.measure import MeasureConfig, Measurer  # noqa: E402
from placer.models import build_model  # noqa: E402
from placer.placement import Placement  # noqa: E402


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
    parser.add_argument("--placements", type=int, default=3, help="placements measured per graph")
    parser.add_argument("--out")
    args = parser.parse_args()

    rows = []
    config = MeasureConfig(warmup_steps=1, timed_steps=3)
    with Measurer("inprocess:2", config) as measurer:
        for build in (lambda: build_model("mlp", "tiny"), lambda: inception_v3(args.inception_batch)):
            started = time.perf_counter()
            graph = build()
            build_seconds = time.perf_counter() - started
            print(graph.summary(), f"(built in {build_seconds:.1f} s)")
            kinds = [Placement.round_robin, Placement.single_device]
            per_placement = []
            for i in range(args.placements):
                placement = kinds[i % 2](graph, measurer.devices)
                started = time.perf_counter()
                result = measurer.measure(graph, placement)
                wall = time.perf_counter() - started
                if not result.ok:
                    raise SystemExit(f"{graph.name}: {result.describe()}")
                per_placement.append((wall, result))
            # The first request also ships the graph to the worker; report it apart.
            steady = per_placement[1:] or per_placement
            med = lambda values: statistics.median(values)  # noqa: E731
            rows.append({
                "graph": graph.name, "ops": len(graph.ops), "groups": len(graph.groups), "build_s": build_seconds,
                "first_request_s": per_placement[0][0],
                "rewrite_s": med([r.overhead["graph_rewrite"] for _, r in steady]),
                "session_s": med([r.overhead["session"] for _, r in steady]),
                "init_s": med([r.overhead["init"] for _, r in steady]),
                "first_step_s": med([r.overhead["first_step"] for _, r in steady]),
                "step_s": med([r.median for _, r in steady]),
                "per_placement_s": med([w for w, _ in steady]),
            })
    write_report("measure_overhead", list(rows[0]), rows, args.out, target="inprocess:2",
                 warmup=config.warmup_steps, repeats=config.timed_steps)


if __name__ == "__main__":
    main()
