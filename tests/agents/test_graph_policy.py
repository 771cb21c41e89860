"""The generalizing policy: one network for graphs of any size and device sets of any length."""

from __future__ import annotations

import numpy as np
import pytest

from agents.graph_policy import (GraphBatch, GraphPlacementPolicy, GraphPolicyConfig, PolicyFileError,
                                 device_inputs, graph_inputs, load_policy, save_policy)
from agents.graph_policy.features import OP_TYPE_BUCKETS
from agents.graph_policy.policy_file import check_devices
from placer.hardware import modeled_machine
from placer.models import build_model


@pytest.fixture(scope="module")
def graphs():
    return [graph_inputs(build_model("two-tower", "tiny")), graph_inputs(build_model("mlp", "tiny"))]


def _logits(policy, batch: GraphBatch, devices) -> np.ndarray:
    return policy.logits(batch.units, batch.edges, device_inputs(devices).features).numpy()


def test_graphs_of_different_sizes_in_one_batch_score_as_they_do_alone(graphs):
    policy = GraphPlacementPolicy(GraphPolicyConfig(hidden_size=16, message_rounds=2))
    devices = modeled_machine(2)
    assert graphs[0].num_units != graphs[1].num_units
    batch = GraphBatch.of(graphs)
    together = batch.split(_logits(policy, batch, devices))
    for graph, rows in zip(graphs, together):
        assert rows.shape == (graph.num_units, len(devices))
        np.testing.assert_allclose(rows, _logits(policy, GraphBatch.of([graph]), devices), rtol=1e-5, atol=1e-5)
    # any number of devices: the head scores units against device features, not device indices
    assert _logits(policy, batch, modeled_machine(4)).shape == (batch.units.shape[0], 5)


def test_hashed_op_types_read_every_graph_with_the_same_columns(graphs):
    for graph in graphs:
        assert graph.units.shape[1] == OP_TYPE_BUCKETS + 6
        np.testing.assert_allclose(graph.units[:, :OP_TYPE_BUCKETS].sum(axis=1), 1.0, rtol=1e-5)


def test_a_saved_policy_loads_with_the_same_scores_and_its_record(tmp_path, graphs):
    policy = GraphPlacementPolicy(GraphPolicyConfig(hidden_size=16, message_rounds=2, seed=3))
    devices = modeled_machine(2)
    path = save_policy(policy, tmp_path / "policy.npz", trained_on={"models": ["two-tower"], "samples": 12},
                       device_kinds={"CPU", "GPU"}, max_devices=3)
    loaded, record = load_policy(path)
    batch = GraphBatch.of(graphs)
    np.testing.assert_array_equal(_logits(loaded, batch, devices), _logits(policy, batch, devices))
    assert record["trained_on"] == {"models": ["two-tower"], "samples": 12} and record["config"]["seed"] == 3


def test_a_policy_refuses_device_sets_it_never_learned_to_address(tmp_path):
    record = {"device_kinds": ["CPU", "GPU"], "max_devices": 3}
    check_devices(record, modeled_machine(2))  # host CPU + 2 GPUs: what it was trained on
    with pytest.raises(PolicyFileError, match="at most 3 devices, not 5"):
        check_devices(record, modeled_machine(4))
    with pytest.raises(PolicyFileError, match="cannot place on GPU"):
        check_devices({"device_kinds": ["CPU"], "max_devices": 8}, modeled_machine(2))


def test_bad_policy_files_are_refused_with_the_reason(tmp_path):
    with pytest.raises(PolicyFileError, match="no policy file"):
        load_policy(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_text("not a policy")
    with pytest.raises(PolicyFileError, match="not a placer policy file"):
        load_policy(tmp_path / "junk.npz")


def test_the_partition_prior_lets_an_untrained_policy_split_a_graph_over_identical_gpus():
    from agents.graph_policy.agent import GraphAgentConfig, GraphPolicyAgent, partition_prior
    from envs.placement import PlacementEnv

    env = PlacementEnv(model="two-tower", size="tiny", backend="simulated", devices="modeled:2xV100")
    env.reset(seed=0)
    try:
        gpus = [i for i, d in enumerate(env.devices) if d.kind == "GPU"]
        prior = partition_prior(env.graph, env.devices)
        assert prior.shape == (len(env.graph.groups), len(env.devices)) and (prior.sum(axis=1) == 1).all()
        assert set(prior.argmax(axis=1)) == set(gpus)  # one part per GPU, none on the host CPU

        def greedy(config) -> np.ndarray:
            return GraphPolicyAgent(env.graph, env.device_mask, env.devices, config).best_guess()

        # The two GPUs look alike to the learned score: without the prior, one device takes every unit.
        assert len(set(greedy(GraphAgentConfig(hidden_size=16, message_rounds=2, partition_prior=False)))) == 1
        # With it, the greedy placement is the partition's.
        np.testing.assert_array_equal(greedy(GraphAgentConfig(hidden_size=16, message_rounds=2)), prior.argmax(axis=1))
    finally:
        env.close()


def test_the_graph_agent_learns_a_placement_on_the_simulator():
    from agents.factory import make_agent
    from envs.placement import PlacementEnv

    env = PlacementEnv(model="two-tower", size="tiny", backend="simulated", devices="modeled:2xV100")
    env.reset(seed=0)
    agent = make_agent("graph", env.graph, env.device_mask, env.devices,
                       options={"hidden_size": 32, "message_rounds": 3, "partition_prior": False})

    def step_time(assignment) -> float:
        return env.target.evaluate(list(assignment)).seconds

    before = step_time(agent.best_guess())
    for _ in range(10):
        assignments = agent.propose(4)
        agent.learn(assignments, [-np.sqrt(step_time(a)) for a in assignments])
    # the untrained policy spreads units over the host CPU and the GPUs; ten updates move them off the CPU
    assert step_time(agent.best_guess()) < 0.5 * before


def test_a_short_pre_training_places_a_graph_it_never_saw_better_than_an_untrained_policy(tmp_path):
    from agents.graph_policy.agent import GraphAgentConfig
    from agents.graph_policy.pretrain import PretrainConfig, place_with_policy, pretrain
    from envs.placement import PlacementEnv

    # Without the partition prior, whose start already places rnnlm as well as 12 updates can learn to
    config = PretrainConfig(models=("two-tower", "mlp"), machines=("modeled:2xV100",), updates=12,
                            agent=GraphAgentConfig(hidden_size=32, message_rounds=3, partition_prior=False),
                            progress=False)
    result = pretrain(config, tmp_path / "policy.npz")
    assert result.samples == 48 and set(result.best_step_times) == {"two-tower:tiny@modeled:2xV100",
                                                                      "mlp:tiny@modeled:2xV100"}
    pretrained, record = load_policy(result.path)
    assert record["trained_on"]["pairs"] == list(result.best_step_times) and record["max_devices"] == 3
    untrained = GraphPlacementPolicy(pretrained.config)
    held_out = PlacementEnv(model="rnnlm", size="tiny", backend="simulated", devices="modeled:2xV100")
    try:
        held_out.reset(seed=0)

        def zero_shot(policy) -> float:
            assignment = place_with_policy(policy, held_out.graph, held_out.devices, held_out.device_mask)
            return held_out.target.evaluate(list(assignment)).seconds

        assert zero_shot(pretrained) < zero_shot(untrained)
    finally:
        held_out.close()


def test_pretrain_place_and_fine_tune_from_the_command_line(tmp_path, capsys):
    import json

    from placer.cli import main

    policy = tmp_path / "policy.npz"
    assert main(["pretrain", "--models", "two-tower", "--machines", "modeled:2xV100", "--updates", "2",
                 "--set", "hidden_size=16", "--set", "message_rounds=2", "--out", str(policy), "--no-progress"]) == 0
    assert "two-tower:tiny@modeled:2xV100" in capsys.readouterr().out
    placement = tmp_path / "mlp.json"
    assert main(["place", "mlp", "--policy", str(policy), "--out", str(placement), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["step_time"] > 0 and json.loads(placement.read_text())["metadata"]["method"] == "graph policy, zero-shot"
    # a device set the policy never saw is refused before the model is built
    assert main(["place", "mlp", "--policy", str(policy), "--cluster", "modeled:4xV100"]) == 2
    assert "at most 3 devices, not 5" in capsys.readouterr().err
    # --init fine-tunes it with the graph agent
    runs = tmp_path / "runs"
    assert main(["train", "mlp", "--init", str(policy), "--updates", "2", "--samples-per-update", "2",
                 "--baselines", "single-device", "--runs", str(runs), "--no-progress"]) == 0
    (run_dir,) = (runs / "mlp").iterdir()
    config = json.loads((run_dir / "config.json").read_text())["experiment"]
    assert config["agent"] == "graph" and config["init"] == str(policy.resolve())
