"""What TensorFlow moves between devices for a placement: the `_Recv` nodes of the graphs it partitions for a
real step, after grappler and its other rewrites. The ground truth the simulator's transfers are checked on."""

from __future__ import annotations

from collections.abc import Mapping

from placer.graph.opgraph import OpGraph


def partition_receives(graph: OpGraph, op_devices: Mapping[str, str], *, local_cpus: int = 2) -> list:
    """The `_Recv` NodeDefs of one real step of `graph` with each op on `op_devices[op]`, run in process on
    `local_cpus` logical CPU devices (`RunOptions(output_partition_graphs=True)`)."""
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2

    from placer.measure.config import MeasureConfig
    from placer.measure.runner import LoadedGraph, session_config_for

    loaded = LoadedGraph(tf.compat.v1.GraphDef.FromString(graph.graph_def), graph.train_op, graph.init_op)
    placed = loaded.placed_graph(op_devices)
    metadata = config_pb2.RunMetadata()
    config = session_config_for(MeasureConfig(), local_cpus=local_cpus)
    with tf.compat.v1.Session(graph=placed, config=config) as session:
        session.run(graph.init_op)
        session.run(graph.train_op, options=config_pb2.RunOptions(output_partition_graphs=True), run_metadata=metadata)
    return [node for partition in metadata.partition_graphs for node in partition.node if node.op == "_Recv"]
