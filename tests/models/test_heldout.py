"""Held-out models: seeded branchy graphs and MobileNet-V2 build, train, load by spec, and stay out of the zoo."""

import importlib
from collections import defaultdict

import numpy as np
import pytest
import tensorflow as tf

from placer.errors import GraphBuildError
from placer.models import MODELS, check_model_spec, load_model
from placer.models.branchy import BranchyGraphConfig, branch_of, branchy_plan
from placer.models.heldout import (
    HELDOUT_MODELS,
    branchy_config,
    heldout_model,
    random_branchy_graph,
)

_MERGE_TYPES = {"AddV2", "AddN", "ConcatV2"}


@pytest.fixture(scope="module")
def branchy_0():
    return heldout_model("branchy-0", "tiny")


def run_one_step(graph):
    """(loss, values before, values after) of one training step, for every variable an optimizer updates."""
    with tf.Graph().as_default() as g:
        tf.import_graph_def(tf.compat.v1.GraphDef.FromString(graph.graph_def), name="")
        updated = sorted({op.inputs[0].op for op in g.get_operations() if op.type.startswith("ResourceApply")},
                         key=lambda op: op.name)
        reads = {op.name: tf.raw_ops.ReadVariableOp(resource=op.outputs[0], dtype=op.get_attr("dtype"))
                 for op in updated}
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
        with tf.compat.v1.Session(graph=g, config=config) as session:
            session.run(graph.init_op)
            before = session.run(reads)
            loss, _ = session.run([graph.loss, graph.train_op])
            after = session.run(reads)
    return loss, before, after


def test_same_seed_and_size_build_the_same_graph():
    assert random_branchy_graph(1, "tiny").fingerprint == random_branchy_graph(1, "tiny").fingerprint
    assert branchy_config(1, "tiny") == branchy_config(1, "tiny")


def test_different_seeds_build_structurally_different_graphs(branchy_0):
    graphs = [branchy_0, random_branchy_graph(1, "tiny"), random_branchy_graph(2, "tiny")]
    assert len({g.fingerprint for g in graphs}) == 3
    assert len({len(g.ops) for g in graphs}) == 3
    shapes = [sorted(map(str, {(op.type, op.output_shapes) for op in g.step_ops})) for g in graphs]
    assert shapes[0] != shapes[1] != shapes[2] != shapes[0]
    assert [g.name for g in graphs] == ["branchy-0-tiny", "branchy-1-tiny", "branchy-2-tiny"]


def test_seeds_draw_different_configs_and_plans():
    configs = [branchy_config(seed, "tiny") for seed in range(5)]
    assert len(set(configs)) == 5
    assert len({branchy_plan(configs[0], seed) for seed in range(5)}) == 5
    assert branchy_plan(configs[0], 3) == branchy_plan(configs[0], 3)


def test_branchy_graph_fans_out_into_branches_and_merges_them(branchy_0):
    # The model's own scope: no gradient and no optimizer ops (the learning rate fans out to every update).
    forward = [op for op in branchy_0.step_ops if op.name.startswith("branchy/")]
    branches_fed = defaultdict(set)
    for op in forward:
        for producer in op.producers:
            if branch_of(op.name) is not None and branch_of(producer) is None:
                branches_fed[producer].add(branch_of(op.name))
    assert max(len(fed) for fed in branches_fed.values()) >= 2, "no trunk op fans out into two branches"

    merges = [op for op in forward if op.type in _MERGE_TYPES and "_merge/" in op.name]
    merged_branches = [{branch_of(p) for p in op.producers} - {None} for op in merges]
    assert max(map(len, merged_branches)) >= 2, "no merge op joins two branches"


def test_tiny_branchy_training_step_runs_and_updates_every_trained_variable(branchy_0):
    loss, before, after = run_one_step(branchy_0)
    assert np.isfinite(loss)
    assert len(before) >= 10
    unchanged = [name for name in before if np.array_equal(before[name], after[name])]
    assert not unchanged, f"variables not updated by one step: {unchanged}"


def test_small_branchy_graph_is_bigger_than_tiny(branchy_0):
    small = random_branchy_graph(0, "small")
    assert small.name == "branchy-0-small"
    assert small.num_parameters > 10 * branchy_0.num_parameters
    assert sum(op.flops for op in small.step_ops) > 10 * sum(op.flops for op in branchy_0.step_ops)


def test_heldout_models_are_not_in_the_zoo_but_load_by_spec():
    assert set(HELDOUT_MODELS) == {"branchy-0", "branchy-1", "branchy-2", "mobilenet-v2", "keras-lstm-seq2seq",
                                   "keras-residual-mlp"}
    assert not set(HELDOUT_MODELS) & set(MODELS)
    for name, model in HELDOUT_MODELS.items():
        assert model.name == name and model.description and "tiny" in model.sizes
        check_model_spec(model.spec)
        module, _, function = model.spec.partition(":")
        assert getattr(importlib.import_module(module), function) is model.build


def test_branchy_spec_loads_the_seeds_graph_through_the_model_loader():
    graph = load_model("placer.models.heldout:branchy_1_graph", "tiny")
    assert graph.fingerprint == random_branchy_graph(1, "tiny").fingerprint


def test_mobilenet_v2_loads_through_the_model_loader_and_trains():
    graph = load_model("placer.models.heldout:mobilenet_v2_graph", "tiny")
    assert graph.name == "mobilenet-v2-tiny"
    assert "DepthwiseConv2dNative" in {op.type for op in graph.step_ops}
    loss, before, after = run_one_step(graph)
    assert np.isfinite(loss)
    assert any(not np.array_equal(before[name], after[name]) for name in before)


def test_residual_mlp_branches_run_side_by_side_and_train():
    graph = load_model("placer.models.heldout:keras_residual_mlp_graph", "tiny")
    assert graph.name == "keras-residual-mlp-tiny"
    # three blocks of three branches of two dense layers, the stem and the head: 20 matmuls forward
    forward = [op for op in graph.step_ops if op.type == "MatMul" and not op.name.startswith("gradient_tape/")]
    assert len(forward) == 20
    with tf.Graph().as_default() as g:  # Keras 3's Adam assigns to its variables (no ResourceApply ops)
        tf.import_graph_def(tf.compat.v1.GraphDef.FromString(graph.graph_def), name="")
        kernels = {op.name: tf.raw_ops.ReadVariableOp(resource=op.outputs[0], dtype=op.get_attr("dtype"))
                   for op in g.get_operations() if op.type == "VarHandleOp" and op.name.endswith("kernel")}
        with tf.compat.v1.Session(graph=g) as session:
            session.run(graph.init_op)
            before = session.run(kernels)
            loss, _ = session.run([graph.loss, graph.train_op])
            after = session.run(kernels)
    assert np.isfinite(loss) and len(kernels) == 20
    assert all(not np.array_equal(before[name], after[name]) for name in kernels)


def test_unknown_heldout_model_is_a_graph_build_error_listing_the_held_out_models():
    with pytest.raises(GraphBuildError, match="branchy-0, branchy-1, branchy-2, mobilenet-v2"):
        heldout_model("inception-v3")


@pytest.mark.parametrize("spec", ["placer.models.heldout:mobilenet_v2_graph", "placer.models.heldout:branchy_0_graph"])
def test_unknown_size_is_a_graph_build_error_naming_the_sizes(spec):
    with pytest.raises(GraphBuildError, match="unknown size 'huge'.*tiny"):
        load_model(spec, "huge")


def test_a_config_without_fan_out_is_refused():
    fields = dict(branchy_config(0, "tiny").__dict__)
    with pytest.raises(GraphBuildError, match="fewest >= 2"):
        BranchyGraphConfig(**{**fields, "branches": (1, 3)})
    with pytest.raises(GraphBuildError, match="multiples of 16"):
        BranchyGraphConfig(**{**fields, "widths": (24,)})
