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


SEND_NODE_OPS = frozenset({"_Send", "_HostSend"})
RECEIVE_NODE_OPS = frozenset({"_Recv", "_HostRecv"})
"""The nodes TensorFlow adds to move a tensor between partitions; the `_Host` ones carry a tensor kept in host
memory (int32 shapes), and one end of a pair may be a `_Host` node where the other is not."""


def partition_receives(graph: OpGraph, op_devices: Mapping[str, str], *, local_cpus: int = 2) -> list:
    """The `_Recv` and `_HostRecv` NodeDefs of one real step of `graph` with each op on `op_devices[op]` (`partition_graphs`)."""
    return [node for partition in partition_graphs(graph, op_devices, local_cpus=local_cpus)
            for node in partition.node if node.op in RECEIVE_NODE_OPS]


def received_tensors(partitions) -> frozenset[str]:
    """The tensors ("op:port") TensorFlow sent between the devices of `partitions`: each receive's tensor, by
    its send's input. Control edges travel as tensors of nodes TensorFlow adds, named as it names them."""
    sent_by_key = {node.attr["tensor_name"].s: node.input[0] for partition in partitions for node in partition.node
                   if node.op in SEND_NODE_OPS and node.input}
    received = set()
    for partition in partitions:
        for node in partition.node:
            source = sent_by_key.get(node.attr["tensor_name"].s) if node.op in RECEIVE_NODE_OPS else None
            if source is not None and not source.startswith("^"):
                received.add(source if ":" in source else f"{source}:0")
    return frozenset(received)


def constants_sent_when_cut(graph: OpGraph, op_devices: Mapping[str, str] | None = None, *,
                            local_cpus: int = 2) -> frozenset[str]:
    """The small tensors `placer.graph.constants.replicated_tensors` says every reading CPU gets a copy of, that
    TensorFlow sends between devices after all, in one real step of `graph` with each op on `op_devices[op]`
    (default: round-robin over `local_cpus` in-process CPUs, which cuts most of the graph's edges).

    TensorFlow's `ReplicateConstantsPass` skips a constant with at most one reader, and which constants keep
    one reader is grappler's doing: it merges equal constants, folds and removes their readers. On the held-out
    branchy-0 at `tiny`, METIS's placement received 58 tensors where the rule alone sends 38, and 59 with what
    round-robin teaches (`experiments/probes/partition_transfers.py`). A constant the placement leaves uncut is not
    learned about, and keeps the rule's answer."""
    from placer.graph.constants import replicated_tensors
    from placer.graph.control import kept_control_inputs

    if op_devices is None:
        from placer.devices import local_devices
        from placer.placement import Placement

        op_devices = Placement.round_robin(graph, local_devices(local_cpus)).op_devices(graph)
    if len(set(op_devices.values())) < 2:
        return frozenset()
    sent = received_tensors(partition_graphs(graph, op_devices, local_cpus=local_cpus))
    return frozenset(replicated_tensors(graph, kept_control_inputs(graph)) & sent)


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
            if node.op in SEND_NODE_OPS and node.input:
                producer = node.input[0].split(":")[0]
                others = {name for name in readers.get(producer, ()) if ops.get(name) not in SEND_NODE_OPS}
                beside[producer] = max(beside.get(producer, 0), len(others))
    return beside
