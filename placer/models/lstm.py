"""Statically unrolled LSTM layers built from plain TF ops, shared by the RNNLM and NMT models.

The papers placed unrolled graphs: every time step of every layer is its own set of ops, which is what
gives recurrent models the grid structure placements exploit. `tf.while_loop` would hide it in one op.
"""

from __future__ import annotations

import tensorflow as tf


def variable(name: str, shape: list[int], seed: int, scale: float | None = None) -> tf.Variable:
    """A resource variable with a seeded uniform initializer (Glorot-scaled unless `scale` is given)."""
    if scale is None:
        initializer = tf.compat.v1.glorot_uniform_initializer(seed=seed)
    else:
        initializer = tf.compat.v1.random_uniform_initializer(-scale, scale, seed=seed)
    return tf.compat.v1.get_variable(name, shape, initializer=initializer, use_resource=True)


class LSTMLayer:
    """One LSTM layer: `step(x, state)` adds the ops of one time step under the layer's name scope."""

    def __init__(self, scope: str, input_size: int, units: int, seed: int):
        self.scope = scope
        self.units = units
        with tf.compat.v1.variable_scope(scope):
            self.kernel = variable("kernel", [input_size + units, 4 * units], seed)
            self.bias = tf.compat.v1.get_variable(
                "bias", [4 * units], initializer=tf.compat.v1.zeros_initializer(), use_resource=True
            )

    def zero_state(self, batch: int) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.name_scope(f"{self.scope}/zero_state"):
            zeros = tf.zeros([batch, self.units])
            return zeros, zeros

    def step(self, x: tf.Tensor, state: tuple[tf.Tensor, tf.Tensor], t: int) -> tuple[tf.Tensor, tuple[tf.Tensor, tf.Tensor]]:
        c, h = state
        with tf.name_scope(f"{self.scope}/t{t}"):
            gates = tf.nn.bias_add(tf.matmul(tf.concat([x, h], axis=1), self.kernel), self.bias)
            i, j, f, o = tf.split(gates, 4, axis=1)
            # The forget-gate bias of 1 is the usual LSTM initialisation (Jozefowicz et al., 2015).
            c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
            h = tf.sigmoid(o) * tf.tanh(c)
        return h, (c, h)

    def unroll(self, inputs: list[tf.Tensor], batch: int, reverse: bool = False) -> list[tf.Tensor]:
        """Outputs for each time step (in input order, also when run in reverse)."""
        state = self.zero_state(batch)
        order = range(len(inputs) - 1, -1, -1) if reverse else range(len(inputs))
        outputs: list[tf.Tensor | None] = [None] * len(inputs)
        for t in order:
            outputs[t], state = self.step(inputs[t], state, t)
        return outputs  # type: ignore[return-value]


def embed(scope: str, tokens: tf.Tensor, vocabulary: int, width: int, seed: int) -> list[tf.Tensor]:
    """Embedding lookup of [batch, time] token ids, returned as one [batch, width] tensor per time step."""
    with tf.compat.v1.variable_scope(scope):
        table = variable("table", [vocabulary, width], seed, scale=0.1)
        embedded = tf.nn.embedding_lookup(table, tokens)
        return tf.unstack(embedded, axis=1, name="time_steps")


def softmax_loss(scope: str, outputs: list[tf.Tensor], targets: tf.Tensor, vocabulary: int, seed: int) -> tf.Tensor:
    """Mean cross-entropy of a full softmax over all time steps at once (one projection, as TF's NMT does)."""
    with tf.compat.v1.variable_scope(scope):
        width = outputs[0].shape[-1]
        weights = variable("weights", [width, vocabulary], seed)
        bias = tf.compat.v1.get_variable("bias", [vocabulary], initializer=tf.compat.v1.zeros_initializer(), use_resource=True)
        # [time * batch, width], time-major. Stacking, not concatenating: the gradient of a concat of more
        # than 16 tensors is built differently, and the graph's structure must not depend on the length.
        stacked = tf.reshape(tf.stack(outputs), [-1, width])
        logits = tf.nn.bias_add(tf.matmul(stacked, weights), bias)
        labels = tf.reshape(tf.transpose(targets), [-1])  # time-major, like `stacked`
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.reduce_mean(losses, name="loss")
