import os
import signal
import threading
import time

import pytest
import tensorflow as tf

from placer.graph import graph_from_function
from placer.measure import MeasureConfig, Measurer
from placer.measure.runner import run_placed_step
from placer.placement import Placement

QUICK = MeasureConfig(warmup_steps=1, timed_steps=3, step_timeout=20)


@pytest.fixture(scope="module")
def measurer():
    with Measurer("inprocess:2", QUICK) as m:
        yield m


def _oom_graph():
    def build():
        w = tf.compat.v1.get_variable("w", [1], use_resource=True)
        huge = tf.random.uniform([2**40], name="four_terabytes")  # more than any machine's memory
        loss = tf.reduce_sum(huge) * w[0]  # the gradient needs `huge`, so every step computes it
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss), loss

    return graph_from_function(build, name="oom")


def _hanging_graph():
    def build():
        queue = tf.queue.FIFOQueue(1, tf.float32, shapes=[[]])
        w = tf.compat.v1.get_variable("w", [], use_resource=True)
        loss = queue.dequeue() * w  # nothing is ever enqueued: the step waits forever
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss), loss

    return graph_from_function(build, name="hang")


def test_measurement_returns_timed_samples_and_checks_the_placement(measurer, mlp):
    result = measurer.measure(mlp, Placement.round_robin(mlp, measurer.devices))
    assert result.ok, result.describe()
    assert len(result.samples) == QUICK.timed_steps and all(s > 0 for s in result.samples)
    assert result.median == sorted(result.samples)[1]
    assert result.ops_checked > 20
    # The only deviation allowed: grappler fusing an op into its producer's kernel (e.g. MatMul+BiasAdd)
    # on the producer's device, which the result names.
    assert all(m.ran_as for m in result.moved_ops), result.moved_ops
    assert set(result.overhead) == {"graph_rewrite", "session", "init", "first_step"}


def test_op_moved_by_soft_placement_is_reported(mlp):
    """An op TensorFlow cannot put where asked (here: a device that does not exist) is moved, and reported."""
    op_devices = {op.name: "/job:localhost/replica:0/task:0/device:CPU:0" for op in mlp.ops}
    moved_group = mlp.group("dense/kernel")
    for name in moved_group.ops:
        op_devices[name] = "/job:localhost/replica:0/task:0/device:CPU:7"
    graph_def = tf.compat.v1.GraphDef.FromString(mlp.graph_def)
    result = run_placed_step(graph_def, mlp.train_op, mlp.init_op, op_devices, "", QUICK)
    assert result.ok
    moved = {m.op for m in result.moved_ops}
    assert "dense/kernel" in moved or moved & set(moved_group.ops)
    assert all(m.requested.endswith("CPU:7") and m.actual.endswith("CPU:0") for m in result.moved_ops)
    assert "TensorFlow moved" in result.describe()


def test_out_of_memory_is_a_failed_result_and_measuring_goes_on(measurer, mlp):
    graph = _oom_graph()
    result = measurer.measure(graph, Placement.single_device(graph, measurer.devices))
    assert not result.ok and result.failure.kind == "oom", result.describe()
    assert result.median == float("inf")
    assert measurer.measure(mlp, Placement.single_device(mlp, measurer.devices)).ok


def test_hung_step_fails_with_timeout_and_measuring_goes_on(measurer, mlp):
    graph = _hanging_graph()
    started = time.monotonic()
    config = MeasureConfig(warmup_steps=1, timed_steps=1, step_timeout=2)
    result = measurer.measure(graph, Placement.single_device(graph, measurer.devices), config)
    assert not result.ok and result.failure.kind == "timeout", result.describe()
    assert time.monotonic() - started < 30
    assert measurer.measure(mlp, Placement.single_device(mlp, measurer.devices)).ok


def test_killed_worker_is_a_crash_result_and_a_new_worker_takes_over(mlp):
    graph = _hanging_graph()
    with Measurer("inprocess:1", MeasureConfig(warmup_steps=1, timed_steps=1, step_timeout=60)) as measurer:
        placement = Placement.single_device(graph, measurer.devices)
        pid = measurer.worker_pid
        threading.Timer(2.0, os.kill, (pid, signal.SIGKILL)).start()
        result = measurer.measure(graph, placement)
        assert not result.ok and result.failure.kind == "crash", result.describe()
        assert measurer.restarts == 1
        again = measurer.measure(mlp, Placement.single_device(mlp, measurer.devices))
        assert again.ok and measurer.worker_pid != pid


def test_worker_that_never_answers_is_killed_at_the_backstop(mlp):
    """If even TensorFlow's own step deadline fails to fire, the caller's backstop kills the worker."""
    graph = _hanging_graph()
    with Measurer("inprocess:1") as measurer:
        placement = Placement.single_device(graph, measurer.devices)
        backstop = MeasureConfig(warmup_steps=1, timed_steps=1, step_timeout=300, answer_timeout=3.0)
        started = time.monotonic()
        result = measurer.measure(graph, placement, backstop)
        assert result.failure.kind == "timeout" and time.monotonic() - started < 20
        assert measurer.restarts == 1
        assert measurer.measure(mlp, Placement.single_device(mlp, measurer.devices)).ok
