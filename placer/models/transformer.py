"""Transformer (base): 6 encoder and 6 decoder layers, d_model 512, 8 heads, defined in Keras 3.

Its training step is a TF2 `tf.function` imported through `graph_from_tf_function`, so this is the
benchmark that exercises that path on a real architecture. Paper setting (Vaswani et al., 2017, base):
d_model 512, 8 heads, feed-forward 2048, dropout 0.1, Adam (0.9, 0.98; `FusedAdam`, one update op a variable); batches of ~3,200 tokens per
device (their 25k-token batches over 8 GPUs: here 64 sentences of 50 tokens) and a 32k vocabulary.
Embeddings and the output projection are not tied. Scopes: `source_embedding`, `target_embedding`,
`encoder_layer_I`, `decoder_layer_I`, `output_projection`.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import dataclasses
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from placer.devices import DeviceSet
from placer.graph.build import graph_from_tf_function
from placer.graph.opgraph import OpGraph
from placer.models.expert import compute_devices, placement_by_stage, spread
from placer.models.fused_adam import FusedAdam
from placer.placement import Placement

LAYERS = 6
HEADS = 8
DROPOUT = 0.1


@dataclass(frozen=True)
class TransformerSize:
    batch: int
    length: int
    d_model: int
    d_ff: int
    vocabulary: int


SIZES = {
    # A length of at least 32 makes the causal mask (32x32) a Fill as in the larger sizes, not a Const.
    "tiny": TransformerSize(batch=4, length=32, d_model=32, d_ff=64, vocabulary=500),
    "small": TransformerSize(batch=16, length=32, d_model=256, d_ff=1024, vocabulary=8_000),
    "paper": TransformerSize(batch=64, length=50, d_model=512, d_ff=2048, vocabulary=32_000),
}


def batch_of(size: str) -> int:
    return SIZES[size].batch


def transformer_graph(size: str = "tiny", batch: int | None = None) -> OpGraph:
    """The step at `size`; `batch` overrides the size's batch (e.g. one micro-batch of it)."""
    import keras

    s = SIZES[size] if batch is None else dataclasses.replace(SIZES[size], batch=batch)
    model = _transformer(s)
    optimizer = FusedAdam(model.trainable_variables, learning_rate=1e-3, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step():
        source = tf.random.uniform([s.batch, s.length], 0, s.vocabulary, dtype=tf.int32, name="synthetic_source")
        target = tf.random.uniform([s.batch, s.length + 1], 0, s.vocabulary, dtype=tf.int32, name="synthetic_target")
        with tf.GradientTape() as tape:
            logits = model([source, target[:, :-1]], training=True)
            loss = loss_fn(target[:, 1:], logits)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(gradients)
        return loss

    suffix = "" if s.batch == SIZES[size].batch else f"-batch{s.batch}"
    graph = graph_from_tf_function(train_step, name=f"transformer-{size}{suffix}")
    return dataclasses.replace(graph, model_parameters=model.count_params())


def _transformer(s: TransformerSize):
    import keras

    seeds = itertools.count(1)

    def init():
        return keras.initializers.GlorotUniform(seed=next(seeds))

    def embedding(name: str, tokens):
        x = keras.layers.Embedding(s.vocabulary, s.d_model, embeddings_initializer=init(), name=name)(tokens)
        x = x * float(np.sqrt(s.d_model)) + _positional_encoding(s.length, s.d_model)
        return keras.layers.Dropout(DROPOUT, seed=next(seeds), name=f"{name}_dropout")(x)

    def attention(name: str, query, value, causal: bool = False):
        layer = keras.layers.MultiHeadAttention(
            HEADS, s.d_model // HEADS, dropout=DROPOUT, kernel_initializer=init(), seed=next(seeds), name=name
        )
        return layer(query, value, use_causal_mask=causal)

    def add_and_norm(name: str, x, y):
        y = keras.layers.Dropout(DROPOUT, seed=next(seeds), name=f"{name}_dropout")(y)
        return keras.layers.LayerNormalization(epsilon=1e-6, name=f"{name}_norm")(x + y)

    def feed_forward(name: str, x):
        x = keras.layers.Dense(s.d_ff, activation="relu", kernel_initializer=init(), name=f"{name}_inner")(x)
        return keras.layers.Dense(s.d_model, kernel_initializer=init(), name=f"{name}_outer")(x)

    source = keras.Input((s.length,), dtype="int32", name="source")
    target = keras.Input((s.length,), dtype="int32", name="target")
    x = embedding("source_embedding", source)
    for i in range(LAYERS):
        layer = f"encoder_layer_{i}"
        x = add_and_norm(f"{layer}_self_attention", x, attention(f"{layer}_self_attention", x, x))
        x = add_and_norm(f"{layer}_feed_forward", x, feed_forward(f"{layer}_feed_forward", x))
    memory = x
    y = embedding("target_embedding", target)
    for i in range(LAYERS):
        layer = f"decoder_layer_{i}"
        y = add_and_norm(f"{layer}_self_attention", y, attention(f"{layer}_self_attention", y, y, causal=True))
        y = add_and_norm(f"{layer}_cross_attention", y, attention(f"{layer}_cross_attention", y, memory))
        y = add_and_norm(f"{layer}_feed_forward", y, feed_forward(f"{layer}_feed_forward", y))
    logits = keras.layers.Dense(s.vocabulary, kernel_initializer=init(), name="output_projection")(y)
    return keras.Model([source, target], logits, name="transformer")


def _positional_encoding(length: int, d_model: int) -> np.ndarray:
    position = np.arange(length)[:, None]
    rates = 1.0 / np.power(10000.0, (2 * (np.arange(d_model) // 2)) / d_model)
    angles = position * rates
    angles[:, 0::2] = np.sin(angles[:, 0::2])
    angles[:, 1::2] = np.cos(angles[:, 1::2])
    return angles.astype("float32")


_STAGE = re.compile(r"(?:^|/)((?:encoder|decoder)_layer_\d+|source_embedding|target_embedding|output_projection)")


def stage_of(op_name: str) -> str | None:
    """'encoder_layer_I', 'decoder_layer_I', an embedding or 'output_projection', from the Keras layer
    name at the start of a scope (forward and gradient-tape ops alike)."""
    match = _STAGE.search(op_name)
    return match.group(1) if match else None


def expert_placement(graph: OpGraph, devices: DeviceSet) -> Placement:
    """Layer-wise (pipeline-style) placement: encoder layers spread over the devices in order, decoder
    layers likewise, embeddings with the first layers and the output projection with the last."""
    compute = compute_devices(devices)
    layer_devices = spread(LAYERS, compute)
    stage_devices = {f"{side}_layer_{i}": d for side in ("encoder", "decoder") for i, d in enumerate(layer_devices)}
    stage_devices.update(source_embedding=layer_devices[0], target_embedding=layer_devices[0], output_projection=layer_devices[-1])
    return placement_by_stage(graph, devices, stage_of, stage_devices)
