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
    config = PretrainConfig(models=("two-tower", "mlp"), machines=("modeled:2xV100",), generated=0, updates=12,
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
            assignment = place_with_policy(policy, held_out.graph, held_out.devices, held_out.device_mask).assignment
            return held_out.target.evaluate(list(assignment)).seconds

        assert zero_shot(pretrained) < zero_shot(untrained)
    finally:
        held_out.close()


def test_pretrain_place_and_fine_tune_from_the_command_line(tmp_path, capsys):
    import json

    from agents.cli import main

    policy = tmp_path / "policy.npz"
    assert main(["pretrain", "--models", "two-tower", "--target", "modeled:2xV100", "--updates", "2", "--generated", "1",
                 "--set", "hidden_size=16", "--set", "message_rounds=2", "--out", str(policy), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "two-tower:tiny@modeled:2xV100" in printed and "branchy-0-tiny@modeled:2xV100" in printed  # a generated graph
    placement = tmp_path / "mlp.json"
    assert main(["place", "mlp", "--policy", str(policy), "--out", str(placement), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["step_time"] > 0 and json.loads(placement.read_text())["metadata"]["method"] == "graph policy, zero-shot"
    # a device set the policy never saw is refused before the model is built
    assert main(["place", "mlp", "--policy", str(policy), "--target", "modeled:4xV100"]) == 2
    assert "at most 3 devices, not 5" in capsys.readouterr().err
    # --init fine-tunes it with the graph agent
    runs = tmp_path / "runs"
    assert main(["train", "mlp", "--init", str(policy), "--updates", "2", "--samples-per-update", "2",
                 "--baselines", "single-device", "--runs", str(runs), "--no-progress"]) == 0
    (run_dir,) = (runs / "mlp").iterdir()
    config = json.loads((run_dir / "config.json").read_text())["experiment"]
    assert config["agent"] == "graph" and config["init"] == str(policy.resolve())


def test_pretraining_with_fewer_updates_than_pairs_says_which_pairs_got_none(tmp_path, capsys):
    from agents.cli import main

    assert main(["pretrain", "--models", "two-tower", "--target", "modeled:2xV100", "--updates", "1", "--generated", "1",
                 "--set", "hidden_size=16", "--set", "message_rounds=2", "--out", str(tmp_path / "p.npz"),
                 "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    (sampled,) = [line for line in lines if "two-tower:tiny@modeled:2xV100" in line]
    (unsampled,) = [line for line in lines if "branchy-0-tiny@modeled:2xV100" in line]
    assert sampled.endswith(" ms") and unsampled.endswith("not sampled")
    assert "1 of 2 pairs got no update" in lines[-1] and "--updates 2" in lines[-1]


@pytest.mark.slow  # about 13 s; pretraining on modeled machines is tested in the default run
def test_pretraining_on_a_calibrated_target_beside_modeled_gpus_then_placing_there(tmp_path, capsys):
    """The training distribution's real machine: the simulator of a calibrated target (here in-process CPU
    devices, calibrated by hand; the op costs are profiled there on first use)."""
    import json

    from placer.calibration import Calibration
    from placer.host import this_machine
    from agents.cli import main

    calibration = tmp_path / "calibration.json"
    Calibration(step_overhead=2e-4, spanning_overhead=1e-4, send_cpu=2e-5, send_cpu_per_byte=1e-10, recv_cpu=2e-5,
                recv_cpu_per_byte=1e-10, latency=1e-5, bandwidth=float("inf"), samples={}, target="inprocess:2",
                devices=("/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"),
                rounds=2, machine=this_machine()).save(calibration)
    policy = tmp_path / "policy.npz"
    calibrated = f"calibrated:{calibration}"
    assert main(["pretrain", "--models", "mlp", "--target", "modeled:2xV100", calibrated, "--updates", "2",
                 "--generated", "0", "--set", "hidden_size=16", "--set", "message_rounds=2", "--out", str(policy),
                 "--no-progress"]) == 0
    assert f"mlp:tiny@{calibrated}" in capsys.readouterr().out
    _, record = load_policy(policy)
    assert set(record["device_kinds"]) == {"CPU", "GPU"}
    assert main(["place", "two-tower", "--policy", str(policy), "--target", calibrated, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time"] > 0


# -- the "moves" head: a few units of an anchor placement per sample ------------------------------------


@pytest.fixture(scope="module")
def two_tower_env():
    from envs.placement import PlacementEnv

    env = PlacementEnv(model="two-tower", size="tiny", backend="simulated", devices="modeled:2xV100")
    env.reset(seed=0)
    yield env
    env.close()


def _moves_agent(env, moves_per_sample: int = 3, **options):
    from agents.factory import make_agent

    return make_agent("graph", env.graph, env.device_mask, env.devices,
                      options={"hidden_size": 16, "message_rounds": 2, "head": "moves",
                               "moves_per_sample": moves_per_sample, **options})


def test_a_moves_sample_is_its_anchor_with_at_most_k_units_moved_to_other_devices(two_tower_env):
    agent = _moves_agent(two_tower_env, moves_per_sample=3)
    candidates = agent.start_candidates()
    samples = agent.sample(8)
    # before any reward, the first samples are the start itself and each heuristic's own placement, unmoved, so
    # the anchor leaves them only for a better one
    np.testing.assert_array_equal(samples[0].assignment, agent.start)
    assert 2 <= len(candidates) <= 4  # here METIS's vote is the start, and m-ETF and m-SCT each place otherwise
    for sample, placement in zip(samples, candidates.values()):
        np.testing.assert_array_equal(sample.assignment, placement)
        assert (sample.units == -1).all()
    for sample in samples[len(candidates):]:
        np.testing.assert_array_equal(sample.anchor, agent.start)
        assert len(set(sample.units.tolist())) == 3  # three distinct units drawn
        moved = np.flatnonzero(sample.assignment != sample.anchor)
        assert sorted(moved) == sorted(sample.units.tolist())  # each drawn unit leaves its anchor device
        assert two_tower_env.device_mask[sample.units, sample.devices].all()
    # the greedy placement is the anchor: nobody has timed the likeliest moves
    np.testing.assert_array_equal(agent.best_guess(), agent.start)


def test_the_log_prob_of_sampled_moves_is_the_sum_of_its_draws_each_unit_drawn_from_those_left(two_tower_env):
    import tensorflow as tf

    def log_softmax(logits: np.ndarray) -> np.ndarray:
        shifted = logits - logits.max()
        return shifted - np.log(np.exp(shifted).sum())

    agent = _moves_agent(two_tower_env, moves_per_sample=4)
    starts = len(agent.start_candidates())  # the first samples are unmoved
    samples = agent.sample(starts + 4)[starts:]
    batch, _, _ = agent.score(samples)
    for sample, scored in zip(samples, batch.numpy()):
        noise = tf.constant(sample.noise[None])
        move_logits, away = (x.numpy()[0] for x in agent._move_logits(noise, sample.anchor[None]))
        expected, left = 0.0, np.ones(len(move_logits), bool)
        for unit, device in zip(sample.units, sample.devices):
            expected += log_softmax(np.where(left, move_logits, -np.inf))[unit] + log_softmax(away[unit])[device]
            left[unit] = False
        assert scored == pytest.approx(expected, abs=1e-3)
        assert float(agent.score([sample])[0][0]) == pytest.approx(scored, abs=1e-4)  # alone as in a batch


def test_moves_are_drawn_as_often_as_their_log_prob_says():
    import tensorflow as tf

    from agents.graph_policy import moves

    # four units, the last of which has nowhere else to go; two devices besides the anchor's
    move_logits = tf.constant([[1.0, 0.0, -0.5, 3.0]] * 20000)
    away = tf.constant([[[0.0, 1.0], [0.5, -0.5], [0.0, 0.0], [moves.MASKED, moves.MASKED]]] * 20000)
    move_logits = tf.where(tf.reduce_max(away, axis=2) > moves.MASKED / 2, move_logits, moves.MASKED)
    units, devices = moves.draw_moves(move_logits, away, 2, tf.constant([[1, 2], [3, 4]]))
    assert (units != 3).all()  # the unit that cannot move is never drawn
    log_probs, _ = moves.move_log_probs(move_logits, away, tf.constant(units, tf.int32), tf.constant(devices, tf.int32))
    draws, counts = np.unique(np.concatenate([units, devices], axis=1), axis=0, return_counts=True)
    expected = {tuple(draw): p for draw, p in zip(np.concatenate([units, devices], axis=1).tolist(),
                                                  np.exp(log_probs.numpy()))}
    assert sum(expected.values()) == pytest.approx(1.0, abs=1e-4)  # every ordered (units, devices) outcome seen
    for draw, count in zip(draws.tolist(), counts):
        assert count / 20000 == pytest.approx(expected[tuple(draw)], abs=0.01)


def test_the_moves_head_starts_from_the_partition_even_where_the_one_shot_greedy_has_drifted(two_tower_env):
    """Pre-training with the moves head never trains the one-shot distribution, so its greedy placement drifts;
    the moves head's start (and so its zero-shot placement) is the heuristics' weighted vote all the same, here
    METIS's alone."""
    from agents.graph_policy.agent import partition_prior

    agent = _moves_agent(two_tower_env, prior_heuristics=["metis"])
    partition = partition_prior(two_tower_env.graph, two_tower_env.devices).argmax(axis=1)
    np.testing.assert_array_equal(agent.start, partition)
    policy = agent.policy
    policy.prior_bias.assign(-20.0)  # the prior's weight ~0: the one-shot greedy follows the scores alone
    policy.score_vector.assign(policy.score_vector * 0.0 + 1.0)
    from agents.graph_policy.agent import GraphPolicyAgent

    drifted = GraphPolicyAgent(two_tower_env.graph, two_tower_env.device_mask, two_tower_env.devices, agent.config,
                               policy=policy)
    assert (drifted._one_shot_samples(1, greedy=True)[0].devices != partition).any()
    np.testing.assert_array_equal(drifted.start, partition)
    np.testing.assert_array_equal(drifted.best_guess(), partition)
    # zero-shot (`placer place`) with the head the policy was trained with
    from agents.graph_policy.pretrain import place_with_policy

    env = two_tower_env
    np.testing.assert_array_equal(
        place_with_policy(drifted.policy, env.graph, env.devices, env.device_mask, "moves").assignment, partition)


def test_the_anchor_follows_the_best_placement_found(two_tower_env):
    agent = _moves_agent(two_tower_env, moves_per_sample=2)
    assignments = agent.propose(4)
    agent.learn(assignments, [-3.0, -1.0, -2.0, -4.0])
    np.testing.assert_array_equal(agent.anchor, assignments[1])
    samples = agent.sample(3)
    assert all((s.anchor == assignments[1]).all() for s in samples)  # later samples move units of the best
    assert all(s.units.min() >= 0 for s in samples)  # and the start is not spent again
    assignments = agent.propose(3)
    agent.learn(assignments, [-1.5, -1.2, -5.0])  # none beats it: the anchor stays
    np.testing.assert_array_equal(agent.best_guess(), agent.anchor)
    np.testing.assert_array_equal(agent.anchor, agent.best.sample.assignment)
    # a resumed agent climbs from the same anchor
    resumed = _moves_agent(two_tower_env, moves_per_sample=2)
    resumed.load_numpy_state(agent.numpy_state())
    np.testing.assert_array_equal(resumed.anchor, agent.anchor)


def test_bad_heads_are_refused_with_what_to_give(two_tower_env):
    from agents.factory import AgentOptionError, check_agent_options

    with pytest.raises(AgentOptionError, match="unknown head 'sideways': 'one-shot' or 'moves'"):
        check_agent_options("graph", {"head": "sideways"})
    with pytest.raises(AgentOptionError, match="moves_per_sample must be a whole number of at least 1, got 0"):
        check_agent_options("graph", {"head": "moves", "moves_per_sample": 0})
    units = len(two_tower_env.graph.groups)
    with pytest.raises(AgentOptionError, match=f"more than the {units} units of .*: give at most {units}"):
        _moves_agent(two_tower_env, moves_per_sample=units + 1)


def test_a_policy_file_records_its_head_and_fine_tuning_uses_it_unless_told(tmp_path, two_tower_env):
    from agents.factory import make_agent

    env = two_tower_env
    policy = GraphPlacementPolicy(GraphPolicyConfig(hidden_size=16, message_rounds=2))
    path = save_policy(policy, tmp_path / "moves.npz", trained_on={}, device_kinds={"CPU", "GPU"}, max_devices=3,
                       head={"head": "moves", "moves_per_sample": 5})
    assert load_policy(path)[1]["head"] == {"head": "moves", "moves_per_sample": 5}
    agent = make_agent("graph", env.graph, env.device_mask, env.devices, init=str(path))
    assert (agent.config.head, agent.config.moves_per_sample) == ("moves", 5)
    agent = make_agent("graph", env.graph, env.device_mask, env.devices, init=str(path), options={"head": "one-shot"})
    assert agent.config.head == "one-shot"


def test_a_policy_file_of_version_2_loads_with_an_untrained_move_scorer_and_the_one_shot_head(tmp_path, graphs):
    import json

    from agents.graph_policy.policy import GRAPH_PRIOR_VARIABLES_PREFIX, MOVE_VARIABLES_PREFIX

    # what version 2 had: no move scorer, METIS's vote alone and no graph-level weight for it
    policy = GraphPlacementPolicy(GraphPolicyConfig(hidden_size=16, message_rounds=2, seed=5, prior_heuristics=("metis",),
                                                    prior_weight_bound=None))
    names = [v.name for v in policy._ordered_variables()]
    old = {f"weight_{i}": w for i, w in enumerate(
        w for name, w in zip(names, policy.weights())
        if not name.startswith((MOVE_VARIABLES_PREFIX, GRAPH_PRIOR_VARIABLES_PREFIX)))}
    config = {k: v for k, v in json.loads(json.dumps(vars(policy.config))).items()
              if k not in ("prior_heuristics", "other_prior_weight", "prior_weight_bound")}
    record = {"format": "placer.graph-policy", "version": 2, "features_version": 1,
              "config": config, "trained_on": {}, "device_kinds": ["CPU", "GPU"], "max_devices": 3}
    np.savez(tmp_path / "v2.npz", record=np.array(json.dumps(record)), **old)
    loaded, record = load_policy(tmp_path / "v2.npz")
    assert record["head"] == {"head": "one-shot"}
    batch = GraphBatch.of(graphs)
    np.testing.assert_array_equal(_logits(loaded, batch, modeled_machine(2)), _logits(policy, batch, modeled_machine(2)))
    assert float(loaded.move_cut_weight) == float(GraphPlacementPolicy(loaded.config).move_cut_weight)


def test_fine_tuning_with_the_moves_head_improves_on_its_start_on_a_graph_it_never_saw():
    from agents.factory import make_agent
    from envs.placement import PlacementEnv

    # NMT-2: m-SCT's placement (7.7 ms) beats the METIS partition the policy starts from (9.8 ms)
    env = PlacementEnv(model="nmt-2", size="tiny", backend="simulated", devices="modeled:2xV100")
    env.reset(seed=0)
    try:
        # the moves alone: no heuristic's placement is timed first (m-SCT's would be the improvement)
        agent = make_agent("graph", env.graph, env.device_mask, env.devices,
                           options={"hidden_size": 32, "message_rounds": 3, "head": "moves", "try_heuristics": False})

        def step_time(assignment) -> float:
            return env.target.evaluate(list(assignment)).seconds

        start = step_time(agent.best_guess())
        for _ in range(12):
            assignments = agent.propose(4)
            anchor = agent.anchor
            assert all((a != anchor).sum() <= 8 for a in assignments)  # every sample searches near the anchor
            agent.learn(assignments, [-np.sqrt(step_time(a)) for a in assignments])
        assert step_time(agent.best_guess()) < 0.99 * start
    finally:
        env.close()


def test_pretrain_with_the_moves_head_then_fine_tune_and_place_from_the_command_line(tmp_path, capsys):
    import json

    from agents.cli import main

    policy = tmp_path / "moves.npz"
    assert main(["pretrain", "--models", "two-tower", "--target", "modeled:2xV100", "--updates", "3", "--generated", "0",
                 "--set", "hidden_size=16", "--set", "message_rounds=2", "--set", "head=moves",
                 "--set", "moves_per_sample=4", "--out", str(policy), "--no-progress"]) == 0
    capsys.readouterr()
    assert load_policy(policy)[1]["head"] == {"head": "moves", "moves_per_sample": 4}
    runs = tmp_path / "runs"
    assert main(["train", "mlp", "--init", str(policy), "--updates", "3", "--samples-per-update", "3",
                 "--baselines", "single-device", "--runs", str(runs), "--no-progress"]) == 0
    (run_dir,) = (runs / "mlp").iterdir()
    agent_state = json.loads((run_dir / "trainer_state.json").read_text())["agent_state"]
    assert agent_state["config"]["head"] == "moves" and agent_state["config"]["moves_per_sample"] == 4
    best = agent_state["best_sample"]["sample"]  # a moves sample: its anchor and at most 4 units moved
    # the anchor is the start or a voting heuristic's own placement (timed first), moved at most 3 times since
    from agents import run_files
    from agents.graph_policy.priors import heuristic_placements
    from envs.placement import PlacementEnv

    experiment = json.loads((run_dir / "config.json").read_text())["experiment"]
    env = PlacementEnv(model="mlp", size=experiment["size"], backend="simulated", devices=experiment["cluster"])
    try:
        starts = [run_files.read_start(run_dir, env.graph, env.devices).assignment,
                  *heuristic_placements(env.graph, env.devices)]
    finally:
        env.close()
    assert len(best["units"]) == 4
    assert min(sum(a != b for a, b in zip(best["anchor"], start)) for start in starts) <= 4 * 3
    capsys.readouterr()
    assert main(["place", "mlp", "--policy", str(policy), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time"] > 0
    # a bad head is refused before any work, saying what to give
    assert main(["train", "mlp", "--init", str(policy), "--set", "head=sideways", "--runs", str(runs)]) == 2
    assert "unknown head 'sideways'" in capsys.readouterr().err


def test_pretraining_refuses_a_generated_count_that_would_reach_the_held_out_seeds():
    from agents.graph_policy import training_set
    from agents.graph_policy.pretrain import PretrainConfig
    from placer.errors import PlacerError

    for bad in (-1, training_set.HELD_OUT_SEED + 1, 1.5):
        with pytest.raises(PlacerError, match="generated"):
            PretrainConfig(generated=bad)
    assert PretrainConfig(models=("mlp",), machines=("modeled:2xV100",), generated=2).pairs()[-1] == (
        "branchy:1", "tiny", "modeled:2xV100")


def test_move_logits_are_bounded_so_that_no_few_units_take_every_draw():
    import tensorflow as tf

    policy = GraphPlacementPolicy(GraphPolicyConfig(hidden_size=8, message_rounds=1))
    units = 2_000
    move_bias = tf.constant(np.r_[np.full(8, 1e3), np.zeros(units - 8)], tf.float32)  # a scorer gone extreme
    zeros = tf.zeros([1, units])
    logits = policy.move_logits(move_bias, zeros, zeros)
    assert float(tf.reduce_max(tf.abs(logits))) <= policy.config.tanh_constant + 1e-6
    top8 = float(tf.reduce_sum(tf.sort(tf.nn.softmax(logits[0]))[-8:]))
    assert top8 < 0.5  # the other units keep being drawn, so fine-tuning can still find a better move


def test_a_policy_file_of_version_3_loads_with_metis_alone_voting_as_it_did(tmp_path, two_tower_env):
    import json

    import tensorflow as tf

    from agents.graph_policy.agent import partition_prior
    from agents.graph_policy.policy import GRAPH_PRIOR_VARIABLES_PREFIX

    env = two_tower_env
    # what version 3 was: METIS's vote alone, its weight an unbounded softplus
    policy = GraphPlacementPolicy(GraphPolicyConfig(hidden_size=16, message_rounds=2, seed=7,
                                                    prior_heuristics=("metis",), prior_weight_bound=None))
    policy.prior_gate.assign(tf.random.stateless_normal(policy.prior_gate.shape, seed=[1, 2]))
    names = [v.name for v in policy._ordered_variables()]
    old = {f"weight_{i}": w for i, w in enumerate(
        w for name, w in zip(names, policy.weights()) if not name.startswith(GRAPH_PRIOR_VARIABLES_PREFIX))}
    config = {k: v for k, v in json.loads(json.dumps(vars(policy.config))).items()
              if k not in ("prior_heuristics", "other_prior_weight", "prior_weight_bound")}
    record = {"format": "placer.graph-policy", "version": 3, "features_version": 1, "config": config, "trained_on": {},
              "device_kinds": ["CPU", "GPU"], "max_devices": 3, "head": {"head": "one-shot"}}
    np.savez(tmp_path / "v3.npz", record=np.array(json.dumps(record)), **old)
    loaded, record = load_policy(tmp_path / "v3.npz")
    assert loaded.config.prior_heuristics == ("metis",) and loaded.config.prior_weight_bound is None
    inputs, devices = graph_inputs(env.graph), device_inputs(env.devices).features
    prior = partition_prior(env.graph, env.devices)[None]
    np.testing.assert_array_equal(loaded.logits_with_prior(inputs.units, inputs.edges, devices, prior).numpy(),
                                  policy.logits_with_prior(inputs.units, inputs.edges, devices, prior).numpy())
