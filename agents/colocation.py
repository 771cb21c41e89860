"""The colocation-RL placer (Mirhoseini et al., ICML 2017): seq-to-seq over colocation groups, no grouper,
in one file: its settings, one sample, the network, then the agent (its update: `reinforce_update`).

Every unit (colocation group) is a step of the sequence: an embedding of its pooled op features (op-type
shares, sizes, adjacency) goes through a bidirectional LSTM; an LSTM decoder with attention emits a
device per unit, fed the previous unit's device. Graphs here have up to tens of thousands of units, so
the loops are `tf.while_loop`s (not unrolled), and the attention looks at a window of encoder outputs
around the current unit (`attention_window`; None: all of them, as the paper, at O(units^2) cost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from agents.features import UnitFeatures, unit_features
from agents.layers import LSTMCell, dense
from agents.policy_gradient import (
    PolicyGradientConfig, ReinforceAgent, logit_noise, reinforce_update, stateless_seeds,
)
from placer.graph.opgraph import OpGraph


@dataclass(frozen=True)
class ColocationConfig(PolicyGradientConfig):
    hidden_size: int = 256
    """Width of the LSTMs and the attention."""
    attention_window: int | None = 64
    """Encoder outputs on each side of the current unit that the attention sees (None: all)."""


@dataclass(frozen=True)
class UnitSample:
    devices: np.ndarray
    noise: np.ndarray

    @property
    def assignment(self) -> np.ndarray:
        return self.devices


class ColocationPolicy(tf.Module):
    def __init__(self, features: UnitFeatures, device_mask: np.ndarray, *, hidden_size: int, window: int | None,
                 tanh_constant: float, seed: int):
        super().__init__(name="colocation_policy")
        self.num_units = features.num_units
        self.num_devices = device_mask.shape[1]
        self.window = window
        self.tanh_constant = tanh_constant
        self.inputs = tf.constant(features.dense())
        mask = device_mask.astype(np.float32)
        mask[mask.sum(axis=1) == 0] = 1.0  # no device fits: leave it free, the placement fails and is charged
        self.mask = tf.constant(mask)
        h = hidden_size
        self.embed = dense("colocation/embed", self.inputs.shape[1], h, seed)
        self.forward_lstm = LSTMCell("colocation/encoder_fw", h, h // 2, seed + 1)
        self.backward_lstm = LSTMCell("colocation/encoder_bw", h, h - h // 2, seed + 2)
        self.decoder_lstm = LSTMCell("colocation/decoder", h, h, seed + 3)
        self.device_embedding = tf.Variable(tf.keras.initializers.RandomUniform(-0.1, 0.1, seed=seed + 4)((self.num_devices + 1, h)),
                                            name="colocation/device_embedding")
        self.attention_memory = dense("colocation/attention_memory", h, h, seed + 5)[0]
        self.attention_query = dense("colocation/attention_query", h, h, seed + 6)[0]
        self.attention_vector = tf.Variable(tf.zeros([h]), name="colocation/attention_vector")
        self.output = dense("colocation/logits", 2 * h, self.num_devices, seed + 7)

    def _encode(self) -> tf.Tensor:
        kernel, bias = self.embed
        x = tf.tanh(tf.matmul(self.inputs, kernel) + bias)[:, None, :]  # [U, 1, H]

        def run(lstm, sequence):
            def step(state, x_t):
                _, new = lstm(x_t, state)
                return new
            return tf.scan(step, sequence, initializer=lstm.zero_state())[1][:, 0, :]  # hidden states [U, H']

        forward = run(self.forward_lstm, x)
        backward = tf.reverse(run(self.backward_lstm, tf.reverse(x, [0])), [0])
        return tf.concat([forward, backward], axis=1)

    def _decode(self, memory, noise, temperature, chosen, seeds, mode):
        """mode 0: sample, 1: greedy, 2: score `chosen`. Returns devices [U], log-prob, entropy."""
        units = self.num_units
        keys = tf.matmul(memory, self.attention_memory)
        w = self.window if self.window is not None else units
        pad = [[w, w], [0, 0]]
        keys_padded, memory_padded = tf.pad(keys, pad), tf.pad(memory, pad)
        valid_padded = tf.pad(tf.ones([units]), [[w, w]])
        kernel, bias = self.output

        def body(t, state, previous, devices, log_prob, entropy):
            out, state = self.decoder_lstm(tf.gather(self.device_embedding, previous)[None, :], state)
            window_keys = keys_padded[t: t + 2 * w + 1]
            window_memory = memory_padded[t: t + 2 * w + 1]
            scores = tf.reduce_sum(self.attention_vector * tf.tanh(window_keys + tf.matmul(out, self.attention_query)), 1)
            scores = tf.where(valid_padded[t: t + 2 * w + 1] > 0, scores, -1e9)
            context = tf.reduce_sum(tf.nn.softmax(scores)[:, None] * window_memory, 0, keepdims=True)
            logits = self.tanh_constant * tf.tanh(tf.matmul(tf.concat([out, context], 1), kernel) + bias)[0]
            logits = tf.where(self.mask[t] > 0, (logits + noise[t]) / temperature, -1e9)
            distribution = tfp.distributions.Categorical(logits=logits)
            if mode == 2:
                device = chosen[t]
            elif mode == 1:
                device = tf.argmax(logits, output_type=tf.int32)
            else:
                device = tf.cast(distribution.sample(seed=seeds[t]), tf.int32)
            return (t + 1, state, device, devices.write(t, device), log_prob + distribution.log_prob(device),
                    entropy + distribution.entropy())

        state = self.decoder_lstm.zero_state()
        loop = tf.while_loop(
            lambda t, *_: t < units, body,
            (tf.constant(0), state, tf.constant(self.num_devices), tf.TensorArray(tf.int32, size=units),
             tf.constant(0.0), tf.constant(0.0)),
        )
        return loop[3].stack(), loop[4], loop[5]

    @tf.function
    def sample(self, seeds, noise, temperature, greedy: bool = False):
        chosen = tf.zeros([self.num_units], tf.int32)
        devices, _, _ = self._decode(self._encode(), noise, temperature, chosen, seeds, 1 if greedy else 0)
        return devices

    @tf.function
    def log_prob(self, devices, noise, temperature):
        seeds = tf.zeros([self.num_units, 2], tf.int32)
        _, log_prob, entropy = self._decode(self._encode(), noise, temperature, devices, seeds, 2)
        return log_prob, entropy


class ColocationPlacer(ReinforceAgent):
    """Seq-to-seq placer over every colocation group, trained by REINFORCE (ICML 2017's agent)."""

    name = "colocation"
    sample_type = UnitSample

    def __init__(self, graph: OpGraph, device_mask: np.ndarray, config: ColocationConfig | None = None):
        c = config or ColocationConfig()
        policy = ColocationPolicy(unit_features(graph), device_mask[: len(graph.groups)], hidden_size=c.hidden_size,
                                  window=c.attention_window, tanh_constant=c.tanh_constant, seed=c.seed)
        super().__init__(c, policy, device_mask.shape[1])

    # -- sampling ---------------------------------------------------------------------------------

    def propose(self, count: int) -> list[np.ndarray]:
        """`count` placements ([U] device per unit), one decoder pass each."""
        self._pending = [self.sample() for _ in range(count)]
        return [sample.assignment for sample in self._pending]

    def best_guess(self) -> np.ndarray:
        """The greedy placement: each unit's most likely device, no noise."""
        return self.sample(greedy=True).assignment

    def sample(self, greedy: bool = False) -> UnitSample:
        units, d, c = self.policy.num_units, self.num_devices, self.config
        seeds = stateless_seeds(self.rng, units)
        noise = logit_noise(self.rng, [units, d], c, int(self.updates.numpy()), greedy)
        devices = self.policy.sample(seeds, noise, tf.constant(c.temperature), greedy=greedy)
        return UnitSample(devices.numpy().astype(np.int64), noise.numpy())

    # -- one update -------------------------------------------------------------------------------

    def learn(self, assignments: Sequence[np.ndarray], rewards: Sequence[float]) -> Mapping[str, float]:
        """One REINFORCE update (`agents.policy_gradient.reinforce_update`) from the rewards of the last
        `propose()`'s placements; returns the metrics to log."""
        samples, self._pending = self._pending, []
        parts = [(list(self.policy.trainable_variables), self.optimizer, self.config.learning_rate)]
        return reinforce_update(self, samples, rewards, self.score, parts)

    def score(self, samples: Sequence[UnitSample]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """[B] log-probabilities, [B] entropies (summed over units, or averaged per unit as
        `entropy_normalization` asks) and [B] what self-imitation maximizes (the whole log-probability) of
        `samples` under the current policy."""
        scored = [self.policy.log_prob(tf.constant(s.devices, tf.int32), tf.constant(s.noise, tf.float32),
                                       tf.constant(self.config.temperature)) for s in samples]
        log_probs, entropies = tf.stack([lp for lp, _ in scored]), tf.stack([e for _, e in scored])
        if self.config.entropy_normalization == "per-decision":
            entropies = entropies / self.policy.num_units
        return log_probs, entropies, log_probs
