"""The hierarchical planner (Mirhoseini et al., ICLR 2018), the seed paper's agent, in one file.

A feed-forward grouper assigns every unit (colocation group) of the graph to one of G groups; a seq-to-seq
placer with attention gives each group a device; both are trained jointly by REINFORCE on the step time
of the placements they sample. Read top to bottom: the settings (`Args`, whose defaults are the values
`placer train` runs; `REFERENCE`, the numbers of TensorFlow grappler's `hierarchical_controller.py`), one
sample, the networks, then the agent: how it samples and scores placements, and its update (the steps of
REINFORCE the learned placers share, in order, in `agents.policy_gradient.reinforce_update`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from agents.features import UnitFeatures, unit_features
from agents.layers import LSTMCell, dense
from agents.policy_gradient import (
    GradientStep, Parts, ReinforceAgent, apply_gradients, check_loss_settings, logit_noise, reinforce_loss,
    reinforce_update, stateless_seeds,
)
from placer.devices import DeviceSet
from placer.graph.opgraph import OpGraph


@dataclass(frozen=True)
class Args:
    """The planner's settings. The defaults are the tuned setting `placer train` runs (`--preset tuned`, the
    best-known one: docs/results/learned-placement.md); `REFERENCE` holds grappler's (`--preset reference`)."""

    # -- the networks --
    num_groups: int | None = None
    """Groups the grouper forms; None: min(256, 20 x devices)."""
    grouping_hidden_size: int = 64
    """Width of the grouper's hidden layer."""
    hidden_size: int = 256
    """Width of the placer's LSTMs and attention. The reference's 512 costs 2.1x more per sample (its LSTMs'
    and attention's work grows with it) and, in the same minutes on the simulator, learned no more: 256 wide with
    32 samples an update (4-6x the samples) ended 4.5-6.9 % ahead on two of the papers' five setups and within
    0.4 % on the other three (docs/results/learned-placement.md, "The planner's own speed")."""
    attention: str = "additive"
    """How the decoder scores the groups at each step. "additive" (Bahdanau et al., as the reference planner):
    v . tanh(key + query), an elementwise [samples, groups, hidden] tensor per step. "dot": key . query /
    sqrt(hidden) (Luong et al.), one matrix product per step: 1.2x the samples per second at NMT-4 paper size
    (experiments/probes/planner_speed.py), its learning not yet compared."""

    # -- sampling --
    tanh_constant: float = 2.5
    """Placer logits are bounded to C * tanh(logits)."""
    temperature: float = 0.5
    """Placer logits are divided by it before sampling (below 1: sharper sampling)."""
    logits_noise_std: float = 0.5
    """Gaussian noise added to placer logits while exploring early on."""
    noise_updates: int = 750
    """Updates during which logit noise is added."""

    # -- where the policy starts --
    grouping_prior: str = "partition"
    """Where the grouper starts. "none" (the reference): from its random weights, so early groups are
    scattered across the graph, almost every edge crosses devices, and merging everything into one group
    is the first improvement REINFORCE finds. "partition": its logits are biased towards a METIS recursive
    bisection of the unit graph into the G groups (needs pymetis), so groups start as contiguous pieces of
    the graph, numbered so that neighbouring groups are neighbouring pieces; the placer then chooses devices
    for pieces, and the grouper still learns on top of the bias."""
    grouping_prior_weight: float = 8.0
    """With grouping_prior="partition": the logit bias towards each unit's part (8: ~99% of units start in
    their part with 40 groups)."""
    placement_prior_weight: float = 2.5
    """With grouping_prior="partition" and a weight above 0, the placer starts from the partition too: its
    bounded logits get this bias towards spreading the groups over the compute devices (the GPUs when there
    are any) in contiguous blocks, groups [0, G/K) on the first, so its greedy placement starts as the
    partition's K-way cut. Below 2 x tanh_constant the learned logits can overrule the bias. 0: no bias
    (the placer starts from its random weights)."""

    # -- optimization --
    learning_rate: float = 0.0003
    """Adam's initial learning rate (the placer's, and the grouper's when it has no rate of its own)."""
    grouper_learning_rate: float | None = 0.001
    """Adam's initial learning rate for the grouper, with its own optimizer (decayed on the same schedule);
    None: the grouper and placer share one Adam at `learning_rate` (the reference). 0 freezes the grouper:
    with grouping_prior="partition" the placer then learns over fixed pieces of the graph."""
    lr_decay_rate: float = 0.95
    """Factor applied to the learning rates every `lr_decay_updates` updates..."""
    lr_decay_updates: int = 50
    lr_decay_start: int = 400
    """...starting after this many updates."""
    grad_bound: float = 1.0
    """Gradients are clipped to this global norm."""

    # -- the loss --
    reward_baseline_decay: float = 0.9
    """Decay of the reward baseline: the exponential moving average of rewards that REINFORCE subtracts."""
    normalize_advantages: bool = True
    """Standardize the advantages of one update's samples (zero mean, unit std) before the loss, so the
    entropy weight means the same whatever the reward scale; centering on the batch mean replaces the
    reward baseline (False: raw reward - reward baseline, as the reference)."""
    entropy_weight: float = 0.001
    """Weight of an entropy bonus in the loss (0: none, as the reference)."""
    entropy_normalization: str = "sum"
    """What the entropy bonus (and the logged entropy) is: "sum" over every decision of a placement (the
    grouper's ~10k per-unit choices then outweigh the placer's ~100), or "per-decision": each part's
    entropy averaged over its decisions (grouper per unit, placer per group), then summed."""
    imitation_weight: float = 1.0
    """Self-imitation (Oh et al., 2018): every update also maximizes this weight times the placer's
    log-probability (without logit noise) of the best placement's group devices sampled so far. REINFORCE
    alone moves the policy by the average of a few samples, and its greedy placement can stay far from the
    best one it has found (on NMT-4 with 4 GPUs, 417 ms against the best sample's 347); imitation pulls the
    policy to its best, so later samples search around it (there: 314 ms, the greedy placement 348). The
    best is the highest single reward: on a noisy backend that may be a lucky timing. 0: off (the reference)."""

    seed: int = 0
    """Seeds weights, sampling and noise."""

    def __post_init__(self):
        check_loss_settings(self)
        if self.attention not in ("additive", "dot"):
            raise ValueError(f"unknown attention {self.attention!r}: 'additive' or 'dot'")
        if self.grouping_prior not in ("none", "partition"):
            raise ValueError(f"unknown grouping_prior {self.grouping_prior!r}: 'none' or 'partition'")
        if self.placement_prior_weight and self.grouping_prior == "none":
            raise ValueError("placement_prior_weight spreads the partition's groups over the devices: "
                             "it needs grouping_prior='partition'")
        if self.grouper_learning_rate is not None and self.grouper_learning_rate < 0:
            raise ValueError(f"grouper_learning_rate must be >= 0 (0 freezes the grouper), got {self.grouper_learning_rate}")

    def groups_for(self, devices: int) -> int:
        return self.num_groups or min(256, 20 * devices)


REFERENCE = Args(
    # grappler's hierarchical_controller.py: Adam at 0.1 decayed 0.95 every 50 updates after update 400,
    # logit noise 0.5 for 750 updates, tanh constant 1, temperature 1, gradient norm bound 1, reward
    # baseline decay 0.9, no entropy term; min(256, 20 x devices) groups, hidden size 512, grouping hidden
    # size 64. With it the grouper collapses to one group and loses to the partitioners on every NMT setup
    # (docs/results/learned-placement.md).
    hidden_size=512, tanh_constant=1.0, temperature=1.0, grouping_prior="none", placement_prior_weight=0.0,
    learning_rate=0.1, grouper_learning_rate=None, normalize_advantages=False, entropy_weight=0.0,
    imitation_weight=0.0,
)
"""The reference planner's settings (`--preset reference`)."""


@dataclass(frozen=True)
class Sample:
    """One sampled placement and what is needed to score it again under the policy."""

    groups: np.ndarray
    """[U] group of each unit."""
    group_devices: np.ndarray
    """[G] device of each group."""
    noise: np.ndarray
    """[G, D] logit noise used when sampling (zeros when there was none)."""

    @property
    def assignment(self) -> np.ndarray:
        """[U] device of each unit: what the environment's action is."""
        return self.group_devices[self.groups]


PLACEMENT_SIGNATURE = [tf.TensorSpec([None, 2], tf.int32), tf.TensorSpec([None, None, None], tf.float32),
                       tf.TensorSpec([], tf.float32)]
"""What sampling takes: seeds [G + 1, 2], noise [B, G, D], temperature."""
SCORING_SIGNATURE = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32),
                     tf.TensorSpec([None, None, None], tf.float32), tf.TensorSpec([], tf.float32)]
"""What scoring takes: groups [B, U], devices [B, G], noise [B, G, D], temperature."""


# -- the networks ---------------------------------------------------------------------------------
# Each unit's features (op-type histogram, sizes, position) -> the grouper's logits over G groups; each
# group's embedding (op-type shares, summed sizes, edges to and from other groups) -> a bidirectional LSTM
# encoder -> an LSTM decoder with content-based attention that emits one device per group, fed the
# embedding of the previous group's device. Placer logits are tanh-bounded, noised early on, tempered,
# and masked where a group cannot run.


class HierarchicalPolicy(tf.Module):
    def __init__(self, features: UnitFeatures, device_mask: np.ndarray, *, num_groups: int, grouping_hidden_size: int = 64,
                 hidden_size: int = 512, attention: str = "additive", tanh_constant: float = 1.0, seed: int = 0,
                 prior_groups: np.ndarray | None = None, prior_weight: float = 0.0,
                 prior_devices: np.ndarray | None = None, placement_prior_weight: float = 0.0):
        """device_mask: [U, D] 1 where a unit can run on a device. prior_groups: [U] a starting group per
        unit; the grouper's logits get `prior_weight` added for it (a fixed bias the network learns on top of).
        prior_devices: [G] a starting device per group; the placer's bounded logits get
        `placement_prior_weight` added for it (below 2 x tanh_constant, the learned logits can overrule it)."""
        super().__init__(name="hierarchical_policy")
        self.num_units = features.num_units
        self.num_groups = num_groups
        self.num_devices = device_mask.shape[1]
        self.tanh_constant = tanh_constant
        self.attention = attention
        self.unit_inputs = tf.constant(features.dense())
        self.unit_types = tf.constant(features.op_types.astype(np.float32))
        self.unit_sizes = tf.constant(features.sizes[:, :3])
        self.edge_source = tf.constant(features.edges[:, 0] if len(features.edges) else np.zeros(0, np.int64))
        self.edge_target = tf.constant(features.edges[:, 1] if len(features.edges) else np.zeros(0, np.int64))
        self.unit_device_mask = tf.constant(device_mask.astype(np.float32))
        self.grouper_prior = tf.constant(
            np.zeros((self.num_units, num_groups), np.float32) if prior_groups is None
            else prior_weight * np.eye(num_groups, dtype=np.float32)[np.asarray(prior_groups) % num_groups])

        self.placer_prior = tf.constant(
            np.zeros((num_groups, self.num_devices), np.float32) if prior_devices is None
            else placement_prior_weight * np.eye(self.num_devices, dtype=np.float32)[np.asarray(prior_devices)])

        g, d, hidden = num_groups, self.num_devices, hidden_size
        embedding_size = features.op_types.shape[1] + 3 + 2 * g
        self.grouper_hidden = dense("grouper/hidden", self.unit_inputs.shape[1], grouping_hidden_size, seed)
        self.grouper_out = dense("grouper/logits", grouping_hidden_size, g, seed + 1)
        self.encoder_in = dense("placer/embed", embedding_size, hidden, seed + 2)
        self.forward_lstm = LSTMCell("placer/encoder_fw", hidden, hidden // 2, seed + 3)
        self.backward_lstm = LSTMCell("placer/encoder_bw", hidden, hidden - hidden // 2, seed + 4)
        self.decoder_lstm = LSTMCell("placer/decoder", hidden, hidden, seed + 5)
        self.device_embedding = tf.Variable(tf.keras.initializers.RandomUniform(-0.1, 0.1, seed=seed + 6)((d + 1, hidden)),
                                            name="placer/device_embedding")
        self.attention_memory = dense("placer/attention_memory", hidden, hidden, seed + 7)[0]
        self.attention_query = dense("placer/attention_query", hidden, hidden, seed + 8)[0]
        # Dot-product attention has no vector: a variable no loss reaches would get no gradient to apply.
        self.attention_vector = (tf.Variable(tf.zeros([hidden]), name="placer/attention_vector")
                                 if attention == "additive" else None)
        self.output = dense("placer/logits", 2 * hidden, d, seed + 9)

    # -- grouper -----------------------------------------------------------------------------------

    def grouper_logits(self) -> tf.Tensor:
        kernel, bias = self.grouper_hidden
        hidden = tf.nn.relu(tf.matmul(self.unit_inputs, kernel) + bias)
        kernel, bias = self.grouper_out
        return tf.matmul(hidden, kernel) + bias + self.grouper_prior  # [U, G]

    def group_embeddings(self, groups: tf.Tensor) -> tf.Tensor:
        """[B, G, T + 3 + 2G] for groups [B, U]: op-type shares, summed sizes and in/out edge counts of each
        group, normalized."""
        g, batch = self.num_groups, tf.shape(groups)[0]
        offset = tf.range(batch)[:, None]  # each sample's groups get their own segments
        segments = tf.reshape(groups + offset * g, [-1])

        def per_group(values: tf.Tensor) -> tf.Tensor:  # [U, K] summed per group of each sample: [B, G, K]
            tiled = tf.tile(values, [batch, 1])
            return tf.reshape(tf.math.unsorted_segment_sum(tiled, segments, batch * g), [batch, g, -1])

        types = per_group(self.unit_types)
        types = types / tf.maximum(tf.reduce_sum(types, 2, keepdims=True), 1.0)
        sizes = per_group(self.unit_sizes)
        sizes = sizes / tf.maximum(tf.reduce_max(sizes, 1, keepdims=True), 1e-6)
        pairs = (tf.gather(groups, self.edge_source, axis=1) * g + tf.gather(groups, self.edge_target, axis=1)
                 + offset * g * g)
        counts = tf.math.unsorted_segment_sum(tf.ones_like(pairs, tf.float32), pairs, batch * g * g)
        counts = tf.reshape(counts, [batch, g, g])
        counts = counts / tf.maximum(tf.reduce_max(counts, [1, 2], keepdims=True), 1.0)
        return tf.concat([types, sizes, counts, tf.transpose(counts, [0, 2, 1])], axis=2)

    def group_device_mask(self, groups: tf.Tensor) -> tf.Tensor:
        """[B, G, D] for groups [B, U]: 1 where every unit of the group can run on the device (all ones for
        an empty group, and for a group with no common device: its placement will fail and be charged the
        failing signal)."""
        g, batch = self.num_groups, tf.shape(groups)[0]
        segments = tf.reshape(groups + tf.range(batch)[:, None] * g, [-1])
        blocked = tf.math.unsorted_segment_max(tf.tile(1.0 - self.unit_device_mask, [batch, 1]), segments, batch * g)
        mask = 1.0 - tf.maximum(tf.reshape(blocked, [batch, g, self.num_devices]), 0.0)
        return tf.where(tf.reduce_sum(mask, 2, keepdims=True) > 0, mask, tf.ones_like(mask))

    # -- placer ------------------------------------------------------------------------------------

    def _encode(self, embeddings: tf.Tensor) -> tf.Tensor:
        """[B, G, H] for embeddings [B, G, E]: a bidirectional LSTM over the groups of each sample."""
        kernel, bias = self.encoder_in
        x = tf.tanh(tf.einsum("bge,eh->bgh", embeddings, kernel) + bias)
        batch = tf.shape(x)[0]
        forward = self.forward_lstm.run(self.forward_lstm.input_projection(x), self.forward_lstm.zero_state(batch))
        backward = self.backward_lstm.run(self.backward_lstm.input_projection(x), self.backward_lstm.zero_state(batch),
                                          reverse=True)
        return tf.concat([forward, backward], axis=2)

    def _attend(self, query: tf.Tensor, keys: tf.Tensor, memory: tf.Tensor) -> tf.Tensor:
        """[B, H] attention context for one step's query [B, H] over keys and memory [B, G, H]."""
        if self.attention == "dot":
            scores = tf.einsum("bgh,bh->bg", keys, query) * float(keys.shape[-1]) ** -0.5
        else:
            scores = tf.reduce_sum(self.attention_vector * tf.tanh(keys + query[:, None, :]), 2)  # [B, G]
        return tf.reduce_sum(tf.nn.softmax(scores)[:, :, None] * memory, 1)

    def _device_logits(self, out, context, prior, noise, mask, temperature):
        """Bounded, biased, noised, tempered and masked logits over devices for decoder outputs and attention
        contexts [..., H] (one step [B, H], or every step [B, G, H])."""
        kernel, bias = self.output
        logits = self.tanh_constant * tf.tanh(tf.tensordot(tf.concat([out, context], -1), kernel, axes=1) + bias)
        logits = (logits + prior + noise) / temperature
        return tf.where(mask > 0, logits, -1e9)

    def _decoder_start(self, memory):
        """The decoder's initial state (zero cell, the encoder's last output), and each device's embedding
        (the start token's last) projected onto the gates once, so a step gathers its input's projection."""
        return (memory[:, -1] * 0.0, memory[:, -1]), self.decoder_lstm.input_projection(self.device_embedding)

    def _sample_devices(self, memory, mask, noise, temperature, *, greedy: bool, seeds):
        """[B, G] devices sampled (the argmax when greedy) one group after the other, each step fed the
        previous group's device (memory [B, G, H], mask and noise [B, G, D], seeds [G, 2])."""
        keys = tf.einsum("bgh,hk->bgk", memory, self.attention_memory)
        state, device_inputs = self._decoder_start(memory)
        recurrent_kernel = self.decoder_lstm.kernel[self.decoder_lstm.inputs:]
        previous = tf.fill([tf.shape(memory)[0]], self.num_devices)
        devices = tf.TensorArray(tf.int32, size=self.num_groups)
        for t in tf.range(self.num_groups):
            out, state = self.decoder_lstm.step(tf.gather(device_inputs, previous), state, recurrent_kernel)
            context = self._attend(tf.matmul(out, self.attention_query), keys, memory)
            logits = self._device_logits(out, context, self.placer_prior[t], noise[:, t], mask[:, t], temperature)
            if greedy:
                device = tf.argmax(logits, axis=1, output_type=tf.int32)
            else:
                device = tf.cast(tfp.distributions.Categorical(logits=logits).sample(seed=seeds[t]), tf.int32)
            devices = devices.write(t, device)
            previous = device
        return tf.transpose(devices.stack())

    def _score_devices(self, memory, mask, noise, temperature, chosen):
        """Log-prob sums [B] and entropy sums [B] of the devices `chosen` [B, G]. Fed the chosen devices, the
        decoder's recurrence does not wait on its own outputs: it runs alone, and the attention and the
        logits of every step then come in a few batched ops (their weights' gradients in one matmul each)."""
        keys = tf.einsum("bgh,hk->bgk", memory, self.attention_memory)
        state, device_inputs = self._decoder_start(memory)
        previous = tf.concat([tf.fill([tf.shape(chosen)[0], 1], self.num_devices), chosen[:, :-1]], 1)
        outs = self.decoder_lstm.run(tf.gather(device_inputs, previous), state)  # [B, G, H]
        queries = tf.einsum("bgh,hk->gbk", outs, self.attention_query)
        contexts = tf.transpose(tf.map_fn(lambda query: self._attend(query, keys, memory), queries), [1, 0, 2])
        logits = self._device_logits(outs, contexts, self.placer_prior, noise, mask, temperature)
        distribution = tfp.distributions.Categorical(logits=logits)
        return tf.reduce_sum(distribution.log_prob(chosen), 1), tf.reduce_sum(distribution.entropy(), 1)

    # -- the two passes ----------------------------------------------------------------------------
    # Each is traced once: the batch dimension is left open in its signature, so a new number of samples
    # does not trace it again, and the decoder and encoder are symbolic loops, so tracing stays short.

    def sample(self, seeds: tf.Tensor, noise: tf.Tensor, temperature: float = 1.0, greedy: bool = False):
        """seeds: [G + 1, 2] stateless seeds (grouper, then one per group); noise [B, G, D]. Returns B placements
        drawn independently in one pass (the greedy one B times when greedy): groups [B, U], devices [B, G]."""
        drawn = self._greedy_placements if greedy else self._sampled_placements
        return drawn(tf.cast(seeds, tf.int32), tf.cast(noise, tf.float32), tf.cast(temperature, tf.float32))

    def placements(self, seeds: tf.Tensor, noise: tf.Tensor, temperature: tf.Tensor, greedy: bool):
        """What `sample` returns, untraced: `sample` runs it as a traced function."""
        logits = self.grouper_logits()
        batch = tf.shape(noise)[0]
        if greedy:
            groups = tf.tile(tf.argmax(logits, axis=1, output_type=tf.int32)[None], [batch, 1])
        else:
            groups = tf.transpose(tf.random.stateless_categorical(logits, batch, seed=seeds[0], dtype=tf.int32))
        memory = self._encode(self.group_embeddings(groups))
        devices = self._sample_devices(memory, self.group_device_mask(groups), noise, temperature, greedy=greedy,
                                       seeds=seeds[1:])
        return groups, devices

    @tf.function(input_signature=PLACEMENT_SIGNATURE)
    def _sampled_placements(self, seeds, noise, temperature):
        return self.placements(seeds, noise, temperature, greedy=False)

    @tf.function(input_signature=PLACEMENT_SIGNATURE)
    def _greedy_placements(self, seeds, noise, temperature):
        return self.placements(seeds, noise, temperature, greedy=True)

    def log_prob(self, groups: tf.Tensor, devices: tf.Tensor, noise: tf.Tensor, temperature: float = 1.0):
        """Log-probabilities of B sampled placements (groups [B, U], devices [B, G], noise [B, G, D]) under
        the current policy, and entropies of their decisions, each [B]: grouper log-prob, placer log-prob,
        grouper entropy (summed over units), placer entropy (summed over groups). One pass scores them all:
        the decoder's steps are sequential, so a batch costs about what one sample does."""
        return self._traced_log_probs(tf.cast(groups, tf.int32), tf.cast(devices, tf.int32), tf.cast(noise, tf.float32),
                                      tf.cast(temperature, tf.float32))

    @tf.function(input_signature=SCORING_SIGNATURE)
    def _traced_log_probs(self, groups, devices, noise, temperature):
        return self.log_probs(groups, devices, noise, temperature)

    def log_probs(self, groups, devices, noise, temperature):
        """What `log_prob` returns, untraced: for a traced function that goes on (a whole update)."""
        grouper_log_probs = tf.nn.log_softmax(self.grouper_logits())  # [U, G], the same for every sample
        grouper_log_prob = tf.reduce_sum(tf.gather(grouper_log_probs, tf.transpose(groups), axis=1, batch_dims=1), 0)
        grouper_entropy = -tf.reduce_sum(tf.exp(grouper_log_probs) * grouper_log_probs)
        memory = self._encode(self.group_embeddings(groups))
        placer_log_prob, entropy = self._score_devices(memory, self.group_device_mask(groups), noise, temperature,
                                                       devices)
        return grouper_log_prob, placer_log_prob, tf.fill(tf.shape(placer_log_prob), grouper_entropy), entropy


# -- the agent ------------------------------------------------------------------------------------


class HierarchicalPlanner(ReinforceAgent):
    """Grouper + placer trained jointly by REINFORCE: `propose` samples placements, `learn` is one update."""

    name = "hierarchical"
    sample_type = Sample

    def __init__(self, graph: OpGraph, device_mask: np.ndarray, config: Args | None = None,
                 devices: DeviceSet | None = None, compiled_update: bool = True):
        """device_mask: [U, D] 1 where a unit may run on a device (the environment's `device_mask`).
        devices: the environment's devices, needed by `placement_prior_weight` to find the compute devices.
        compiled_update: each update's loss, gradients and optimizer steps run as one traced function (False:
        taped op by op; the same update, several times slower at paper size)."""
        c = config or Args()
        num_groups = c.groups_for(device_mask.shape[1])
        prior_groups = prior_devices = None
        if c.grouping_prior == "partition":
            from placer.heuristics.partitioners import unit_partition

            prior_groups = unit_partition(graph, num_groups, seed=c.seed)
        if c.placement_prior_weight:
            if devices is None:
                raise ValueError("placement_prior_weight needs the devices: HierarchicalPlanner(graph, mask, config, "
                                 "devices=env.devices)")
            from placer.models.expert import compute_devices, spread

            prior_devices = np.asarray(spread(num_groups, compute_devices(devices)), np.int64)
        policy = HierarchicalPolicy(
            unit_features(graph), device_mask[: len(graph.groups)], num_groups=num_groups,
            grouping_hidden_size=c.grouping_hidden_size, hidden_size=c.hidden_size, attention=c.attention,
            tanh_constant=c.tanh_constant,
            seed=c.seed, prior_groups=prior_groups, prior_weight=c.grouping_prior_weight,
            prior_devices=prior_devices, placement_prior_weight=c.placement_prior_weight,
        )
        super().__init__(c, policy, device_mask.shape[1])
        # Per-part optimizers: the inherited Adam for the placer (and the grouper, unless it has its own rate);
        # a grouper rate of 0 freezes the grouper, so it gets no optimizer at all.
        self.grouper_optimizer = (tf.keras.optimizers.Adam(learning_rate=c.grouper_learning_rate)
                                  if c.grouper_learning_rate else None)
        self.compiled_update = compiled_update
        for variables, optimizer, _ in self._parameter_parts():
            optimizer.build(variables)  # the optimizers' slots exist before `_gradient_step` is traced

    # -- sampling ---------------------------------------------------------------------------------

    def propose(self, count: int) -> list[np.ndarray]:
        """`count` placements ([U] device per unit), drawn independently in one batched pass."""
        self._pending = self.sample(count)
        return [sample.assignment for sample in self._pending]

    def best_guess(self) -> np.ndarray:
        """The greedy placement: each unit's most likely group, each group's most likely device, no noise."""
        return self.sample(1, greedy=True)[0].assignment

    def sample(self, count: int = 1, greedy: bool = False) -> list[Sample]:
        """`count` samples (the greedy one `count` times when greedy), with what scoring them again needs."""
        g, d, c = self.policy.num_groups, self.num_devices, self.config
        seeds = stateless_seeds(self.rng, g + 1)  # the grouper's, then one per group
        noise = logit_noise(self.rng, [count, g, d], c, int(self.updates.numpy()), greedy)
        groups, devices = self.policy.sample(seeds, noise, tf.constant(c.temperature), greedy=greedy)
        groups, devices, noise = groups.numpy().astype(np.int64), devices.numpy().astype(np.int64), noise.numpy()
        return [Sample(groups[i], devices[i], noise[i]) for i in range(count)]

    # -- one update -------------------------------------------------------------------------------

    def learn(self, assignments: Sequence[np.ndarray], rewards: Sequence[float]) -> Mapping[str, float]:
        """One update from the rewards of the last `propose()`'s placements, in order
        (`agents.policy_gradient.reinforce_update`): the best sample so far becomes self-imitation's target;
        advantages are the rewards minus the reward baseline (standardized within the update); the loss is
        REINFORCE minus the entropy bonus minus self-imitation of the best sample's placer decisions, every
        sample and the best scored in one batched pass; one gradient step with the global norm bounded, the
        grouper and the placer each by its own Adam; then the reward baseline follows the rewards and the
        learning rates decay. Returns the metrics to log."""
        samples, self._pending = self._pending, []
        step = self.traced_gradient_step() if self.compiled_update else None
        return reinforce_update(self, samples, rewards, self.score, self._parameter_parts(), step)

    def traced_gradient_step(self) -> GradientStep:
        """Steps 3 and 4 of the update (`agents.policy_gradient.taped_gradient_step`) as one traced function
        (`_gradient_step`): scoring, loss, gradients, clipping and every part's optimizer step, then the best
        sample's score after the step."""
        imitating = self.config.imitation_weight > 0

        def step(samples: Sequence[Sample], advantages: tf.Tensor):
            loss, norm, entropies, best_score = self._gradient_step(*self._batch(samples), advantages)
            return loss, norm, entropies, best_score if imitating else None

        return step

    @tf.function(input_signature=[*SCORING_SIGNATURE, tf.TensorSpec([None], tf.float32)])
    def _gradient_step(self, groups, devices, noise, temperature, advantages):
        """The samples (the best last when imitating) and their advantages in; loss, norm, entropies and the
        best's placer log-prob after the step (0 when not imitating) out. The batch is open in the signature,
        so it is traced once for the whole run."""
        c, policy, parts = self.config, self.policy, self._parameter_parts()
        count = tf.shape(advantages)[0]
        with tf.GradientTape() as tape:
            log_probs, entropies, imitation = self._normalized(*policy.log_probs(groups, devices, noise, temperature))
            entropies = entropies[:count]
            loss = reinforce_loss(advantages, log_probs[:count], entropies, c.entropy_weight)
            if c.imitation_weight > 0:
                loss -= c.imitation_weight * imitation[count]
        norm = apply_gradients(tape, loss, parts, c.grad_bound)
        best_score = tf.constant(0.0)
        if c.imitation_weight > 0:  # a metric: how likely the stepped policy now finds the best sample
            best_score = policy.log_probs(groups[count:], devices[count:], noise[count:], temperature)[1][0]
        return loss, norm, entropies, best_score

    def _batch(self, samples: Sequence[Sample]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """What scoring takes for `samples`: groups [B, U], devices [B, G], noise [B, G, D], the temperature."""
        return (tf.constant(np.stack([s.groups for s in samples]), tf.int32),
                tf.constant(np.stack([s.group_devices for s in samples]), tf.int32),
                tf.constant(np.stack([s.noise for s in samples]), tf.float32), tf.constant(self.config.temperature))

    def _normalized(self, grouper_lp, placer_lp, grouper_entropy, placer_entropy):
        """(log-probabilities, entropies as `entropy_normalization` asks, the placer's log-probabilities)."""
        if self.config.entropy_normalization == "per-decision":
            grouper_entropy /= self.policy.num_units
            placer_entropy /= self.policy.num_groups
        return grouper_lp + placer_lp, grouper_entropy + placer_entropy, placer_lp

    def score(self, samples: Sequence[Sample]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Under the current policy, in one batched pass, each [B]: the samples' log-probabilities, their
        entropies (summed over every decision, or averaged per part as `entropy_normalization` asks), and
        the placer's part of the log-probabilities: what self-imitation maximizes, because the grouper's ~10k
        per-unit choices make up almost all of a sample's log-probability (about -5,000 nats on NMT-4 against
        the placer's ~-100) and are mostly sampling accidents around the partition; imitating them all barely
        moved the placer."""
        return self._normalized(*self.policy.log_prob(*self._batch(samples)))

    def _parameter_parts(self) -> Parts:
        """(variables, optimizer, initial learning rate) of each part a gradient step updates."""
        c = self.config
        if c.grouper_learning_rate is None:
            return [(list(self.policy.trainable_variables), self.optimizer, c.learning_rate)]
        grouper = [*self.policy.grouper_hidden, *self.policy.grouper_out]
        grouper_ids = {id(v) for v in grouper}
        placer = [v for v in self.policy.trainable_variables if id(v) not in grouper_ids]
        parts = [(placer, self.optimizer, c.learning_rate)]
        if self.grouper_optimizer is not None:
            parts.append((grouper, self.grouper_optimizer, c.grouper_learning_rate))
        return parts

    # -- state: checkpoints, resume, the hand-over from the simulator -----------------------------

    def checkpoint_objects(self) -> dict[str, Any]:
        objects = super().checkpoint_objects()
        if self.grouper_optimizer is not None:
            objects["grouper_optimizer"] = self.grouper_optimizer
        return objects
