"""The generalizing policy as an agent for one graph on one device set, trained by the shared policy-gradient
loop: every unit's device is drawn at once from the policy's logits (one-shot, as GDP places)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from agents.colocation import UnitSample
from agents.graph_policy.features import device_inputs, graph_inputs
from agents.graph_policy.policy import GraphPlacementPolicy, GraphPolicyConfig
from agents.policy_gradient import PolicyGradientAgent, PolicyGradientConfig
from placer.devices import DeviceSet
from placer.graph.opgraph import OpGraph


@dataclass(frozen=True)
class GraphAgentConfig(PolicyGradientConfig):
    hidden_size: int = 64
    """Width of the policy's unit and device embeddings (GraphPolicyConfig)."""
    message_rounds: int = 4
    """Rounds of message passing over the unit graph (GraphPolicyConfig)."""
    learning_rate: float = 0.003
    """Adam's initial learning rate (the per-unit policy has no grouper to collapse, and its logits are
    shared across graphs, so it learns at a rate between the reference planner's 0.1 and the tuned 0.0003)."""
    tanh_constant: float = 2.5
    logits_noise_std: float = 0.0
    """No logit noise by default: the per-unit draws explore enough."""
    normalize_advantages: bool = True
    partition_prior: bool = True
    """Start each unit on its device in a partition of the graph over the compute devices (GraphPolicyConfig)."""
    prior_weight: float = 2.5
    """Initial weight of that prior in the logits (GraphPolicyConfig)."""

    def policy_config(self) -> GraphPolicyConfig:
        return GraphPolicyConfig(hidden_size=self.hidden_size, message_rounds=self.message_rounds,
                                 tanh_constant=self.tanh_constant, partition_prior=self.partition_prior,
                                 prior_weight=self.prior_weight, seed=self.seed)


def partition_prior(graph: OpGraph, devices: DeviceSet) -> np.ndarray:
    """[U, D] 1 on each unit's starting device: the METIS baseline's k-way partition over the compute devices,
    balanced by the devices' roofline op costs (a generic host CPU's or V100's where a device has no
    hardware numbers, as on the testbed: only the costs' ratios matter to the balance). Neighbouring units
    start together, and the parts differ in which device they start on."""
    from agents.partitioners import metis_placement
    from placer.cost.targets import roofline_tables
    from placer.errors import DeviceSpecError
    from placer.hardware import GPUS, HOST_CPU
    from placer.profile import roofline_costs
    from placer.simulate import Simulator

    try:
        tables = roofline_tables(graph, devices)
    except DeviceSpecError:
        tables = {device.model or device.kind: roofline_costs(graph, HOST_CPU if device.kind == "CPU" else GPUS["V100"])
                  for device in devices}
    start = metis_placement(graph, devices, Simulator(graph, devices, tables)).group_device_array
    prior = np.zeros((len(graph.groups), len(devices)), np.float32)
    prior[np.arange(len(graph.groups)), start] = 1.0
    return prior


class GraphPolicyAgent(PolicyGradientAgent):
    """Places one graph with a `GraphPlacementPolicy` (a new one, or a pre-trained one to fine-tune)."""

    name = "graph"
    sample_type = UnitSample

    def __init__(self, graph: OpGraph, device_mask: np.ndarray, devices: DeviceSet,
                 config: GraphAgentConfig | None = None, policy: GraphPlacementPolicy | None = None,
                 optimizer: tf.keras.optimizers.Optimizer | None = None):
        """policy: a pre-trained policy to fine-tune (its own configuration then decides the network's
        sizes); optimizer: one shared by agents of several graphs that train one policy (pre-training)."""
        c = config or GraphAgentConfig()
        inputs = graph_inputs(graph)
        super().__init__(c, policy or GraphPlacementPolicy(c.policy_config()), device_mask.shape[1])
        if optimizer is not None:
            self.optimizer = optimizer
        self.units = tf.constant(inputs.units)
        self.edges = tf.constant(inputs.edges)
        self.device_features = tf.constant(device_inputs(devices).features)
        mask = device_mask[: inputs.num_units].astype(np.float32)
        mask[mask.sum(axis=1) == 0] = 1.0  # no device fits: leave it free, the placement fails and is charged
        self.mask = tf.constant(mask)
        # The policy's own configuration decides (a pre-trained policy brings its own).
        self.prior = tf.constant(partition_prior(graph, devices) if self.policy.config.partition_prior
                                 else np.zeros((inputs.num_units, len(devices)), np.float32))

    def _masked_logits(self, noise: tf.Tensor) -> tf.Tensor:
        """[B, U, D] for noise [B, U, D]."""
        logits = self.policy.logits_with_prior(self.units, self.edges, self.device_features, self.prior)
        return tf.where(self.mask > 0, (logits + noise) / self.config.temperature, -1e9)

    def _sample(self, greedy: bool = False) -> UnitSample:
        return self._samples(1, greedy)[0]

    def _samples(self, count: int, greedy: bool = False) -> list[UnitSample]:
        units, d = int(self.units.shape[0]), self.num_devices
        noise = self._noise([count, units, d], greedy)
        logits = self._masked_logits(noise)
        if greedy:
            devices = tf.argmax(logits, axis=2, output_type=tf.int32)
        else:
            seed = self._seeds(1)[0]
            flat = tf.random.stateless_categorical(tf.reshape(logits, [-1, d]), 1, seed=seed, dtype=tf.int32)
            devices = tf.reshape(flat, [count, units])
        devices, noise = devices.numpy().astype(np.int64), noise.numpy()
        return [UnitSample(devices[i], noise[i]) for i in range(count)]

    def _log_probs(self, samples):
        noise = tf.constant(np.stack([s.noise for s in samples]), tf.float32)
        chosen = tf.constant(np.stack([s.devices for s in samples]), tf.int32)
        log_softmax = tf.nn.log_softmax(self._masked_logits(noise))  # [B, U, D]
        log_probs = tf.reduce_sum(tf.gather(log_softmax, chosen, axis=2, batch_dims=2), axis=1)
        entropies = -tf.reduce_sum(tf.exp(log_softmax) * log_softmax, axis=[1, 2])
        if self.config.entropy_normalization == "per-decision":
            entropies = entropies / float(self.units.shape[0])
        return log_probs, entropies

    def _log_prob(self, sample: UnitSample):
        log_probs, entropies = self._log_probs([sample])
        return log_probs[0], entropies[0]
