"""Operation scheduling: an op order per device from a strategy, enforced and kept by the real runtime."""

from __future__ import annotations

import dataclasses

import pytest

from placer.concurrency.op_order import is_compute_bound, op_order_chains, ordered_step, priorities
from placer.errors import OrderError
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


def _seconds(graph):
    return {op.name: (1e-3 if op.type == "MatMul" else 1e-5) for op in graph.step_ops}


def _position(chains, name):
    for chain in chains:
        for k, link in enumerate(chain.links):
            if name in link:
                return k
    raise AssertionError(name)


def test_critical_path_first_runs_the_long_chain_before_the_short_one(long_and_short):
    placement = Placement.single_device(long_and_short, _devices())
    level = priorities(long_and_short, _seconds(long_and_short))
    assert level["mm0"] > level["e0"]  # the matmuls lie on the critical path
    chains = op_order_chains(long_and_short, placement, _seconds(long_and_short), "critical-path", corun=1)
    assert len(chains) == 1 and all(len(link) == 1 for link in chains[0].links)
    assert _position(chains, "mm0") < _position(chains, "e0")
    assert op_order_chains(long_and_short, placement, _seconds(long_and_short), "default") == []


def test_complementary_links_pair_a_compute_bound_op_with_a_memory_bound_one(long_and_short):
    assert is_compute_bound(long_and_short, "mm0") and not is_compute_bound(long_and_short, "e0")
    placement = Placement.single_device(long_and_short, _devices())
    chains = op_order_chains(long_and_short, placement, _seconds(long_and_short), "complementary", corun=2)
    [link] = [link for link in chains[0].links if "mm0" in link]
    assert len(link) == 2 and not all(is_compute_bound(long_and_short, op) for op in link)


def test_bad_strategies_are_refused(long_and_short):
    placement = Placement.single_device(long_and_short, _devices())
    with pytest.raises(OrderError, match="unknown op-order strategy 'fastest'"):
        op_order_chains(long_and_short, placement, {}, "fastest")
    with pytest.raises(OrderError, match="at least 1"):
        op_order_chains(long_and_short, placement, {}, "critical-path", corun=0)


def test_the_traced_step_keeps_the_enforced_order(long_and_short):
    from placer.graph.order import order_violations, traced_links
    from placer.measure import MeasureConfig, Measurer, parse_target

    with Measurer(parse_target("inprocess:1,intra=1,inter=2")) as measurer:
        devices = measurer.devices
        placement = Placement.single_device(long_and_short, devices)
        ordered, ordered_placement, chains = ordered_step(long_and_short, placement, devices,
                                                          _seconds(long_and_short), "critical-path", corun=1)
        config = dataclasses.replace(MeasureConfig(warmup_steps=1, timed_steps=2), profile_steps=1)
        measurement = measurer.measure(ordered.graph, ordered_placement, config)
    assert measurement.ok, measurement.describe()
    traced, links = traced_links(measurement.chrome_trace, chains)
    assert traced >= 5 and links == sum(len(c.links) for c in chains)
    assert order_violations(measurement.chrome_trace, chains) == ()


def _devices():
    from placer.devices import local_devices

    return local_devices(1)
