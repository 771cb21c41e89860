"""Two independent towers of dense layers joined by one loss: the smallest graph where placement pays.

Each tower makes its own synthetic input, so placing one tower per device needs no input transfer and the
towers run in parallel; only the tower outputs (a few KB) cross devices.
"""

from __future__ import annotations

import tensorflow as tf

from placer.graph.build import graph_from_function
from placer.graph.opgraph import OpGraph

# (batch, width, layers per tower)
_SIZES = {"tiny": (64, 512, 4), "small": (128, 1024, 6), "paper": (256, 2048, 8)}


def batch_of(size: str) -> int:
    return _SIZES[size][0]


def two_tower_graph(size: str = "tiny", batch: int | None = None) -> OpGraph:
    """The step at `size`; `batch` overrides the size's batch (e.g. one micro-batch of it)."""
    default, width, layers = _SIZES[size]
    batch = default if batch is None else batch

    def build():
        outputs = []
        for tower in ("tower_a", "tower_b"):
            with tf.compat.v1.variable_scope(tower):
                # Each tower draws its own input: identical towers fed the same input have a loss of 0 and no
                # gradient to train on.
                x = tf.random.uniform([batch, width], seed=1 if tower == "tower_a" else 2, name="synthetic_input")
                for layer in range(layers):
                    w = tf.compat.v1.get_variable(
                        f"w{layer}", [width, width], initializer=tf.compat.v1.glorot_uniform_initializer(seed=layer),
                        use_resource=True,
                    )
                    x = tf.nn.relu(tf.matmul(x, w), name=f"relu{layer}")
                outputs.append(tf.reduce_mean(x, axis=1, name="summary"))
        loss = tf.reduce_mean(tf.square(outputs[0] - outputs[1]), name="loss")
        train_op = tf.compat.v1.train.GradientDescentOptimizer(1e-3).minimize(loss, name="train_op")
        return train_op, loss

    return graph_from_function(build, name=f"two-tower-{size}" + ("" if batch == default else f"-batch{batch}"))


def tower_of(op_name: str) -> str | None:
    """'tower_a' or 'tower_b' for ops of a tower (forward or gradient), None for the shared head."""
    for tower in ("tower_a", "tower_b"):
        if f"{tower}/" in op_name:
            return tower
    return None
