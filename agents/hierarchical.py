"""The hierarchical planner's policy: a feed-forward grouper and a seq-to-seq placer with attention.

After Mirhoseini et al. (ICLR 2018) and TensorFlow's grappler `hierarchical_controller.py`. The grouper
assigns every unit (colocation group: TF runs its ops on one device, so it is the atom) to one of G
groups; each group gets an embedding (op-type counts, output sizes, edges to and from other groups);
a bidirectional LSTM encodes the groups, and an LSTM decoder with content-based attention emits a device
per group, fed the embedding of the previous group's device. Logits are tanh-bounded, optionally noised
(early in training) and tempered; devices a group cannot run on are masked out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from agents.features import UnitFeatures


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


def _dense(name: str, inputs: int, outputs: int, seed: int) -> tuple[tf.Variable, tf.Variable]:
    init = tf.keras.initializers.GlorotUniform(seed=seed)
    return (tf.Variable(init((inputs, outputs)), name=f"{name}/kernel"),
            tf.Variable(tf.zeros([outputs]), name=f"{name}/bias"))


class _LSTM(tf.Module):
    def __init__(self, name: str, inputs: int, units: int, seed: int):
        super().__init__(name=name.replace("/", "_"))
        self.units = units
        self.kernel, self.bias = _dense(name, inputs + units, 4 * units, seed)

    def __call__(self, x, state):
        c, h = state
        i, j, f, o = tf.split(tf.matmul(tf.concat([x, h], 1), self.kernel) + self.bias, 4, axis=1)
        c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, (c, h)

    def zero_state(self, batch: int = 1):
        zeros = tf.zeros([batch, self.units])
        return zeros, zeros


class HierarchicalPolicy(tf.Module):
    def __init__(self, features: UnitFeatures, device_mask: np.ndarray, *, num_groups: int, grouping_hidden_size: int = 64,
                 hidden_size: int = 512, tanh_constant: float = 1.0, seed: int = 0,
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
        self.grouper_hidden = _dense("grouper/hidden", self.unit_inputs.shape[1], grouping_hidden_size, seed)
        self.grouper_out = _dense("grouper/logits", grouping_hidden_size, g, seed + 1)
        self.encoder_in = _dense("placer/embed", embedding_size, hidden, seed + 2)
        self.forward_lstm = _LSTM("placer/encoder_fw", hidden, hidden // 2, seed + 3)
        self.backward_lstm = _LSTM("placer/encoder_bw", hidden, hidden - hidden // 2, seed + 4)
        self.decoder_lstm = _LSTM("placer/decoder", hidden, hidden, seed + 5)
        self.device_embedding = tf.Variable(tf.keras.initializers.RandomUniform(-0.1, 0.1, seed=seed + 6)((d + 1, hidden)),
                                            name="placer/device_embedding")
        self.attention_memory = _dense("placer/attention_memory", hidden, hidden, seed + 7)[0]
        self.attention_query = _dense("placer/attention_query", hidden, hidden, seed + 8)[0]
        self.attention_vector = tf.Variable(tf.zeros([hidden]), name="placer/attention_vector")
        self.output = _dense("placer/logits", 2 * hidden, d, seed + 9)

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
        forward, backward = [], []
        state = self.forward_lstm.zero_state(batch)
        for t in range(self.num_groups):
            out, state = self.forward_lstm(x[:, t], state)
            forward.append(out)
        state = self.backward_lstm.zero_state(batch)
        for t in reversed(range(self.num_groups)):
            out, state = self.backward_lstm(x[:, t], state)
            backward.append(out)
        return tf.concat([tf.stack(forward, 1), tf.stack(backward[::-1], 1)], axis=2)

    def _decode(self, memory, mask, noise, temperature, *, chosen=None, greedy=False, seed=None):
        """Decode one device per group for each of B samples (memory [B, G, H], mask and noise [B, G, D]).
        With `chosen` [B, G], score those devices (teacher forcing); otherwise sample them (the argmax when
        greedy). Returns devices [B, G], log-prob sums [B], entropy sums [B]."""
        keys = tf.einsum("bgh,hk->bgk", memory, self.attention_memory)
        batch = tf.shape(memory)[0]
        state = (memory[:, -1] * 0.0, memory[:, -1])
        previous = tf.fill([batch], self.num_devices)
        devices, log_prob, entropy = [], 0.0, 0.0
        kernel, bias = self.output
        for t in range(self.num_groups):
            out, state = self.decoder_lstm(tf.gather(self.device_embedding, previous), state)
            query = tf.matmul(out, self.attention_query)[:, None, :]
            scores = tf.reduce_sum(self.attention_vector * tf.tanh(keys + query), 2)  # [B, G]
            context = tf.reduce_sum(tf.nn.softmax(scores)[:, :, None] * memory, 1)  # [B, H]
            logits = self.tanh_constant * tf.tanh(tf.matmul(tf.concat([out, context], 1), kernel) + bias)
            logits = (logits + self.placer_prior[t] + noise[:, t]) / temperature
            logits = tf.where(mask[:, t] > 0, logits, -1e9)
            distribution = tfp.distributions.Categorical(logits=logits)
            if chosen is not None:
                device = chosen[:, t]
            elif greedy:
                device = tf.argmax(logits, axis=1, output_type=tf.int32)
            else:
                device = tf.cast(distribution.sample(seed=seed[t]), tf.int32)
            log_prob += distribution.log_prob(device)
            entropy += distribution.entropy()
            devices.append(device)
            previous = device
        return tf.stack(devices, 1), log_prob, entropy

    # -- the two passes ----------------------------------------------------------------------------

    @tf.function
    def sample(self, seeds: tf.Tensor, noise: tf.Tensor, temperature: float = 1.0, greedy: bool = False):
        """seeds: [G + 1, 2] stateless seeds (grouper, then one per group); noise [B, G, D]. Returns B placements
        drawn independently in one pass (the greedy one B times when greedy): groups [B, U], devices [B, G]."""
        logits = self.grouper_logits()
        batch = tf.shape(noise)[0]
        if greedy:
            groups = tf.tile(tf.argmax(logits, axis=1, output_type=tf.int32)[None], [batch, 1])
        else:
            groups = tf.transpose(tf.random.stateless_categorical(logits, batch, seed=seeds[0], dtype=tf.int32))
        memory = self._encode(self.group_embeddings(groups))
        devices, _, _ = self._decode(memory, self.group_device_mask(groups), noise, temperature, greedy=greedy,
                                     seed=seeds[1:])
        return groups, devices

    @tf.function
    def log_prob(self, groups: tf.Tensor, devices: tf.Tensor, noise: tf.Tensor, temperature: float = 1.0):
        """Log-probabilities of B sampled placements (groups [B, U], devices [B, G], noise [B, G, D]) under
        the current policy, and entropies of their decisions, each [B]: grouper log-prob, placer log-prob,
        grouper entropy (summed over units), placer entropy (summed over groups). One pass scores them all:
        the decoder's steps are sequential, so a batch costs about what one sample does."""
        grouper_log_probs = tf.nn.log_softmax(self.grouper_logits())  # [U, G], the same for every sample
        grouper_log_prob = tf.reduce_sum(tf.gather(grouper_log_probs, tf.transpose(groups), axis=1, batch_dims=1), 0)
        grouper_entropy = -tf.reduce_sum(tf.exp(grouper_log_probs) * grouper_log_probs)
        memory = self._encode(self.group_embeddings(groups))
        _, placer_log_prob, entropy = self._decode(memory, self.group_device_mask(groups), noise, temperature,
                                                   chosen=devices)
        return grouper_log_prob, placer_log_prob, tf.fill(tf.shape(placer_log_prob), grouper_entropy), entropy
