"""Data parallelism on the local testbed: two workers each running half the batch, their gradients summed where
worker 0 holds the variables, measured side by side with one process and with every op on one worker.

    python experiments/probes/data_parallel.py [--models two-tower mobilenet transformer-block] [--rounds 7]
        [--timed-steps 10] [--testbed local:2] [--out results/data_parallel.json]

--testbed local:2,link=1gbit puts the two workers on two machines over a link shaped to 1 Gbit/s
(`placer.testbed`), so that the gradient exchange crosses it.

Each model's step is built at its batch and at half of it (two replicas' slices). Per model, in interleaved rounds
(each candidate once a round, the same order; the median of its rounds' medians):
- one process under TensorFlow's default pools, and at intra 1 / inter 2 (the setting `placer tune` finds fastest
  on 2 cores for every model tried), every op on its one CPU device;
- one worker: the local:2 testbed with every op on worker 0 (one core);
- one replica alone: the step at half the batch on worker 0, nothing exchanged: the most two replicas on one core
  each could reach (their ceiling: data parallelism's step is at least this long);
- data parallel x2: the testbed's two workers, each a replica on its slice (`placer.replicas.data_parallel_step`:
  in-graph replicas, the variables and the update on worker 0, worker 1 reading the weights and sending its
  gradients over gRPC each step).
Reported: each median, its spread over rounds (max - min over the median), data parallel over the fastest
one-process setting (x: above 1 data parallel is faster), and the same for its ceiling. Measurements of this machine only; a GPU result is not implied.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

COLUMNS = ["model", "batch", "ops", "gradient_mb", "one_process_default_ms", "one_process_tuned_ms", "one_worker_ms",
           "one_replica_ms", "data_parallel_ms", "data_parallel_spread_pct", "vs_one_process", "ceiling_vs_one_process",
           "winner"]
MACHINE_USES = {"one process, default pools": "inprocess:1", "one process, intra 1 / inter 2": "inprocess:1,intra=1,inter=2",
                "testbed": "local:2"}


def _mobilenet(batch: int):
    """keras.applications' smallest MobileNetV3 at 32x32, no weights: the image classifier of the coverage run."""
    import keras

    model = keras.applications.MobileNetV3Small(weights=None, input_tensor=keras.Input((32, 32, 3), batch_size=batch),
                                                classes=10)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy())
    return model


def _transformer_block(batch: int):
    """Two Transformer encoder blocks (`keras.layers.MultiHeadAttention`, 4 heads, width 128, feed-forward 512) over
    64 tokens, pooled, classified into 10."""
    import keras

    tokens = keras.Input((64, 128), batch_size=batch)
    x = tokens
    for _ in range(2):
        x = keras.layers.LayerNormalization()(x + keras.layers.MultiHeadAttention(4, 32)(x, x))
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(128)(keras.layers.Dense(512, activation="gelu")(x)))
    outputs = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model(tokens, outputs)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


KERAS_MODELS = {"mobilenet": (_mobilenet, 16), "transformer-block": (_transformer_block, 16)}
"""Keras models by name: a builder taking the batch, and the whole step's batch."""
BUILTIN = {"two-tower": "small"}
"""Built-in models and the size measured."""


def step_graphs(name: str):
    """The step of model `name` at its batch, and at half of it (a replica's slice): (graph, replica graph, batch)."""
    if name in BUILTIN:
        from placer.models import build_model, model_batch

        size = BUILTIN[name]
        batch = model_batch(name, size)
        return build_model(name, size), build_model(name, size, batch=batch // 2), batch
    from placer.graph.keras_model import graph_from_keras_model

    build, batch = KERAS_MODELS[name]
    return (graph_from_keras_model(build(batch), name=f"{name}-b{batch}"),
            graph_from_keras_model(build(batch // 2), name=f"{name}-b{batch // 2}"), batch)


def measure_model(name: str, measurers: dict, rounds: int, uses: dict[str, str] = MACHINE_USES) -> dict:
    from placer.cost import compare
    from placer.cost.record import StepTime
    from placer.placement import Placement
    from placer.replicas import data_parallel_step, first_group
    from placer.schedule.micro_batch import gradients

    graph, replica_graph, batch = step_graphs(name)
    testbed = measurers["testbed"]
    machine = testbed.devices
    replica = Placement.on_device(replica_graph, first_group(machine, 2), 0)
    step_graph, replicated = data_parallel_step(replica_graph, replica, machine, 2)
    candidates = {
        "one process, default pools": ("one process, default pools", graph, None),
        "one process, intra 1 / inter 2": ("one process, intra 1 / inter 2", graph, None),
        "one worker": ("testbed", graph, Placement.on_device(graph, machine, 0)),
        "one replica alone": ("testbed", replica_graph, Placement.on_device(replica_graph, machine, 0)),
        "data parallel x2": ("testbed", step_graph, replicated),
    }

    def evaluate(candidate) -> StepTime:
        use, g, placement = candidate
        measurer = measurers[use]
        placement = placement or Placement.on_device(g, measurer.devices, 0)
        return StepTime.from_measurement(measurer.measure(g, placement), uses[use])

    compared = compare(evaluate, candidates, rounds)
    medians = {key: (c.median if c.ok else None) for key, c in compared.items()}
    spreads = {}
    for key, c in compared.items():
        values = [t.seconds for t in c.timings if t.ok]
        spreads[key] = 100 * (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else None
    one_process = min(v for k, v in medians.items() if k.startswith("one process") and v is not None)
    ok = {k: v for k, v in medians.items() if v is not None and k != "one replica alone"}  # not a way to run the step
    ms = {k: None if v is None else v * 1e3 for k, v in medians.items()}
    return {"model": name, "batch": batch, "ops": len(graph.ops),
            "gradient_mb": sum(g.bytes for g in gradients(replica_graph)) / 1e6,
            "one_process_default_ms": ms["one process, default pools"],
            "one_process_tuned_ms": ms["one process, intra 1 / inter 2"], "one_worker_ms": ms["one worker"],
            "one_replica_ms": ms["one replica alone"],
            "ceiling_vs_one_process": None if medians["one replica alone"] is None else
            one_process / medians["one replica alone"],
            "data_parallel_ms": ms["data parallel x2"], "data_parallel_spread_pct": spreads["data parallel x2"],
            "vs_one_process": None if medians["data parallel x2"] is None else one_process / medians["data parallel x2"],
            "winner": min(ok, key=ok.get), "rounds_ms": {k: [t.seconds * 1e3 if t.ok else None for t in c.timings]
                                                         for k, c in compared.items()},
            "spread_pct": spreads,
            "failures": {k: c.failure.message for k, c in compared.items() if c.failure is not None}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=[*BUILTIN, *KERAS_MODELS], choices=[*BUILTIN, *KERAS_MODELS])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--timed-steps", type=int, default=10, help="timed steps a measurement, after 2 warm-ups")
    parser.add_argument("--testbed", default="local:2", help="the two-worker testbed (default local:2; "
                        "local:2,link=1gbit: over a shaped link)")
    parser.add_argument("--out", default="results/data_parallel.json")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.timed_steps < 1:
        parser.error("--rounds and --timed-steps must be at least 1")
    from placer.measure import MeasureConfig, Measurer

    config = MeasureConfig(timed_steps=args.timed_steps)
    uses = {**MACHINE_USES, "testbed": args.testbed}
    measurers = {use: Measurer(spec, config) for use, spec in uses.items()}
    rows = []
    started = time.monotonic()
    try:
        for measurer in measurers.values():
            measurer.start()
        for name in args.models:
            row = measure_model(name, measurers, args.rounds, uses)
            rows.append(row)
            print(f"{name}: one process {row['one_process_tuned_ms']:.2f} ms (tuned) / "
                  f"{row['one_process_default_ms']:.2f} (default), one worker {row['one_worker_ms']:.2f}, data parallel "
                  f"x2 {row['data_parallel_ms'] or float('nan'):.2f} ms: {row['winner']} fastest", flush=True)
    finally:
        for measurer in measurers.values():
            measurer.close()
    command = "python experiments/probes/data_parallel.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("data_parallel", COLUMNS, rows, args.out, command=command.strip(), rounds=args.rounds,
                 timed_steps=args.timed_steps, seconds=time.monotonic() - started,
                 testbed=args.testbed,
                 caveat=f"measured on this machine's {args.testbed} testbed (two workers pinned to a core each) and in "
                        "one process on both cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
