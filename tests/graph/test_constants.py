"""Which tensors TensorFlow copies to each CPU that reads them instead of sending them: small constants,
including the shape arithmetic grappler folds into constants."""

import tensorflow as tf

from placer.graph import graph_from_function
from placer.graph.constants import folded_ops, replicated_tensors
from placer.graph.control import kept_control_inputs


def build():
    x = tf.random.uniform([8, 4], seed=1, name="x")
    scale = tf.constant([2.0, 3.0, 4.0, 5.0], name="scale")  # 4 elements: replicated
    table = tf.constant([[1.0] * 4] * 8, name="table")  # 32 elements: too large, sent
    shape = tf.shape(x, name="shape")  # x's shape is static: folded into a constant
    flat = tf.reshape(x * scale + table, tf.reduce_prod(shape, keepdims=True, name="size"), name="flat")
    noise = tf.random.uniform([4], seed=2, name="noise")  # stateful: never folded
    return tf.add(tf.reduce_sum(flat), tf.reduce_sum(noise * scale), name="train_op")


def test_constants_and_shape_arithmetic_on_static_shapes_are_folded_but_stateful_ops_are_not():
    graph = graph_from_function(build, name="constants")
    folded = folded_ops(graph)
    assert {"scale", "table", "shape", "size"} <= folded
    assert not {"x/RandomUniform", "noise/RandomUniform", "flat", "train_op"} & folded


def test_only_small_folded_tensors_without_control_outputs_are_replicated():
    graph = graph_from_function(build, name="constants")
    replicated = replicated_tensors(graph, kept_control_inputs(graph))
    assert {"scale:0", "shape:0", "size:0"} <= replicated
    assert "table:0" not in replicated
    assert "x/RandomUniform:0" not in replicated
    ordering = replicated_tensors(graph, {"train_op": ("scale",)})
    assert "scale:0" not in ordering
