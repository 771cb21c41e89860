"""What a loop placed apart from the ops that start it costs on the testbed: why placer keeps them one unit.

    python experiments/probes/loop_split.py [--rounds 3] [--out results/loop_split.json]

A Keras 3 LSTM classifier (20 steps, batch 16, two `keras.layers.LSTM`, not unrolled) on `local:2`. Its graph is
regrouped as TensorFlow alone requires (each loop with the variables its body reads, not with the ops that make
its inputs: `placer.graph.colocation.colocation_groups` without `loop_input_edges`), and timed side by side in
interleaved rounds: every op on worker 0, then each loop's unit alone on worker 1. TensorFlow runs a loop
variable's frame on the device of its initial value and the body on the loop's, so each such placement sends
every loop variable across twice per iteration.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from experiments._report import write_report  # noqa: E402


def lstm_classifier():
    import keras

    inputs = keras.Input((20, 8), batch_size=16)
    x = keras.layers.LSTM(32, return_sequences=True)(inputs)
    outputs = keras.layers.Dense(10)(keras.layers.LSTM(32)(x))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def without_loop_units(graph):
    """`graph` with the colocation groups TensorFlow itself imposes: loops not joined to their inputs' producers."""
    import tensorflow as tf

    from placer.graph.colocation import colocation_groups
    from placer.graph.opgraph import ColocationGroup

    graph_def = tf.compat.v1.GraphDef.FromString(graph.graph_def)
    classes = {node.name: [c.decode()[len("loc:@"):] for c in node.attr["_class"].list.s if c.startswith(b"loc:@")]
               for node in graph_def.node if "_class" in node.attr}
    handles = [(tensor.rsplit(":", 1)[0], op.name) for op in graph.ops for tensor in op.data_inputs
               if graph.op(tensor.rsplit(":", 1)[0]).output_dtypes[int(tensor.rsplit(":", 1)[1])] == "resource"]
    group_of, raw = colocation_groups([op.name for op in graph.ops], classes, handles)
    groups = tuple(ColocationGroup(i, anchor, tuple(ops), frozenset.intersection(
        *(graph.op(name).kernel_devices for name in ops))) for i, (anchor, ops) in enumerate(raw))
    ops = tuple(dataclasses.replace(op, group=group_of[op.name]) for op in graph.ops)
    return dataclasses.replace(graph, ops=ops, groups=groups)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="results/loop_split.json")
    args = parser.parse_args(argv)

    from placer.cost import compare, open_target
    from placer.graph import graph_from_keras_model
    from placer.placement import Placement

    graph = without_loop_units(graph_from_keras_model(lstm_classifier()))
    loops = [op for op in graph.step_ops if op.type in ("While", "StatelessWhile")]
    with open_target(graph, "local:2") as target:
        on_first = [0] * len(graph.groups)
        placements = {"every op on worker 0": Placement.from_assignment(graph, target.devices, on_first)}
        for loop in loops:
            moved = list(on_first)
            moved[loop.group] = 1
            placements[f"{loop.name} on worker 1"] = Placement.from_assignment(graph, target.devices, moved)
        compared = compare(target.evaluate, placements, args.rounds)
    rows = [{"placement": name, "step_ms": result.median * 1e3 if result.ok else None,
             "rounds_ms": [None if t is None else t * 1e3 for t in result.rounds]} for name, result in compared.items()]
    write_report("loop_split", ["placement", "step_ms"], rows, args.out, rounds=args.rounds, target="local:2")


if __name__ == "__main__":
    main()
