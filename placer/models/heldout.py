"""Held-out models for the simulator-fidelity benchmark: graphs the simulator was never tuned or calibrated
on, so that its error on them says how it does on models nobody has seen.

They are deliberately not in the built-in zoo (`placer.models.MODELS`), so no tuning loop over the zoo can
reach them. Load one with `heldout_model("branchy-1", "tiny")`, or anywhere a model spec is accepted with
its `module:function` spec (each entry's `spec`), e.g. `placer.models.heldout:mobilenet_v2_graph`. Random
branchy graphs of any seed: `random_branchy_graph(seed, size)` (see `placer.models.branchy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from placer.errors import GraphBuildError
from placer.models.branchy import (  # noqa: F401  (held-out API: every held-out model loads from here)
    BRANCHY_SIZES,
    BranchyGraphConfig,
    branchy_config,
    random_branchy_graph,
)

if TYPE_CHECKING:  # building graphs needs TensorFlow; listing the held-out models must not
    from placer.graph.opgraph import OpGraph


@dataclass(frozen=True)
class HeldoutModel:
    """A held-out model: call it with a size to build its training step."""

    name: str
    description: str
    build: Callable[[str], "OpGraph"]
    sizes: tuple[str, ...]
    """The sizes `build` accepts; any other raises GraphBuildError."""

    @property
    def spec(self) -> str:
        """Its `module:function` model spec, for `placer.models.load_model` and the command line."""
        return f"{__name__}:{self.build.__name__}"

    def __call__(self, size: str = "tiny") -> OpGraph:
        return self.build(size)


# -- the models ------------------------------------------------------------------------------------------

# Three fixed seeds, so results on "branchy-1" are comparable across runs and machines.


def branchy_0_graph(size: str = "tiny") -> OpGraph:
    return random_branchy_graph(0, size)


def branchy_1_graph(size: str = "tiny") -> OpGraph:
    return random_branchy_graph(1, size)


def branchy_2_graph(size: str = "tiny") -> OpGraph:
    return random_branchy_graph(2, size)


def mobilenet_v2_graph(size: str = "tiny") -> OpGraph:
    """MobileNet-V2 (tf-keras application, untrained, architecture unchanged) on a synthetic batch; as for the
    zoo's classifiers, sizes change only batch, image side (32 is the smallest MobileNet-V2 accepts) and
    classes. Paper: batch 96, 224x224, RMSProp with decay and momentum 0.9, learning rate 0.045 (Sandler et
    al., 2018)."""
    import tf_keras

    from placer.models.image_classifiers import ImageSize, image_classifier_graph

    if size not in _MOBILENET_V2_SIZES:
        raise GraphBuildError(f"unknown size {size!r} for mobilenet-v2; sizes: {', '.join(_MOBILENET_V2_SIZES)}")
    s = ImageSize(*_MOBILENET_V2_SIZES[size])
    return image_classifier_graph(
        lambda: tf_keras.applications.MobileNetV2(
            weights=None, input_shape=(s.side, s.side, 3), classes=s.classes, classifier_activation=None
        ),
        s,
        optimizer=lambda: tf_keras.optimizers.legacy.RMSprop(
            learning_rate=0.045, rho=0.9, momentum=0.9, epsilon=1.0
        ),
        name=f"mobilenet-v2-{size}",
    )


# (batch, image side, classes), as placer.models.image_classifiers.ImageSize; that module imports TensorFlow.
_MOBILENET_V2_SIZES = {"tiny": (2, 32, 10), "small": (8, 96, 100), "paper": (96, 224, 1000)}


def keras_lstm_seq2seq_graph(size: str = "tiny") -> OpGraph:
    """An LSTM encoder-decoder with dot-product attention as people write it in Keras 3: `keras.layers.LSTM`
    (not unrolled, so each layer and its gradient are functional `While` loops), `keras.layers.Attention`, a
    softmax over the target vocabulary per token, Adam. Sizes: (batch, tokens, units, vocabulary)."""
    import keras

    from placer.graph.keras_model import graph_from_keras_model, keras_names_from_zero

    if size not in _LSTM_SEQ2SEQ_SIZES:
        raise GraphBuildError(f"unknown size {size!r} for keras-lstm-seq2seq; sizes: {', '.join(_LSTM_SEQ2SEQ_SIZES)}")
    batch, tokens, units, vocabulary = _LSTM_SEQ2SEQ_SIZES[size]
    with keras_names_from_zero():
        source = keras.Input((tokens,), batch_size=batch, dtype="int32", name="source")
        target = keras.Input((tokens,), batch_size=batch, dtype="int32", name="target")
        encoded, state_h, state_c = keras.layers.LSTM(units, return_sequences=True, return_state=True)(
            keras.layers.Embedding(vocabulary, units)(source))
        decoded = keras.layers.LSTM(units, return_sequences=True)(
            keras.layers.Embedding(vocabulary, units)(target), initial_state=[state_h, state_c])
        context = keras.layers.Attention()([decoded, encoded])
        logits = keras.layers.Dense(vocabulary)(keras.layers.Concatenate()([decoded, context]))
        model = keras.Model([source, target], logits, name=f"keras-lstm-seq2seq-{size}")
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return graph_from_keras_model(model)


_LSTM_SEQ2SEQ_SIZES = {"tiny": (8, 10, 32, 100), "small": (16, 20, 128, 1000), "paper": (128, 40, 1024, 32000)}


def keras_residual_mlp_graph(size: str = "tiny") -> OpGraph:
    """A Keras 3 MLP with three residual branches, as a user writes one: a dense stem, three parallel branches of
    two dense layers each added back onto the stem, then two more such blocks in sequence, and a softmax head;
    Adam. Its branches are what a placement splits, and each split cuts the stem's activations and gradients
    three ways, so its placements range from a few cut edges to hundreds. Sizes: (batch, features, width,
    classes)."""
    import keras

    from placer.graph.keras_model import graph_from_keras_model, keras_names_from_zero

    if size not in _RESIDUAL_MLP_SIZES:
        raise GraphBuildError(f"unknown size {size!r} for keras-residual-mlp; sizes: {', '.join(_RESIDUAL_MLP_SIZES)}")
    batch, features, width, classes = _RESIDUAL_MLP_SIZES[size]
    with keras_names_from_zero():
        inputs = keras.Input((features,), batch_size=batch, name="features")
        hidden = keras.layers.Dense(width, activation="relu")(inputs)
        for _ in range(3):  # blocks in sequence, each of three branches side by side
            branches = [keras.layers.Dense(width)(keras.layers.Dense(width, activation="relu")(hidden))
                        for _ in range(3)]
            hidden = keras.layers.Activation("relu")(keras.layers.Add()([hidden, *branches]))
        logits = keras.layers.Dense(classes)(hidden)
        model = keras.Model(inputs, logits, name=f"keras-residual-mlp-{size}")
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return graph_from_keras_model(model)


_RESIDUAL_MLP_SIZES = {"tiny": (32, 64, 128, 10), "small": (128, 256, 512, 100), "paper": (512, 1024, 2048, 1000)}


HELDOUT_MODELS: dict[str, HeldoutModel] = {
    model.name: model
    for model in [
        *(
            HeldoutModel(f"branchy-{seed}", f"random branchy classifier drawn from seed {seed}: stages of dense, "
                         "conv2d, normalization and elementwise branches merged by add or concat", build, BRANCHY_SIZES)
            for seed, build in enumerate([branchy_0_graph, branchy_1_graph, branchy_2_graph])
        ),
        HeldoutModel("mobilenet-v2", "MobileNet-V2 image classifier (tf-keras): depthwise-separable inverted "
                     "residual blocks; paper: 224x224", mobilenet_v2_graph, tuple(_MOBILENET_V2_SIZES)),
        HeldoutModel("keras-lstm-seq2seq", "LSTM encoder-decoder with attention (Keras 3): its LSTMs are "
                     "functional loops, not unrolled", keras_lstm_seq2seq_graph, tuple(_LSTM_SEQ2SEQ_SIZES)),
        HeldoutModel("keras-residual-mlp", "MLP of three blocks of three residual branches each (Keras 3)",
                     keras_residual_mlp_graph, tuple(_RESIDUAL_MLP_SIZES)),
    ]
}


def heldout_model(name: str, size: str = "tiny") -> OpGraph:
    """The training step of held-out model `name` at `size`."""
    if name not in HELDOUT_MODELS:
        raise GraphBuildError(
            f"unknown held-out model {name!r}; held-out models: {', '.join(HELDOUT_MODELS)}. For another random "
            "branchy graph call random_branchy_graph(seed, size); built-in (tuning) models load with build_model"
        )
    return HELDOUT_MODELS[name](size)
