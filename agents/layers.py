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
        self.inputs, self.units = inputs, units
        self.kernel, self.bias = dense(name, inputs + units, 4 * units, seed)

    def __call__(self, x, state):
        c, h = state
        i, j, f, o = tf.split(tf.matmul(tf.concat([x, h], 1), self.kernel) + self.bias, 4, axis=1)
        c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, (c, h)

    # The same cell split in two, for a recurrence over inputs known before it starts: the inputs' share of
    # the kernel is applied to every step at once, one matmul (and one for its gradient) instead of one per step.

    def input_projection(self, x: tf.Tensor) -> tf.Tensor:
        """[..., 4 x units] for x [..., inputs]: the inputs' share of every gate."""
        # tensordot, not einsum with "...": einsum's gradient for the kernel keeps one [inputs, 4 x units] per
        # position before summing them (gigabytes at paper size); tensordot's is one matmul.
        return tf.tensordot(x, self.kernel[: self.inputs], axes=1)

    def step(self, projected: tf.Tensor, state, recurrent_kernel: tf.Tensor):
        """One step from the inputs' projection [B, 4 x units]; `recurrent_kernel` is `self.kernel[inputs:]`,
        sliced once outside the loop."""
        c, h = state
        i, j, f, o = tf.split(projected + tf.matmul(h, recurrent_kernel) + self.bias, 4, axis=1)
        c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, (c, h)

    def run(self, projected: tf.Tensor, state, reverse: bool = False) -> tf.Tensor:
        """[B, T, units] outputs over projected inputs [B, T, 4 x units] (last step first when reverse, the
        outputs still in input order), as one symbolic loop: its graph does not grow with T."""
        recurrent_kernel = self.kernel[self.inputs:]

        def one_step(carry, projected_t):
            c, h = carry
            _, new_state = self.step(projected_t, (c, h), recurrent_kernel)
            return new_state

        _, outputs = tf.scan(one_step, tf.transpose(projected, [1, 0, 2]), initializer=state, reverse=reverse)
        return tf.transpose(outputs, [1, 0, 2])

    def zero_state(self, batch: int = 1):
        zeros = tf.zeros([batch, self.units])
        return zeros, zeros
