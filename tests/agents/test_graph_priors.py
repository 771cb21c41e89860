"""The heuristics' votes the generalizing policy starts from, and imitation of the best of them."""

from __future__ import annotations

import numpy as np
import pytest

from agents.graph_policy.priors import align_to, heuristic_placements, heuristic_votes, interchangeable_classes
from placer.hardware import modeled_machine


def test_align_to_undoes_a_relabelling_of_interchangeable_gpus_and_never_moves_the_cpu():
    machine = modeled_machine(4)  # host CPU, then four V100s
    assert interchangeable_classes(machine) == [[0], [1, 2, 3, 4]]
    rng = np.random.default_rng(0)
    reference = rng.integers(0, 5, size=300)
    relabel = np.array([0, 3, 4, 1, 2])  # the same placement, the GPUs named differently
    np.testing.assert_array_equal(align_to(relabel[reference], reference, machine), reference)
    # a unit on the CPU stays there, however much agreement moving it would buy
    everything_on_cpu = np.zeros(300, np.int64)
    np.testing.assert_array_equal(align_to(everything_on_cpu, np.ones(300, np.int64), machine), everything_on_cpu)


def test_align_to_matches_greedily_past_the_brute_force_limit(monkeypatch):
    import agents.graph_policy.priors as priors

    monkeypatch.setattr(priors, "BRUTE_FORCE_DEVICES", 2)
    machine = modeled_machine(4)
    reference = np.random.default_rng(1).integers(1, 5, size=200)
    relabel = np.array([0, 2, 1, 4, 3])
    np.testing.assert_array_equal(align_to(relabel[reference], reference, machine), reference)


@pytest.fixture(scope="module")
def nmt_env():
    from envs.placement import PlacementEnv

    # NMT-2: m-SCT's placement (7.9 ms) beats the METIS partition (9.8 ms) on two modeled V100s
    env = PlacementEnv(model="nmt-2", size="tiny", backend="simulated", devices="modeled:2xV100")
    env.reset(seed=0)
    yield env
    env.close()


def test_every_heuristic_votes_once_per_unit_and_the_first_is_the_metis_partition(nmt_env):
    from agents.graph_policy.agent import partition_prior

    votes = heuristic_votes(nmt_env.graph, nmt_env.devices, ("metis", "m-etf", "m-sct"))
    assert votes.shape == (3, len(nmt_env.graph.groups), len(nmt_env.devices))
    assert (votes.sum(axis=2) == 1).all()
    np.testing.assert_array_equal(votes[0], partition_prior(nmt_env.graph, nmt_env.devices))
    # the others are relabelled towards METIS: no swap of the two GPUs agrees with it more
    placements = votes.argmax(axis=2)
    for other in placements[1:]:
        swapped = np.where(other == 1, 2, np.where(other == 2, 1, other))
        assert (other == placements[0]).sum() >= (swapped == placements[0]).sum()


def test_an_untrained_policy_places_as_metis_does_and_imitation_makes_it_place_as_the_best_heuristic(nmt_env):
    from agents.graph_policy.agent import GraphAgentConfig, GraphPolicyAgent
    from agents.graph_policy.pretrain import best_heuristic

    env = nmt_env
    agent = GraphPolicyAgent(env.graph, env.device_mask, env.devices, GraphAgentConfig(hidden_size=32, message_rounds=3))
    metis, etf, sct = heuristic_placements(env.graph, env.devices, ("metis", "m-etf", "m-sct"))
    np.testing.assert_array_equal(agent.best_guess(), metis)
    name, target = best_heuristic(env, agent)
    assert name == "m-sct"
    np.testing.assert_array_equal(target, sct)

    def step_time(assignment) -> float:
        return env.target.evaluate(list(assignment)).seconds

    assert np.mean(agent.best_guess() == sct) < 0.5
    losses = [agent.imitate(target) for _ in range(30)]
    assert losses[-1] < 0.1 * losses[0]
    assert np.mean(agent.best_guess() == sct) > 0.95
    assert step_time(agent.best_guess()) < 0.9 * step_time(metis)
    # the weights stay bounded: a policy this sure still samples other placements
    assert float(np.max(agent.policy.prior_weights(agent.units, agent.edges))) <= agent.policy.config.prior_weight_bound
    # the moves head starts from the weighted vote
    moves = GraphPolicyAgent(env.graph, env.device_mask, env.devices,
                             GraphAgentConfig(hidden_size=32, message_rounds=3, head="moves"), policy=agent.policy)
    assert np.mean(moves.start == sct) > 0.95


def test_unknown_or_model_specific_heuristics_are_refused_as_voters():
    from agents.factory import AgentOptionError, check_agent_options

    config = check_agent_options("graph", {"prior_heuristics": ["metis", "m-etf"]})
    assert config.prior_heuristics == ("metis", "m-etf")
    with pytest.raises(AgentOptionError, match="prior_heuristics: .*nonsense"):
        check_agent_options("graph", {"prior_heuristics": ["metis", "nonsense"]})
    with pytest.raises(AgentOptionError, match="prior_heuristics: .*expert"):
        check_agent_options("graph", {"prior_heuristics": ["expert"]})


@pytest.mark.parametrize("head", ["one-shot", "moves"])
def test_pretraining_can_start_by_imitating_each_pairs_best_heuristic(tmp_path, capsys, head):
    from agents.graph_policy import load_policy
    from agents.cli import main

    policy = tmp_path / "policy.npz"
    # then rewards train the same policy with the same Adam (the moves head's scorer included)
    assert main(["pretrain", "--models", "two-tower", "mlp", "--target", "modeled:2xV100", "--imitation-updates", "4",
                 "--updates", "2", "--generated", "0", "--set", "hidden_size=16", "--set", "message_rounds=2",
                 "--set", f"head={head}", "--out", str(policy), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    # two-tower's best is METIS's tower per GPU, mlp's is m-ETF's (RESULTS.md's generalization tables)
    assert "(imitated metis)" in printed and "(imitated m-etf)" in printed
    _, record = load_policy(policy)
    assert record["trained_on"]["imitation_updates"] == 4
    assert record["trained_on"]["imitated"] == {"two-tower:tiny@modeled:2xV100": "metis",
                                                "mlp:tiny@modeled:2xV100": "m-etf"}
    assert record["config"]["prior_heuristics"] == ["metis", "m-etf", "m-sct"]


def test_a_heuristic_that_cannot_place_the_graph_does_not_vote_and_is_never_imitated(monkeypatch, nmt_env):
    import placer.heuristics.list_scheduling as heuristics_module
    from agents.graph_policy.agent import GraphAgentConfig, GraphPolicyAgent
    from agents.graph_policy.pretrain import best_heuristic
    from placer.errors import PlacementError

    def out_of_memory(*args, **kwargs):
        raise PlacementError("list scheduling: unit 'x' fits on no device (memory, kernels or links)")

    monkeypatch.setattr(heuristics_module, "m_sct", out_of_memory)
    env = nmt_env
    with pytest.warns(UserWarning, match="m-sct cannot place nmt2-tiny .*: it does not vote"):
        votes = heuristic_votes(env.graph, env.devices, ("metis", "m-etf", "m-sct"))
    assert (votes[2] == 0).all() and (votes[:2].sum(axis=2) == 1).all()
    with pytest.warns(UserWarning, match="it does not vote"):
        agent = GraphPolicyAgent(env.graph, env.device_mask, env.devices, GraphAgentConfig(hidden_size=16, message_rounds=2))
    assert best_heuristic(env, agent)[0] == "m-etf"  # m-SCT, the best where it can place NMT-2, is skipped


def test_vote_weights_that_the_bound_cannot_hold_are_refused():
    from agents.graph_policy.policy import GraphPolicyConfig

    with pytest.raises(ValueError, match="prior_weight_bound must be above prior_weight .* and other_prior_weight"):
        GraphPolicyConfig(other_prior_weight=5.0, prior_weight_bound=5.0)
    with pytest.raises(ValueError, match="prior_weight_bound must be above"):
        GraphPolicyConfig(prior_weight=6.0)
    GraphPolicyConfig(prior_weight=6.0, prior_weight_bound=None)  # unbounded, as policy files before version 4


# -- the heuristics' own placements, timed: zero-shot and the moves head's first samples --------------------


def test_zero_shot_with_a_judge_keeps_the_fastest_of_the_policys_own_placement_and_the_heuristics(nmt_env):
    import math

    from agents.graph_policy.policy import GraphPlacementPolicy, GraphPolicyConfig
    from agents.graph_policy.pretrain import place_with_policy, step_seconds

    env = nmt_env
    policy = GraphPlacementPolicy(GraphPolicyConfig(hidden_size=16, message_rounds=2))
    metis, etf, sct = heuristic_placements(env.graph, env.devices, ("metis", "m-etf", "m-sct"))
    own = place_with_policy(policy, env.graph, env.devices, env.device_mask, "moves")
    assert own.source == "policy" and own.step_times == {}
    np.testing.assert_array_equal(own.assignment, metis)  # untrained: METIS's vote leads
    checked = place_with_policy(policy, env.graph, env.devices, env.device_mask, "moves",
                                judge=lambda a: step_seconds(env.target, a))
    # METIS's own placement is the policy's, so it is timed once, under the policy's name
    assert set(checked.step_times) == {"policy", "m-etf", "m-sct"}
    assert checked.source == "m-sct" and checked.step_times["m-sct"] < 0.9 * checked.step_times["policy"]
    np.testing.assert_array_equal(checked.assignment, sct)
    # a heuristic whose placement fails is never kept; ties go to the policy's own
    failing = place_with_policy(policy, env.graph, env.devices, env.device_mask, "moves",
                                judge=lambda a: 1.0 if np.array_equal(a, metis) else math.inf)
    assert failing.source == "policy"


def test_the_moves_head_times_the_heuristics_first_and_climbs_from_the_best_of_them(nmt_env):
    from agents.graph_policy.agent import GraphAgentConfig, GraphPolicyAgent

    env = nmt_env
    config = GraphAgentConfig(hidden_size=16, message_rounds=2, head="moves", moves_per_sample=4)
    agent = GraphPolicyAgent(env.graph, env.device_mask, env.devices, config)
    _, _, sct = heuristic_placements(env.graph, env.devices, ("metis", "m-etf", "m-sct"))

    def step_time(assignment) -> float:
        return env.target.evaluate(list(assignment)).seconds

    first = agent.propose(4)
    assert [list(a) for a in first[:3]] == [list(p) for p in agent.start_candidates().values()]
    agent.learn(first, [-np.sqrt(step_time(a)) for a in first])
    np.testing.assert_array_equal(agent.anchor, sct)  # the fastest of the start, m-ETF's and m-SCT's
    later = agent.propose(4)
    assert all(0 < (a != sct).sum() <= 4 for a in later)  # moves of m-SCT's placement, nothing timed twice
    # without them, the search stays near the start
    alone = GraphPolicyAgent(env.graph, env.device_mask, env.devices,
                             GraphAgentConfig(hidden_size=16, message_rounds=2, head="moves", moves_per_sample=4,
                                              try_heuristics=False))
    assert all((a != alone.start).sum() <= 4 for a in alone.propose(4))


def test_placer_place_times_the_heuristics_unless_told_to_place_the_policys_own(tmp_path, capsys):
    import json

    from agents.graph_policy.policy import GraphPlacementPolicy, GraphPolicyConfig
    from agents.graph_policy.policy_file import save_policy
    from agents.cli import main

    path = save_policy(GraphPlacementPolicy(GraphPolicyConfig(hidden_size=16, message_rounds=2)), tmp_path / "p.npz",
                       trained_on={}, device_kinds={"CPU", "GPU"}, max_devices=3, head={"head": "moves"})
    assert main(["place", "nmt-2", "--policy", str(path)]) == 0
    assert "kept m-sct's" in capsys.readouterr().out
    assert main(["place", "nmt-2", "--policy", str(path), "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["source"] == "m-sct" and checked["step_time"] == pytest.approx(checked["candidates"]["m-sct"])
    assert main(["place", "nmt-2", "--policy", str(path), "--policy-only", "--json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert own["source"] == "policy" and own["candidates"] == {}
    assert own["step_time"] == pytest.approx(checked["candidates"]["policy"])
