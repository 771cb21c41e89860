"""The Gymnasium environments: spaces, rewards, failures, seeding, registration, vectorization."""

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the environments)
from envs.placement import PlacementEnv
from envs.reward import RewardConfig, reward
from envs.sequential import SequentialPlacementEnv
from placer.devices import machine_from_dict
from placer.graph import graph_from_function


@pytest.fixture(scope="module")
def env():
    environment = PlacementEnv(model="two-tower", size="tiny", render_mode="ansi")
    yield environment
    environment.close()


@pytest.mark.parametrize("env_id", ["placer/Placement-v0", "placer/SequentialPlacement-v0"])
def test_simulated_environments_pass_gymnasiums_checker_without_warnings(env_id):
    environment = gym.make(env_id, model="nmt-2", size="tiny").unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(environment)


def test_one_step_places_every_unit_and_rewards_minus_sqrt_step_time(env):
    obs, info = env.reset(seed=0)
    assert obs["unit_mask"].sum() == env.num_units == len(env.graph.groups)
    assert env.action_space.shape == (env.num_units,)
    _, value, terminated, truncated, info = env.step(np.zeros(env.num_units, np.int64))
    assert terminated and not truncated and info["ok"] and info["backend"] == "simulated"
    assert value == pytest.approx(-math.sqrt(info["step_time"]))
    assert set(info["peak_memory"]) == set(env.devices.names)
    assert "units" in env.render() and "step time" in env.render()


def test_observation_describes_ops_units_edges_and_devices(env):
    obs, _ = env.reset(seed=0)
    step = env.graph.step_ops
    matmul = next(i for i, op in enumerate(step) if op.type == "MatMul")
    assert obs["op_flops"][matmul] == step[matmul].flops and obs["op_type"][matmul] > 1
    assert obs["op_cost"][matmul].max() > 0  # roofline costs of the modeled devices
    producer = env.graph.op(step[matmul].producers[0])
    assert [i for i, op in enumerate(step) if op.name == producer.name][0] in obs["in_neighbours"][matmul]
    assert obs["edge_mask"].sum() == sum(len(op.data_inputs) + len(op.control_inputs) for op in step)
    assert list(obs["device_kind"]) == [0, 1, 1]
    assert env.observation_space.contains(obs)


def test_the_observation_shows_each_devices_width_so_placing_an_op_chooses_its_threads(env):
    from envs.observation import graph_observation, observation_shape

    graph = env.graph
    widths = machine_from_dict({"devices": [{"name": "/job:worker/task:0/device:CPU:0", "cores": 2},
                                            {"name": "/job:worker/task:1/device:CPU:0", "cores": 1},
                                            {"name": "GPU:0"}]})
    obs = graph_observation(graph, widths, observation_shape(graph, widths))
    assert list(obs["device_threads"]) == [2, 1, 0]


def test_out_of_memory_placement_gets_the_failing_signal_and_ends_normally():
    tiny_memory = machine_from_dict({"devices": [
        {"name": "GPU:0", "memory": "1MB", "peak_flops": "10T", "memory_bandwidth": "500G"},
        {"name": "GPU:1", "memory": "1MB", "peak_flops": "10T", "memory_bandwidth": "500G"}],
        "links": [{"source": "GPU:0", "target": "GPU:1", "bandwidth": "10G"},
                  {"source": "GPU:1", "target": "GPU:0", "bandwidth": "10G"}]})
    environment = PlacementEnv(model="two-tower", size="tiny", devices=tiny_memory, failing_step_time=100.0)
    environment.reset(seed=0)
    _, value, terminated, _, info = environment.step(np.zeros(environment.num_units, np.int64))
    assert terminated and info["failure"] == "oom" and value == pytest.approx(-10.0)


def test_a_unit_on_a_device_without_its_kernel_is_an_invalid_placement():
    def build():
        w = tf.compat.v1.get_variable("w", [4], use_resource=True)
        text = tf.strings.as_string(w, name="as_string")  # AsString has a CPU kernel only
        loss = tf.reduce_sum(w) + tf.cast(tf.strings.length(text)[0], tf.float32) * 0.0
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss), loss

    graph = graph_from_function(build, name="needs-cpu")
    environment = PlacementEnv(model=graph, devices="modeled:1xV100")
    environment.reset(seed=0)
    gpu = environment.devices.index(environment.devices.resolve("GPU:0").name)
    _, value, _, _, info = environment.step(np.full(environment.num_units, gpu))
    assert info["failure"] == "invalid" and "AsString" in info["failure_message"]
    assert value == pytest.approx(-10.0)
    obs, _ = environment.reset()
    as_string_unit = graph.group_of("as_string").index
    assert obs["device_mask"][as_string_unit, gpu] == 0


def test_improvement_reward_is_zero_for_the_reference_placement():
    environment = PlacementEnv(model="two-tower", size="tiny", reward="improvement")
    environment.reset(seed=0)
    _, value, _, _, _ = environment.step(environment.reference_assignment())
    assert value == pytest.approx(0.0)
    assert reward(None, RewardConfig("improvement"), reference=2.0) == pytest.approx((2.0 - 100.0) / 2.0)


def test_same_seed_same_samples_same_rewards():
    a = PlacementEnv(model="two-tower", size="tiny")
    b = PlacementEnv(model="two-tower", size="tiny")
    a.reset(seed=7)
    b.reset(seed=7)
    actions = [a.action_space.sample() for _ in range(3)]
    assert all(np.array_equal(x, b.action_space.sample()) for x in actions)
    assert [a.step(x)[1] for x in actions] == [b.step(x)[1] for x in actions]


def test_sequential_return_is_the_improvement_over_the_starting_placement():
    environment = SequentialPlacementEnv(model="two-tower", size="tiny")
    obs, info = environment.reset(seed=0)
    assert environment.action_space.n == len(environment.devices) and "action_mask" in info
    start = reward(environment.reference_step_time, environment.reward_config)
    total, done, steps = 0.0, False, 0
    while not done:
        obs, value, done, _, info = environment.step(steps % 2 + 1)
        total += value
        steps += 1
    assert steps == environment.num_units and (obs["placed"] >= 0).all()
    assert total == pytest.approx(reward(info["step_time"], environment.reward_config) - start)


def test_registered_ids_and_nondeterminism():
    assert gym.spec("placer/MeasuredPlacement-v0").nondeterministic
    assert not gym.spec("placer/Placement-v0").nondeterministic
    environment = gym.make("placer/nmt-2-v0", size="tiny")
    assert environment.unwrapped.graph.name == "nmt2-tiny"
    environment.close()


def test_async_vector_environment_with_spawned_workers():
    vector = gym.make_vec("placer/Placement-v0", num_envs=2, vectorization_mode="async",
                          vector_kwargs={"context": "spawn"}, model="two-tower", size="tiny")
    try:
        vector.reset(seed=1)
        _, rewards, terminated, _, _ = vector.step(vector.action_space.sample())
        assert rewards.shape == (2,) and np.all(rewards < 0) and terminated.all()
    finally:
        vector.close()


@pytest.mark.testbed
def test_measured_environment_steps_on_the_local_testbed():
    from placer.testbed import isolation_available

    if not isolation_available():
        pytest.skip("no private network namespace on this machine")
    environment = gym.make("placer/MeasuredPlacement-v0", model="nmt-2", size="tiny", devices="local:2")
    try:
        environment.reset(seed=0)
        units = environment.unwrapped.num_units
        _, value, terminated, _, info = environment.step(np.zeros(units, np.int64))
        assert terminated and info["ok"] and info["backend"] == "measured"
        assert value == pytest.approx(-math.sqrt(info["step_time"])) and len(info["samples"]) > 0
    finally:
        environment.close()


def test_gym_make_takes_a_model_from_a_file(tmp_path):
    path = tmp_path / "my_models.py"
    path.write_text("from placer.models import build_model\n\n\ndef build(size):\n    return build_model('mlp', size)\n")
    env = gym.make("placer/Placement-v0", model=f"{path}:build", size="tiny")
    try:
        env.reset(seed=0)
        _, value, terminated, _, info = env.step(env.action_space.sample())
        assert terminated and info["ok"] and value < 0 and env.unwrapped.graph.name == "mlp-tiny"
    finally:
        env.close()


def test_a_measurement_worker_killed_mid_step_is_not_scored_as_the_placements_failure(slow_graph, caplog):
    import os
    import signal
    import threading

    from placer.measure import MeasureConfig

    environment = PlacementEnv(model=slow_graph, backend="measured",
                               devices="inprocess:1",
                               measure_config=MeasureConfig(warmup_steps=1, timed_steps=1, timed_seconds=3.0))
    try:
        environment.reset(seed=0)
        measurer = environment.target.measurer
        measurer.start()
        pid = measurer.worker_pid
        threading.Timer(2.0, os.kill, (pid, signal.SIGKILL)).start()  # the graph loads first, then it times steps
        with caplog.at_level("WARNING", logger="placer.measure"):
            _, value, _, _, info = environment.step(np.zeros(environment.num_units, np.int64))
        assert info["ok"] and value > -math.sqrt(environment.reward_config.failing_step_time)
        assert measurer.restarts == 1 and "measured again" in caplog.text
    finally:
        environment.close()
