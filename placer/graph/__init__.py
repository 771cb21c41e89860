"""Placeable training-step graphs: `OpGraph` and the builders that make one from a model.

Builders: `graph_from_keras` (tf-keras model + loss + optimizer + synthetic batch), `graph_from_function`
(a function adding ops to a tf.Graph), `graph_from_tf_function` (a TF2 tf.function step, e.g. Keras 3),
`graph_from_keras_model` (a compiled Keras 3 or tf-keras model's own train_step) and `op_graph_from_tf_graph`
(an existing graph and its train op). Builders import TensorFlow.
"""

from placer.graph.opgraph import ColocationGroup, OpGraph, OpNode

__all__ = [
    "ColocationGroup", "OpGraph", "OpNode", "SyntheticTensor", "graph_from_function", "graph_from_keras",
    "graph_from_keras_model", "graph_from_tf_function", "op_graph_from_tf_graph",
]


def __getattr__(name):  # builders load TensorFlow: import them only when asked for
    if name in ("SyntheticTensor", "graph_from_function", "graph_from_keras", "graph_from_tf_function", "op_graph_from_tf_graph"):
        from placer.graph import build

        return getattr(build, name)
    if name == "graph_from_keras_model":
        from placer.graph import keras_model

        return keras_model.graph_from_keras_model
    raise AttributeError(name)
