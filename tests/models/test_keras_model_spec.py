"""A model spec that returns a compiled keras.Model: placed as the model's own training step, or refused with
what the model lacks, before any step is traced."""

import json
import subprocess
import sys
import textwrap

import gymnasium as gym
import keras
import pytest

import envs  # noqa: F401  (registers the environments)
import placer.graph.build
from placer.errors import GraphBuildError
from placer.models import check_model_spec, load_model, rebuildable_batch, require_rebuildable_batch

# A user's model file: a 2-layer MLP as a Keras user writes it, compiled or not, with input shapes or not.
KERAS_MODEL_FILE = """
import keras


def build():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(4)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def uncompiled_without_shapes():
    return keras.Sequential([keras.layers.Dense(16, activation="relu"), keras.layers.Dense(4)])


def uncompiled():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])


def fixed_batch():
    model = keras.Sequential([keras.Input((8,), batch_size=16), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def with_batch(batch=16):
    model = keras.Sequential([keras.Input((8,), batch_size=batch), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def bad_batch_default(batch="sixteen"):
    return with_batch()


def open_inputs_with_batch(batch=12):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="mse")
    return model
"""


@pytest.fixture
def keras_model_file(tmp_path):
    path = tmp_path / "my_model.py"
    path.write_text(textwrap.dedent(KERAS_MODEL_FILE))
    return path


def test_a_compiled_keras_model_becomes_its_training_step_with_its_loss_and_optimizer(keras_model_file):
    graph = load_model(f"{keras_model_file}:build")

    # named after the function that built it, not Keras's default model name ("sequential")
    assert graph.name == "build" and graph.loss is not None and graph.train_op in graph
    # a synthetic batch of the model's input shape at fit's default batch, with class ids for the sparse loss
    assert graph.op("synthetic_input_0/RandomUniform").output_shapes == ((32, 8),)
    assert graph.op("synthetic_target_0").output_shapes == ((32,),)
    assert graph.op("synthetic_target_0").output_dtypes == ("int32",)
    # Adam's two slots per weight are variables of the step: the compiled optimizer is the one that updates
    weights = 8 * 16 + 16 + 16 * 4 + 4
    assert graph.num_parameters >= 3 * weights
    assert graph.model_parameters == weights  # as Keras counts them: the optimizer's slots apart
    assert any(op.type == "MatMul" and "gradient_tape" in op.name for op in graph.step_ops)


def test_the_same_keras_spec_gives_the_same_fingerprint_in_one_process_and_in_a_fresh_one(keras_model_file):
    spec = f"{keras_model_file}:build"
    first = load_model(spec)
    keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(2)])  # moves Keras's name counters
    again = load_model(spec)
    assert again.fingerprint == first.fingerprint

    fresh = subprocess.run(
        [sys.executable, "-c", f"from placer.models import load_model; print(load_model({spec!r}).fingerprint)"],
        capture_output=True, text=True, timeout=300,
    )
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert fresh.stdout.split()[-1] == first.fingerprint
    # names built afterwards stay unique beside the loaded model's
    assert keras.layers.Dense(1).name not in {"dense", "dense_1", "dense_2", "dense_3"}


def test_an_uncompiled_model_without_input_shapes_is_refused_before_any_step_naming_both(keras_model_file, monkeypatch):
    def no_tracing(*args, **kwargs):
        raise AssertionError("a training step was traced")

    monkeypatch.setattr(placer.graph.build, "graph_from_tf_function", no_tracing)
    with pytest.raises(GraphBuildError) as refused:
        load_model(f"{keras_model_file}:uncompiled_without_shapes")
    message = str(refused.value)
    assert "uncompiled_without_shapes" in message
    assert "not compiled: compile the model (model.compile(optimizer=..., loss=...)) or return an OpGraph" in message
    assert "no input shapes" in message and "keras.Input(shape=...)" in message

    with pytest.raises(GraphBuildError) as only_compile:
        load_model(f"{keras_model_file}:uncompiled")
    assert "not compiled" in str(only_compile.value) and "input shapes" not in str(only_compile.value)


def test_a_compiled_keras_model_object_is_accepted_where_a_spec_is():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    check_model_spec(model)
    environment = gym.make("placer/Placement-v0", model=model, devices="modeled:2xV100").unwrapped
    environment.reset(seed=0)
    _, reward, _, _, info = environment.step(environment.action_space.sample())
    assert environment.graph.loss is not None and reward < 0 and info["step_time"] > 0

    with pytest.raises(GraphBuildError, match="not compiled"):
        load_model(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))


def test_placer_measure_runs_a_keras_model_spec_end_to_end(keras_model_file):
    run = subprocess.run(
        [sys.executable, "-m", "agents.cli", "measure", f"{keras_model_file}:build", "--target", "inprocess:1",
         "--repeats", "2", "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["graph"] == "build" and report["result"]["ok"] and len(report["result"]["samples"]) == 2

    refused = subprocess.run(
        [sys.executable, "-m", "agents.cli", "measure", f"{keras_model_file}:uncompiled_without_shapes"],
        capture_output=True, text=True, timeout=300,
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "model.compile(optimizer=..., loss=...)" in refused.stderr


def test_a_keras_model_is_built_at_a_slice_of_its_batch_where_nothing_fixes_it_or_its_function_takes_one(
        keras_model_file):
    """Data parallelism runs each replica on a slice of the batch: a model function whose inputs fix no batch is
    traced there, one with a `batch` parameter is called with it; one whose inputs fix the batch cannot be."""
    spec = f"{keras_model_file}:build"
    assert rebuildable_batch(spec) == 32  # traced at fit's default, as load_model traces it
    sliced = load_model(spec, batch=8)
    assert sliced.batch.size == 8 and sliced.op("synthetic_input_0/RandomUniform").output_shapes == ((8, 8),)
    assert sliced.name == load_model(spec).name  # the same model: op names carry a placement over by name

    taking = f"{keras_model_file}:with_batch"
    assert rebuildable_batch(taking) == 16
    assert load_model(taking, batch=4).batch.size == 4

    # a `batch` default is the step's batch even where the model's inputs leave it open
    open_inputs = f"{keras_model_file}:open_inputs_with_batch"
    assert rebuildable_batch(open_inputs) == 12 and load_model(open_inputs).batch.size == 12

    fixed = f"{keras_model_file}:fixed_batch"
    assert rebuildable_batch(fixed) is None
    with pytest.raises(GraphBuildError, match=r"cannot be built at another batch .*`batch` parameter"):
        require_rebuildable_batch(fixed)
    with pytest.raises(GraphBuildError, match="batch_size 8 differs from the batch size 16"):
        load_model(fixed, batch=8)
    with pytest.raises(GraphBuildError, match=r"`batch` parameter whose default is 'sixteen'"):
        rebuildable_batch(f"{keras_model_file}:bad_batch_default")
    with pytest.raises(GraphBuildError, match="batch must be a positive whole number"):
        load_model(spec, batch=0)
