"""RNNLM: a 2-layer LSTM language model, the recurrent benchmark of the colocation-RL paper (ICML 2017).

Paper setting: LSTM size 2048, batch 64 (Mirhoseini et al., 2017). The paper does not restate the
vocabulary or the unroll length; we use 20 unrolled steps (Zaremba et al., 2014; Jozefowicz et al., 2016)
and a 40k-word full softmax, large enough that the softmax is a unit worth placing on its own, as the
paper's experts did. Scopes: `embedding`, `lstm_0`, `lstm_1`, `softmax`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import tensorflow as tf

from placer.devices import DeviceSet
from placer.graph.build import SyntheticTensor, graph_from_function
from placer.graph.opgraph import OpGraph
from placer.models.expert import compute_devices, placement_by_stage, spread
from placer.models.lstm import LSTMLayer, embed, softmax_loss
from placer.placement import Placement

LAYERS = 2


@dataclass(frozen=True)
class RNNLMSize:
    batch: int
    steps: int
    units: int
    vocabulary: int


SIZES = {
    "tiny": RNNLMSize(batch=16, steps=10, units=256, vocabulary=2_000),
    "small": RNNLMSize(batch=32, steps=20, units=512, vocabulary=10_000),
    "paper": RNNLMSize(batch=64, steps=20, units=2048, vocabulary=40_000),
}


def batch_of(size: str) -> int:
    return SIZES[size].batch


def rnnlm_graph(size: str = "tiny", batch: int | None = None) -> OpGraph:
    """The step at `size`; `batch` overrides the size's batch (e.g. one micro-batch of it)."""
    s = SIZES[size] if batch is None else dataclasses.replace(SIZES[size], batch=batch)

    def build():
        # Tokens and next-token targets come from one synthetic sequence of steps + 1 tokens.
        sequence = SyntheticTensor((s.batch, s.steps + 1), "int32", maxval=s.vocabulary).make("synthetic_tokens")
        inputs, targets = sequence[:, :-1], sequence[:, 1:]
        x = embed("embedding", inputs, s.vocabulary, s.units, seed=1)
        for layer in range(LAYERS):
            x = LSTMLayer(f"lstm_{layer}", s.units, s.units, seed=10 + layer).unroll(x, s.batch)
        loss = softmax_loss("softmax", x, targets, s.vocabulary, seed=2)
        return _sgd_with_clipping(loss), loss

    suffix = "" if s.batch == SIZES[size].batch else f"-batch{s.batch}"
    return graph_from_function(build, name=f"rnnlm-{size}{suffix}")


def _sgd_with_clipping(loss: tf.Tensor) -> tf.Operation:
    """SGD with global-norm clipping at 5, the usual recipe for LSTM language models (Zaremba et al.)."""
    variables = tf.compat.v1.trainable_variables()
    gradients = tf.compat.v1.gradients(loss, variables)
    clipped, _ = tf.clip_by_global_norm(gradients, 5.0)
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(1.0)
    return optimizer.apply_gradients(zip(clipped, variables), name="train_op")


def stage_of(op_name: str) -> str | None:
    """The model part an op belongs to ('embedding', 'lstm_0', 'lstm_1', 'softmax'), forward or backward."""
    for part in op_name.split("/"):
        if part in ("embedding", "softmax") or part.startswith("lstm_"):
            return part
    return None


def expert_placement(graph: OpGraph, devices: DeviceSet) -> Placement:
    """The colocation-RL paper's expert: LSTM layers spread over the devices, the softmax on its own one."""
    compute = compute_devices(devices)
    layer_devices = spread(LAYERS, compute[:-1] or compute)
    stage_devices = {f"lstm_{i}": device for i, device in enumerate(layer_devices)}
    stage_devices.update(embedding=layer_devices[0], softmax=compute[-1])
    return placement_by_stage(graph, devices, stage_of, stage_devices)
