"""The pieces of REINFORCE with a reward baseline that the learned placers share, each agent's update
calling them in order (agents/hierarchical.py, agents/colocation.py, agents/graph_policy/agent.py).

Defaults follow TensorFlow's grappler `hierarchical_controller.py` (see ../shared/FINDINGS.md): logit
noise 0.5 for the first 750 updates, Adam at 0.1 decayed 0.95 every 50 updates after update 400,
gradient-norm bound 1, reward baseline decay 0.9, no entropy term. The loss is
-(reward - reward baseline) * log p(placement), averaged over the placements of one update. Off by
default, beyond the reference: an entropy bonus (summed, or averaged per decision), advantages
standardized within each update's samples, and self-imitation of the best placement sampled so far.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Mapping, Sequence

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


class ReinforceAgent:
    """What every policy-gradient placer keeps between updates besides its policy: the optimizer, the reward
    baseline, the best sample, the update count and the random generator, checkpointed and resumed one way.
    It holds no step of the algorithm: each agent's file has its sampling, its scoring and its update."""

    sample_type: type
    """The dataclass of the agent's samples (with a `noise` field): the best one is rebuilt from plain data."""

    def __init__(self, config, policy: tf.Module, num_devices: int,
                 optimizer: tf.keras.optimizers.Optimizer | None = None):
        self.config = config
        self.policy = policy
        self.num_devices = num_devices
        self.optimizer = optimizer or tf.keras.optimizers.Adam(learning_rate=config.learning_rate)
        self.reward_baseline = RewardBaseline(config.reward_baseline_decay)
        self.best = BestSample()
        self.updates = tf.Variable(0, trainable=False, dtype=tf.int64, name="updates")
        self.rng = tf.random.Generator.from_seed(config.seed)
        self._pending: list = []

    def checkpoint_objects(self) -> dict[str, Any]:
        return {"policy": self.policy, "optimizer": self.optimizer, **self.reward_baseline.checkpoint_objects(),
                "updates": self.updates, "rng": self.rng}

    def rebase_best(self, reward: float) -> None:
        """The best sample's reward as measured on a new backend (training moved from the simulator to real
        execution): rewards from there on compare with it, not with the old backend's."""
        self.best.rebase(reward)

    def numpy_state(self) -> Mapping[str, Any]:
        return {"config": asdict(self.config), "best_sample": self.best.to_state()}

    def load_numpy_state(self, state: Mapping[str, Any]) -> None:
        self.best.load(state.get("best_sample"), self.sample_type)


Scores = Callable[[Sequence], tuple[tf.Tensor, tf.Tensor, tf.Tensor]]
"""A policy's scoring of samples in one pass: [B] log-probabilities, [B] entropies (normalized as its
`entropy_normalization` asks), and [B] what self-imitation maximizes of each (its whole log-probability, or a
part of it: the hierarchical planner's placer decisions)."""


GradientStep = Callable[[Sequence, tf.Tensor], tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor | None]]
"""Steps 3 and 4 of an update: (the samples, with the best last when imitating; their [count] advantages) in;
(loss, gradient norm before clipping, [count] entropies, the best sample's score after the step or None) out."""


def taped_gradient_step(agent, score: Scores, parts: Parts) -> GradientStep:
    """The gradient step op by op: the scoring pass taped, the gradients and each optimizer's step run eagerly."""
    c = agent.config

    def step(samples: Sequence, advantages: tf.Tensor):
        count = int(advantages.shape[0])
        imitating = len(samples) > count
        with tf.GradientTape() as tape:
            log_probs, entropies, imitation = score(samples)
            log_probs, entropies = log_probs[:count], entropies[:count]
            loss = reinforce_loss(advantages, log_probs, entropies, c.entropy_weight)
            if imitating:
                loss -= c.imitation_weight * imitation[count]
        norm = apply_gradients(tape, loss, parts, c.grad_bound)
        return loss, norm, entropies, score([samples[-1]])[2][0] if imitating else None

    return step


def reinforce_update(agent, samples: Sequence, rewards: Sequence[float], score: Scores, parts: Parts,
                     gradient_step: GradientStep | None = None) -> dict[str, float]:
    """One update of REINFORCE with a reward baseline, written out in order, for an agent with `config`,
    `best` (BestSample), `reward_baseline` (RewardBaseline), `updates` and `optimizer`: the samples of its last
    proposal and their rewards in, the metrics to log out. gradient_step: how steps 3 and 4 run (an agent's
    traced one); None: `taped_gradient_step`."""
    c = agent.config
    if len(samples) != len(rewards):
        raise ValueError("learn() takes the rewards of the placements of the last propose()")
    rewards_t = tf.constant(np.asarray(rewards, np.float32))

    # 1. Self-imitation's target: the best sample so far, without the noise it was drawn with.
    agent.best.offer(samples, rewards)
    imitating = c.imitation_weight > 0

    # 2. Advantages: reward - reward baseline (which starts at the first update's mean reward), standardized
    # within the update if asked.
    advantages = agent.reward_baseline.advantages(rewards_t)
    if c.normalize_advantages:
        advantages = standardized(advantages)

    # 3. The loss: REINFORCE, minus the entropy bonus, minus self-imitation of the best sample; the samples
    # and the best are scored in one pass.
    # 4. One gradient step: the global norm bounded, each part by its own optimizer.
    count = len(samples)
    step = gradient_step or taped_gradient_step(agent, score, parts)
    loss, norm, entropies, best_score = step([*samples, agent.best.sample] if imitating else list(samples), advantages)
    metrics = {"best_sample_log_prob": float(best_score)} if imitating else {}

    # 5. The reward baseline follows the rewards; the learning rates decay on schedule.
    agent.reward_baseline.follow(rewards_t)
    agent.updates.assign_add(1)
    decay_learning_rates(parts, int(agent.updates.numpy()), c)
    return {"loss": float(loss), "reward_baseline": float(agent.reward_baseline.value), "grad_norm": float(norm),
            "entropy": float(tf.reduce_sum(entropies)) / count, "learning_rate": float(agent.optimizer.learning_rate),
            **metrics}


def stateless_seeds(rng: tf.random.Generator, count: int) -> tf.Tensor:
    """[count, 2] int32 seeds for stateless sampling, drawn from a checkpointed generator: resuming replays
    the same draws."""
    return tf.cast(tf.transpose(rng.make_seeds(count)) % (2**31 - 1), tf.int32)


def logit_noise(rng: tf.random.Generator, shape, config, update: int, greedy: bool) -> tf.Tensor:
    """Gaussian noise of `config.logits_noise_std` for the first `config.noise_updates` updates while sampling;
    zeros when greedy, later, or with no noise set."""
    if not greedy and update < config.noise_updates and config.logits_noise_std > 0:
        return rng.normal(shape, stddev=config.logits_noise_std)
    return tf.zeros(shape)


def standardized(advantages: tf.Tensor) -> tf.Tensor:
    """Advantages shifted to zero mean and scaled to unit std; all zeros when they are all equal."""
    centered = advantages - tf.reduce_mean(advantages)
    std = tf.math.reduce_std(advantages)
    return tf.where(std > 1e-8, centered / tf.maximum(std, 1e-8), tf.zeros_like(centered))
