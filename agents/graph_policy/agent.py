"""The generalizing policy as an agent for one graph on one device set, trained by REINFORCE
(`agents.policy_gradient.reinforce_update`). Two heads draw its samples: "one-shot" draws
every unit's device at once from the policy's logits (as GDP places); "moves" moves a few units of an anchor
placement (`agents.graph_policy.moves`), the anchor being the agent's start and then the best placement it
has found, so that its search climbs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from agents.base import AgentOptionError
from agents.colocation import UnitSample
from agents.graph_policy import moves
from agents.graph_policy.features import device_inputs, graph_inputs
from agents.graph_policy.policy import MOVE_VARIABLES_PREFIX, GraphPlacementPolicy, GraphPolicyConfig
from agents.graph_policy.priors import PRIOR_HEURISTICS, heuristic_votes
from agents.policy_gradient import (
    PolicyGradientConfig, ReinforceAgent, logit_noise, reinforce_update, stateless_seeds,
)
from placer.devices import DeviceSet
from placer.graph.opgraph import OpGraph

HEADS = ("one-shot", "moves")


@dataclass(frozen=True)
class GraphAgentConfig(PolicyGradientConfig):
    hidden_size: int = 64
    """Width of the policy's unit and device embeddings (GraphPolicyConfig)."""
    message_rounds: int = 4
    """Rounds of message passing over the unit graph (GraphPolicyConfig)."""
    learning_rate: float = 0.003
    """Adam's initial learning rate (the per-unit policy has no grouper to collapse, and its logits are
    shared across graphs, so it learns at a rate between the reference planner's 0.1 and the tuned 0.0003)."""
    tanh_constant: float = 2.5
    logits_noise_std: float = 0.0
    """No logit noise by default: the per-unit draws explore enough."""
    normalize_advantages: bool = True
    partition_prior: bool = True
    """Start each unit on its device in a partition of the graph over the compute devices (GraphPolicyConfig)."""
    prior_weight: float = 2.5
    """Initial weight of that prior in the logits (GraphPolicyConfig)."""
    prior_heuristics: tuple[str, ...] = PRIOR_HEURISTICS
    """Baselines whose placements vote for each unit's device, the first leading (GraphPolicyConfig)."""
    head: str = "one-shot"
    """How a sample is drawn: "one-shot" draws every unit's device at once; "moves" moves `moves_per_sample`
    units of the anchor (the start, then the best placement found), so fine-tuning searches near its start.
    Both start from the same greedy placement. With --init, the head the policy was pre-trained with."""
    moves_per_sample: int = 8
    """The "moves" head: units moved per sample."""
    try_heuristics: bool = True
    """The "moves" head: the first samples are the start and each voting heuristic's own placement, unmoved
    (`GraphPolicyAgent.start_candidates`; they count as samples), so the search climbs from the best of
    them. False: from the start alone."""

    def __post_init__(self):
        super().__post_init__()
        if self.head not in HEADS:
            raise ValueError(f"unknown head {self.head!r}: {' or '.join(repr(h) for h in HEADS)}")
        if not isinstance(self.moves_per_sample, int) or self.moves_per_sample < 1:
            raise ValueError(f"moves_per_sample must be a whole number of at least 1, got {self.moves_per_sample!r}")
        if isinstance(self.prior_heuristics, str):
            object.__setattr__(self, "prior_heuristics", (self.prior_heuristics,))
        object.__setattr__(self, "prior_heuristics", tuple(self.prior_heuristics))
        from placer.heuristics import HeuristicError, check_heuristic

        try:  # every graph the policy meets is a user's graph to it: no expert placement
            names = tuple(check_heuristic(name, builtin_model=False, simulator=True) for name in self.prior_heuristics)
        except HeuristicError as error:
            raise ValueError(f"prior_heuristics: {error}") from None
        object.__setattr__(self, "prior_heuristics", names)  # aliases resolved

    def head_options(self) -> dict:
        """The options that make the head, as a policy file records them."""
        return {"head": self.head, "moves_per_sample": self.moves_per_sample}

    def policy_config(self) -> GraphPolicyConfig:
        return GraphPolicyConfig(hidden_size=self.hidden_size, message_rounds=self.message_rounds,
                                 tanh_constant=self.tanh_constant, partition_prior=self.partition_prior,
                                 prior_weight=self.prior_weight, prior_heuristics=self.prior_heuristics,
                                 seed=self.seed)


def partition_prior(graph: OpGraph, devices: DeviceSet) -> np.ndarray:
    """[U, D] 1 on each unit's device in the METIS baseline's k-way partition over the compute devices,
    balanced by the devices' roofline op costs: the first heuristic's vote (`agents.graph_policy.priors`)."""
    return heuristic_votes(graph, devices, ("metis",))[0]


class GraphPolicyAgent(ReinforceAgent):
    """Places one graph with a `GraphPlacementPolicy` (a new one, or a pre-trained one to fine-tune)."""

    name = "graph"

    def __init__(self, graph: OpGraph, device_mask: np.ndarray, devices: DeviceSet,
                 config: GraphAgentConfig | None = None, policy: GraphPlacementPolicy | None = None,
                 optimizer: tf.keras.optimizers.Optimizer | None = None, votes: np.ndarray | None = None):
        """policy: a pre-trained policy to fine-tune (its own configuration then decides the network's
        sizes); optimizer: one shared by agents of several graphs that train one policy (pre-training);
        votes: the policy's heuristics' votes on this graph and devices (`heuristic_votes`), when a worker that
        owns the problem placed them (default: placed here)."""
        c = config or GraphAgentConfig()
        inputs = graph_inputs(graph)
        super().__init__(c, policy or GraphPlacementPolicy(c.policy_config()), device_mask.shape[1], optimizer)
        self.sample_type = UnitSample
        self.units = tf.constant(inputs.units)
        self.edges = tf.constant(inputs.edges)
        self.device_features = tf.constant(device_inputs(devices).features)
        mask = device_mask[: inputs.num_units].astype(np.float32)
        mask[mask.sum(axis=1) == 0] = 1.0  # no device fits: leave it free, the placement fails and is charged
        self.mask = tf.constant(mask)
        # The policy's own configuration decides (a pre-trained policy brings its own).
        heuristics = self.policy.config.prior_heuristics
        if not self.policy.config.partition_prior:
            votes = np.zeros((len(heuristics), inputs.num_units, len(devices)), np.float32)
        elif votes is None:
            votes = heuristic_votes(graph, devices, heuristics)
        self.prior = tf.constant(votes)
        if c.head == "moves":
            if c.moves_per_sample > inputs.num_units:
                raise AgentOptionError(f"moves_per_sample={c.moves_per_sample} is more than the {inputs.num_units} "
                                       f"units of {graph.name}: give at most {inputs.num_units}")
            self.sample_type = moves.MoveSample
            self.edges_array = inputs.edges
            # The heuristics' weighted vote where there is one: this head never trains the one-shot scores, so
            # after pre-training with it the greedy one-shot placement drifts far from anything sampled
            # (two-tower tiny: 2.28 ms against the partition's 0.28 ms). Units whose voted device is masked,
            # and graphs without the prior, start where the greedy one-shot placement puts them.
            start = self._one_shot_samples(1, greedy=True)[0].devices
            if self.policy.config.partition_prior:
                voted = self.voted_placement()
                start = np.where(mask[np.arange(inputs.num_units), voted] > 0, voted, start)
            self.start = start
            candidates = self.start_candidates() if c.try_heuristics else {"policy": start}
            self._untried_starts = list(candidates.values())

    def start_candidates(self) -> dict[str, np.ndarray]:
        """Placements worth timing before any search, by name: "policy", the policy's own (the moves head's
        start, or the greedy one-shot placement), then each voting heuristic's own placement (a heuristic
        that could not place the graph has none). A placement already named keeps its first name. Which
        heuristic wins depends on the graph family, and a policy that mixes the votes unit by unit can land on
        a majority's hybrid that is worse than any of them (RESULTS.md): timing each costs a few samples."""
        own = self.start if self.config.head == "moves" else self._one_shot_samples(1, greedy=True)[0].devices
        candidates = {"policy": own}
        votes = self.prior.numpy()
        for name, vote in zip(self.policy.config.prior_heuristics, votes):
            placement = np.argmax(vote, axis=1).astype(np.int64)
            if vote.any() and not any(np.array_equal(placement, seen) for seen in candidates.values()):
                candidates[name] = placement
        return candidates

    # -- the agent: propose, learn ---------------------------------------------------------------

    def propose(self, count: int) -> list[np.ndarray]:
        self._pending = self.sample(count)
        return [sample.assignment for sample in self._pending]

    def best_guess(self) -> np.ndarray:
        return self.sample(1, greedy=True)[0].assignment

    def learn(self, assignments: Sequence[np.ndarray], rewards: Sequence[float]) -> Mapping[str, float]:
        """One REINFORCE update (`agents.policy_gradient.reinforce_update`) from the rewards of the last
        `propose()`'s placements; returns the metrics to log."""
        samples, self._pending = self._pending, []
        return reinforce_update(self, samples, rewards, self.score, self._parameter_parts())

    def score(self, samples: Sequence) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """[B] log-probabilities, [B] entropies and [B] what self-imitation maximizes (the whole
        log-probability) of `samples` under the current policy, by the agent's head."""
        scores = self._move_log_probs if self.config.head == "moves" else self._one_shot_log_probs
        log_probs, entropies = scores(list(samples))
        return log_probs, entropies, log_probs

    def load_numpy_state(self, state: Mapping[str, Any]) -> None:
        super().load_numpy_state(state)
        if self.best.sample is not None and self.config.head == "moves":
            self._untried_starts = []  # a resumed run timed its starts before it stopped

    def voted_placement(self) -> np.ndarray:
        """[U] each unit's device by the heuristics' votes, each weighted as the policy trusts it for that unit
        (ties to the lower device index)."""
        weights = self.policy.prior_weights(self.units, self.edges)
        return tf.argmax(tf.einsum("nk,knd->nd", weights, self.prior), axis=1).numpy().astype(np.int64)

    def imitate(self, target: np.ndarray) -> float:
        """One gradient step towards placing as `target` [U] does (cross-entropy of every unit's device
        logits, mean over units), with this agent's optimizer and learning rate: a warm start before
        rewards, as DOPPLER imitates a heuristic first. Returns the loss before the step."""
        target_t = tf.constant(np.asarray(target, np.int32))
        # The variables rewards train too (the move scorer's get no gradient here): Adam refuses, later, a
        # variable it was not first called with.
        variables = [v for part, _, _ in self._parameter_parts() for v in part]
        with tf.GradientTape() as tape:
            logits = self._masked_logits(tf.zeros([1, int(self.units.shape[0]), self.num_devices]))[0]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target_t, logits=logits))
        gradients = [tf.zeros_like(v) if g is None else g
                     for g, v in zip(tape.gradient(loss, variables), variables)]
        clipped, _ = tf.clip_by_global_norm(gradients, self.config.grad_bound)
        self.optimizer.apply_gradients(zip(clipped, variables))
        return float(loss)

    @property
    def anchor(self) -> np.ndarray:
        """The "moves" head: the placement samples move units of, the best one found (or the start)."""
        return self.start if self.best.sample is None else self.best.sample.assignment

    def _masked_logits(self, noise: tf.Tensor) -> tf.Tensor:
        """[B, U, D] for noise [B, U, D]."""
        logits = self.policy.logits_with_prior(self.units, self.edges, self.device_features, self.prior)
        return self._masked(logits, noise)

    def _masked(self, logits: tf.Tensor, noise: tf.Tensor) -> tf.Tensor:
        return tf.where(self.mask > 0, (logits + noise) / self.config.temperature, moves.MASKED)

    def sample(self, count: int = 1, greedy: bool = False) -> list:
        """`count` samples by the agent's head (the greedy one `count` times when greedy)."""
        if self.config.head == "moves":
            return self._move_samples(count, greedy)
        return self._one_shot_samples(count, greedy)

    def _noise(self, shape, greedy: bool) -> tf.Tensor:
        return logit_noise(self.rng, shape, self.config, int(self.updates.numpy()), greedy)

    def _parameter_parts(self):
        variables = list(self.policy.trainable_variables)
        if self.config.head == "one-shot":  # it never reads the move scorer, so no gradient reaches it
            variables = [v for v in variables if not v.name.startswith(MOVE_VARIABLES_PREFIX)]
        return [(variables, self.optimizer, self.config.learning_rate)]

    # -- one-shot: every unit's device at once -------------------------------------------------------

    def _one_shot_samples(self, count: int, greedy: bool = False) -> list[UnitSample]:
        units, d = int(self.units.shape[0]), self.num_devices
        noise = self._noise([count, units, d], greedy)
        logits = self._masked_logits(noise)
        if greedy:
            devices = tf.argmax(logits, axis=2, output_type=tf.int32)
        else:
            seed = stateless_seeds(self.rng, 1)[0]
            flat = tf.random.stateless_categorical(tf.reshape(logits, [-1, d]), 1, seed=seed, dtype=tf.int32)
            devices = tf.reshape(flat, [count, units])
        devices, noise = devices.numpy().astype(np.int64), noise.numpy()
        return [UnitSample(devices[i], noise[i]) for i in range(count)]

    def _one_shot_log_probs(self, samples: list[UnitSample]):
        noise = tf.constant(np.stack([s.noise for s in samples]), tf.float32)
        chosen = tf.constant(np.stack([s.devices for s in samples]), tf.int32)
        log_softmax = tf.nn.log_softmax(self._masked_logits(noise))  # [B, U, D]
        log_probs = tf.reduce_sum(tf.gather(log_softmax, chosen, axis=2, batch_dims=2), axis=1)
        entropies = -tf.reduce_sum(tf.exp(log_softmax) * log_softmax, axis=[1, 2])
        if self.config.entropy_normalization == "per-decision":
            entropies = entropies / float(self.units.shape[0])
        return log_probs, entropies

    # -- moves: a few units of the anchor --------------------------------------------------------------

    def _move_logits(self, noise: tf.Tensor, anchors: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
        """[B, U] move logits and [B, U, D] destination logits of B anchors [B, U] under noise [B, U, D]."""
        logits, move_bias = self.policy.logits_and_move_bias(self.units, self.edges, self.device_features, self.prior)
        cut = tf.constant(moves.cut_shares(self.edges_array, anchors))
        move_logits, away = moves.move_and_away_logits(self.policy, move_bias, self._masked(logits, noise),
                                                       tf.constant(anchors, tf.int32), cut)
        return move_logits / self.config.temperature, away

    def _move_samples(self, count: int, greedy: bool = False) -> list[moves.MoveSample]:
        k, anchor = self.config.moves_per_sample, self.anchor
        noise = self._noise([count, int(self.units.shape[0]), self.num_devices], greedy)
        if greedy:  # the best placement found: applying the likeliest moves would be a placement nobody timed
            return [moves.MoveSample.unmoved(anchor, k, n) for n in noise.numpy()]
        move_logits, away = self._move_logits(noise, np.tile(anchor, (count, 1)))
        units, devices = moves.draw_moves(move_logits, away, k, stateless_seeds(self.rng, 2))
        noise = noise.numpy()
        samples = [moves.MoveSample(anchor.copy(), units[i], devices[i], noise[i]) for i in range(count)]
        # The start candidates' own step times come back with the first rewards, so the anchor moves to the best
        # of them, and leaves it only for a placement that beats it (their log-probability is 0: they teach the
        # policy nothing).
        for i in range(min(count, len(self._untried_starts))):
            samples[i] = moves.MoveSample.unmoved(self._untried_starts.pop(0), k, noise[i])
        return samples

    def _move_log_probs(self, samples: list[moves.MoveSample]):
        noise = tf.constant(np.stack([s.noise for s in samples]), tf.float32)
        move_logits, away = self._move_logits(noise, np.stack([s.anchor for s in samples]))
        log_probs, entropies = moves.move_log_probs(move_logits, away,
                                                    tf.constant(np.stack([s.units for s in samples]), tf.int32),
                                                    tf.constant(np.stack([s.devices for s in samples]), tf.int32))
        if self.config.entropy_normalization == "per-decision":
            entropies = entropies / float(2 * self.config.moves_per_sample)
        return log_probs, entropies
