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
    """The REINFORCE settings of the colocation placer and the graph policy. Each field means what the field
    of the same name of `agents.hierarchical.Args` means (documented there); the defaults are grappler's."""

    tanh_constant: float = 1.0
    temperature: float = 1.0
    logits_noise_std: float = 0.5
    noise_updates: int = 750
    learning_rate: float = 0.1
    lr_decay_rate: float = 0.95
    lr_decay_updates: int = 50
    lr_decay_start: int = 400
    grad_bound: float = 1.0
    reward_baseline_decay: float = 0.9
    entropy_weight: float = 0.0
    entropy_normalization: str = "sum"
    """"sum" over every decision of a placement, or "per-decision": averaged over the decisions of each part."""
    normalize_advantages: bool = False
    imitation_weight: float = 0.0
    """Self-imitation of the best placement sampled so far (its whole log-probability, without noise)."""
    seed: int = 0

    def __post_init__(self):
        check_loss_settings(self)


def check_loss_settings(config) -> None:
    """Refuse loss settings no policy-gradient agent knows (a config with imitation_weight and
    entropy_normalization)."""
    if config.imitation_weight < 0:
        raise ValueError(f"imitation_weight must be >= 0, got {config.imitation_weight}")
    if config.entropy_normalization not in ("sum", "per-decision"):
        raise ValueError(f"unknown entropy_normalization {config.entropy_normalization!r}: 'sum' or 'per-decision'")


Parts = list[tuple[list[tf.Variable], tf.keras.optimizers.Optimizer, float]]
"""(variables, optimizer, initial learning rate) of each part of a policy a gradient step updates."""


def reinforce_loss(advantages: tf.Tensor, log_probs: tf.Tensor, entropies: tf.Tensor,
                   entropy_weight: float) -> tf.Tensor:
    """REINFORCE over one update's samples: -(advantage x log-probability) - entropy bonus, averaged."""
    return tf.reduce_mean(-advantages * log_probs - entropy_weight * entropies)


def apply_gradients(tape: tf.GradientTape, loss: tf.Tensor, parts: Parts, grad_bound: float) -> tf.Tensor:
    """One gradient step: the gradients of `loss` clipped to a global norm of `grad_bound` over every part,
    each part stepped by its own optimizer. Returns the norm before clipping."""
    variables = [v for part_variables, _, _ in parts for v in part_variables]
    gradients, norm = tf.clip_by_global_norm(tape.gradient(loss, variables), grad_bound)
    start = 0
    for part_variables, optimizer, _ in parts:
        optimizer.apply_gradients(zip(gradients[start:start + len(part_variables)], part_variables))
        start += len(part_variables)
    return norm


def decay_learning_rates(parts: Parts, update: int, config) -> None:
    """After `lr_decay_start` updates, each part's rate is its initial one x lr_decay_rate ** (decays so far,
    one every `lr_decay_updates` updates)."""
    if update > config.lr_decay_start:
        decays = (update - config.lr_decay_start) // config.lr_decay_updates
        for _, optimizer, initial in parts:
            optimizer.learning_rate.assign(initial * config.lr_decay_rate ** decays)


class RewardBaseline(tf.Module):
    """REINFORCE's reward baseline: the exponential moving average of each update's mean reward, started at
    the first update's mean rather than at 0."""

    def __init__(self, decay: float):
        super().__init__(name="reward_baseline")
        self.decay = decay
        self.value = tf.Variable(0.0, trainable=False, name="baseline")
        self.ready = tf.Variable(False, trainable=False, name="baseline_ready")

    def advantages(self, rewards: tf.Tensor) -> tf.Tensor:
        """`rewards` minus the baseline."""
        if not bool(self.ready.numpy()):
            self.value.assign(tf.reduce_mean(rewards))
            self.ready.assign(True)
        return rewards - self.value

    def follow(self, rewards: tf.Tensor) -> None:
        """Move the baseline towards this update's mean reward."""
        self.value.assign(self.decay * self.value + (1 - self.decay) * tf.reduce_mean(rewards))

    def checkpoint_objects(self) -> dict[str, tf.Variable]:
        # "baseline" names the reward baseline in checkpoints written before it was called so: kept for resume.
        return {"baseline": self.value, "baseline_ready": self.ready}


class BestSample:
    """The best sample so far, its logit noise zeroed: what self-imitation maximizes. Plain data in the agent's
    state (`to_state`, `load`), so a resumed run imitates the same sample."""

    def __init__(self):
        self.sample = None
        self.reward = -np.inf

    def offer(self, samples: Sequence, rewards: Sequence[float]) -> None:
        best = int(np.argmax(rewards))
        if rewards[best] > self.reward:
            self.sample = replace(samples[best], noise=np.zeros_like(samples[best].noise))
            self.reward = float(rewards[best])

    def rebase(self, reward: float) -> None:
        """The best sample's reward as measured on a new backend (training moved from the simulator to real
        execution): rewards from there on compare with it, not with the old backend's."""
        if self.sample is not None:
            self.reward = float(reward)

    def to_state(self) -> dict[str, Any] | None:
        if self.sample is None:
            return None
        return {"reward": self.reward, "sample": {key: value.tolist() for key, value in asdict(self.sample).items()}}

    def load(self, state: Mapping[str, Any] | None, sample_type: type) -> None:
        if state is not None:
            self.sample = sample_type(**{key: np.asarray(value) for key, value in state["sample"].items()})
            self.reward = float(state["reward"])


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
        self.reward_baseline = RewardBaseline(config.reward_baseline_decay)
        self.updates = tf.Variable(0, trainable=False, dtype=tf.int64, name="updates")
        self.rng = tf.random.Generator.from_seed(config.seed)
        self._pending: list = []
        self.best = BestSample()

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
        self.best.offer(samples, rewards)
        advantages = self.reward_baseline.advantages(rewards_t)
        if self.config.normalize_advantages:
            advantages = standardized(advantages)
        loss, entropy_total, norm = self._step(samples, advantages)
        metrics = {}
        if self.config.imitation_weight > 0:
            metrics["best_sample_log_prob"] = float(self._imitation_log_prob(self.best.sample))
        self.reward_baseline.follow(rewards_t)
        self.updates.assign_add(1)
        decay_learning_rates(self._parameter_parts(), int(self.updates.numpy()), self.config)
        self._pending = []
        return {"loss": float(loss), "reward_baseline": float(self.reward_baseline.value), "grad_norm": float(norm),
                "entropy": float(entropy_total) / len(samples), "learning_rate": float(self.optimizer.learning_rate),
                **metrics}

    def _step(self, samples, advantages):
        """One gradient step of REINFORCE."""
        imitating = self.config.imitation_weight > 0
        with tf.GradientTape() as tape:
            if imitating:
                log_probs, entropies, imitation = self._log_probs_and_imitation(samples, self.best.sample)
            else:
                log_probs, entropies = self._log_probs(samples)
            loss = reinforce_loss(advantages, log_probs, entropies, self.config.entropy_weight)
            if imitating:
                loss -= self.config.imitation_weight * imitation
        norm = apply_gradients(tape, loss, self._parameter_parts(), self.config.grad_bound)
        return loss, tf.reduce_sum(entropies), norm

    def _parameter_parts(self) -> Parts:
        """The parts a gradient step updates (the decay schedule scales each initial rate); one Adam over the
        whole policy by default."""
        return [(list(self.policy.trainable_variables), self.optimizer, self.config.learning_rate)]

    # -- state -------------------------------------------------------------------------------------

    def checkpoint_objects(self) -> Mapping[str, Any]:
        return {"policy": self.policy, "optimizer": self.optimizer, **self.reward_baseline.checkpoint_objects(),
                "updates": self.updates, "rng": self.rng}

    def rebase_best(self, reward: float) -> None:
        self.best.rebase(reward)

    def numpy_state(self) -> Mapping[str, Any]:
        return {"config": asdict(self.config), "best_sample": self.best.to_state()}

    def load_numpy_state(self, state: Mapping[str, Any]) -> None:
        self.best.load(state.get("best_sample"), self.sample_type)
