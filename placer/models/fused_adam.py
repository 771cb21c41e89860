"""Adam as TensorFlow's fused kernel (one `ResourceApplyAdam` per variable) for the zoo's Keras 3 training steps.

Keras 3's Adam is a dozen elementwise ops per variable that read the gradient; in the step's graph nothing
tells them from the backward, so a micro-batched step would copy them per micro-batch and a schedule would
count them as backward blocks. One update op per variable, as TensorFlow's v1 optimizers build, keeps the
optimizer out of the blocks and lets the micro-batches' gradients be averaged before it
(`placer.schedule.micro_batch`). Same update rule as Keras's Adam (Kingma and Ba, 2015).
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf


class FusedAdam:
    """Adam's moments for `variables` (tf.Variables or Keras 3 variables), created here, eagerly."""

    def __init__(self, variables: Sequence, learning_rate: float, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, name: str = "adam"):
        self.variables = list(variables)
        self.learning_rate, self.beta_1, self.beta_2, self.epsilon = learning_rate, beta_1, beta_2, epsilon
        with tf.name_scope(name):
            self.first_moments = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name=f"m{i}")
                                  for i, v in enumerate(self.variables)]
            self.second_moments = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name=f"v{i}")
                                   for i, v in enumerate(self.variables)]
            self.iterations = tf.Variable(0.0, trainable=False, name="iterations")
        self.name = name

    def apply_gradients(self, gradients: Sequence[tf.Tensor]) -> None:
        """One update of every variable, inside the step's tf.function."""
        graph = tf.compat.v1.get_default_graph()
        for moment in (*self.first_moments, *self.second_moments):
            # Passed by handle, the moments would be captured as bare resources: make the trace record them
            # as variables, as reading them would.
            if hasattr(graph, "watch_variable"):
                graph.watch_variable(moment)
        with tf.name_scope(self.name):
            step = self.iterations.read_value() + 1.0
            beta_1_power = tf.pow(self.beta_1, step)
            beta_2_power = tf.pow(self.beta_2, step)
            for variable, m, v, gradient in zip(self.variables, self.first_moments, self.second_moments, gradients):
                tf.raw_ops.ResourceApplyAdam(
                    var=variable.handle, m=m.handle, v=v.handle, beta1_power=beta_1_power, beta2_power=beta_2_power,
                    lr=tf.constant(self.learning_rate), beta1=tf.constant(self.beta_1),
                    beta2=tf.constant(self.beta_2), epsilon=tf.constant(self.epsilon), grad=gradient)
            self.iterations.assign(step)
