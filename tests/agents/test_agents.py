"""Agents: the hierarchical planner's policy and training, the search baselines, checkpoint and resume."""

import itertools
import json
import math
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from agents.colocation import ColocationConfig, ColocationPlacer
from agents.graph_policy.agent import GraphAgentConfig, GraphPolicyAgent
from agents.policy_gradient import standardized
from agents.hierarchical import REFERENCE, Args, HierarchicalPlanner
from agents.search import CrossEntropyMethod, RandomSearch
from agents.loop import TrainingConfig, train
from placer.placement import read_placement_file
from envs.placement import PlacementEnv
from placer.placement import load_placement

def reference_args(**changes) -> Args:
    """The reference planner's settings with `changes`: these tests pin the reference planner's behaviour."""
    return replace(REFERENCE, **changes)


SMALL = reference_args(num_groups=4, hidden_size=32, grouping_hidden_size=16, learning_rate=0.05, seed=3)
SMALL_COLOCATION = ColocationConfig(hidden_size=16, attention_window=4, learning_rate=0.05, seed=3)


@pytest.fixture(scope="module")
def env():
    environment = PlacementEnv(model="two-tower", size="tiny")
    environment.reset(seed=0)
    return environment


def device_mask(env):
    return env.device_mask


def test_proposals_give_every_unit_a_device_through_its_group(env):
    planner = HierarchicalPlanner(env.graph, device_mask(env), SMALL)
    assignments = planner.propose(3)
    assert len(assignments) == 3
    for assignment, sample in zip(assignments, planner._pending):
        assert assignment.shape == (env.num_units,) and sample.groups.shape == (env.num_units,)
        assert sample.group_devices.shape == (4,) and set(np.unique(assignment)) <= set(range(len(env.devices)))
        assert np.array_equal(assignment, sample.group_devices[sample.groups])


def test_log_probabilities_match_how_often_placements_are_sampled(env):
    config = reference_args(num_groups=2, hidden_size=16, grouping_hidden_size=8, logits_noise_std=0.0, seed=1)
    planner = HierarchicalPlanner(env.graph, device_mask(env), config)
    policy = planner.policy
    groups = tf.constant(planner.sample()[0].groups, tf.int32)
    noise = tf.zeros([2, len(env.devices)])
    one = tf.constant(1.0)
    # The grouper's log-probability is the sum of each unit's log-softmax entry.
    logits = policy.grouper_logits().numpy()
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = log_softmax[np.arange(len(logits)), groups.numpy()].sum()
    grouper_lp, _, _, _ = policy.log_prob(groups[None], tf.constant([[0, 0]]), noise[None], one)
    assert float(grouper_lp[0]) == pytest.approx(expected, rel=1e-4)
    # The placer's probabilities over all device sequences sum to 1 and match sampling frequencies.
    sequences = list(itertools.product(range(len(env.devices)), repeat=2))
    probabilities = {s: float(np.exp(policy.log_prob(groups[None], tf.constant([s]), noise[None], one)[1][0]))
                     for s in sequences}
    assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-4)
    draws = 600
    counts = {s: 0 for s in sequences}
    for i in range(draws):
        seeds = tf.constant([[i, 1]] * 3, tf.int32) + tf.constant([[0, 0], [0, 7], [0, 13]])
        _, devices = policy.sample(seeds, noise[None], one)
        counts[tuple(int(d) for d in devices.numpy()[0])] += 1
    for s in sequences:
        assert abs(counts[s] / draws - probabilities[s]) < 0.06, (s, counts[s] / draws, probabilities[s])


def test_scoring_samples_in_one_batch_gives_what_scoring_each_alone_gives(env):
    # one batched pass replaces a pass per sample in every update; it must not change a single score
    planner = HierarchicalPlanner(env.graph, device_mask(env), SMALL)
    samples = planner.sample(5)  # drawn in one batched pass: independent placements, not one repeated
    assert len({tuple(s.assignment) for s in samples}) > 1
    # (self-imitation's score of the best sample rides in the same pass as the update's samples)
    batched = [scores.numpy() for scores in planner.score(samples)]
    for index, sample in enumerate(samples):
        alone = [float(scores[0]) for scores in planner.score([sample])]
        assert alone[0] == pytest.approx(float(batched[0][index]), rel=1e-5, abs=1e-4)
        assert alone[1] == pytest.approx(float(batched[1][index]), rel=1e-5)
        assert alone[2] == pytest.approx(float(batched[2][index]), rel=1e-5, abs=1e-4)


def test_gradients_reach_both_grouper_and_placer(env):
    planner = HierarchicalPlanner(env.graph, device_mask(env), SMALL)
    sample = planner.sample()[0]
    with tf.GradientTape() as tape:
        grouper_lp, placer_lp, _, _ = planner.policy.log_prob(
            tf.constant(sample.groups[None], tf.int32), tf.constant(sample.group_devices[None], tf.int32),
            tf.constant(sample.noise[None], tf.float32), tf.constant(1.0))
        total = grouper_lp[0] + placer_lp[0]
    variables = planner.policy.trainable_variables
    norms = {v.name: float(tf.norm(g)) for v, g in zip(variables, tape.gradient(total, variables)) if g is not None}
    assert any(name.startswith("grouper/") and n > 0 for name, n in norms.items())
    assert any(name.startswith("placer/decoder") and n > 0 for name, n in norms.items())
    assert any(name.startswith("placer/encoder") and n > 0 for name, n in norms.items())


def test_same_seed_same_proposals_and_updates(env):
    runs = []
    for _ in range(2):
        planner = HierarchicalPlanner(env.graph, device_mask(env), SMALL)
        proposals = planner.propose(2)
        metrics = planner.learn(proposals, [-1.0, -2.0])
        runs.append((proposals, metrics, planner.propose(2)))
    for a, b in zip(runs[0][0] + runs[0][2], runs[1][0] + runs[1][2]):
        assert np.array_equal(a, b)
    assert runs[0][1] == runs[1][1]


def test_training_improves_on_the_first_samples_and_writes_the_best_placement(env, tmp_path):
    planner = HierarchicalPlanner(env.graph, device_mask(env), SMALL)
    state = train(planner, env, tmp_path, TrainingConfig(updates=6, progress=False))
    assert state.updates == 6 and state.samples == 24
    first = state.history[0]["step_time_best"]
    assert state.best_step_time <= first
    saved = load_placement(tmp_path / "best_placement.json", env.graph, env.devices)
    assert saved.metadata["step_time"] == pytest.approx(state.best_step_time)
    assert env.target.evaluate(saved.group_devices).seconds == pytest.approx(state.best_step_time)


@pytest.mark.parametrize("make_agent", [
    # the two planners without imitation are slow-marked (9 s each): their imitating runs save all they save, and more
    pytest.param(lambda env: HierarchicalPlanner(env.graph, device_mask(env), SMALL), marks=pytest.mark.slow),
    pytest.param(lambda env: ColocationPlacer(env.graph, device_mask(env), SMALL_COLOCATION), marks=pytest.mark.slow),
    lambda env: CrossEntropyMethod(device_mask(env), seed=5),
    # self-imitation keeps the best sample in the agent: a resumed run must imitate the same one
    lambda env: HierarchicalPlanner(env.graph, device_mask(env), replace(SMALL, imitation_weight=0.5)),
    lambda env: ColocationPlacer(env.graph, device_mask(env), replace(SMALL_COLOCATION, imitation_weight=0.5)),
    # the moves head climbs from its best sample: a resumed run must move units of the same anchor
    lambda env: GraphPolicyAgent(env.graph, device_mask(env), env.devices,
                                 GraphAgentConfig(hidden_size=16, message_rounds=2, head="moves", moves_per_sample=3)),
], ids=["hierarchical", "colocation", "cem", "hierarchical-imitation", "colocation-imitation", "graph-moves"])
def test_killed_training_resumes_where_it_stopped(env, tmp_path, make_agent):
    straight = train(make_agent(env), env, tmp_path / "straight", TrainingConfig(updates=5, progress=False))

    class Killed(Exception):
        pass

    def kill_after_three(update, metrics):
        if update == 3:
            raise Killed

    with pytest.raises(Killed):
        train(make_agent(env), env, tmp_path / "resumed", TrainingConfig(updates=5, progress=False), callbacks=[kill_after_three])
    assert json.loads((tmp_path / "resumed" / "trainer_state.json").read_text())["updates"] == 3
    resumed = train(make_agent(env), env, tmp_path / "resumed", TrainingConfig(updates=5, progress=False))
    assert resumed.updates == 5
    assert [h["reward_mean"] for h in resumed.history] == [h["reward_mean"] for h in straight.history]
    assert resumed.best_assignment == straight.best_assignment


class _GuessingAgent:
    """Proposes the given placements in turn and believes in another one: the policy whose samples stay
    a few groups off the placement it has learned."""

    name = "guessing"

    def __init__(self, proposals, guess):
        self.proposals, self.guess, self.turn = proposals, guess, 0

    def propose(self, count):
        picked = [self.proposals[(self.turn + i) % len(self.proposals)] for i in range(count)]
        self.turn += count
        return picked

    def learn(self, assignments, rewards):
        return {}

    def best_guess(self):
        return self.guess

    def checkpoint_objects(self):
        return {}

    def numpy_state(self):
        return {}

    def load_numpy_state(self, state):
        pass


@pytest.mark.parametrize("greedy_every", [0, 2])
def test_the_greedy_placement_is_evaluated_as_a_sample_and_kept_when_best(env, tmp_path, greedy_every):
    rng = np.random.default_rng(0)
    candidates = [rng.integers(0, 2, env.num_units) for _ in range(6)] + [np.zeros(env.num_units, int)]
    ranked = sorted(candidates, key=lambda c: env.target.evaluate(c).seconds)
    guess, others = ranked[0], ranked[1:]
    agent = _GuessingAgent(others, guess)
    state = train(agent, env, tmp_path, TrainingConfig(updates=4, samples_per_update=2, greedy_every=greedy_every,
                                                       progress=False))
    greedy_updates = [h["update"] for h in state.history if "step_time_greedy" in h]
    if greedy_every:
        assert state.samples == 4 * 2 + 2 and greedy_updates == [2, 4]
        assert list(state.best_assignment) == [int(a) for a in guess]
        assert state.best_step_time == pytest.approx(env.target.evaluate(guess).seconds)
        saved = load_placement(tmp_path / "best_placement.json", env.graph, env.devices)
        assert saved.metadata["step_time"] == pytest.approx(state.best_step_time)
    else:
        assert state.samples == 8 and greedy_updates == []
        assert list(state.best_assignment) != [int(a) for a in guess]


class _ScriptedTimes(gym.Wrapper):
    """Step times from a script per placement, like a measured backend whose first timing can be lucky."""

    def __init__(self, env, script):
        super().__init__(env)
        self.script = {key: list(times) for key, times in script.items()}

    def step(self, action):
        step_time = self.script[tuple(int(a) for a in action)].pop(0)
        return None, -math.sqrt(step_time), True, False, {"step_time": step_time, "ok": True}


@pytest.mark.parametrize("confirm_repeats", [0, 2])
def test_a_lucky_timing_does_not_become_the_best_when_improvements_are_confirmed(env, tmp_path, confirm_repeats):
    lucky, steady = np.zeros(env.num_units, int), np.arange(env.num_units) % 2
    fluke = 1 - steady
    noisy = _ScriptedTimes(env, {tuple(lucky): [1.0, 3.0, 3.0, 3.0, 3.0], tuple(steady): [2.0, 2.0, 2.0, 2.5, 2.5],
                                 tuple(fluke): [1.5, 4.0, 4.0]})
    state = train(_GuessingAgent([lucky, steady, fluke], lucky), noisy, tmp_path,
                  TrainingConfig(updates=3, samples_per_update=1, confirm_repeats=confirm_repeats, progress=False))
    if confirm_repeats:
        # lucky's median (1, 3, 3) is 3 s; steady beats its next two timings side by side; fluke loses to
        # steady side by side, and steady keeps its fresh time. Each timing is counted as a sample.
        assert list(state.best_assignment) == steady.tolist() and state.best_step_time == 2.5
        # updates 2 and 3 timed the best again side by side: a chart of the best marks them
        assert [h["best_retimed"] for h in state.history] == [False, True, True]
        assert state.samples == 3 + 2 + 2 * 2 + 2 * 2
        assert load_placement(tmp_path / "best_placement.json", env.graph, env.devices).metadata["step_time"] == 2.5
    else:
        assert list(state.best_assignment) == lucky.tolist() and state.best_step_time == 1.0 and state.samples == 3
        assert not any(h["best_retimed"] for h in state.history)


def test_cross_entropy_method_concentrates_and_random_search_keeps_its_best(env):
    cem = CrossEntropyMethod(device_mask(env), seed=0)
    entropies = []
    for _ in range(5):
        proposals = cem.propose(8)
        rewards = [env.target.evaluate(p).seconds * -1 for p in proposals]
        entropies.append(cem.learn(proposals, rewards)["entropy"])
    assert entropies[-1] < entropies[0]
    search = RandomSearch(device_mask(env), seed=0)
    proposals = search.propose(4)
    search.learn(proposals, [-3.0, -1.0, -2.0, -4.0])
    assert np.array_equal(search.best_guess(), proposals[1])


def test_colocation_placer_scores_its_samples_and_its_gradients_reach_encoder_and_decoder(env):
    placer = ColocationPlacer(env.graph, device_mask(env), SMALL_COLOCATION)
    sample = placer.sample()
    assert sample.devices.shape == (env.num_units,)
    with tf.GradientTape() as tape:
        log_probs, entropies, _ = placer.score([sample])
        log_prob, entropy = log_probs[0], entropies[0]
    assert float(log_prob) < 0 and float(entropy) > 0
    variables = placer.policy.trainable_variables
    norms = {v.name: float(tf.norm(g)) for v, g in zip(variables, tape.gradient(log_prob, variables)) if g is not None}
    assert any("encoder" in name and n > 0 for name, n in norms.items())
    assert any("decoder" in name and n > 0 for name, n in norms.items())
    # Greedy decoding picks, unit by unit, the device the scored distribution favours.
    greedy = placer.sample(greedy=True)
    assert float(placer.score([greedy])[0][0]) >= float(log_prob)


def test_training_through_a_vector_environment(tmp_path):
    import gymnasium as gym

    import envs  # noqa: F401

    vector = gym.make_vec("placer/Placement-v0", num_envs=4, vectorization_mode="sync", model="two-tower", size="tiny")
    try:
        single = vector.envs[0].unwrapped
        single.reset(seed=0)
        planner = HierarchicalPlanner(single.graph, single.device_mask, SMALL)
        state = train(planner, vector, tmp_path, TrainingConfig(updates=2, samples_per_update=4, greedy_every=2,
                                                                progress=False))
    finally:
        vector.close()
    # The greedy placement goes to every sub-environment at once (4 more samples), the median is kept.
    assert state.samples == 8 + 4 and len(state.best_assignment) == single.num_units
    assert np.isfinite(state.history[-1]["step_time_greedy"])
    # The best placement is a placement file, whatever the environment.
    best = read_placement_file(tmp_path / "best_placement.json")
    assert best.metadata["step_time"] == pytest.approx(state.best_step_time)
    assert list(best.to_placement(single.graph, single.devices).group_devices) == list(state.best_assignment)


def test_per_decision_entropy_averages_the_grouper_over_units_and_the_placer_over_groups(env):
    summed = HierarchicalPlanner(env.graph, device_mask(env), SMALL)
    averaged = HierarchicalPlanner(env.graph, device_mask(env), reference_args(
        **{**SMALL.__dict__, "entropy_normalization": "per-decision"}))
    sample = summed.sample()[0]
    logits = summed.policy.grouper_logits().numpy()
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    grouper_entropy = -(probabilities * np.log(probabilities)).sum()
    _, _, _, placer_entropy = summed.policy.log_prob(
        tf.constant(sample.groups[None], tf.int32), tf.constant(sample.group_devices[None], tf.int32),
        tf.constant(sample.noise[None], tf.float32), tf.constant(1.0))
    placer_entropy = placer_entropy[0]
    units, groups = env.num_units, SMALL.num_groups
    assert float(summed.score([sample])[1][0]) == pytest.approx(grouper_entropy + float(placer_entropy), rel=1e-4)
    assert float(averaged.score([sample])[1][0]) == pytest.approx(
        grouper_entropy / units + float(placer_entropy) / groups, rel=1e-4)
    with pytest.raises(ValueError, match="entropy_normalization"):
        reference_args(entropy_normalization="mean")


def test_entropy_bonus_spreads_the_policy_when_rewards_carry_no_signal(env):
    config = Args(**{**SMALL.__dict__, "entropy_weight": 1.0, "entropy_normalization": "per-decision",
                                   "logits_noise_std": 0.0, "learning_rate": 0.01})
    planner = HierarchicalPlanner(env.graph, device_mask(env), config)
    entropies = []
    for _ in range(5):
        proposals = planner.propose(2)
        entropies.append(planner.learn(proposals, [-1.0, -1.0])["entropy"])
    assert entropies[-1] > entropies[0]


def _best_sample_log_probs(env, imitation_weight):
    """The placer's log-probability of the devices of the best sample (the first of equals), before and
    after 10 updates whose rewards are all equal: standardized advantages are then 0, so only imitation
    can move the policy."""
    config = replace(SMALL, imitation_weight=imitation_weight, normalize_advantages=True, logits_noise_std=0.0,
                     learning_rate=0.01)
    planner = HierarchicalPlanner(env.graph, device_mask(env), config)
    proposals = planner.propose(4)
    best = planner._pending[0]
    before = float(planner.score([best])[2][0])
    metrics = planner.learn(proposals, [-2.0] * 4)
    for _ in range(9):
        metrics = planner.learn(planner.propose(4), [-2.0] * 4)
    return before, float(planner.score([best])[2][0]), metrics


def test_self_imitation_raises_the_probability_of_the_best_sample_so_far(env):
    before, after, metrics = _best_sample_log_probs(env, 0.5)
    plain_before, plain_after, plain_metrics = _best_sample_log_probs(env, 0.0)
    assert plain_after == pytest.approx(plain_before, abs=1e-5) and after > before + 1.0
    assert metrics["best_sample_log_prob"] == pytest.approx(after, abs=1e-3) and "best_sample_log_prob" not in plain_metrics


def test_standardized_advantages_have_zero_mean_and_unit_std_and_vanish_when_equal():
    advantages = standardized(tf.constant([1.0, 2.0, 3.0, 10.0])).numpy()
    assert advantages.mean() == pytest.approx(0.0, abs=1e-6) and advantages.std() == pytest.approx(1.0, rel=1e-5)
    assert np.array_equal(standardized(tf.constant([-2.0, -2.0])).numpy(), [0.0, 0.0])


@pytest.mark.slow  # about 15 s
def test_normalized_advantages_make_the_update_independent_of_the_reward_scale(env):
    def weights_after(rewards, normalize):
        config = Args(**{**SMALL.__dict__, "entropy_weight": 0.5, "normalize_advantages": normalize,
                                       "logits_noise_std": 0.0})
        planner = HierarchicalPlanner(env.graph, device_mask(env), config)
        for batch in rewards:
            planner.learn(planner.propose(3), batch)
        return np.concatenate([v.numpy().ravel() for v in planner.policy.trainable_variables])

    small = [[-1.0, -2.0, -3.0], [-2.0, -1.0, -1.5]]
    large = [[1000 * r + 5 for r in batch] for batch in small]
    np.testing.assert_allclose(weights_after(small, True), weights_after(large, True), atol=1e-5)
    assert not np.allclose(weights_after(small, False), weights_after(large, False), atol=1e-5)


def _tower(unit_name: str) -> str | None:
    for tower in ("tower_a/", "tower_b/"):
        if unit_name.startswith(tower) or unit_name.startswith("gradients/" + tower):
            return tower
    return None


def test_partition_prior_starts_each_group_inside_one_tower_with_the_towers_in_two_halves():
    env = PlacementEnv(model="two-tower", size="small")
    env.reset(seed=0)
    config = reference_args(num_groups=8, hidden_size=16, grouping_hidden_size=8, grouping_prior="partition", seed=0)
    planner = HierarchicalPlanner(env.graph, device_mask(env), config)
    towers = [_tower(group.name) for group in env.graph.groups]
    greedy = planner.sample(greedy=True)[0].groups
    halves = {tower: {int(g) < 4 for g, t in zip(greedy, towers) if t == tower} for tower in ("tower_a/", "tower_b/")}
    # Recursive bisection: the first cut separates the towers, so each half of the groups holds one tower.
    assert len(halves["tower_a/"]) == 1 and len(halves["tower_b/"]) == 1 and halves["tower_a/"] != halves["tower_b/"]
    # Sampled groupings follow the prior for almost every unit (weight 8 over 8 groups: ~99.8%).
    sampled = np.concatenate([planner.sample()[0].groups for _ in range(5)])
    assert np.mean(sampled == np.tile(greedy, 5)) > 0.97
    # Without the prior, groups start scattered: some group mixes both towers.
    scattered = HierarchicalPlanner(env.graph, device_mask(env), replace(config, grouping_prior="none"))
    groups = scattered.sample()[0].groups
    assert any(len({t for g, t in zip(groups, towers) if g == group and t}) == 2 for group in range(8))


def test_placement_prior_starts_the_placer_on_the_partitions_cut_one_tower_per_gpu():
    env = PlacementEnv(model="two-tower", size="small")
    env.reset(seed=0)
    config = reference_args(num_groups=8, hidden_size=16, grouping_hidden_size=8, grouping_prior="partition",
                                placement_prior_weight=1.0, seed=0)
    planner = HierarchicalPlanner(env.graph, device_mask(env), config, devices=env.devices)
    gpus = [i for i, d in enumerate(env.devices) if d.kind == "GPU"]
    assignment = planner.best_guess()
    towers = [_tower(group.name) for group in env.graph.groups]
    per_tower = {tower: {int(a) for a, t in zip(assignment, towers) if t == tower} for tower in ("tower_a/", "tower_b/")}
    assert sorted(per_tower["tower_a/"] | per_tower["tower_b/"]) == gpus
    assert len(per_tower["tower_a/"]) == 1 and per_tower["tower_a/"] != per_tower["tower_b/"]
    single = env.target.evaluate(np.full(env.num_units, gpus[0])).seconds
    assert env.target.evaluate(assignment).seconds < 0.8 * single
    # The bias (1) is below the learned logits' range (2 x tanh 1): samples still try other devices.
    sampled = np.stack([planner.sample()[0].group_devices for _ in range(10)])
    assert 0.5 < np.mean(sampled == planner.sample(greedy=True)[0].group_devices) < 0.95
    with pytest.raises(ValueError, match="needs the devices"):
        HierarchicalPlanner(env.graph, device_mask(env), config)
    with pytest.raises(ValueError, match="needs grouping_prior='partition'"):
        replace(config, grouping_prior="none")


def test_unknown_grouping_prior_is_refused():
    with pytest.raises(ValueError, match="grouping_prior"):
        reference_args(grouping_prior="spectral")


def _weights(variables):
    return [v.numpy().copy() for v in variables]


@pytest.mark.parametrize("grouper_learning_rate", [0.0, 0.001])
def test_the_grouper_learns_at_its_own_rate_or_not_at_all(env, grouper_learning_rate):
    planner = HierarchicalPlanner(env.graph, device_mask(env),
                                  replace(SMALL, learning_rate=0.1, grouper_learning_rate=grouper_learning_rate))
    grouper = [*planner.policy.grouper_hidden, *planner.policy.grouper_out]
    placer = [planner.policy.decoder_lstm.kernel, *planner.policy.output]
    before_grouper, before_placer = _weights(grouper), _weights(placer)
    planner.learn(planner.propose(2), [-1.0, -2.0])
    planner.learn(planner.propose(2), [-2.0, -1.0])
    grouper_step = max(np.abs(a - b).max() for a, b in zip(_weights(grouper), before_grouper))
    placer_step = max(np.abs(a - b).max() for a, b in zip(_weights(placer), before_placer))
    # Adam moves each weight by about its learning rate per step, whatever the gradient's scale.
    assert placer_step > 0.05
    if grouper_learning_rate == 0:
        assert grouper_step == 0.0 and "grouper_optimizer" not in planner.checkpoint_objects()
    else:
        assert 0 < grouper_step < 0.003 and "grouper_optimizer" in planner.checkpoint_objects()


def test_a_would_be_best_must_win_every_round_side_by_side_not_only_the_median(env, tmp_path):
    """Of two placements as fast as each other, the faster median is a coin toss: a would-be best that loses one
    round of its confirmation stays behind the best."""
    first, close, clear = np.zeros(env.num_units, int), np.arange(env.num_units) % 2, 1 - np.arange(env.num_units) % 2
    noisy = _ScriptedTimes(env, {tuple(first): [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
                                 tuple(close): [1.0, 1.9, 2.1],  # faster median of its two rounds, one round lost
                                 tuple(clear): [1.0, 1.5, 1.5]})
    state = train(_GuessingAgent([first, close, clear], first), noisy, tmp_path,
                  TrainingConfig(updates=3, samples_per_update=1, confirm_repeats=2, progress=False))
    assert list(state.best_assignment) == clear.tolist() and state.best_step_time == 1.5
