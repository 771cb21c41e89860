"""Data parallelism executed for real: in-graph replicas of the step on their own devices, their gradients averaged
where replica 0 holds the variables, one update. After one step the weights equal the single replica's step's."""

from collections import Counter

import numpy as np
import pytest

from placer.devices import local_devices
from placer.errors import ReplicaError
from placer.placement import Placement
from placer.replicas import data_parallel_step, first_group

SLICE = 32  # two-tower tiny: batch 64, two replicas of 32


@pytest.fixture(scope="module")
def replica_graph():
    from placer.models import build_model

    return build_model("two-tower", "tiny", batch=SLICE)


def _weights_after_one_step(graph, placement):
    """Every variable after one training step of `graph` placed by `placement`, in a fresh session of two CPU
    devices, soft placement off (a device TensorFlow could not honour fails the run); and the devices that ran."""
    import tensorflow as tf

    imported = tf.Graph()
    with imported.as_default():
        tf.compat.v1.import_graph_def(placement.apply(graph), name="")
        handles = sorted(op.name for op in imported.get_operations() if op.type == "VarHandleOp")
        reads = [tf.raw_ops.ReadVariableOp(resource=imported.get_tensor_by_name(f"{h}:0"),
                                           dtype=imported.get_operation_by_name(h).get_attr("dtype")) for h in handles]
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=False)
    with tf.compat.v1.Session(graph=imported, config=config) as session:
        session.run(graph.init_op)
        metadata = tf.compat.v1.RunMetadata()
        session.run(graph.train_op, options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                    run_metadata=metadata)
        ran = Counter(stats.device for stats in metadata.step_stats.dev_stats for _ in stats.node_stats)
        return dict(zip(handles, session.run(reads))), ran


def test_two_replicas_on_two_devices_update_the_weights_as_one_replica_s_step_does(replica_graph):
    # two-tower seeds its synthetic inputs, so both replicas draw the same slice: their mean gradient is one
    # replica's, and one update from it gives the single step's weights
    machine = local_devices(logical_cpus=2)
    group = first_group(machine, 2)
    assert group.names == machine.names[:1]
    single = Placement.on_device(replica_graph, group, 0)
    step_graph, placement = data_parallel_step(replica_graph, single, machine, 2)
    devices = Counter(placement.op_devices(step_graph).values())
    assert set(devices) == set(machine.names)  # replica 1's copy runs on the second device
    weights, ran = _weights_after_one_step(step_graph, placement)
    reference, _ = _weights_after_one_step(replica_graph, single)
    assert all(ran[name] > 0 for name in machine.names), ran  # both devices computed
    assert set(weights) == set(reference) and len(reference) == 8
    for name, value in reference.items():
        np.testing.assert_allclose(weights[name], value, rtol=1e-5, atol=1e-7)


def test_a_replica_placed_outside_its_group_is_refused(replica_graph):
    machine = local_devices(logical_cpus=2)
    with pytest.raises(ReplicaError, match="outside its group"):
        data_parallel_step(replica_graph, Placement.on_device(replica_graph, machine, 1), machine, 2)
