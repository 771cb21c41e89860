"""The layers the learned placers share: a dense layer's variables and the LSTM cell of the papers' placers.

Plain `tf.Variable`s in `tf.Module`s, seeded, so a policy's weights are the same for the same seed and
its checkpoint names say which layer a variable belongs to.
"""

from __future__ import annotations

import tensorflow as tf


def dense(name: str, inputs: int, outputs: int, seed: int) -> tuple[tf.Variable, tf.Variable]:
    """(kernel [inputs, outputs] Glorot-uniform, bias [outputs] zeros) of a dense layer."""
    init = tf.keras.initializers.GlorotUniform(seed=seed)
    return (tf.Variable(init((inputs, outputs)), name=f"{name}/kernel"),
            tf.Variable(tf.zeros([outputs]), name=f"{name}/bias"))


class LSTMCell(tf.Module):
    """The basic LSTM cell (forget-gate bias 1) of grappler's hierarchical controller."""

    def __init__(self, name: str, inputs: int, units: int, seed: int):
        super().__init__(name=name.replace("/", "_"))
        self.units = units
        self.kernel, self.bias = dense(name, inputs + units, 4 * units, seed)

    def __call__(self, x, state):
        c, h = state
        i, j, f, o = tf.split(tf.matmul(tf.concat([x, h], 1), self.kernel) + self.bias, 4, axis=1)
        c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, (c, h)

    def zero_state(self, batch: int = 1):
        zeros = tf.zeros([batch, self.units])
        return zeros, zeros
