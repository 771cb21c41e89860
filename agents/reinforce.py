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
from placer.graph.opgraph import OpGraph


@dataclass(frozen=True)
class HierarchicalConfig(PolicyGradientConfig):
    num_groups: int | None = None
    """Groups the grouper forms; None: min(256, 20 x devices)."""
    grouping_hidden_size: int = 64
    """Width of the grouper's hidden layer."""
    hidden_size: int = 512
    """Width of the placer's LSTMs and attention."""

    def groups_for(self, devices: int) -> int:
        return self.num_groups or min(256, 20 * devices)


class HierarchicalPlanner(PolicyGradientAgent):
    """Grouper + placer trained jointly by REINFORCE (the agent of the seed paper)."""

    name = "hierarchical"

    def __init__(self, graph: OpGraph, device_mask: np.ndarray, config: HierarchicalConfig | None = None):
        """device_mask: [U, D] 1 where a unit may run on a device (the environment's `device_mask`)."""
        c = config or HierarchicalConfig()
        num_devices = device_mask.shape[1]
        policy = HierarchicalPolicy(
            unit_features(graph), device_mask[: len(graph.groups)], num_groups=c.groups_for(num_devices),
            grouping_hidden_size=c.grouping_hidden_size, hidden_size=c.hidden_size, tanh_constant=c.tanh_constant,
            seed=c.seed,
        )
        super().__init__(c, policy, num_devices)

    def _sample(self, greedy: bool = False) -> Sample:
        g, d = self.policy.num_groups, self.num_devices
        seeds = self._seeds(g + 1)
        noise = self._noise([g, d], greedy)
        groups, devices = self.policy.sample(seeds, noise, tf.constant(self.config.temperature), greedy=greedy)
        return Sample(groups.numpy().astype(np.int64), devices.numpy().astype(np.int64), noise.numpy())

    def _log_prob(self, sample: Sample):
        grouper_lp, placer_lp, grouper_entropy, placer_entropy = self.policy.log_prob(
            tf.constant(sample.groups, tf.int32), tf.constant(sample.group_devices, tf.int32),
            tf.constant(sample.noise, tf.float32), tf.constant(self.config.temperature))
        if self.config.entropy_normalization == "per-decision":
            grouper_entropy /= self.policy.num_units
            placer_entropy /= self.policy.num_groups
        return grouper_lp + placer_lp, grouper_entropy + placer_entropy
