"""Does drawing a Keras model's initial values, instead of storing them in the graph, change its step time?

    python experiments/probes/initial_values_step.py [--model experiments/model_coverage.py:resnet50] [--size tiny]
        [--target inprocess:1] [--rounds 6] [--out results/initial_values_step.json]

The model's step built twice in this process: as `placer.graph.tf_function` builds it (a variable of more than
`EXACT_INITIAL_VALUE_ELEMENTS` varied values starts from values drawn alike, one of a repeated value from that
value) and with every variable's values stored in the GraphDef. Both on one device of --target, measured side by
side in --rounds interleaved rounds (the order alternating); per round the drawn graph's step over the stored one's.
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

COLUMNS = ["round", "stored_ms", "drawn_ms", "drawn_over_stored"]


def graph_with_values_stored(model: str, size: str):
    """The step of `model` with every variable's values in its GraphDef."""
    import tensorflow as tf

    import placer.graph.tf_function as tf_function
    from placer.models import load_model

    drawn = tf_function._initial_value
    tf_function._initial_value = lambda value, dtype, seed: tf.constant(value, dtype=dtype, name="initial_value")
    try:
        return load_model(model, size)
    finally:
        tf_function._initial_value = drawn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="experiments/model_coverage.py:resnet50")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--target", default="inprocess:1")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", default="results/initial_values_step.json")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    from placer.measure import Measurer
    from placer.models import load_model
    from placer.placement import Placement

    graphs = {"drawn": load_model(args.model, args.size), "stored": graph_with_values_stored(args.model, args.size)}
    sizes = {name: len(graph.graph_def) / 1e6 for name, graph in graphs.items()}
    print(f"GraphDef: values stored {sizes['stored']:.1f} MB, drawn {sizes['drawn']:.1f} MB", flush=True)
    rows = []
    with Measurer(args.target) as measurer:
        for index in range(args.rounds):
            order = ("stored", "drawn") if index % 2 == 0 else ("drawn", "stored")
            step = {}
            for name in order:
                graph = graphs[name]
                result = measurer.measure(graph, Placement.on_device(graph, measurer.devices, 0))
                if not result.ok:
                    raise SystemExit(f"{name}: {result.failure.message}")
                step[name] = 1e3 * result.median
            rows.append(dict(round=index + 1, stored_ms=step["stored"], drawn_ms=step["drawn"],
                             drawn_over_stored=step["drawn"] / step["stored"]))
            print(f"round {index + 1}: stored {step['stored']:.2f} ms, drawn {step['drawn']:.2f} ms", flush=True)
    median_ratio = statistics.median(row["drawn_over_stored"] for row in rows)
    print(f"drawn over stored, median over rounds: {median_ratio:.3f}")
    command = "python experiments/probes/initial_values_step.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("initial_values_step", COLUMNS, rows, args.out, command=command.strip(), model=args.model,
                 size=args.size, target=args.target, graph_mb=sizes, median_drawn_over_stored=median_ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
