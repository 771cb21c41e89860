"""The hierarchical planner trained by REINFORCE, with every hyper-parameter in one config dataclass.

Defaults follow TensorFlow's grappler `hierarchical_controller.py` (see ../shared/FINDINGS.md): groups
min(256, 20 x devices), hidden 512, grouping hidden 64, tanh constant 1, logit noise 0.5 for the first
750 updates, Adam at 0.1 decayed 0.95 every 50 updates after update 400, gradient-norm bound 1,
moving-average baseline with decay 0.9, no entropy term. The loss is
-(reward - baseline) * (log p_grouper + log p_placer), averaged over the placements of one update.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from agents.features import unit_features
from agents.hierarchical import HierarchicalPolicy, Sample
from placer.graph.opgraph import OpGraph


@dataclass(frozen=True)
class HierarchicalConfig:
    num_groups: int | None = None
    """Groups the grouper forms; None: min(256, 20 x devices)."""
    grouping_hidden_size: int = 64
    """Width of the grouper's hidden layer."""
    hidden_size: int = 512
    """Width of the placer's LSTMs and attention."""
    tanh_constant: float = 1.0
    """Placer logits are bounded to C * tanh(logits)."""
    temperature: float = 1.0
    """Placer logits are divided by it before sampling."""
    logits_noise_std: float = 0.5
    """Gaussian noise added to placer logits while exploring early on."""
    noise_updates: int = 750
    """Updates during which logit noise is added."""
    learning_rate: float = 0.1
    """Adam's initial learning rate."""
    lr_decay_rate: float = 0.95
    """Factor applied to the learning rate every `lr_decay_updates` updates..."""
    lr_decay_updates: int = 50
    lr_decay_start: int = 400
    """...starting after this many updates."""
    grad_bound: float = 1.0
    """Gradients are clipped to this global norm."""
    baseline_decay: float = 0.9
    """Decay of the exponential moving-average reward baseline."""
    entropy_weight: float = 0.0
    """Weight of an entropy bonus in the loss (0: none, as the reference)."""
    samples_per_update: int = 4
    """Placements sampled and evaluated per update."""
    seed: int = 0
    """Seeds weights, sampling and noise."""

    def groups_for(self, devices: int) -> int:
        return self.num_groups or min(256, 20 * devices)


class HierarchicalPlanner:
    """Grouper + placer trained jointly by REINFORCE (the agent of the seed paper)."""

    name = "hierarchical"

    def __init__(self, graph: OpGraph, device_mask: np.ndarray, config: HierarchicalConfig | None = None):
        """device_mask: [U, D] 1 where a unit may run on a device (the environment's `device_mask`)."""
        self.config = config or HierarchicalConfig()
        c = self.config
        self.num_devices = device_mask.shape[1]
        self.policy = HierarchicalPolicy(
            unit_features(graph), device_mask[: len(graph.groups)], num_groups=c.groups_for(self.num_devices),
            grouping_hidden_size=c.grouping_hidden_size, hidden_size=c.hidden_size, tanh_constant=c.tanh_constant,
            seed=c.seed,
        )
        self.optimizer = tf.keras.optimizers.Adam(learning_rate=c.learning_rate)
        self.baseline = tf.Variable(0.0, trainable=False, name="baseline")
        self.baseline_ready = tf.Variable(False, trainable=False, name="baseline_ready")
        self.updates = tf.Variable(0, trainable=False, dtype=tf.int64, name="updates")
        self.rng = tf.random.Generator.from_seed(c.seed)
        self._pending: list[Sample] = []

    # -- proposing ---------------------------------------------------------------------------------

    def propose(self, count: int) -> list[np.ndarray]:
        self._pending = [self._sample() for _ in range(count)]
        return [s.assignment for s in self._pending]

    def _sample(self, greedy: bool = False) -> Sample:
        g, d = self.policy.num_groups, self.num_devices
        # Stateless seeds drawn from a checkpointed generator: resuming replays the same draws.
        seeds = tf.cast(tf.transpose(self.rng.make_seeds(g + 1)) % (2**31 - 1), tf.int32)
        noisy = not greedy and int(self.updates.numpy()) < self.config.noise_updates and self.config.logits_noise_std > 0
        noise = self.rng.normal([g, d], stddev=self.config.logits_noise_std) if noisy else tf.zeros([g, d])
        groups, devices = self.policy.sample(seeds, noise, tf.constant(self.config.temperature), greedy=greedy)
        return Sample(groups.numpy().astype(np.int64), devices.numpy().astype(np.int64), noise.numpy())

    def best_guess(self) -> np.ndarray:
        return self._sample(greedy=True).assignment

    # -- learning ----------------------------------------------------------------------------------

    def learn(self, assignments: Sequence[np.ndarray], rewards: Sequence[float]) -> Mapping[str, float]:
        samples = self._pending
        if len(samples) != len(rewards):
            raise ValueError("learn() takes the rewards of the placements of the last propose()")
        rewards_t = tf.constant(np.asarray(rewards, np.float32))
        mean_reward = tf.reduce_mean(rewards_t)
        if not bool(self.baseline_ready.numpy()):  # start the baseline at the first rewards, not at 0
            self.baseline.assign(mean_reward)
            self.baseline_ready.assign(True)
        advantages = rewards_t - self.baseline
        temperature = tf.constant(self.config.temperature)
        with tf.GradientTape() as tape:
            loss = 0.0
            entropy_total = 0.0
            for sample, advantage in zip(samples, tf.unstack(advantages)):
                grouper_lp, placer_lp, entropy = self.policy.log_prob(
                    tf.constant(sample.groups, tf.int32), tf.constant(sample.group_devices, tf.int32),
                    tf.constant(sample.noise, tf.float32), temperature)
                loss += -advantage * (grouper_lp + placer_lp) - self.config.entropy_weight * entropy
                entropy_total += entropy
            loss /= len(samples)
        variables = self.policy.trainable_variables
        gradients = tape.gradient(loss, variables)
        clipped, norm = tf.clip_by_global_norm(gradients, self.config.grad_bound)
        self.optimizer.apply_gradients(zip(clipped, variables))
        self.baseline.assign(self.config.baseline_decay * self.baseline + (1 - self.config.baseline_decay) * mean_reward)
        self.updates.assign_add(1)
        self._decay_learning_rate()
        self._pending = []
        return {"loss": float(loss), "baseline": float(self.baseline), "grad_norm": float(norm),
                "entropy": float(entropy_total) / len(samples), "learning_rate": float(self.optimizer.learning_rate)}

    def _decay_learning_rate(self) -> None:
        c, step = self.config, int(self.updates.numpy())
        if step > c.lr_decay_start:
            decays = (step - c.lr_decay_start) // c.lr_decay_updates
            self.optimizer.learning_rate.assign(c.learning_rate * c.lr_decay_rate ** decays)

    # -- state -------------------------------------------------------------------------------------

    def checkpoint_objects(self) -> Mapping[str, Any]:
        return {"policy": self.policy, "optimizer": self.optimizer, "baseline": self.baseline,
                "baseline_ready": self.baseline_ready, "updates": self.updates, "rng": self.rng}

    def numpy_state(self) -> Mapping[str, Any]:
        return {"config": asdict(self.config)}

    def load_numpy_state(self, state: Mapping[str, Any]) -> None:
        pass
