"""`ReplicaChoosingAgent`: any placement agent with a choice of data-parallel degree in front of it, so that the
policy learns replication with placement (FlexFlow's sample dimension, as one decision per plan).

Its actions are those of `envs.replicated.ReplicatedPlacementEnv`: the index of a degree, then a device per unit.
The degree is drawn from a categorical of its own, independent of the placement, so a plan's log-probability is
the sum of the two and REINFORCE's gradient splits: the degree's logits and the placement agent each learn from the
same rewards of the same samples (the placement agent through its own `learn`, with its baseline, imitation and
optimizers). The degree's logits start even: every degree is sampled alike until the rewards say otherwise.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf


class ReplicaChoosingAgent:
    """A degree drawn from `replica_degrees`, then `placer`'s placement of the whole step (which the environment
    folds onto one replica's group of devices)."""

    def __init__(self, placer, replica_degrees: Sequence[int], *, seed: int = 0, learning_rate: float = 0.1,
                 entropy_weight: float = 0.01):
        if not replica_degrees:
            raise ValueError("give at least one degree (1: no replicas)")
        self.placer = placer
        self.replica_degrees = tuple(int(d) for d in replica_degrees)
        self.name = f"{placer.name} with replicas"
        self.entropy_weight = entropy_weight
        self.logits = tf.Variable(tf.zeros([len(self.replica_degrees)]), name="replica_logits")
        self.optimizer = tf.keras.optimizers.Adam(learning_rate=learning_rate)
        self.optimizer.build([self.logits])
        self.rng = np.random.default_rng(seed)
        self._pending: list[int] = []

    def probabilities(self) -> np.ndarray:
        """The chance of each degree, in `replica_degrees`' order."""
        return tf.nn.softmax(self.logits).numpy()

    def propose(self, count: int) -> list[np.ndarray]:
        placements = self.placer.propose(count)
        self._pending = [int(i) for i in self.rng.choice(len(self.replica_degrees), size=count, p=self._safe_p())]
        return [np.concatenate([[degree], np.asarray(p, np.int64)]) for degree, p in zip(self._pending, placements)]

    def best_guess(self) -> np.ndarray:
        return np.concatenate([[int(np.argmax(self.logits.numpy()))], np.asarray(self.placer.best_guess(), np.int64)])

    def learn(self, assignments: Sequence[np.ndarray], rewards: Sequence[float]) -> Mapping[str, float]:
        """One REINFORCE step of the degree's logits on the rewards standardized within the update, and one update
        of the placement agent on the same rewards."""
        chosen, self._pending = self._pending, []
        metrics = dict(self.placer.learn([np.asarray(a)[1:] for a in assignments], rewards))
        values = np.asarray(rewards, np.float64)
        finite = np.isfinite(values)
        if finite.sum() >= 2 and len(chosen) == len(values):
            advantages = np.where(finite, values, values[finite].min()) - values[finite].mean()
            spread = values[finite].std()
            advantages = advantages / spread if spread > 0 else advantages * 0
            with tf.GradientTape() as tape:
                log_p = tf.nn.log_softmax(self.logits)
                entropy = -tf.reduce_sum(tf.exp(log_p) * log_p)
                loss = (-tf.reduce_mean(tf.gather(log_p, chosen) * tf.constant(advantages, tf.float32))
                        - self.entropy_weight * entropy)
            self.optimizer.apply_gradients([(tape.gradient(loss, self.logits), self.logits)])
        p = self.probabilities()
        metrics.update(replica_entropy=float(-(p * np.log(np.maximum(p, 1e-12))).sum()),
                       replica_degree_likeliest=float(self.replica_degrees[int(np.argmax(p))]))
        return metrics

    def _safe_p(self) -> np.ndarray:
        p = self.probabilities().astype(np.float64)
        return p / p.sum()

    # -- state: the placement agent's and the degree's, checkpointed and resumed together --

    def checkpoint_objects(self) -> dict[str, Any]:
        return {**self.placer.checkpoint_objects(), "replica_logits": self.logits,
                "replica_optimizer": self.optimizer}

    def numpy_state(self) -> Mapping[str, Any]:
        return {**self.placer.numpy_state(), "replica_rng": self.rng.bit_generator.state}

    def load_numpy_state(self, state: Mapping[str, Any]) -> None:
        state = dict(state)
        if "replica_rng" in state:
            self.rng.bit_generator.state = state.pop("replica_rng")
        self.placer.load_numpy_state(state)

    def rebase_best(self, reward: float) -> None:
        if hasattr(self.placer, "rebase_best"):
            self.placer.rebase_best(reward)
