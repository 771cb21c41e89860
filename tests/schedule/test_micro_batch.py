"""The micro-batched step: copies of a micro-batch's forward and backward, one update from their mean."""

import numpy as np
import pytest

from placer.errors import GraphBuildError, MicroBatchError
from placer.schedule.micro_batch import build_micro_batch_graph, copy_prefix, micro_batched_step

MICRO_BATCH = 16  # two-tower tiny has a batch of 64


@pytest.fixture(scope="module")
def micro_batch_graph():
    return build_micro_batch_graph("two-tower", "tiny", 4)


@pytest.fixture(scope="module")
def four_micro_batches(micro_batch_graph):
    return micro_batched_step(micro_batch_graph, 4)


def test_the_micro_batch_graph_is_built_at_the_batch_divided_by_the_micro_batches(micro_batch_graph):
    from placer.schedule.from_placement import infer_batch_size

    assert infer_batch_size(micro_batch_graph) == MICRO_BATCH


def test_forward_and_backward_ops_are_copied_once_per_micro_batch_and_variables_shared(micro_batch_graph,
                                                                                   four_micro_batches):
    batched = four_micro_batches.graph
    originals = {original for _, original in four_micro_batches.copies.values()}
    assert "loss" in originals and "tower_a/synthetic_input/RandomUniform" in originals
    assert any(name.startswith("gradients/") for name in originals)
    for original in originals:
        assert all(f"{copy_prefix(m)}{original}" in batched for m in range(4))
    variables = [op.name for op in micro_batch_graph.ops if op.type == "VarHandleOp"]
    assert variables and all(name in batched and name not in originals for name in variables)
    updates = [op.name for op in batched.ops if op.type == "ResourceApplyGradientDescent"]
    assert len(updates) == len(variables)  # one update per variable, not one per micro-batch
    for update in updates:  # each reads the merged gradient, not a copy
        gradient = batched.op(update).producers[2]
        assert gradient in four_micro_batches.merged
    assert batched.loss in {f"{name}:0" for name in four_micro_batches.merged}


def first_gradients(graph):
    """Loss and the gradient every update op reads, in the first step of a fresh session (by update op)."""
    import tensorflow as tf

    updates = [op for op in graph.step_ops if op.type == "ResourceApplyGradientDescent"]
    imported = tf.Graph()
    with imported.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(graph.graph_def), name="")
    with tf.compat.v1.Session(graph=imported) as session:
        session.run(graph.init_op)
        values = session.run([graph.loss, *(op.data_inputs[2] for op in updates)])
    return values[0], dict(zip((op.name for op in updates), values[1:]))


def test_identical_micro_batches_give_the_update_one_micro_batch_s_gradient(micro_batch_graph, four_micro_batches):
    # two-tower seeds its synthetic inputs, so every copy draws the same micro-batch: the mean of the four
    # gradients the update reads is the one micro-batch's gradient (a sum instead of a mean would be 4 times it).
    single_loss, single = first_gradients(micro_batch_graph)
    batched_loss, batched = first_gradients(four_micro_batches.graph)
    assert batched_loss == pytest.approx(single_loss, rel=1e-5) and single_loss > 0
    assert set(batched) == set(single) and len(single) == 8
    for update, gradient in single.items():
        assert np.abs(gradient).max() > 0
        np.testing.assert_allclose(batched[update], gradient, rtol=1e-4, atol=1e-9 * np.abs(gradient).max())


def test_a_placement_of_the_micro_batch_graph_lifts_to_the_copies(micro_batch_graph, four_micro_batches, cpus2):
    from placer.heuristics import make_heuristic

    placement = make_heuristic("expert", micro_batch_graph, cpus2, model="two-tower")
    lifted = four_micro_batches.lift_placement(placement, cpus2).op_devices(four_micro_batches.graph)
    original = placement.op_devices(micro_batch_graph)
    for copy, (_, name) in four_micro_batches.copies.items():
        assert lifted[copy] == original[name]
    assert {lifted["mb0/tower_a/synthetic_input/RandomUniform"], lifted["mb3/tower_b/synthetic_input/RandomUniform"]} == set(cpus2.names)


def test_micro_batches_that_do_not_divide_the_batch_are_refused():
    with pytest.raises(MicroBatchError, match="do not divide the batch of 64"):
        build_micro_batch_graph("two-tower", "tiny", 3)


def test_a_model_with_a_fixed_batch_cannot_be_micro_batched(monkeypatch):
    import dataclasses

    from placer.models import registry

    fixed = dataclasses.replace(registry.MODELS["mlp"], batch_of=None)
    monkeypatch.setitem(registry.MODELS, "mlp", fixed)
    with pytest.raises(GraphBuildError, match="'mlp' cannot be built at another batch size"):
        build_micro_batch_graph("mlp", "tiny", 2)


@pytest.mark.parametrize("count", [0, -1, 1.5, True])
def test_a_micro_batch_count_that_is_no_positive_whole_number_is_refused(micro_batch_graph, count):
    with pytest.raises(MicroBatchError, match="positive whole number"):
        micro_batched_step(micro_batch_graph, count)


def test_the_same_step_asked_again_is_not_built_again(micro_batch_graph):
    """A search prices every placement's schedules on one micro-batched step: building it imports the whole graph."""
    four = micro_batched_step(micro_batch_graph, 4)
    assert micro_batched_step(micro_batch_graph, 4) is four
    two = micro_batched_step(micro_batch_graph, 2)
    assert two is not four and two.micro_batches == 2
    assert micro_batched_step(micro_batch_graph, 2) is two and micro_batched_step(micro_batch_graph, 4) is four


@pytest.mark.slow  # about 30 s; the fused optimizers' micro-batch update is tested in the default run
def test_an_optimizer_written_in_plain_ops_updates_once_after_every_micro_batch():
    # tf-keras RMSprop (Inception-V3's) assigns its mean square, reads it back and divides the gradient by its
    # root. That arithmetic runs once, after every micro-batch's gradient: taken for backward ops copied per
    # micro-batch, it waited for the update, which waits for every copy, a cycle no schedule could order.
    from placer.cost import open_target
    from placer.heuristics import make_heuristic
    from placer.models import build_model
    from placer.schedule import gpipe
    from placer.schedule.from_placement import blocks_from_placement, op_kinds, update_ops
    from placer.schedule.micro_batch import placement_at_micro_batch
    from placer.schedule.predict import predict_plans

    graph, at_micro_batch = build_model("inception-v3", "small"), build_micro_batch_graph("inception-v3", "small", 2)
    updates = update_ops(at_micro_batch)
    read_back = [op.name for op in at_micro_batch.step_ops
                 if op.type == "ReadVariableOp" and op.name in updates and "RMSprop" in op.name]
    assert read_back and not updates & set(op_kinds(at_micro_batch))
    step = micro_batched_step(at_micro_batch, 2)
    assert not any(original in updates for _, original in step.copies.values())
    with open_target(graph, "modeled:2xV100") as target:
        placement = make_heuristic("single-device", graph, target.devices)
        plan = gpipe(blocks_from_placement(target.simulator, placement, 2), 2)
        placed = placement_at_micro_batch(placement, graph, at_micro_batch, target.devices)
        prediction = predict_plans({"gpipe": plan}, at_micro_batch, placed, target.spec)["gpipe"]
    assert prediction.step_time.ok


def test_a_placement_carries_over_to_slices_of_one_sample_whose_graph_has_ops_the_whole_batch_lacks():
    """GPT-2 (tiny, batch 8) at one sample a micro-batch: TensorFlow adds the reduction indices of a broadcast's
    gradient, which go with the op they feed; every other op stays where the expert put it."""
    from placer.hardware import modeled_machine
    from placer.heuristics import make_heuristic
    from placer.models import build_model
    from placer.schedule.micro_batch import gradients, placement_at_micro_batch

    devices = modeled_machine(4, "H100")
    graph = build_model("gpt2", "tiny")
    expert = make_heuristic("expert", graph, devices, model="gpt2")
    one_sample = build_micro_batch_graph("gpt2", "tiny", 8)
    carried = placement_at_micro_batch(expert, graph, one_sample, devices).op_devices(one_sample)
    whole = expert.op_devices(graph)
    extra = [op for op in one_sample.ops if op.name not in whole]
    assert extra, "the one-sample graph has ops the whole batch's lacks (else this test checks nothing)"
    for op in extra:
        consumers = [o.name for o in one_sample.ops if op.name in (*o.producers, *o.control_inputs)]
        assert carried[op.name] in {carried[c] for c in consumers} | {carried[p] for p in op.producers}
    assert all(carried[name] == device for name, device in whole.items() if name in carried)
    # replicas and micro-batches of one sample exchange what the whole batch's step updates with
    assert sum(g.bytes for g in gradients(one_sample)) == sum(g.bytes for g in gradients(graph))
