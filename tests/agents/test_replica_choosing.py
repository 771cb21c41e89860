"""A placement agent with the data-parallel degree in its action: the degree it learns follows the rewards, and the
one training loop keeps and writes its plans (degree and placement) as it does placements."""

import json

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the environments)
from agents.factory import make_agent
from agents.replicated import ReplicaChoosingAgent


def _random_placer(units: int = 5, devices: int = 2):
    return make_agent("random", None, np.ones((units, devices), np.float32), seed=0)


def test_the_degree_the_agent_proposes_follows_the_rewards():
    agent = ReplicaChoosingAgent(_random_placer(), (1, 2, 4), seed=0)
    assert np.allclose(agent.probabilities(), 1 / 3)  # every degree alike before any reward
    for _ in range(40):
        actions = agent.propose(8)
        assert all(a.shape == (6,) and 0 <= a[0] < 3 for a in actions)
        # degree 4 (index 2) is twice as fast as the others
        agent.learn(actions, [-(1.0 if a[0] == 2 else 2.0) for a in actions])
    assert agent.probabilities()[2] > 0.9
    assert agent.best_guess()[0] == 2


def test_the_degree_s_state_resumes_with_the_placer_s():
    agent = ReplicaChoosingAgent(_random_placer(), (1, 2), seed=3)
    state = json.loads(json.dumps(agent.numpy_state()))  # the trainer state is JSON
    first = [a[0] for a in agent.propose(16)]
    again = ReplicaChoosingAgent(_random_placer(), (1, 2), seed=99)
    again.load_numpy_state(state)
    assert [a[0] for a in again.propose(16)] == first


def test_the_training_loop_writes_the_best_plan_with_its_degree(tmp_path):
    from agents.loop import TrainingConfig, train
    from agents.run_files import BEST_PLACEMENT
    from placer.placement import read_placement_file

    env = gym.make("placer/ReplicatedPlacement-v0", model="two-tower", size="tiny", devices="modeled:2xH100").unwrapped
    try:
        env.reset(seed=0)
        agent = ReplicaChoosingAgent(make_agent("random", env.graph, env.device_mask, seed=0), env.replica_degrees)
        state = train(agent, env, tmp_path, TrainingConfig(updates=2, samples_per_update=4, progress=False))
        degree, _ = env.split(state.best_assignment)
        written = read_placement_file(tmp_path / BEST_PLACEMENT)
        assert written.metadata["replicas"] == degree
        assert written.metadata["step_time"] == pytest.approx(state.best_step_time)
        assert len(written.groups) == env.num_units
    finally:
        env.close()
