"""Operation scheduling: an op order per device from a strategy, enforced and kept by the real runtime."""

from __future__ import annotations

import dataclasses

import pytest

from placer.concurrency.op_order import is_compute_bound, order_ops, ordered_step, priorities
from placer.errors import OrderError
from placer.graph.order import CONSTANT, INITIALIZER_RUNS_IT
from placer.placement import Placement


@pytest.fixture(scope="module")
def long_and_short():
    """A long chain of matmuls (compute-bound) and a short chain of elementwise ops (memory-bound), both
    feeding a loss that writes a variable (so grappler keeps them)."""
    import tensorflow as tf

    from placer.graph.build import graph_from_function

    def build():
        v = tf.compat.v1.get_variable("v", [64, 64], initializer=tf.compat.v1.ones_initializer(), use_resource=True)
        x = tf.random.uniform([64, 64], name="x")
        for i in range(3):
            x = tf.matmul(x, v, name=f"mm{i}")
        y = tf.random.uniform([64, 64], name="y")
        y = tf.add(y, 1.0, name="e0")
        loss = tf.reduce_sum(x + y, name="loss")
        return tf.compat.v1.train.GradientDescentOptimizer(1e-6).minimize(loss, name="train_op"), loss

    return graph_from_function(build, name="long-and-short")


@pytest.fixture(scope="module")
def late_counter():
    """An embedding table whose initializer is slow, and a step counter: the counter's handle feeds only its
    increment at the end, so critical-path orders it after the table's update, yet the initializer needs
    that handle (as in NMT, whose ordered steps failed at initialization)."""
    import tensorflow as tf

    from placer.graph.build import graph_from_function

    def build():
        slow = tf.linalg.matmul(tf.random.uniform([1000, 1000]), tf.random.uniform([1000, 1000]))[:50, :8]
        table = tf.compat.v1.get_variable("table", initializer=slow, use_resource=True)
        step = tf.compat.v1.train.get_or_create_global_step()
        ids = tf.random.uniform([4], 0, 50, dtype=tf.int32, name="ids")
        loss = tf.reduce_sum(tf.tanh(tf.nn.embedding_lookup(table, ids)), name="loss")
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step, name="train_op"), loss

    return graph_from_function(build, name="late-counter")


def _seconds(graph):
    return {op.name: (1e-3 if op.type == "MatMul" else 1e-5) for op in graph.step_ops}


def _position(chains, name):
    for chain in chains:
        for k, link in enumerate(chain.links):
            if name in link:
                return k
    raise AssertionError(name)


def test_critical_path_first_runs_the_long_chain_before_the_short_one(long_and_short):
    placement = Placement.on_device(long_and_short, _devices(), 0)
    level = priorities(long_and_short, _seconds(long_and_short))
    assert level["mm0"] > level["e0"]  # the matmuls lie on the critical path
    chains = order_ops(long_and_short, placement, _seconds(long_and_short), "critical-path", corun=1).chains
    assert len(chains) == 1 and all(len(link) == 1 for link in chains[0].links)
    assert _position(chains, "mm0") < _position(chains, "e0")
    assert order_ops(long_and_short, placement, _seconds(long_and_short), "default").chains == ()


def test_complementary_links_pair_a_compute_bound_op_with_a_memory_bound_one(long_and_short):
    assert is_compute_bound(long_and_short, "mm0") and not is_compute_bound(long_and_short, "e0")
    placement = Placement.on_device(long_and_short, _devices(), 0)
    chains = order_ops(long_and_short, placement, _seconds(long_and_short), "complementary", corun=2).chains
    [link] = [link for link in chains[0].links if "mm0" in link]
    assert len(link) == 2 and not all(is_compute_bound(long_and_short, op) for op in link)


def test_bad_strategies_are_refused(long_and_short):
    placement = Placement.on_device(long_and_short, _devices(), 0)
    with pytest.raises(OrderError, match="unknown op-order strategy 'fastest'"):
        order_ops(long_and_short, placement, {}, "fastest")
    with pytest.raises(OrderError, match="at least 1"):
        order_ops(long_and_short, placement, {}, "critical-path", corun=0)


def test_the_traced_step_keeps_the_enforced_order(long_and_short):
    from placer.graph.order import order_violations, traced_links

    step, measurement = _measure_ordered(long_and_short, "critical-path", corun=1)
    assert measurement.ok, measurement.failure
    chains = step.order.chains
    traced, links = traced_links(measurement.chrome_trace, chains)
    assert traced >= 5 and links == step.order.links
    assert order_violations(measurement.chrome_trace, chains) == ()


def test_ops_the_initializer_runs_are_left_free_so_the_ordered_step_initializes(late_counter):
    placement = Placement.on_device(late_counter, _devices(), 0)
    order = order_ops(late_counter, placement, _seconds(late_counter), "critical-path", corun=1)
    assert order.left_free["global_step"] == order.left_free["table"] == INITIALIZER_RUNS_IT
    assert not {"global_step", "table"} & {op for chain in order.chains for link in chain.links for op in link}
    step, measurement = _measure_ordered(late_counter, "critical-path", corun=1)
    assert measurement.ok, measurement.failure


def test_constants_are_left_free_because_grappler_drops_their_control_edges(long_and_short):
    placement = Placement.on_device(long_and_short, _devices(), 0)
    order = order_ops(long_and_short, placement, _seconds(long_and_short), "critical-path")
    constants = [op.name for op in long_and_short.step_ops if op.type == "Const"]
    assert constants and all(order.left_free[name] == CONSTANT for name in constants)
    assert order.left_free_counts()[CONSTANT] >= len(constants) and CONSTANT in order.describe()


def test_a_time_threshold_orders_only_the_long_ops_and_the_trace_keeps_their_order(long_and_short):
    from placer.graph.order import order_violations, traced_links

    seconds = _seconds(long_and_short)
    placement = Placement.on_device(long_and_short, _devices(), 0)
    everything = order_ops(long_and_short, placement, seconds, "critical-path")
    order = order_ops(long_and_short, placement, seconds, "critical-path", min_op_seconds=1e-4)
    ordered = {op for chain in order.chains for link in chain.links for op in link}
    matmuls = {op.name for op in long_and_short.step_ops if op.type == "MatMul"}
    assert ordered == matmuls  # the 1 ms ops; the 10 us ones run when ready
    assert order.links < everything.links / 2
    short = {op.name for op in long_and_short.step_ops} - set(everything.left_free) - matmuls
    assert {name for name, why in order.left_free.items() if why == "shorter than 100 us"} == short
    step, measurement = _measure_ordered(long_and_short, "critical-path", min_op_seconds=1e-4)
    assert measurement.ok, measurement.failure
    assert traced_links(measurement.chrome_trace, step.order.chains) == (order.links, order.links)
    assert order_violations(measurement.chrome_trace, step.order.chains) == ()


def test_the_longest_ops_per_device_are_the_only_ones_ordered(long_and_short):
    seconds = {**_seconds(long_and_short), "mm2": 5e-3, "mm0": 4e-3}
    placement = Placement.on_device(long_and_short, _devices(), 0)
    order = order_ops(long_and_short, placement, seconds, "critical-path", corun=1, longest=2)
    assert [set(link) for chain in order.chains for link in chain.links] == [{"mm0"}, {"mm2"}]
    assert order.left_free["mm1"] == "not among its device's 2 longest"


def test_bad_thresholds_are_refused(long_and_short):
    placement = Placement.on_device(long_and_short, _devices(), 0)
    with pytest.raises(OrderError, match="min_op_seconds must be 0 or more"):
        order_ops(long_and_short, placement, {}, "critical-path", min_op_seconds=-1e-6)
    with pytest.raises(OrderError, match="longest must be a whole number of ops per device, at least 1"):
        order_ops(long_and_short, placement, {}, "critical-path", longest=0)


def _measure_ordered(graph, strategy, **options):
    from placer.measure import MeasureConfig, Measurer, parse_target

    with Measurer(parse_target("inprocess:1,intra=1,inter=2")) as measurer:
        devices = measurer.devices
        placement = Placement.on_device(graph, devices, 0)
        step = ordered_step(graph, placement, devices, _seconds(graph), strategy, **options)
        config = dataclasses.replace(MeasureConfig(warmup_steps=1, timed_steps=2), profile_steps=1)
        return step, measurer.measure(step.graph, step.placement, config)


def _devices():
    from placer.devices import local_devices

    return local_devices(1)
