"""Thread settings priced by the simulator from op costs profiled at each width, on a graph whose answer is
known: two independent ops, then a cheap join."""

import pytest
import tensorflow as tf

from placer.concurrency.choose import choose_setting, predicted_step_time, price_settings
from placer.concurrency.settings import ThreadSetting, global_settings
from placer.concurrency.width_costs import WidthCosts
from placer.errors import DeviceSpecError, ProfileError
from placer.graph import graph_from_function
from placer.profile import CostTable

MS = 1e-3


@pytest.fixture(scope="module")
def pair():
    """Two matmuls `a` and `b` that do not wait for each other, added by `join`."""
    def build():
        x = tf.random.uniform([64, 64], seed=1)
        joined = tf.add(tf.matmul(x, x, name="a"), tf.matmul(x, x, name="b"), name="join")
        total = tf.compat.v1.get_variable("total", [], use_resource=True)
        return tf.group(total.assign_add(tf.reduce_sum(joined)), name="train_op")

    return graph_from_function(build, name="pair")


def width_costs(graph, milliseconds_at_width):
    """`a` and `b` take the given milliseconds at each width; every other op takes no time."""
    return WidthCosts(graph.name, graph.fingerprint, {
        width: CostTable(graph.fingerprint, "CPU", {"a": ms * MS, "b": ms * MS}, "hand-made")
        for width, ms in milliseconds_at_width.items()})


def test_two_inter_op_threads_run_the_independent_ops_at_once_at_their_one_thread_time(pair):
    costs = width_costs(pair, {1: 10, 2: 6})
    assert predicted_step_time(pair, costs, ThreadSetting(1, 2), cores=2) == pytest.approx(10 * MS)


def test_one_inter_op_thread_runs_them_one_after_the_other_at_the_wide_time(pair):
    costs = width_costs(pair, {1: 10, 2: 6})
    assert predicted_step_time(pair, costs, ThreadSetting(2, 1), cores=2) == pytest.approx(12 * MS)
    assert predicted_step_time(pair, costs, ThreadSetting(1, 1), cores=2) == pytest.approx(20 * MS)


def test_threads_beyond_the_cores_slow_every_co_running_op_by_the_oversubscription(pair):
    costs = width_costs(pair, {1: 10, 2: 6})
    # Two ops of two threads at once on two cores: each takes 6 ms x 4 threads / 2 cores.
    assert predicted_step_time(pair, costs, ThreadSetting(2, 2), cores=2) == pytest.approx(12 * MS)
    # Two ops of one thread at once on one core: each 10 ms x 2, so nothing gained over one at a time.
    assert predicted_step_time(pair, costs, ThreadSetting(1, 2), cores=1) == pytest.approx(20 * MS)


def test_tensorflows_default_pools_are_priced_as_one_thread_per_core_in_each(pair):
    costs = width_costs(pair, {1: 10, 2: 6})
    assert (predicted_step_time(pair, costs, ThreadSetting(), cores=2)
            == predicted_step_time(pair, costs, ThreadSetting(2, 2), cores=2))


def test_the_pick_follows_the_op_costs_so_graphs_whose_best_settings_differ_get_different_picks(pair):
    # Ops that barely speed up with a second thread: run both at once, one thread each.
    assert choose_setting(pair, width_costs(pair, {1: 10, 2: 9}), cores=2).setting == ThreadSetting(1, 2)
    # Ops that more than halve with a second thread: one at a time, two threads each.
    assert choose_setting(pair, width_costs(pair, {1: 10, 2: 4}), cores=2).setting == ThreadSetting(2, 1)


def test_choose_setting_prices_the_settings_it_is_given(pair):
    settings = [ThreadSetting(), ThreadSetting(1, 1)]
    choice = choose_setting(pair, width_costs(pair, {1: 10, 2: 6}), cores=2, settings=settings)
    assert set(choice.predicted) == set(settings)
    assert choice.setting == ThreadSetting()
    assert set(choose_setting(pair, width_costs(pair, {1: 10, 2: 6}), cores=2).predicted) == set(global_settings(2))


def test_a_setting_wider_than_the_devices_cores_is_refused_naming_the_cores(pair):
    costs = width_costs(pair, {1: 10, 2: 6})
    with pytest.raises(DeviceSpecError, match=r"intra 3 / inter 1 asks for 3 threads per op on a device of 2 cores"):
        predicted_step_time(pair, costs, ThreadSetting(3, 1), cores=2)


def test_a_width_the_op_costs_were_not_profiled_at_is_refused_naming_what_to_profile(pair):
    only_one_thread = width_costs(pair, {1: 10})
    with pytest.raises(ProfileError, match=r"cannot price intra 2 / inter 1 on 2 cores: .*profiled at 1 intra-op "
                                           r"threads, not at 2: .*profile_widths\(graph, widths=\(1, 2\)\)"):
        predicted_step_time(pair, only_one_thread, ThreadSetting(2, 1), cores=2)


def test_op_costs_profiled_for_another_graph_are_refused(pair, two_tower):
    with pytest.raises(ProfileError, match="another graph"):
        predicted_step_time(two_tower, width_costs(pair, {1: 10}), ThreadSetting(1, 1), cores=1)


def test_priced_settings_answer_as_tune_does_with_a_simulated_step_time_per_setting(pair):
    settings = {"recommended": ThreadSetting(2, 1), "intra 1 / inter 2": ThreadSetting(1, 2)}
    result = price_settings(pair, settings, width_costs(pair, {1: 10, 2: 6}), cores=2)
    assert result.predicted and result.best == "intra 1 / inter 2"
    assert result.medians == pytest.approx({"recommended": 12 * MS, "intra 1 / inter 2": 10 * MS})
    assert {name: (t.backend, t.seconds) for name, t in result.step_times.items()} == {
        name: ("simulated", seconds) for name, seconds in result.medians.items()}
    assert "predicted step time per thread setting" in result.describe()
