import subprocess
import sys

import pytest
import tensorflow as tf

from placer.errors import GraphBuildError
from placer.graph import graph_from_function, graph_from_tf_function


def test_keras_training_step_includes_forward_backward_and_update(mlp):
    types = {op.type for op in mlp.step_ops}
    assert {"MatMul", "BiasAdd"} <= types  # forward
    assert any(op.name.startswith("gradients/") for op in mlp.step_ops)  # backward
    assert any(t.startswith("ResourceApplyAdam") for t in types)  # optimizer update
    assert mlp.loss == "loss:0"
    assert mlp.op("dense/kernel").parameters == 64 * 128
    model_weights = 64 * 128 + 128 + 4 * 128 + 128 * 128 + 128 + 128 * 10 + 10
    assert mlp.num_parameters > 2 * model_weights  # weights plus Adam's two slots per weight


def test_parameters_are_counted_as_keras_counts_them_with_the_optimizer_state_apart(mlp):
    model_weights = 64 * 128 + 128 + 4 * 128 + 128 * 128 + 128 + 128 * 10 + 10  # batch norm's moving statistics too
    assert mlp.model_parameters == model_weights
    state = mlp.num_parameters - model_weights
    assert state > 2 * (model_weights - 2 * 128)  # Adam's two slots per trainable weight
    assert f"{model_weights:,} parameters (+{state:,} optimizer state)" in mlp.summary()


def test_a_tf1_step_counts_its_trainable_variables_as_the_model_and_adams_slots_apart():
    def build():
        w = tf.compat.v1.get_variable("w", shape=(3, 4), use_resource=True)
        loss = tf.reduce_sum(tf.matmul(tf.ones((2, 3)), w))
        return tf.compat.v1.train.AdamOptimizer().minimize(loss), loss

    graph = graph_from_function(build, name="tf1")
    assert graph.model_parameters == 12
    assert graph.num_parameters == 3 * 12 + 2  # two slots per weight, and Adam's two beta powers
    assert "12 parameters (+26 optimizer state)" in graph.summary()


def test_ops_are_in_topological_order(mlp):
    seen = set()
    for op in mlp.ops:
        for producer in (*op.producers, *op.control_inputs):
            if mlp.op(producer).type not in ("NextIteration",):
                assert producer in seen, f"{producer} comes after its consumer {op.name}"
        seen.add(op.name)


def test_a_variable_and_every_op_that_reads_or_updates_it_form_one_colocation_group(mlp):
    group = mlp.group("dense/kernel")
    member_types = {mlp.op(name).type for name in group.ops}
    assert {"VarHandleOp", "ReadVariableOp", "ResourceApplyAdam"} <= member_types
    for op in mlp.ops:
        for producer in op.producers:
            if mlp.op(producer).type == "VarHandleOp":
                assert op.group == mlp.op(producer).group, f"{op.name} reads {producer} but is not in its group"


def test_every_op_lists_the_device_types_with_a_kernel_for_it(mlp):
    assert mlp.op("dense/kernel").kernel_devices >= {"CPU"}
    assert all(op.kernel_devices for op in mlp.ops)


def test_output_shapes_bytes_and_flops_are_recorded(mlp):
    matmul = next(op for op in mlp.step_ops if op.type == "MatMul" and op.output_shapes[0] == (32, 128))
    assert matmul.output_dtypes == ("float32",)
    assert matmul.output_bytes == (32 * 128 * 4,)
    assert matmul.flops > 0


def test_fingerprint_is_stable_across_processes(two_tower):
    code = "from placer.models import build_model; print(build_model('two-tower', 'tiny').fingerprint)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == two_tower.fingerprint


def test_graph_function_builder_rejects_a_function_returning_nothing():
    with pytest.raises(GraphBuildError, match="returned None"):
        graph_from_function(lambda: None)


def test_tf_function_step_becomes_a_placeable_graph():
    w = tf.Variable(tf.ones([4, 2]))

    @tf.function
    def inner(x):
        return tf.matmul(x, w)

    @tf.function
    def step():
        x = tf.random.uniform([8, 4], seed=1)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(inner(x)))
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss

    graph = graph_from_tf_function(step, name="tiny-tf-function")
    assert not any(op.type in ("PartitionedCall", "StatefulPartitionedCall") for op in graph.ops)
    assert any(op.type == "VarHandleOp" for op in graph.ops)
    assert graph.loss is not None


def test_computing_flops_leaves_the_graph_def_runnable():
    # The FLOP function of BatchMatMulV2 reads a `transpose_a` attribute the op does not have.
    def build():
        w = tf.compat.v1.get_variable("w", [3, 4, 4], use_resource=True)
        x = tf.random.uniform([3, 2, 4], seed=1)
        loss = tf.reduce_sum(tf.linalg.matmul(x, w))
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss), loss

    graph = graph_from_function(build, name="batch-matmul")
    graph_def = tf.compat.v1.GraphDef.FromString(graph.graph_def)
    batch_matmul = next(node for node in graph_def.node if node.op == "BatchMatMulV2")
    assert "transpose_a" not in batch_matmul.attr
    with tf.Graph().as_default() as g:
        tf.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g) as session:
            session.run(graph.init_op)
            session.run(graph.train_op)
