"""REINFORCE with a reward baseline, for the colocation placer and the graph policy; `standardized` for all.

Defaults follow TensorFlow's grappler `hierarchical_controller.py` (see ../shared/FINDINGS.md): logit
noise 0.5 for the first 750 updates, Adam at 0.1 decayed 0.95 every 50 updates after update 400,
gradient-norm bound 1, reward baseline decay 0.9, no entropy term. The loss is
-(reward - reward baseline) * log p(placement), averaged over the placements of one update. Off by
default, beyond the reference: an entropy bonus (summed, or averaged per decision), advantages
standardized within each update's samples, and self-imitation of the best placement sampled so far.
A policy supplies `_sample(greedy)` (an object with `.assignment`) and `_log_prob(sample)` (the
log-probability and the entropy to reward, normalized as `entropy_normalization` asks). The hierarchical
planner writes the same update out in its own file (agents/hierarchical.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf


@dataclass(frozen=True)
class PolicyGradientConfig:
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
    reward_baseline_decay: float = 0.9
    """Decay of the reward baseline: the exponential moving average of rewards that REINFORCE subtracts."""
    entropy_weight: float = 0.0
    """Weight of an entropy bonus in the loss (0: none, as the reference)."""
    entropy_normalization: str = "sum"
    """What the entropy bonus (and the logged entropy) is: "sum" over every decision of a placement (the
    grouper's ~10k per-unit choices then outweigh the placer's ~100), or "per-decision": each part's
    entropy averaged over its decisions (grouper per unit, placer per group), then summed."""
    normalize_advantages: bool = False
    """Standardize the advantages of one update's samples (zero mean, unit std) before the loss, so the
    entropy weight means the same whatever the reward scale; centering on the batch mean replaces the
    reward baseline (False: raw reward - reward baseline, as the reference)."""
    imitation_weight: float = 0.0
    """Self-imitation (Oh et al., 2018): every update also maximizes this weight times the log-probability
    (without logit noise) of the best placement sampled so far (the hierarchical planner: of its placer's
    devices for the best sample's groups). REINFORCE alone moves the policy by the average of a few
    samples, and its greedy placement can stay far from the best one it has found (on NMT-4 with 4 GPUs,
    417 ms against the best sample's 347); imitation pulls the policy to its best, so later samples search
    around it (there: 314 ms, the greedy placement 348). The best is the highest single reward: on a noisy
    backend that may be a lucky timing. 0: off (the reference)."""
    seed: int = 0
    """Seeds weights, sampling and noise."""

    def __post_init__(self):
        if self.imitation_weight < 0:
            raise ValueError(f"imitation_weight must be >= 0, got {self.imitation_weight}")
        if self.entropy_normalization not in ("sum", "per-decision"):
            raise ValueError(f"unknown entropy_normalization {self.entropy_normalization!r}: 'sum' or 'per-decision'")


def standardized(advantages: tf.Tensor) -> tf.Tensor:
    """Advantages shifted to zero mean and scaled to unit std; all zeros when they are all equal."""
    centered = advantages - tf.reduce_mean(advantages)
    std = tf.math.reduce_std(advantages)
    return tf.where(std > 1e-8, centered / tf.maximum(std, 1e-8), tf.zeros_like(centered))


class PolicyGradientAgent:
    name = "policy-gradient"
    sample_type: type = object
    """The dataclass `_sample` returns (of numpy arrays, with a `noise` field): the best sample is saved as
    plain data and rebuilt from it on resume."""

    def __init__(self, config: PolicyGradientConfig, policy: tf.Module, num_devices: int):
        self.config = config
        self.policy = policy
        self.num_devices = num_devices
        self.optimizer = tf.keras.optimizers.Adam(learning_rate=config.learning_rate)
        self.reward_baseline = tf.Variable(0.0, trainable=False, name="baseline")
        self.reward_baseline_ready = tf.Variable(False, trainable=False, name="baseline_ready")
        self.updates = tf.Variable(0, trainable=False, dtype=tf.int64, name="updates")
        self.rng = tf.random.Generator.from_seed(config.seed)
        self._pending: list = []
        self._best_sample = None  # the best sample so far, with its noise zeroed, for self-imitation
        self._best_sample_reward = -np.inf

    def _sample(self, greedy: bool = False):
        raise NotImplementedError

    def _log_prob(self, sample) -> tuple[tf.Tensor, tf.Tensor]:
        raise NotImplementedError

    def _log_probs(self, samples) -> tuple[tf.Tensor, tf.Tensor]:
        """[B] log-probabilities and [B] entropies of several samples; a policy that can score them in one
        batched pass overrides this."""
        scored = [self._log_prob(sample) for sample in samples]
        return tf.stack([lp for lp, _ in scored]), tf.stack([entropy for _, entropy in scored])

    def _imitation_log_prob(self, sample) -> tf.Tensor:
        """What self-imitation maximizes: the sample's log-probability, by default."""
        return self._log_prob(sample)[0]

    def _log_probs_and_imitation(self, samples, best) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """`_log_probs(samples)` and `_imitation_log_prob(best)`; a policy that can score them all in one
        batched pass overrides this."""
        return (*self._log_probs(samples), self._imitation_log_prob(best))

    def _noise(self, shape, greedy: bool) -> tf.Tensor:
        noisy = (not greedy and int(self.updates.numpy()) < self.config.noise_updates and self.config.logits_noise_std > 0)
        return self.rng.normal(shape, stddev=self.config.logits_noise_std) if noisy else tf.zeros(shape)

    def _seeds(self, count: int) -> tf.Tensor:
        # Stateless seeds drawn from a checkpointed generator: resuming replays the same draws.
        return tf.cast(tf.transpose(self.rng.make_seeds(count)) % (2**31 - 1), tf.int32)

    # -- the agent interface -----------------------------------------------------------------------

    def _samples(self, count: int, greedy: bool = False) -> list:
        """`count` samples; a policy that can draw them in one batched pass overrides this."""
        return [self._sample(greedy) for _ in range(count)]

    def propose(self, count: int) -> list[np.ndarray]:
        self._pending = self._samples(count)
        return [s.assignment for s in self._pending]

    def best_guess(self) -> np.ndarray:
        return self._sample(greedy=True).assignment

    def learn(self, assignments: Sequence[np.ndarray], rewards: Sequence[float]) -> Mapping[str, float]:
        samples = self._pending
        if len(samples) != len(rewards):
            raise ValueError("learn() takes the rewards of the placements of the last propose()")
        rewards_t = tf.constant(np.asarray(rewards, np.float32))
        mean_reward = tf.reduce_mean(rewards_t)
        if not bool(self.reward_baseline_ready.numpy()):  # start the reward baseline at the first rewards, not at 0
            self.reward_baseline.assign(mean_reward)
            self.reward_baseline_ready.assign(True)
        best = int(np.argmax(rewards))
        if rewards[best] > self._best_sample_reward:
            self._best_sample = replace(samples[best], noise=np.zeros_like(samples[best].noise))
            self._best_sample_reward = float(rewards[best])
        advantages = rewards_t - self.reward_baseline
        if self.config.normalize_advantages:
            advantages = standardized(advantages)
        loss, entropy_total, norm = self._step(samples, advantages)
        metrics = {}
        if self.config.imitation_weight > 0:
            metrics["best_sample_log_prob"] = float(self._imitation_log_prob(self._best_sample))
        decay = self.config.reward_baseline_decay
        self.reward_baseline.assign(decay * self.reward_baseline + (1 - decay) * mean_reward)
        self.updates.assign_add(1)
        self._decay_learning_rate()
        self._pending = []
        return {"loss": float(loss), "reward_baseline": float(self.reward_baseline), "grad_norm": float(norm),
                "entropy": float(entropy_total) / len(samples), "learning_rate": float(self.optimizer.learning_rate),
                **metrics}

    def _step(self, samples, advantages):
        """One gradient step of REINFORCE."""
        imitating = self.config.imitation_weight > 0
        with tf.GradientTape() as tape:
            if imitating:
                log_probs, entropies, imitation = self._log_probs_and_imitation(samples, self._best_sample)
            else:
                log_probs, entropies = self._log_probs(samples)
            loss = tf.reduce_mean(-advantages * log_probs - self.config.entropy_weight * entropies)
            entropy_total = tf.reduce_sum(entropies)
            if imitating:
                loss -= self.config.imitation_weight * imitation
        groups = self._parameter_groups()
        variables = [v for group_variables, _, _ in groups for v in group_variables]
        gradients = tape.gradient(loss, variables)
        clipped_gradients, norm = tf.clip_by_global_norm(gradients, self.config.grad_bound)
        start = 0
        for group_variables, optimizer, _ in groups:
            end = start + len(group_variables)
            optimizer.apply_gradients(zip(clipped_gradients[start:end], group_variables))
            start = end
        return loss, entropy_total, norm

    def _parameter_groups(self) -> list[tuple[list[tf.Variable], tf.keras.optimizers.Optimizer, float]]:
        """(variables, optimizer, initial learning rate) for each set of variables a gradient step updates
        (the decay schedule scales each initial rate); one Adam over the whole policy by default."""
        return [(list(self.policy.trainable_variables), self.optimizer, self.config.learning_rate)]

    def _decay_learning_rate(self) -> None:
        c, step = self.config, int(self.updates.numpy())
        if step > c.lr_decay_start:
            decays = (step - c.lr_decay_start) // c.lr_decay_updates
            for _, optimizer, initial in self._parameter_groups():
                optimizer.learning_rate.assign(initial * c.lr_decay_rate ** decays)

    # -- state -------------------------------------------------------------------------------------

    def checkpoint_objects(self) -> Mapping[str, Any]:
        # "baseline" names the reward baseline in checkpoints written before it was called so: kept for resume.
        return {"policy": self.policy, "optimizer": self.optimizer, "baseline": self.reward_baseline,
                "baseline_ready": self.reward_baseline_ready, "updates": self.updates, "rng": self.rng}

    def rebase_best(self, reward: float) -> None:
        """The best sample's reward as measured on a new backend (training moved from the simulator to real
        execution): rewards from there on compare with it, not with the old backend's."""
        if self._best_sample is not None:
            self._best_sample_reward = float(reward)

    def numpy_state(self) -> Mapping[str, Any]:
        best = None
        if self._best_sample is not None:
            best = {"reward": self._best_sample_reward,
                    "sample": {key: value.tolist() for key, value in asdict(self._best_sample).items()}}
        return {"config": asdict(self.config), "best_sample": best}

    def load_numpy_state(self, state: Mapping[str, Any]) -> None:
        best = state.get("best_sample")
        if best is not None:
            self._best_sample = self.sample_type(**{key: np.asarray(value) for key, value in best["sample"].items()})
            self._best_sample_reward = float(best["reward"])
