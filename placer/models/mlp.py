"""A small tf-keras MLP classifier with batch normalization: the default model for quick runs and tests."""

from __future__ import annotations

from placer.graph.build import SyntheticTensor, graph_from_keras
from placer.graph.opgraph import OpGraph

# (batch, features, hidden, classes)
_SIZES = {"tiny": (32, 64, 128, 10), "small": (128, 256, 1024, 100), "paper": (512, 1024, 4096, 1000)}


def batch_of(size: str) -> int:
    return _SIZES[size][0]


def mlp_graph(size: str = "tiny", batch: int | None = None) -> OpGraph:
    """The step at `size`; `batch` overrides the size's batch (e.g. one micro-batch of it)."""
    import tf_keras

    default, features, hidden, classes = _SIZES[size]
    batch = default if batch is None else batch

    def model():
        inputs = tf_keras.Input((features,))
        x = tf_keras.layers.Dense(hidden, activation="relu")(inputs)
        x = tf_keras.layers.BatchNormalization()(x)
        x = tf_keras.layers.Dense(hidden, activation="relu")(x)
        outputs = tf_keras.layers.Dense(classes)(x)
        return tf_keras.Model(inputs, outputs)

    return graph_from_keras(
        model,
        inputs=SyntheticTensor((batch, features)),
        targets=SyntheticTensor((batch,), "int32", maxval=classes),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer="adam",
        name=f"mlp-{size}" + ("" if batch == default else f"-batch{batch}"),
    )
