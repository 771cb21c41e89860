"""Ops running at once on one CPU device share its intra-op pool and cores: the threads each gets, its time at a
share between two widths, and the event loop re-planning running ops when one starts or ends."""

import numpy as np
import pytest
import tensorflow as tf

from placer.devices import machine_from_dict
from placer.graph import graph_from_function
from placer.placement import Placement
from placer.simulate import Simulator, SimulatorConfig
from placer.simulate.thread_pools import seconds_at_threads, shared_pool_costs, threads_per_running_op

MS = 1e-3


@pytest.mark.parametrize("cores, intra, running, threads", [
    (2, 2, 1, 2.0),   # alone: the whole pool
    (2, 2, 2, 1.0),   # two share it
    (2, 1, 2, 1.0),   # one intra-op thread: each op on its own inter-op thread, a core each
    (1, 1, 2, 0.5),   # ... two of them on one core
    (4, 2, 2, 1.0),   # the pool, not the cores, is the limit
    (2, 2, 3, 2 / 3),
    (None, 2, 2, 1.0),  # cores not known: the pool still is shared
    (None, 1, 3, 1.0),
])
def test_running_ops_share_the_intra_op_pool_capped_by_the_cores(cores, intra, running, threads):
    assert threads_per_running_op(cores, intra, running) == pytest.approx(threads)


def test_a_share_between_two_widths_runs_at_the_rate_between_theirs():
    at_width = {1: np.array([10.0, 0.0]), 2: np.array([5.0, 0.0])}.__getitem__
    # 1.5 threads: half the time at 1/10 per ms, half at 1/5: 0.15 per ms. Half a thread: half of 1/10.
    assert seconds_at_threads(at_width, 1.5) == pytest.approx([1 / 0.15, 0.0])
    assert seconds_at_threads(at_width, 0.5) == pytest.approx([20.0, 0.0])
    assert seconds_at_threads(at_width, 2.0) == pytest.approx([5.0, 0.0])


def test_sharing_the_pool_never_makes_an_op_faster_than_alone_on_it():
    # The first op splits (10 ms on one thread, 5 on two); the second is too small to split and pays the pool's
    # hand-offs (1 ms on one thread, 1.5 on two). Two running on a 2-thread pool over 2 cores get a thread each.
    at_width = {1: np.array([10.0, 1.0]), 2: np.array([5.0, 1.5])}.__getitem__
    costs = shared_pool_costs(at_width, 2, 2, 2)
    assert costs[:, 0] == pytest.approx([5.0, 1.5])  # alone: the whole pool
    assert costs[:, 1] == pytest.approx([10.0, 1.5])  # beside another: not the one-thread 1 ms
    one_thread = shared_pool_costs(at_width, 2, 1, 2)  # no pool: each op on its own inter-op thread
    assert one_thread[:, 1] == pytest.approx([10.0, 1.0])


def test_a_co_running_slowdown_below_one_is_refused():
    with pytest.raises(ValueError, match="below 1"):
        shared_pool_costs(lambda width: np.ones(1), 2, 2, 2, co_running_slowdown=0.9)


class WidthTimes:
    """An op time model: op name -> {width: ms}; other ops take no time. Records the widths asked for."""

    def __init__(self, milliseconds):
        self.milliseconds = milliseconds
        self.asked = set()

    def predict(self, graph, op, threads):
        self.asked.add(threads)
        return self.milliseconds.get(op.name, {}).get(threads, 0.0) * MS


@pytest.fixture(scope="module")
def three_branches():
    """Matmuls `a`, `b` and `c` that do not wait for each other, added by `join`."""
    def build():
        x = tf.random.uniform([64, 64], seed=1)
        joined = tf.add_n([tf.matmul(x, x, name=name) for name in "abc"], name="join")
        total = tf.compat.v1.get_variable("total", [], use_resource=True)
        return tf.group(total.assign_add(tf.reduce_sum(joined)), name="train_op")

    return graph_from_function(build, name="three-branches")


def one_cpu(cores, intra, inter):
    return machine_from_dict({"devices": [{"name": "CPU:0", "cores": cores, "intra_op_threads": intra,
                                           "inter_op_threads": inter}]})


def test_three_ops_on_a_pool_of_two_run_at_two_thirds_of_a_thread_until_the_shortest_ends(three_branches):
    times = WidthTimes({"a": {1: 3, 2: 2}, "b": {1: 6, 2: 4}, "c": {1: 6, 2: 4}})
    devices = one_cpu(2, 2, 3)
    simulator = Simulator(three_branches, devices, times)
    result = simulator.simulate(Placement.on_device(three_branches, devices, 0), timeline=True)
    # Two thirds of a thread each: a takes 4.5 ms, having let b and c do half their work; then one thread each:
    # the other half of 6 ms.
    ends = {op.name: op.end for op in result.ops if op.name in "abc"}
    assert ends == pytest.approx({"a": 4.5 * MS, "b": 7.5 * MS, "c": 7.5 * MS})
    assert result.step_time == pytest.approx(7.5 * MS)
    assert result.device_busy[devices.names[0]] == pytest.approx((4.5 + 7.5 + 7.5) * MS)
    assert times.asked == {1, 2}


def test_shared_devices_give_the_same_answer_on_every_call_and_with_memory_tracked(three_branches):
    times = WidthTimes({"a": {1: 3, 2: 2}, "b": {1: 6, 2: 4}, "c": {1: 6, 2: 4}})
    devices = one_cpu(2, 2, 2)
    simulator = Simulator(three_branches, devices, times, SimulatorConfig(co_running_slowdown=1.2))
    placement = Placement.on_device(three_branches, devices, 0)
    first = simulator.simulate(placement, timeline=True)
    assert simulator.simulate(placement).step_time == first.step_time
    # a and b at one thread each, 1.2x: a ends at 3.6 ms (b 0.5 done); b and c then share: b ends at 7.2 ms
    # (c 0.5 done); c alone at two threads: 2 ms more.
    assert first.step_time == pytest.approx(9.2 * MS)
