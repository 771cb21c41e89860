"""The control edges grappler keeps: what the simulator counts as ordering, and what TensorFlow sends."""

import tensorflow as tf

from placer.graph import graph_from_function
from placer.graph.control import kept_control_inputs


def test_control_edges_implied_by_a_longer_path_or_repeating_a_data_input_are_dropped():
    def build():
        a = tf.sqrt(tf.random.uniform([4], seed=1), name="a")
        b = tf.square(a, name="b")
        other = tf.sqrt(tf.random.uniform([4], seed=2), name="other")
        with tf.control_dependencies([a, other, b]):  # a -> c is implied by a -> b -> c; b repeats a data input
            c = tf.square(b, name="c")
        c.op._add_control_input(b.op)  # tf.control_dependencies leaves out inputs the op already reads
        return tf.group(c, name="train_op")

    graph = graph_from_function(build, name="redundant-controls")
    assert set(graph.op("c").control_inputs) >= {"a", "other", "b"}
    assert kept_control_inputs(graph)["c"] == ("other",)


def test_a_control_edge_with_no_other_path_is_kept_in_order():
    def build():
        first = tf.sqrt(tf.random.uniform([4], seed=1), name="first")
        second = tf.sqrt(tf.random.uniform([4], seed=2), name="second")
        seed = tf.random.uniform([4], seed=3)
        with tf.control_dependencies([second, first]):
            last = tf.sqrt(seed, name="last")
        return tf.group(last, name="train_op")

    graph = graph_from_function(build, name="needed-controls")
    assert kept_control_inputs(graph)["last"] == tuple(graph.op("last").control_inputs)
