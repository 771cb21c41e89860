"""The inference step of a training graph: its forward ops alone (no gradients, no update), ended by a NoOp
that waits for the loss, so that `micro_batched_step` copies it per micro-batch like a training step and an
inference plan (forward blocks only) orders it.
"""

from __future__ import annotations

from placer.devices import DeviceSet
from placer.errors import MicroBatchError, PlacementError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement

INFERENCE_STEP = "inference_step"
"""The NoOp one inference step runs (the graph's train op): it waits for the loss of every micro-batch."""


def forward_only_graph(graph: OpGraph) -> OpGraph:
    """`graph`'s forward pass: the loss and the ops it is computed from, with the same names, variables and
    initializer; what only the gradients or the update need is left out. The loss stays as the forward's
    output, so that the batch's labels still count as forward work."""
    import tensorflow as tf

    from placer.graph.build import op_graph_from_tf_graph

    if graph.loss is None:
        raise PlacementError(f"graph {graph.name!r} does not name its loss, so its forward pass cannot be told from "
                             "its backward: build it with loss=")
    if INFERENCE_STEP in graph:
        raise MicroBatchError(f"graph {graph.name!r} already has an op named {INFERENCE_STEP!r}: rename it")
    imported = tf.Graph()
    with imported.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(graph.graph_def), name="")
        loss = imported.get_tensor_by_name(graph.loss)
        with tf.control_dependencies([loss.op]):
            step = tf.no_op(name=INFERENCE_STEP)
    return op_graph_from_tf_graph(imported, step, graph.init_op, loss=graph.loss, name=f"{graph.name}-forward")


def forward_only_placement(placement: Placement, graph: OpGraph, forward_graph: OpGraph, devices: DeviceSet
                           ) -> Placement:
    """`placement` of `graph` as a placement of `forward_graph = forward_only_graph(graph)`: every op where it
    was, the step's NoOp with the loss."""
    op_devices = placement.op_devices(graph)
    op_devices[INFERENCE_STEP] = op_devices[graph.loss.rsplit(":", 1)[0]]
    return Placement.from_op_devices(forward_graph, devices, {op.name: op_devices[op.name] for op in forward_graph.ops},
                                     {**placement.metadata, "inference": True})
