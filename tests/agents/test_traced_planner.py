"""The hierarchical planner traced: the same samples and the same update as run op by op, traced once per run."""

from dataclasses import replace

import numpy as np
import pytest
import tensorflow as tf

from agents.hierarchical import REFERENCE, HierarchicalPlanner
from envs.placement import PlacementEnv

# Every term of the loss on: entropy bonus, self-imitation, standardized advantages, a grouper with its own Adam.
CONFIG = replace(REFERENCE, num_groups=4, hidden_size=32, grouping_hidden_size=16, learning_rate=0.05,
                 grouper_learning_rate=0.01, entropy_weight=0.1, imitation_weight=0.5, normalize_advantages=True,
                 seed=3)


@pytest.fixture(scope="module")
def env():
    environment = PlacementEnv(model="two-tower", size="tiny")
    environment.reset(seed=0)
    return environment


@pytest.fixture
def run_eagerly():
    tf.config.run_functions_eagerly(True)
    yield
    tf.config.run_functions_eagerly(False)


def _draws(planner: HierarchicalPlanner) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(s.groups, s.group_devices) for count in (1, 5) for s in planner.sample(count)] + \
        [(s.groups, s.group_devices) for s in planner.sample(2, greedy=True)]


def test_traced_sampling_draws_what_sampling_op_by_op_draws_for_the_same_seed(env, run_eagerly):
    eager = _draws(HierarchicalPlanner(env.graph, env.device_mask, CONFIG))
    tf.config.run_functions_eagerly(False)
    traced = _draws(HierarchicalPlanner(env.graph, env.device_mask, CONFIG))
    assert len({tuple(devices) for _, devices in traced}) > 1  # the draws differ from one another
    for (eager_groups, eager_devices), (groups, devices) in zip(eager, traced):
        assert np.array_equal(eager_groups, groups) and np.array_equal(eager_devices, devices)


def _weights_after_updates(env, compiled: bool, config=CONFIG) -> tuple[list[np.ndarray], list[dict]]:
    planner = HierarchicalPlanner(env.graph, env.device_mask, config, compiled_update=compiled)
    metrics = [planner.learn(planner.propose(count), rewards)
               for count, rewards in ((3, [-1.0, -2.0, -3.0]), (2, [-0.5, -4.0]), (4, [-2.0, -1.0, -1.5, -3.0]))]
    return [v.numpy() for v in planner.policy.trainable_variables], metrics


@pytest.mark.parametrize("attention", ["additive", pytest.param("dot", marks=pytest.mark.slow)])  # 10 s each
def test_the_traced_update_steps_the_weights_as_the_taped_update_does(env, attention):
    config = replace(CONFIG, attention=attention)
    start = [v.numpy() for v in HierarchicalPlanner(env.graph, env.device_mask, config).policy.trainable_variables]
    traced_weights, traced_metrics = _weights_after_updates(env, compiled=True, config=config)
    taped_weights, taped_metrics = _weights_after_updates(env, compiled=False, config=config)
    assert len(start) == len(traced_weights)
    for before, traced, taped in zip(start, traced_weights, taped_weights):
        assert not np.array_equal(before, traced)  # every weight learns: none is left out of the loss
        np.testing.assert_allclose(traced, taped, atol=1e-5)
    for traced, taped in zip(traced_metrics, taped_metrics):
        assert traced.keys() == taped.keys()
        for key in traced:
            assert traced[key] == pytest.approx(taped[key], rel=1e-4, abs=1e-4), key


def test_an_unknown_attention_is_refused():
    with pytest.raises(ValueError, match="unknown attention 'luong'"):
        replace(CONFIG, attention="luong")


def test_updates_and_samples_are_traced_once_whatever_the_number_of_samples(env):
    planner = HierarchicalPlanner(env.graph, env.device_mask, CONFIG)
    for count in (2, 3, 5, 4):
        planner.learn(planner.propose(count), list(-np.arange(1.0, count + 1)))
    planner.best_guess()
    planner.score(planner.sample(3))
    assert planner._gradient_step.experimental_get_tracing_count() == 1
    assert planner.policy._sampled_placements.experimental_get_tracing_count() == 1
    assert planner.policy._greedy_placements.experimental_get_tracing_count() == 1
    assert planner.policy._traced_log_probs.experimental_get_tracing_count() == 1
