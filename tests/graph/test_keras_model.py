"""graph_from_keras_model: a compiled Keras 3 or tf-keras model's own train_step on a synthetic batch, at the
batch asked for, or on the inputs and targets given."""

import keras
import pytest
import tf_keras

from placer.errors import GraphBuildError
from placer.graph import SyntheticTensor, graph_from_keras_model


def _mlp(batch_size=None):
    model = keras.Sequential([keras.Input((6,), batch_size=batch_size), keras.layers.Dense(5), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _input_shape(graph):
    return graph.op("synthetic_input_0/RandomUniform").output_shapes[0]


def test_the_batch_is_fits_default_unless_asked_for_or_fixed_by_the_inputs():
    assert _input_shape(graph_from_keras_model(_mlp())) == (32, 6)
    assert _input_shape(graph_from_keras_model(_mlp(), batch_size=4)) == (4, 6)
    assert _input_shape(graph_from_keras_model(_mlp(batch_size=8))) == (8, 6)
    with pytest.raises(GraphBuildError, match="batch_size 4 differs from the batch size 8"):
        graph_from_keras_model(_mlp(batch_size=8), batch_size=4)
    with pytest.raises(GraphBuildError, match="positive whole number"):
        graph_from_keras_model(_mlp(), batch_size=0)


def test_float_targets_take_the_outputs_shape_for_a_dense_loss():
    graph = graph_from_keras_model(_mlp(), batch_size=4)
    target = graph.op("synthetic_target_0/RandomUniform")
    assert target.output_shapes == ((4, 3),) and target.output_dtypes == ("float32",)


def test_named_inputs_and_outputs_get_a_batch_each_and_targets_for_each_outputs_loss():
    features, tokens = keras.Input((5,), name="features"), keras.Input((7,), dtype="int32", name="tokens")
    joined = keras.layers.Concatenate()([features, keras.layers.Flatten()(keras.layers.Embedding(100, 4)(tokens))])
    model = keras.Model({"features": features, "tokens": tokens},
                        {"label": keras.layers.Dense(3)(joined), "score": keras.layers.Dense(1)(joined)})
    model.compile(optimizer="adam", loss={"label": "sparse_categorical_crossentropy", "score": "mse"})

    graph = graph_from_keras_model(model, batch_size=4)
    assert _input_shape(graph) == (4, 5)
    assert graph.op("synthetic_input_1").output_dtypes == ("int32",)  # token ids: valid rows of any embedding
    assert graph.op("synthetic_target_0").output_shapes == ((4,),)  # class ids for the sparse loss
    assert graph.op("synthetic_target_1/RandomUniform").output_shapes == ((4, 1),)


class SubclassedMLP(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(5)
        self.out = keras.layers.Dense(3)

    def call(self, x):
        return self.out(self.hidden(x))


def test_a_model_without_input_shapes_trains_on_the_synthetic_tensors_given():
    model = SubclassedMLP()
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(GraphBuildError, match="no input shapes"):
        graph_from_keras_model(model)

    graph = graph_from_keras_model(model, inputs=SyntheticTensor((2, 6)),
                                   targets=SyntheticTensor((2,), "int32", maxval=3), name="subclassed")
    assert graph.name == "subclassed" and graph.loss is not None
    assert _input_shape(graph) == (2, 6)


def test_a_compiled_tf_keras_model_becomes_its_training_step_too():
    model = tf_keras.Sequential([tf_keras.layers.Dense(5, input_shape=(6,)), tf_keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    graph = graph_from_keras_model(model, batch_size=4)
    assert graph.loss is not None and _input_shape(graph) == (4, 6)
    assert graph.op("synthetic_target_0").output_dtypes == ("int32",)
    assert graph.num_parameters >= 3 * model.count_params()  # Adam's slots beside the weights
    assert graph.model_parameters == model.count_params()


def test_anything_but_a_keras_model_is_refused():
    with pytest.raises(GraphBuildError, match="expected a keras.Model"):
        graph_from_keras_model(object())


def test_the_traced_batch_is_recorded_with_who_chose_it_and_a_model_without_one_gets_one_note():
    from placer.graph.opgraph import TracedBatch

    unfixed = graph_from_keras_model(_mlp())
    assert unfixed.batch == TracedBatch(32, "default")
    assert unfixed.batch_note == (f"model {unfixed.name!r} has no fixed batch; traced at 32 examples: to choose, give "
                                  "its model function a `batch` parameter with that default (def model(batch=64))")
    assert unfixed.summary().splitlines()[1:] == [unfixed.batch_note] and "batch 32," in unfixed.summary()

    assert graph_from_keras_model(_mlp(batch_size=8)).batch == TracedBatch(8, "model")
    assert graph_from_keras_model(_mlp(), batch_size=4).batch == TracedBatch(4, "caller")
    for chosen in (graph_from_keras_model(_mlp(batch_size=8)), graph_from_keras_model(_mlp(), batch_size=4)):
        assert chosen.batch_note is None and len(chosen.summary().splitlines()) == 1


def test_the_batch_travels_in_the_placement_file_of_the_graph(tmp_path):
    from placer.devices import local_devices
    from placer.placement import Placement, read_placement_file

    graph = graph_from_keras_model(_mlp(), batch_size=4)
    path = Placement.round_robin(graph, local_devices(1)).save(tmp_path / "placement.json", graph)
    assert read_placement_file(path).batch_size == 4
