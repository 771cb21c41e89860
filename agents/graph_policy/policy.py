"""The generalizing placement policy: message passing over the unit graph, then a score per (unit, device).

A unit's embedding starts from its `GraphInputs` row and is refined by rounds of messages from its
producers and its consumers (means, so a unit with many inputs is not louder), with residual connections.
A device's embedding comes from its `DeviceInputs` row. The logit of placing a unit on a device is an
additive-attention score of the two, bounded by tanh. Nothing depends on the number of units or devices,
so one set of weights places any graph on any device set whose kinds it has seen.

Devices of one kind and model look alike to that score, so on its own the policy can put a graph on one
GPU or spread it at random, but never split it. Heuristics' votes break the tie (`agents.graph_policy.priors`):
the caller gives each unit the device each heuristic puts it on, and the policy weighs each vote per unit
(a learned, non-negative weight from the unit's embedding and from the mean embedding of its graph), as the
hierarchical planner's placement prior does with one fixed weight. The first heuristic (METIS) starts at
`prior_weight`, the others nearly silent, so an untrained policy places as METIS does; pre-training learns
which vote to follow where (imitation of the best heuristic, then rewards).

A move scorer serves the "moves" head (`agents.graph_policy.moves`), which changes a few units of a
placement per sample: it scores how worth moving each unit is, from its embedding and two facts about the
placement it sits in (the share of its edges that cross to another device, and how much more its device
logits favour the other devices than its own). Every policy has it, whichever head samples from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from agents.graph_policy.features import DEVICE_KINDS, OP_TYPE_BUCKETS
from agents.layers import dense

UNIT_FEATURES = OP_TYPE_BUCKETS + 6
INITIAL_MOVE_CUT_WEIGHT = 3.0
MOVE_VARIABLES_PREFIX = "move/"
"""The move scorer's variables are named under it (policy files of version 2 have none)."""
GRAPH_PRIOR_VARIABLES_PREFIX = "prior/graph/"
"""The graph-level share of the votes' weights (policy files before version 4 have none)."""
DEVICE_FEATURES = len(DEVICE_KINDS) + 4


@dataclass(frozen=True)
class GraphPolicyConfig:
    hidden_size: int = 64
    """Width of unit and device embeddings."""
    message_rounds: int = 4
    """Rounds of message passing: a unit sees this many hops of the graph around it."""
    tanh_constant: float = 2.5
    """Logits are bounded to C * tanh(score)."""
    partition_prior: bool = True
    """Start each unit on its device in a partition of the graph over the compute devices (see the module)."""
    prior_weight: float = 2.5
    """Initial weight of the first heuristic's vote in every unit's logits, learned per unit from there on. It
    is the tuned preset's placement prior weight: among three equally scored devices, a unit keeps its
    partition's device with probability e^2.5 / (e^2.5 + 2) = 0.86."""
    prior_heuristics: tuple[str, ...] = ("metis", "m-etf", "m-sct")
    """Baselines whose placements vote for each unit's device (`agents.graph_policy.priors`); the first leads."""
    other_prior_weight: float = 0.1
    """Initial weight of every other heuristic's vote: too small to outvote the first before training."""
    prior_weight_bound: float | None = 5.0
    """Each vote's weight is bounded to B * tanh(w / B), as the scores are: unbounded, 60 steps of imitating a
    heuristic drove weights to 10-70, and a policy that sure never samples anything else (None: unbounded,
    as in policy files before version 4)."""
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "prior_heuristics", tuple(self.prior_heuristics))  # a JSON record gives a list
        if not self.prior_heuristics or not all(isinstance(h, str) for h in self.prior_heuristics):
            raise ValueError(f"prior_heuristics must name at least one baseline, got {self.prior_heuristics!r}")
        if not self.other_prior_weight > 0:
            raise ValueError(f"other_prior_weight must be positive, got {self.other_prior_weight!r}")
        if self.prior_weight_bound is not None and not self.prior_weight_bound > max(self.prior_weight,
                                                                                   self.other_prior_weight):
            raise ValueError(f"prior_weight_bound must be above prior_weight ({self.prior_weight}) and "
                             f"other_prior_weight ({self.other_prior_weight}), got {self.prior_weight_bound!r}")
        for name in ("hidden_size", "message_rounds"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        if not self.prior_weight > 0:
            raise ValueError(f"prior_weight must be positive, got {self.prior_weight!r}")


def _inverse_weight(weight: float, bound: float | None) -> float:
    """The raw value whose bounded softplus (`GraphPlacementPolicy._prior_weights`) is `weight`."""
    if bound is not None:
        weight = bound * float(np.arctanh(weight / bound))
    return float(np.log(np.expm1(weight)))



class GraphPlacementPolicy(tf.Module):
    def __init__(self, config: GraphPolicyConfig | None = None):
        super().__init__(name="graph_placement_policy")
        self.config = c = config or GraphPolicyConfig()
        h, seed = c.hidden_size, c.seed
        self.unit_embedding = dense("unit_embedding", UNIT_FEATURES, h, seed)
        # per round: kernels for the unit itself, the mean of its producers, the mean of its consumers; a bias
        self.rounds = [(dense(f"round{r}/self", h, h, seed + 10 * r + 1)[0],
                        dense(f"round{r}/from_producers", h, h, seed + 10 * r + 2)[0],
                        *dense(f"round{r}/from_consumers", h, h, seed + 10 * r + 3))
                       for r in range(c.message_rounds)]
        self.device_embedding = dense("device_embedding", DEVICE_FEATURES, h, seed + 1000)
        self.unit_query = dense("unit_query", h, h, seed + 1001)[0]
        self.device_key = dense("device_key", h, h, seed + 1002)[0]
        self.score_vector = tf.Variable(tf.keras.initializers.GlorotUniform(seed=seed + 1003)((h, 1))[:, 0],
                                        name="score_vector")
        if c.partition_prior:
            # bound(softplus(h . gate + bias)) starts at prior_weight for every unit: the gate starts at zero
            self.prior_gate = tf.Variable(tf.zeros([h]), name="prior/gate")
            self.prior_bias = tf.Variable(_inverse_weight(c.prior_weight, c.prior_weight_bound), name="prior/bias")
            others = len(c.prior_heuristics) - 1
            if others:
                self.other_prior_gate = tf.Variable(tf.zeros([h, others]), name="prior/others/gate")
                self.other_prior_bias = tf.Variable(
                    tf.fill([others], _inverse_weight(c.other_prior_weight, c.prior_weight_bound)), name="prior/others/bias")
            # the mean embedding of the graph: which heuristic wins is mostly a property of the whole graph
            self.graph_prior_gate = tf.Variable(tf.zeros([h, others + 1]), name=GRAPH_PRIOR_VARIABLES_PREFIX + "gate")
        # Before any training, a unit on the boundary between two devices' parts is e^CUT_WEIGHT times as
        # likely to be moved as one inside a part (moving boundary units is how Kernighan-Lin refines a cut),
        # and the gate starts at zero, so the embedding has no say until it learns one.
        self.move_gate = tf.Variable(tf.zeros([h]), name="move/gate")
        self.move_cut_weight = tf.Variable(INITIAL_MOVE_CUT_WEIGHT, name="move/cut_weight")
        self.move_regret_weight = tf.Variable(1.0, name="move/regret_weight")

    @tf.function(reduce_retracing=True)
    def encode(self, units: tf.Tensor, edges: tf.Tensor) -> tf.Tensor:
        """[N, H] unit embeddings of a `GraphBatch` (units [N, F], edges [E, 2])."""
        kernel, bias = self.unit_embedding
        h = tf.nn.relu(tf.matmul(units, kernel) + bias)
        count = tf.shape(units)[0]
        producers, consumers = edges[:, 0], edges[:, 1]
        ones = tf.ones_like(producers, tf.float32)
        in_degree = tf.maximum(tf.math.unsorted_segment_sum(ones, consumers, count), 1.0)[:, None]
        out_degree = tf.maximum(tf.math.unsorted_segment_sum(ones, producers, count), 1.0)[:, None]
        for own, from_producers, from_consumers, round_bias in self.rounds:
            inbound = tf.math.unsorted_segment_sum(tf.gather(h, producers), consumers, count) / in_degree
            outbound = tf.math.unsorted_segment_sum(tf.gather(h, consumers), producers, count) / out_degree
            h = h + tf.nn.relu(tf.matmul(h, own) + tf.matmul(inbound, from_producers)
                               + tf.matmul(outbound, from_consumers) + round_bias)
        return h

    @tf.function(reduce_retracing=True)
    def logits(self, units: tf.Tensor, edges: tf.Tensor, devices: tf.Tensor) -> tf.Tensor:
        """[N, D] logits of placing each unit of the batch on each device (devices: [D, K] `DeviceInputs`),
        without a prior."""
        return self._scores(self.encode(units, edges), devices)

    @tf.function(reduce_retracing=True)
    def logits_with_prior(self, units: tf.Tensor, edges: tf.Tensor, devices: tf.Tensor, prior: tf.Tensor) -> tf.Tensor:
        """[N, D] logits of one graph with the heuristics' votes: prior [K, N, D] is 1 on the device heuristic k
        puts each unit on (`agents.graph_policy.priors.heuristic_votes`)."""
        h = self.encode(units, edges)
        return self._with_prior(h, self._scores(h, devices), prior)

    @tf.function(reduce_retracing=True)
    def prior_weights(self, units: tf.Tensor, edges: tf.Tensor) -> tf.Tensor:
        """[N, K] how much each unit of one graph trusts each heuristic's vote (all >= 0)."""
        return self._prior_weights(self.encode(units, edges))

    @tf.function(reduce_retracing=True)
    def logits_and_move_bias(self, units: tf.Tensor, edges: tf.Tensor, devices: tf.Tensor,
                             prior: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`logits_with_prior` [N, D], and [N] each unit's learned share of its move logit (`move_logits`),
        from one pass of the encoder."""
        h = self.encode(units, edges)
        return self._with_prior(h, self._scores(h, devices), prior), tf.linalg.matvec(h, self.move_gate)

    def move_logits(self, move_bias: tf.Tensor, cut_shares: tf.Tensor, regrets: tf.Tensor) -> tf.Tensor:
        """[B, N] logits of choosing each unit to move, for B placements: move_bias [N] from
        `logits_and_move_bias`; cut_shares [B, N] the share of each unit's edges that cross to another
        device; regrets [B, N] the log-odds of the unit's other devices against its own. Bounded to
        +-tanh_constant, as the device scores are: unbounded, 200 pre-training updates collapsed the draw onto a
        few units (nmt-2 tiny: 92 % of the probability on 8 of 2,239 units, entropy 1.1 against 7.7 uniform),
        and fine-tuning then never moved anything else and never improved on its start."""
        raw = move_bias[None, :] + self.move_cut_weight * cut_shares + self.move_regret_weight * regrets
        return self.config.tanh_constant * tf.tanh(raw / self.config.tanh_constant)

    def _with_prior(self, h: tf.Tensor, scores: tf.Tensor, prior: tf.Tensor) -> tf.Tensor:
        if not self.config.partition_prior:
            return scores
        return scores + tf.einsum("nk,knd->nd", self._prior_weights(h), prior)

    def _prior_weights(self, h: tf.Tensor) -> tf.Tensor:
        raw = tf.linalg.matvec(h, self.prior_gate)[:, None] + self.prior_bias
        if len(self.config.prior_heuristics) > 1:
            raw = tf.concat([raw, tf.matmul(h, self.other_prior_gate) + self.other_prior_bias], axis=1)
        graph = tf.matmul(tf.reduce_mean(h, axis=0, keepdims=True), self.graph_prior_gate)
        weights = tf.nn.softplus(raw + graph)
        bound = self.config.prior_weight_bound
        return weights if bound is None else bound * tf.tanh(weights / bound)

    def _scores(self, h: tf.Tensor, devices: tf.Tensor) -> tf.Tensor:
        kernel, bias = self.device_embedding
        d = tf.nn.relu(tf.matmul(devices, kernel) + bias)
        query = tf.matmul(h, self.unit_query)[:, None, :]
        key = tf.matmul(d, self.device_key)[None, :, :]
        score = tf.reduce_sum(tf.tanh(query + key) * self.score_vector, axis=2)
        return self.config.tanh_constant * tf.tanh(score)

    def weights(self) -> list[np.ndarray]:
        """Every weight, in a fixed order (what a policy file holds)."""
        return [v.numpy() for v in self._ordered_variables()]

    def set_weights(self, values: list[np.ndarray], *, missing_prefixes: tuple[str, ...] = ()) -> None:
        """values: `weights()` of a policy of the same configuration; missing_prefixes: names of variables
        the values lack (an older policy file), which keep their initial values."""
        variables = [v for v in self._ordered_variables() if not v.name.startswith(missing_prefixes)]
        if len(values) != len(variables) or any(v.shape != np.shape(x) for v, x in zip(variables, values)):
            raise ValueError("these weights are of another network (other sizes): build the policy with the "
                             "configuration it was saved with")
        for variable, value in zip(variables, values):
            variable.assign(value)

    def _ordered_variables(self) -> list[tf.Variable]:
        return sorted(self.trainable_variables, key=lambda v: v.name)
