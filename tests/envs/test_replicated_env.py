"""The placement environment with data parallelism in its action: Gymnasium's checker, and an action with replicas
priced as the search prices the same plan."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the environments)


@pytest.fixture(scope="module")
def env():
    environment = gym.make("placer/ReplicatedPlacement-v0", model="two-tower", size="tiny",
                           devices="modeled:2xH100").unwrapped
    yield environment
    environment.close()


def test_the_replicated_environment_passes_gymnasiums_checker_without_warnings(env):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env)
    assert env.replica_degrees == (1, 2)


def test_the_observation_says_each_degree_s_slice_and_the_gradients_exchanged(env):
    obs, info = env.reset(seed=0)
    assert list(obs["replica_degrees"]) == [1, 2] and list(obs["replica_batch"]) == [64, 32]  # batch 64
    assert obs["gradient_bytes"][0] == pytest.approx(8 * 2**20)  # 8 weight matrices of 512 x 512 floats
    assert info["replica_degrees"] == (1, 2)


def test_an_action_with_replicas_is_priced_as_the_search_prices_the_same_plan(env):
    from agents.optimize_modeled import replicated_candidates

    env.reset(seed=0)
    gpu = env.devices.names.index(next(d.name for d in env.devices if d.kind == "GPU"))
    every_op_on_a_gpu = np.full(env.num_units, gpu, np.int64)
    _, value, terminated, _, info = env.step(np.concatenate([[1], every_op_on_a_gpu]))
    assert terminated and info["ok"] and info["replicas"] == 2
    searched = replicated_candidates("two-tower", "tiny", "modeled:2xH100", 2, [])
    assert searched[0].name == "data parallel x2"
    assert info["step_time"] == pytest.approx(searched[0].predicted_seconds, rel=1e-9)
    # degree 1 is the plain placement, priced on the whole machine
    _, _, _, _, plain = env.step(np.concatenate([[0], every_op_on_a_gpu]))
    assert plain["replicas"] == 1 and plain["step_time"] == pytest.approx(env.target.evaluate(every_op_on_a_gpu).seconds)


def test_replicas_are_refused_where_the_batch_cannot_be_sliced_or_nothing_is_modeled():
    from placer.errors import ReplicaError

    with pytest.raises(ReplicaError, match="3 replicas do not divide the batch of 64"):
        gym.make("placer/ReplicatedPlacement-v0", model="two-tower", size="tiny", devices="modeled:3xH100",
                 replica_degrees=(1, 3)).unwrapped
    with pytest.raises(ValueError, match="is not a model that can be built at another batch"):
        gym.make("placer/ReplicatedPlacement-v0", model="placer.models.heldout:branchy_0_graph", size="tiny",
                 devices="modeled:2xH100").unwrapped
