"""The benchmark models: every one builds, trains, and has expert placements that validate."""

from collections import Counter

import numpy as np
import pytest
import tensorflow as tf

from placer.devices import machine_from_dict
from placer.heuristics import make_heuristic
from placer.models import MODELS, SIZES, build_model, model_batch, model_names
from placer.placement import load_placement

BENCHMARKS = model_names(benchmarks_only=True)
FOUR_GPUS = machine_from_dict({
    "name": "cpu+4gpu",
    "devices": [{"name": "CPU:0", "memory": "64GiB"}] + [{"name": f"GPU:{i}", "memory": "16GiB"} for i in range(4)],
})
_graphs = {}


def tiny(name):
    """Each tiny graph is built once per test session (the Transformer alone takes ~20 s to trace)."""
    if name not in _graphs:
        _graphs[name] = build_model(name, "tiny")
    return _graphs[name]


def train_on_one_batch(graph, steps):
    """Losses of `steps` training steps on one fixed synthetic batch, fed in place of the graph's own
    random inputs, so a step that really trains the model must bring the loss down."""
    graph_def = tf.compat.v1.GraphDef.FromString(graph.graph_def)
    with tf.Graph().as_default() as g:
        tf.import_graph_def(graph_def, name="")
        synthetic = [g.get_operation_by_name(op.name) for op in graph.step_ops
                     if op.name.startswith("synthetic") and op.type.startswith("RandomUniform")]
        assert synthetic, f"{graph.name} has no synthetic input ops"
        rng = np.random.default_rng(0)
        with tf.compat.v1.Session(graph=g) as session:
            session.run(graph.init_op)
            batch = {}
            for op in synthetic:
                shape = op.outputs[0].shape.as_list()
                if op.type == "RandomUniformInt":
                    maxval = int(session.run(op.inputs[2]))
                    batch[op.outputs[0]] = rng.integers(0, maxval, shape).astype(op.outputs[0].dtype.as_numpy_dtype)
                else:
                    batch[op.outputs[0]] = rng.random(shape, dtype=np.float32)
            return [session.run([graph.loss, graph.train_op], batch)[0] for _ in range(steps)]


LEARNING_CHECKED_SLOWLY = ("inception-v3", "resnet-50", "transformer")
"""10-22 s each: run with the slow tests; the other models keep the check in the default run."""


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in LEARNING_CHECKED_SLOWLY else n
                                  for n in BENCHMARKS])
def test_tiny_training_step_learns_a_fixed_batch(name):
    graph = tiny(name)
    losses = train_on_one_batch(graph, steps=20)
    assert np.all(np.isfinite(losses)), losses
    assert np.mean(losses[-3:]) < 0.99 * np.mean(losses[:3]), losses


BUILT_SLOWLY = ("inception-v3",)
"""About 10 s a build here: its round trip and its micro-batch build run with the slow tests; ResNet-50 keeps an
image classifier in the default run."""


def _slow_marked(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in BUILT_SLOWLY else n for n in names]


@pytest.mark.parametrize("name", _slow_marked(BENCHMARKS))
def test_expert_single_device_and_cpu_only_placements_validate_and_round_trip(name, tmp_path):
    graph = tiny(name)
    placements = {heuristic: make_heuristic(heuristic, graph, FOUR_GPUS, model=name)
                  for heuristic in ("expert", "single-device", "cpu-only")}
    assert set(placements["cpu-only"].group_devices) == {0}
    assert set(placements["single-device"].group_devices) == {FOUR_GPUS.index("GPU:0")}
    path = placements["expert"].save(tmp_path / "expert.json", graph)
    assert load_placement(path, graph, FOUR_GPUS) == placements["expert"]


def _device_of_stage(graph, placement, stage_of):
    """Device short name by stage, for the stages whose ops all went to one device."""
    by_stage = {}
    for op_name, device in placement.op_devices(graph).items():
        if (stage := stage_of(op_name)) is not None:
            by_stage.setdefault(stage, Counter())[device.rsplit("/", 1)[-1]] += 1
    return {stage: next(iter(c)) if len(c) == 1 else c for stage, c in by_stage.items()}


def test_nmt_expert_spreads_layers_and_gives_attention_and_softmax_their_own_device():
    from placer.models.nmt import stage_of

    graph = tiny("nmt-2")
    placed = _device_of_stage(graph, make_heuristic("expert", graph, FOUR_GPUS, model="nmt-2"), stage_of)
    # Two layers over the three GPUs before the last, encoder and decoder layer I together (GNMT).
    assert placed["encoder/layer_0"] == placed["decoder/layer_0"] == "device:GPU:0"
    assert placed["encoder/layer_1"] == placed["decoder/layer_1"] == "device:GPU:1"
    assert placed["attention"] == placed["softmax"] == "device:GPU:3"


def test_rnnlm_expert_puts_each_layer_and_the_softmax_on_its_own_device():
    from placer.models.rnnlm import stage_of

    graph = tiny("rnnlm")
    three_gpus = machine_from_dict({"devices": [{"name": f"GPU:{i}"} for i in range(3)]})
    placed = _device_of_stage(graph, make_heuristic("expert", graph, three_gpus, model="rnnlm"), stage_of)
    assert (placed["lstm_0"], placed["lstm_1"], placed["softmax"]) == ("device:GPU:0", "device:GPU:1", "device:GPU:2")


def test_image_classifier_expert_is_one_gpu():
    graph = tiny("resnet-50")
    assert set(make_heuristic("expert", graph, FOUR_GPUS, model="resnet-50").group_devices) == {FOUR_GPUS.index("GPU:0")}


def test_every_registered_model_has_a_description_and_an_expert():
    assert {"inception-v3", "resnet-50", "rnnlm", "nmt-2", "nmt-4", "nmt-8", "transformer"} <= set(BENCHMARKS)
    for spec in MODELS.values():
        assert spec.description and callable(spec.expert)


@pytest.mark.parametrize("name", _slow_marked(MODELS))
def test_every_zoo_model_builds_at_a_micro_batch_with_the_same_op_names(name):
    # A placement of the whole batch carries over to a micro-batch of it by op name (placer schedule).
    from placer.schedule.from_placement import infer_batch_size
    from placer.schedule.micro_batch import build_micro_batch_graph

    whole = tiny(name)
    micro = build_micro_batch_graph(name, "tiny", 2)
    assert infer_batch_size(micro) * 2 == infer_batch_size(whole) == model_batch(name, "tiny")
    assert {op.name for op in micro.ops} <= {op.name for op in whole.ops}
    assert {op.name for op in micro.step_ops if op.type.startswith(("MatMul", "Conv2D"))} == {
        op.name for op in whole.step_ops if op.type.startswith(("MatMul", "Conv2D"))}


def _larger_sizes():
    """Every benchmark at every size above tiny. The builds that take 15-45 s each (paper sizes but NMT-2's,
    the Transformer's small) run with `-m slow`, to keep the default run near 20 minutes on 2 cores."""
    for name in BENCHMARKS:
        for size in SIZES:
            if size == "tiny":
                continue
            slow = (size == "paper" and name != "nmt-2") or (name, size) in (("transformer", "small"),
                                                                              ("inception-v3", "small"),
                                                                              ("nmt-8", "small"))
            yield pytest.param(name, size, marks=pytest.mark.slow) if slow else (name, size)


@pytest.mark.parametrize("name, size", list(_larger_sizes()))
def test_larger_sizes_build_with_the_structure_of_the_tiny_model(name, size):
    graph = build_model(name, size)
    assert {op.type for op in graph.step_ops} == {op.type for op in tiny(name).step_ops}
    assert graph.num_parameters > tiny(name).num_parameters
    if size == "paper":
        assert len(graph.ops) >= 1_000
