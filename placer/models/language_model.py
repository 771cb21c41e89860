"""Decoder-only Transformer language models, GPT-2- and Llama-shaped, in Keras 3: the models pipelines are for.

Each is a stack of pre-norm decoder blocks between a token embedding and an output projection, trained on
next-token prediction of a synthetic sequence with Adam (`FusedAdam`: one update op per variable). `gpt2` (Radford et al., 2019): LayerNorm, learned
positions, GELU feed-forward of 4 x d_model, biases. `llama` (Touvron et al., 2023): RMSNorm, SwiGLU
feed-forward, no biases; rotary position embeddings are left out (they add elementwise ops, no weights).
Neither ties its embedding to the output projection (a pipeline keeps the two on the first and last stage),
and neither uses dropout. Scopes: `embedding`, `block_I`, `head` (the final norm and the projection).

Paper sizes, and why their training step does not fit one 80 GB GPU (FP32 weights, gradients and Adam's two
moments: 16 bytes a parameter; activations kept for the backward with no recomputation, after Korthikanti
et al., 2022, in FP32: length x d_model x (68 + 10 x heads x length / d_model) bytes a sequence and layer,
plus 3 x length x vocabulary x 4 bytes of logits, their softmax and its gradient):
- gpt2: 12 layers, d_model 768, 12 heads, length 1024, vocabulary 50,257 (GPT-2 small, untied: 163 M
  parameters, 2.6 GB of state); 2.15 GB of layer activations and 0.62 GB of logits a sequence, so its batch
  of 64 sequences needs about 180 GB. (The simulator, which frees each tensor after its last reader, puts the
  step of 32 sequences on one modeled H100 at a peak of 55 GB, and runs the step of 64 out of its memory.)
- llama: 16 layers, d_model 1024, 16 heads, feed-forward 2,816, length 2048, vocabulary 32,000 (268 M
  parameters, 4.3 GB of state); 13.0 GB of layer activations and 0.79 GB of logits a sequence, so its batch
  of 16 sequences needs about 225 GB. (A Llama of 1 B parameters, d_model 2048, builds the same ops but holds
  15 GB of weights and Adam moments in this process while its graph is traced; this one keeps the build
  within a few GB.)
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from typing import Mapping

import keras
import tensorflow as tf

from placer.devices import DeviceSet
from placer.graph.build import graph_from_tf_function
from placer.graph.opgraph import OpGraph
from placer.models.expert import balanced_stage_placement, compute_devices, op_stages, placement_by_stage, spread
from placer.models.fused_adam import FusedAdam
from placer.placement import Placement

FAMILIES = ("gpt2", "llama")


@dataclass(frozen=True)
class LanguageModelSize:
    batch: int
    length: int
    layers: int
    d_model: int
    heads: int
    d_ff: int
    vocabulary: int


SIZES = {
    "gpt2": {
        "tiny": LanguageModelSize(batch=8, length=32, layers=4, d_model=64, heads=4, d_ff=256, vocabulary=512),
        "small": LanguageModelSize(batch=16, length=256, layers=8, d_model=256, heads=8, d_ff=1024, vocabulary=8_000),
        "paper": LanguageModelSize(batch=64, length=1024, layers=12, d_model=768, heads=12, d_ff=3072,
                                   vocabulary=50_257),
    },
    "llama": {
        "tiny": LanguageModelSize(batch=8, length=32, layers=4, d_model=64, heads=4, d_ff=176, vocabulary=512),
        "small": LanguageModelSize(batch=16, length=256, layers=8, d_model=256, heads=8, d_ff=704, vocabulary=8_000),
        "paper": LanguageModelSize(batch=16, length=2048, layers=16, d_model=1024, heads=16, d_ff=2816,
                                   vocabulary=32_000),
    },
}


def batch_of(family: str, size: str) -> int:
    return SIZES[family][size].batch


def language_model_graph(family: str, size: str = "tiny", batch: int | None = None) -> OpGraph:
    """The training step of `family` ("gpt2" or "llama") at `size`; `batch` overrides the size's batch (e.g. one
    micro-batch of it)."""
    if family not in FAMILIES:
        raise ValueError(f"language models come as {FAMILIES}, not {family!r}")
    s = SIZES[family][size] if batch is None else dataclasses.replace(SIZES[family][size], batch=batch)
    model = _decoder(family, s)
    optimizer = FusedAdam(model.trainable_variables, learning_rate=3e-4, beta_1=0.9, beta_2=0.95, epsilon=1e-8)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step():
        tokens = tf.random.uniform([s.batch, s.length + 1], 0, s.vocabulary, dtype=tf.int32, name="synthetic_tokens")
        with tf.GradientTape() as tape:
            logits = model(tokens[:, :-1], training=True)
            loss = loss_fn(tokens[:, 1:], logits)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(gradients)
        return loss

    suffix = "" if s.batch == SIZES[family][size].batch else f"-batch{s.batch}"
    return graph_from_tf_function(train_step, name=f"{family}-{size}{suffix}")


def _decoder(family: str, s: LanguageModelSize):
    tokens = keras.Input((s.length,), batch_size=s.batch, dtype="int32", name="tokens")
    x = _Embedding(family, s, name="embedding")(tokens)
    for i in range(s.layers):
        x = _DecoderBlock(family, s, seed=10 * (i + 1), name=f"block_{i}")(x)
    logits = _Head(family, s, name="head")(x)
    return keras.Model(tokens, logits, name=family)


def _norm(family: str, name: str):
    if family == "llama":
        return keras.layers.RMSNormalization(epsilon=1e-5, name=name)
    return keras.layers.LayerNormalization(epsilon=1e-5, name=name)


def _dense(units: int, family: str, seed: int, name: str, activation=None):
    return keras.layers.Dense(units, activation=activation, use_bias=family == "gpt2",
                              kernel_initializer=keras.initializers.RandomNormal(stddev=0.02, seed=seed), name=name)


class _Embedding(keras.layers.Layer):
    """Token embedding, plus GPT-2's learned positions."""

    def __init__(self, family: str, s: LanguageModelSize, **kwargs):
        super().__init__(**kwargs)
        init = keras.initializers.RandomNormal(stddev=0.02, seed=1)
        self.tokens = keras.layers.Embedding(s.vocabulary, s.d_model, embeddings_initializer=init, name="tokens")
        self.positions = (self.add_weight(shape=(s.length, s.d_model), initializer=keras.initializers.RandomNormal(
            stddev=0.01, seed=2), name="positions") if family == "gpt2" else None)

    def call(self, tokens):
        x = self.tokens(tokens)
        return x if self.positions is None else x + self.positions


class _DecoderBlock(keras.layers.Layer):
    """Pre-norm causal self-attention and feed-forward, each with a residual connection."""

    def __init__(self, family: str, s: LanguageModelSize, seed: int, **kwargs):
        super().__init__(**kwargs)
        self.family, self.heads, self.d_model = family, s.heads, s.d_model
        self.attention_norm = _norm(family, "attention_norm")
        self.qkv = _dense(3 * s.d_model, family, seed, "qkv")
        self.attention_out = _dense(s.d_model, family, seed + 1, "attention_out")
        self.feed_forward_norm = _norm(family, "feed_forward_norm")
        if family == "llama":  # SwiGLU: silu(x W_gate) * (x W_up), then W_down
            self.gate = _dense(s.d_ff, family, seed + 2, "gate", activation="silu")
            self.up = _dense(s.d_ff, family, seed + 3, "up")
        else:
            self.up = _dense(s.d_ff, family, seed + 3, "up", activation="gelu")
        self.down = _dense(s.d_model, family, seed + 4, "down")

    def call(self, x):
        x = x + self.attention_out(self._attention(self.qkv(self.attention_norm(x))))
        h = self.feed_forward_norm(x)
        inner = self.gate(h) * self.up(h) if self.family == "llama" else self.up(h)
        return x + self.down(inner)

    def _attention(self, qkv):
        from keras import ops

        length, head = qkv.shape[1], self.d_model // self.heads
        qkv = ops.transpose(ops.reshape(qkv, (-1, length, 3, self.heads, head)), (2, 0, 3, 1, 4))
        query, key, value = qkv[0], qkv[1], qkv[2]  # [batch, heads, length, head]
        scores = ops.matmul(query, ops.swapaxes(key, -1, -2)) * (head ** -0.5)
        causal = ops.tril(ops.ones((length, length), dtype="bool"))
        weights = ops.softmax(ops.where(causal, scores, -1e9), axis=-1)
        out = ops.transpose(ops.matmul(weights, value), (0, 2, 1, 3))
        return ops.reshape(out, (-1, length, self.d_model))


class _Head(keras.layers.Layer):
    """The final norm and the output projection to the vocabulary's logits."""

    def __init__(self, family: str, s: LanguageModelSize, **kwargs):
        super().__init__(**kwargs)
        self.norm = _norm(family, "final_norm")
        self.projection = _dense(s.vocabulary, family, 3, "projection")

    def call(self, x):
        return self.projection(self.norm(x))


_STAGE = re.compile(r"(?:^|/)(block_\d+|embedding|head)(?:/|_\d+/|$)")


def stage_of(op_name: str) -> str | None:
    """'embedding', 'block_I' or 'head', from the Keras layer's scope (forward and gradient-tape ops alike)."""
    match = _STAGE.search(op_name)
    return match.group(1) if match else None


def expert_placement(graph: OpGraph, devices: DeviceSet) -> Placement:
    """A stage per device: contiguous blocks of decoder layers spread over the devices in order, the embedding
    with the first and the head (and the loss) with the last, as a pipeline splits the model."""
    layers = 1 + max(int(stage.split("_")[1]) for op in graph.ops
                     if (stage := stage_of(op.name)) and stage.startswith("block_"))
    compute = compute_devices(devices)
    layer_devices = spread(layers, compute)
    stage_devices = {f"block_{i}": device for i, device in enumerate(layer_devices)}
    stage_devices.update(embedding=layer_devices[0], head=layer_devices[-1])
    stages = _residual_gradients_with_their_block(graph, op_stages(graph, stage_of))
    return placement_by_stage(graph, devices, stages.get, stage_devices)


def balanced_stages(graph: OpGraph, devices: DeviceSet, op_seconds: Mapping[str, float]) -> Placement:
    """A stage per device as the expert's, cut where the stages' compute is even rather than at equal block
    counts: the head (final norm, vocabulary projection and loss: about one more decoder block's compute for
    GPT-2 at paper size) gets fewer blocks beside it."""
    layers = 1 + max(int(stage.split("_")[1]) for op in graph.ops
                     if (stage := stage_of(op.name)) and stage.startswith("block_"))
    order = ["embedding", *(f"block_{i}" for i in range(layers)), "head"]
    stages = _residual_gradients_with_their_block(graph, op_stages(graph, stage_of))
    return balanced_stage_placement(graph, devices, stages.get, order, op_seconds)


def _residual_gradients_with_their_block(graph: OpGraph, stages: dict[str, str | None]) -> dict[str, str | None]:
    """The gradient tape sums the residual stream's gradient in unscoped AddN ops, each reading the sum above it
    and a block's gradients: they belong to that block (most of their inputs' stage), not to the head, where
    their first input's stage would put every one of them."""
    for op in graph.ops:  # topological order: a sum's inputs are settled before it
        if op.type == "AddN" and stage_of(op.name) is None and op.producers:
            votes = Counter(stages[src] for src in op.producers if stages.get(src) is not None)
            if votes:
                stages[op.name] = votes.most_common(1)[0][0]
    return stages
