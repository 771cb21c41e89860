"""The hierarchical planner: grouper + seq-to-seq placer (agents/hierarchical.py) trained by policy gradient.

The seed paper's agent. Defaults follow grappler's reference planner: groups min(256, 20 x devices),
hidden 512, grouping hidden 64; the training defaults are `PolicyGradientConfig`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from agents.features import unit_features
from agents.hierarchical import HierarchicalPolicy, Sample
from agents.policy_gradient import PolicyGradientAgent, PolicyGradientConfig
from placer.devices import DeviceSet
from placer.graph.opgraph import OpGraph
from placer.models.expert import compute_devices, spread


@dataclass(frozen=True)
class HierarchicalConfig(PolicyGradientConfig):
    num_groups: int | None = None
    """Groups the grouper forms; None: min(256, 20 x devices)."""
    grouping_hidden_size: int = 64
    """Width of the grouper's hidden layer."""
    hidden_size: int = 512
    """Width of the placer's LSTMs and attention."""
    grouping_prior: str = "none"
    """Where the grouper starts. "none" (the reference): from its random weights, so early groups are
    scattered across the graph, almost every edge crosses devices, and merging everything into one group
    is the first improvement REINFORCE finds. "partition": its logits are biased towards a METIS recursive
    bisection of the unit graph into the G groups (needs pymetis), so groups start as contiguous pieces of
    the graph, numbered so that neighbouring groups are neighbouring pieces; the placer then chooses devices
    for pieces, and the grouper still learns on top of the bias."""
    grouping_prior_weight: float = 8.0
    """With grouping_prior="partition": the logit bias towards each unit's part (8: ~99% of units start in
    their part with 40 groups)."""
    placement_prior_weight: float = 0.0
    """With grouping_prior="partition" and a weight above 0, the placer starts from the partition too: its
    bounded logits get this bias towards spreading the groups over the compute devices (the GPUs when there
    are any) in contiguous blocks, groups [0, G/K) on the first, so its greedy placement starts as the
    partition's K-way cut. Below 2 x tanh_constant the learned logits can overrule the bias. 0: no bias
    (the placer starts from its random weights)."""
    grouper_learning_rate: float | None = None
    """Adam's initial learning rate for the grouper, with its own optimizer (decayed on the same schedule);
    None: the grouper and placer share one Adam at `learning_rate` (the reference). 0 freezes the grouper:
    with grouping_prior="partition" the placer then learns over fixed pieces of the graph."""

    def __post_init__(self):
        super().__post_init__()
        if self.grouping_prior not in ("none", "partition"):
            raise ValueError(f"unknown grouping_prior {self.grouping_prior!r}: 'none' or 'partition'")
        if self.placement_prior_weight and self.grouping_prior == "none":
            raise ValueError("placement_prior_weight spreads the partition's groups over the devices: "
                             "it needs grouping_prior='partition'")
        if self.grouper_learning_rate is not None and self.grouper_learning_rate < 0:
            raise ValueError(f"grouper_learning_rate must be >= 0 (0 freezes the grouper), got {self.grouper_learning_rate}")

    def groups_for(self, devices: int) -> int:
        return self.num_groups or min(256, 20 * devices)


class HierarchicalPlanner(PolicyGradientAgent):
    """Grouper + placer trained jointly by REINFORCE (the agent of the seed paper)."""

    name = "hierarchical"
    sample_type = Sample

    def __init__(self, graph: OpGraph, device_mask: np.ndarray, config: HierarchicalConfig | None = None,
                 devices: DeviceSet | None = None):
        """device_mask: [U, D] 1 where a unit may run on a device (the environment's `device_mask`).
        devices: the environment's devices, needed by `placement_prior_weight` to find the compute devices."""
        c = config or HierarchicalConfig()
        num_devices = device_mask.shape[1]
        num_groups = c.groups_for(num_devices)
        prior_groups = None
        if c.grouping_prior == "partition":
            from placer.heuristics.partitioners import unit_partition

            prior_groups = unit_partition(graph, num_groups, seed=c.seed)
        prior_devices = None
        if c.placement_prior_weight:
            if devices is None:
                raise ValueError("placement_prior_weight needs the devices: HierarchicalPlanner(graph, mask, config, "
                                 "devices=env.devices)")
            prior_devices = np.asarray(spread(num_groups, compute_devices(devices)), np.int64)
        policy = HierarchicalPolicy(
            unit_features(graph), device_mask[: len(graph.groups)], num_groups=num_groups,
            grouping_hidden_size=c.grouping_hidden_size, hidden_size=c.hidden_size, tanh_constant=c.tanh_constant,
            seed=c.seed, prior_groups=prior_groups, prior_weight=c.grouping_prior_weight,
            prior_devices=prior_devices, placement_prior_weight=c.placement_prior_weight,
        )
        super().__init__(c, policy, num_devices)
        self.grouper_optimizer = (tf.keras.optimizers.Adam(learning_rate=c.grouper_learning_rate)
                                  if c.grouper_learning_rate else None)

    def _parameter_groups(self):
        if self.config.grouper_learning_rate is None:
            return super()._parameter_groups()
        grouper = [*self.policy.grouper_hidden, *self.policy.grouper_out]
        grouper_ids = {id(v) for v in grouper}
        placer = [v for v in self.policy.trainable_variables if id(v) not in grouper_ids]
        groups = [(placer, self.optimizer, self.config.learning_rate)]
        if self.grouper_optimizer is not None:  # a learning rate of 0 freezes the grouper: no optimizer at all
            groups.append((grouper, self.grouper_optimizer, self.config.grouper_learning_rate))
        return groups

    def checkpoint_objects(self):
        objects = dict(super().checkpoint_objects())
        if self.grouper_optimizer is not None:
            objects["grouper_optimizer"] = self.grouper_optimizer
        return objects

    def _sample(self, greedy: bool = False) -> Sample:
        return self._samples(1, greedy)[0]

    def _samples(self, count: int, greedy: bool = False) -> list[Sample]:
        g, d = self.policy.num_groups, self.num_devices
        seeds = self._seeds(g + 1)
        noise = self._noise([count, g, d], greedy)
        groups, devices = self.policy.sample(seeds, noise, tf.constant(self.config.temperature), greedy=greedy)
        groups, devices, noise = (groups.numpy().astype(np.int64), devices.numpy().astype(np.int64), noise.numpy())
        return [Sample(groups[i], devices[i], noise[i]) for i in range(count)]

    def _imitation_log_prob(self, sample: Sample) -> tf.Tensor:
        # The placer's part only: the grouper's ~10k per-unit choices make up almost all of a sample's
        # log-probability (about -5,000 nats on NMT-4, against the placer's ~-100) and are mostly sampling
        # accidents around the partition; imitating them all barely moved the placer.
        return self._scores([sample])[1][0]

    def _log_prob(self, sample: Sample):
        log_probs, entropies = self._log_probs([sample])
        return log_probs[0], entropies[0]

    def _log_probs(self, samples):
        return self._combined(*self._scores(samples))

    def _log_probs_and_imitation(self, samples, best):
        scores = self._scores([*samples, best])
        log_probs, entropies = self._combined(*(score[:-1] for score in scores))
        return log_probs, entropies, scores[1][-1]

    def _combined(self, grouper_lp, placer_lp, grouper_entropy, placer_entropy):
        """A sample's log-probability and the entropy its bonus rewards, from the policy's four scores."""
        if self.config.entropy_normalization == "per-decision":
            grouper_entropy /= self.policy.num_units
            placer_entropy /= self.policy.num_groups
        return grouper_lp + placer_lp, grouper_entropy + placer_entropy

    def _scores(self, samples):
        """The policy's log-probabilities and entropies of `samples`, scored in one batched pass."""
        return self.policy.log_prob(
            tf.constant(np.stack([s.groups for s in samples]), tf.int32),
            tf.constant(np.stack([s.group_devices for s in samples]), tf.int32),
            tf.constant(np.stack([s.noise for s in samples]), tf.float32), tf.constant(self.config.temperature))
