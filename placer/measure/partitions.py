"""What TensorFlow runs on each device for a placement: the graphs it partitions for a real step, after
grappler and its other rewrites. The ground truth the simulator's transfers are checked on, and where a send's
place in the executor's order shows."""

from __future__ import annotations

from collections.abc import Mapping

from placer.graph.opgraph import OpGraph


def partition_graphs(graph: OpGraph, op_devices: Mapping[str, str], *, local_cpus: int = 2) -> list:
    """The GraphDefs TensorFlow ran, one per device, in one real step of `graph` with each op on
    `op_devices[op]`, run in process on `local_cpus` logical CPU devices
    (`RunOptions(output_partition_graphs=True)`)."""
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
    return list(metadata.partition_graphs)


def partition_receives(graph: OpGraph, op_devices: Mapping[str, str], *, local_cpus: int = 2) -> list:
    """The `_Recv` NodeDefs of one real step of `graph` with each op on `op_devices[op]` (`partition_graphs`)."""
    return [node for partition in partition_graphs(graph, op_devices, local_cpus=local_cpus)
            for node in partition.node if node.op == "_Recv"]


def ops_beside_sends(partitions) -> dict[str, int]:
    """For each op whose output TensorFlow sends to another device: how many other nodes of its partition read
    it (data or control). TensorFlow's executor runs a send inline, as its tensor is made, only when nothing
    else became ready beside it; with something beside it the send may be queued behind the worker's run of
    inline work. Inline, it still waits for its request to be taken up (`docs/results/simulator-fidelity.md`)."""
    beside: dict[str, int] = {}
    for partition in partitions:
        readers: dict[str, set[str]] = {}
        for node in partition.node:
            for source in node.input:
                readers.setdefault(source.lstrip("^").split(":")[0], set()).add(node.name)
        ops = {node.name: node.op for node in partition.node}
        for node in partition.node:
            if node.op == "_Send" and node.input:
                producer = node.input[0].split(":")[0]
                others = {name for name in readers.get(producer, ()) if ops.get(name) != "_Send"}
                beside[producer] = max(beside.get(producer, 0), len(others))
    return beside
