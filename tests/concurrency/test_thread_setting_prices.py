"""Thread settings priced by the simulator from op costs profiled at each width, on a graph whose answer is
known: two independent ops, then a cheap join."""

import json

import pytest
import tensorflow as tf

from placer.concurrency.choose import choose_setting, predicted_step_time, price_settings
from placer.concurrency.settings import ThreadSetting, global_settings, tuning_candidates
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


@pytest.fixture(scope="module")
def chain():
    """Matmul `b` reads matmul `a`'s output: they never run at once."""
    def build():
        x = tf.random.uniform([64, 64], seed=1)
        out = tf.matmul(tf.matmul(x, x, name="a"), x, name="b")
        total = tf.compat.v1.get_variable("total", [], use_resource=True)
        return tf.group(total.assign_add(tf.reduce_sum(out)), name="train_op")

    return graph_from_function(build, name="chain")


def op_width_costs(graph, milliseconds):
    """Each op of `milliseconds` (op -> {width: ms}) takes those; every other op takes no time."""
    widths = {width for by_width in milliseconds.values() for width in by_width}
    return WidthCosts(graph.name, graph.fingerprint, {
        width: CostTable(graph.fingerprint, "CPU", {op: by_width[width] * MS for op, by_width in milliseconds.items()},
                         "hand-made")
        for width in widths})


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


def test_two_co_running_ops_share_the_intra_op_pool_and_the_survivor_speeds_up_when_the_other_ends(pair):
    # a: 10 ms at one thread, 6 at two; b: 4 and 3. On 2 cores, intra 2 / inter 2, both start at once and get
    # one thread each; b ends at 4 ms with 4/10 of a done; the rest of a runs alone on both threads: 0.6 x 6 ms.
    costs = op_width_costs(pair, {"a": {1: 10, 2: 6}, "b": {1: 4, 2: 3}})
    assert predicted_step_time(pair, costs, ThreadSetting(2, 2), cores=2) == pytest.approx(7.6 * MS)


def test_the_co_running_slowdown_slows_ops_only_while_they_run_together(pair):
    costs = op_width_costs(pair, {"a": {1: 10, 2: 6}, "b": {1: 4, 2: 3}})
    # 1.1x while both run: b ends at 4.4 ms with 4.4 / 11 of a done; the rest alone at full speed.
    assert predicted_step_time(pair, costs, ThreadSetting(2, 2), cores=2, co_running_slowdown=1.1) == pytest.approx(
        (4.4 + 0.6 * 6) * MS)
    # One inter-op thread: nothing co-runs, nothing is slowed.
    assert predicted_step_time(pair, costs, ThreadSetting(2, 1), cores=2, co_running_slowdown=1.1) == pytest.approx(
        9 * MS)


def test_one_intra_op_thread_runs_each_op_on_its_own_thread_so_the_survivor_does_not_speed_up(pair):
    costs = op_width_costs(pair, {"a": {1: 10, 2: 6}, "b": {1: 4, 2: 3}})
    # On 2 cores each has a core of its own: a takes its 10 ms, b's end changes nothing.
    assert predicted_step_time(pair, costs, ThreadSetting(1, 2), cores=2) == pytest.approx(10 * MS)
    # On 1 core they share it: half a core each until b ends at 8 ms (a 4/10 done), then a alone: 0.6 x 10 ms.
    assert predicted_step_time(pair, costs, ThreadSetting(1, 2), cores=1) == pytest.approx(14 * MS)


def test_ops_of_a_chain_never_co_run_so_each_gets_the_whole_pool(chain):
    costs = op_width_costs(chain, {"a": {1: 10, 2: 6}, "b": {1: 4, 2: 3}})
    assert predicted_step_time(chain, costs, ThreadSetting(2, 2), cores=2, co_running_slowdown=1.5) == pytest.approx(
        9 * MS)


def test_the_pick_follows_the_shared_pool(pair):
    # Two inter-op threads on the shared pool: a gets both threads once b is done (7.6 ms), ahead of one op at a
    # time on both threads (9 ms) and of one thread each (10 ms). `placer tune --predict` prices these candidates.
    costs = op_width_costs(pair, {"a": {1: 10, 2: 6}, "b": {1: 4, 2: 3}})
    result = price_settings(pair, tuning_candidates(2), costs, cores=2)
    assert result.settings[result.best].explicit(2) == ThreadSetting(2, 2)
    assert result.medians["intra 1 / inter 2"] == pytest.approx(10 * MS)
    assert result.medians[result.best] == pytest.approx(7.6 * MS)


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


def test_op_costs_per_width_saved_as_data_price_the_same_and_refuse_another_graph(pair, two_tower):
    from placer.concurrency.width_costs import width_costs_from_dict

    costs = op_width_costs(pair, {"a": {1: 10, 2: 6}, "b": {1: 4, 2: 3}})
    again = width_costs_from_dict(json.loads(json.dumps(costs.to_dict())), pair)
    assert again.widths == (1, 2)
    assert (predicted_step_time(pair, again, ThreadSetting(2, 2), cores=2)
            == predicted_step_time(pair, costs, ThreadSetting(2, 2), cores=2))
    with pytest.raises(ProfileError, match="another graph"):
        width_costs_from_dict(costs.to_dict(), two_tower)
    with pytest.raises(ProfileError, match="not op costs per width"):
        width_costs_from_dict({"graph": "pair"})
