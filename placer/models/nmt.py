"""NMT: a GNMT-style encoder-decoder LSTM with attention, in 2-, 4- and 8-layer variants.

The model on which the hierarchical grouper-placer reported its largest gains (Mirhoseini et al., 2018).
Following GNMT (Wu et al., 2016): the bottom encoder layer is bidirectional, residual connections start
at the third layer, and the bottom decoder layer's output queries an additive attention whose context
feeds every higher decoder layer. Paper setting: WMT14 En-De shapes (32k subword vocabulary, sentences
of 40 tokens, batch 128, LSTM size 1024), Adam with global-norm clipping. Scopes: `encoder/embedding`,
`encoder/layer_I`, `decoder/embedding`, `decoder/layer_I`, `attention`, `softmax`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import tensorflow as tf

from placer.devices import DeviceSet
from placer.graph.build import SyntheticTensor, graph_from_function
from placer.graph.opgraph import OpGraph
from placer.models.expert import compute_devices, placement_by_stage, spread
from placer.models.lstm import LSTMLayer, embed, softmax_loss, variable
from placer.placement import Placement

LAYER_VARIANTS = (2, 4, 8)
RESIDUAL_FROM_LAYER = 2


@dataclass(frozen=True)
class NMTSize:
    batch: int
    source_length: int
    target_length: int
    units: int
    vocabulary: int


SIZES = {
    "tiny": NMTSize(batch=16, source_length=8, target_length=8, units=128, vocabulary=2_000),
    "small": NMTSize(batch=32, source_length=20, target_length=20, units=256, vocabulary=8_000),
    "paper": NMTSize(batch=128, source_length=40, target_length=40, units=1024, vocabulary=32_000),
}


def batch_of(size: str) -> int:
    return SIZES[size].batch


def nmt_graph(layers: int, size: str = "tiny", batch: int | None = None) -> OpGraph:
    """The step at `size`; `batch` overrides the size's batch (e.g. one micro-batch of it)."""
    if layers not in LAYER_VARIANTS:
        raise ValueError(f"NMT comes in {LAYER_VARIANTS} layers, not {layers}")
    s = SIZES[size] if batch is None else dataclasses.replace(SIZES[size], batch=batch)

    def build():
        source = SyntheticTensor((s.batch, s.source_length), "int32", maxval=s.vocabulary).make("synthetic_source")
        target = SyntheticTensor((s.batch, s.target_length + 1), "int32", maxval=s.vocabulary).make("synthetic_target")
        memory = _encoder(source, layers, s)
        outputs = _decoder(target[:, :-1], memory, layers, s)
        loss = softmax_loss("softmax", outputs, target[:, 1:], s.vocabulary, seed=3)
        return _adam_with_clipping(loss), loss

    suffix = "" if s.batch == SIZES[size].batch else f"-batch{s.batch}"
    return graph_from_function(build, name=f"nmt{layers}-{size}{suffix}")


def _encoder(source: tf.Tensor, layers: int, s: NMTSize) -> tf.Tensor:
    x = embed("encoder/embedding", source, s.vocabulary, s.units, seed=1)
    half = s.units // 2
    forward = LSTMLayer("encoder/layer_0/fw", s.units, half, seed=100).unroll(x, s.batch)
    backward = LSTMLayer("encoder/layer_0/bw", s.units, s.units - half, seed=101).unroll(x, s.batch, reverse=True)
    with tf.name_scope("encoder/layer_0/"):
        x = [tf.concat([f, b], axis=1) for f, b in zip(forward, backward)]
    for layer in range(1, layers):
        y = LSTMLayer(f"encoder/layer_{layer}", s.units, s.units, seed=100 + 2 * layer).unroll(x, s.batch)
        x = _residual(f"encoder/layer_{layer}", layer, x, y)
    with tf.name_scope("attention/memory"):
        return tf.stack(x, axis=1)  # [batch, source_length, units]


def _decoder(inputs: tf.Tensor, memory: tf.Tensor, layers: int, s: NMTSize) -> list[tf.Tensor]:
    x = embed("decoder/embedding", inputs, s.vocabulary, s.units, seed=2)
    attention = AdditiveAttention(memory, s.units)
    bottom = LSTMLayer("decoder/layer_0", s.units, s.units, seed=200).unroll(x, s.batch)
    contexts = [attention.context(query, t) for t, query in enumerate(bottom)]
    x = bottom
    for layer in range(1, layers):
        cell = LSTMLayer(f"decoder/layer_{layer}", 2 * s.units, s.units, seed=200 + layer)
        state = cell.zero_state(s.batch)
        y = []
        for t, (x_t, context) in enumerate(zip(x, contexts)):
            with tf.name_scope(f"decoder/layer_{layer}/t{t}/"):
                cell_input = tf.concat([x_t, context], axis=1)
            out, state = cell.step(cell_input, state, t)
            y.append(out)
        x = _residual(f"decoder/layer_{layer}", layer, x, y)
    return x


class AdditiveAttention:
    """Bahdanau attention over the encoder memory; keys are projected once, queries once per step."""

    def __init__(self, memory: tf.Tensor, units: int):
        self.memory = memory
        with tf.compat.v1.variable_scope("attention"):
            self.memory_kernel = variable("memory_kernel", [units, units], seed=300)
            self.query_kernel = variable("query_kernel", [units, units], seed=301)
            self.score_vector = variable("score_vector", [units], seed=302, scale=0.1)
            self.keys = tf.tensordot(memory, self.memory_kernel, axes=1, name="keys")

    def context(self, query: tf.Tensor, t: int) -> tf.Tensor:
        with tf.name_scope(f"attention/t{t}"):
            projected = tf.expand_dims(tf.matmul(query, self.query_kernel), 1)
            scores = tf.reduce_sum(self.score_vector * tf.tanh(self.keys + projected), axis=2)
            weights = tf.nn.softmax(scores)
            return tf.reduce_sum(tf.expand_dims(weights, 2) * self.memory, axis=1)


def _residual(scope: str, layer: int, x: list[tf.Tensor], y: list[tf.Tensor]) -> list[tf.Tensor]:
    if layer < RESIDUAL_FROM_LAYER:
        return y
    with tf.name_scope(f"{scope}/residual"):
        return [a + b for a, b in zip(x, y)]


def _adam_with_clipping(loss: tf.Tensor) -> tf.Operation:
    variables = tf.compat.v1.trainable_variables()
    gradients = tf.compat.v1.gradients(loss, variables)
    clipped, _ = tf.clip_by_global_norm(gradients, 5.0)
    optimizer = tf.compat.v1.train.AdamOptimizer(1e-3)
    return optimizer.apply_gradients(zip(clipped, variables), name="train_op")


def stage_of(op_name: str) -> str | None:
    """'encoder/layer_I', 'decoder/layer_I', 'encoder/embedding', 'decoder/embedding', 'attention',
    'softmax', or None, for forward and backward ops alike."""
    parts = op_name.split("/")
    for i, part in enumerate(parts):
        if part in ("encoder", "decoder") and i + 1 < len(parts):
            return f"{part}/{parts[i + 1]}"
        if part in ("attention", "softmax"):
            return part
    return None


def expert_placement(graph: OpGraph, devices: DeviceSet) -> Placement:
    """The papers' expert (after GNMT): encoder layer I and decoder layer I share a device, layers spread
    over all devices but the last, and the attention and softmax on the last one."""
    layers = 1 + max(int(stage.split("_")[1]) for op in graph.ops if (stage := stage_of(op.name)) and "/layer_" in stage)
    compute = compute_devices(devices)
    layer_devices = spread(layers, compute[:-1] or compute)
    stage_devices = {f"{side}/layer_{i}": d for side in ("encoder", "decoder") for i, d in enumerate(layer_devices)}
    stage_devices.update({
        "encoder/embedding": layer_devices[0], "decoder/embedding": layer_devices[0],
        "attention": compute[-1], "softmax": compute[-1],
    })
    return placement_by_stage(graph, devices, stage_of, stage_devices)
