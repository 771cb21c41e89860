"""Schedules executed for real: a micro-batched two-tower step (training, or forward-only for an inference
plan) whose devices run their blocks in a plan's order, measured in-process on two CPU devices; the traced
step shows the order."""

import pytest

from placer.errors import MicroBatchError, ScheduleMismatchError
from placer.graph.order import order_violations
from placer.measure import MeasureConfig, Measurer
from placer.profile import CostTable
from placer.schedule import gpipe, one_f_one_b, sequential, shape_template
from placer.schedule.execute import run_schedule, scheduled_step, step_for_plan
from placer.schedule.from_placement import UPDATE_OP_PREFIXES
from placer.schedule.from_placement import blocks_from_placement
from placer.schedule.micro_batch import build_micro_batch_graph, micro_batched_step
from placer.simulate import Simulator

MICRO_BATCHES = 4


@pytest.fixture(scope="module")
def measurer():
    with Measurer("inprocess:2", MeasureConfig(warmup_steps=1, timed_steps=2)) as measurer:
        yield measurer


@pytest.fixture(scope="module")
def setup(measurer):
    from placer.heuristics import make_heuristic

    graph = build_micro_batch_graph("two-tower", "tiny", MICRO_BATCHES)
    devices = measurer.devices
    placement = make_heuristic("expert", graph, devices, model="two-tower")  # tower_a on CPU:0, tower_b on CPU:1
    # Spans in proportion to FLOPs: the test needs the blocks and an order, not a prediction.
    costs = CostTable(graph.fingerprint, "CPU", {op.name: 1e-6 + op.flops / 1e10 for op in graph.step_ops}, "roofline")
    template = blocks_from_placement(Simulator(graph, devices, {"CPU": costs}), placement, MICRO_BATCHES,
                                     of_micro_batch=True)
    return graph, devices, placement, template, micro_batched_step(graph, MICRO_BATCHES)


def test_gpipe_and_1f1b_orders_differ_on_a_device_and_each_shows_in_its_traced_step(measurer, setup):
    graph, devices, placement, template, step = setup
    plans = {"gpipe": gpipe(template, MICRO_BATCHES), "1f1b": one_f_one_b(template, MICRO_BATCHES)}
    scheduled = {name: scheduled_step(step, placement, devices, plan) for name, plan in plans.items()}
    assert scheduled["gpipe"].chains != scheduled["1f1b"].chains  # 1F1B runs a backward before the last forward
    for name, ordered in scheduled.items():
        run = run_schedule(measurer, ordered)
        assert run.ok, run.describe()
        assert run.links == 4 * MICRO_BATCHES and run.links_traced == run.links
        assert run.order_kept, run.describe()
    # Without the control dependencies TensorFlow follows its own order, which cannot be both plans' orders.
    free = measurer.measure(step.graph, step.lift_placement(placement, devices), MeasureConfig(warmup_steps=1,
                                                                                               timed_steps=1, profile_steps=1))
    assert free.ok
    broken = [name for name, ordered in scheduled.items() if order_violations(free.chrome_trace, ordered.chains)]
    assert broken, "the unordered step kept both the GPipe and the 1F1B order"


def test_the_step_with_an_enforced_order_trains(setup):
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2

    graph, devices, placement, template, step = setup
    ordered = scheduled_step(step, placement, devices, one_f_one_b(template, MICRO_BATCHES))
    imported = tf.Graph()
    with imported.as_default():
        tf.compat.v1.import_graph_def(ordered.placement.apply(ordered.graph), name="")
    config = config_pb2.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=False)
    with tf.compat.v1.Session(graph=imported, config=config) as session:
        session.run(ordered.graph.init_op)
        losses = [session.run([ordered.graph.train_op, ordered.graph.loss])[1] for _ in range(8)]
    assert losses[-1] < 0.9 * losses[0], losses


def test_a_plan_for_another_template_is_refused(setup):
    graph, devices, placement, template, step = setup
    with pytest.raises(ScheduleMismatchError, match="blocks"):
        scheduled_step(step, placement, devices, sequential(shape_template("v-shape", 2), MICRO_BATCHES))


def test_a_plan_with_another_number_of_micro_batches_is_refused(setup):
    graph, devices, placement, template, step = setup
    with pytest.raises(MicroBatchError, match="2 micro-batches but the step has 4"):
        scheduled_step(step, placement, devices, gpipe(template, 2))


def test_an_inference_plan_runs_a_forward_only_step_whose_trace_keeps_the_plans_order(measurer, setup):
    graph, devices, placement, template, _ = setup
    plan = gpipe(template.forward_only(), MICRO_BATCHES)
    step, forward_placement = step_for_plan(plan, graph, placement, devices)
    ordered = scheduled_step(step, forward_placement, devices, plan)
    run = run_schedule(measurer, ordered)
    assert run.ok, run.describe()
    assert run.violations == () and run.order_kept
    assert run.links == run.links_traced == 2 * MICRO_BATCHES  # one forward block per device and micro-batch


def test_the_forward_only_step_computes_no_gradients_and_updates_no_variable(setup):
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2

    graph, devices, placement, template, _ = setup
    plan = sequential(template.forward_only(), MICRO_BATCHES)
    step, forward_placement = step_for_plan(plan, graph, placement, devices)
    step_ops = step.graph.step_ops
    assert not [op.name for op in step_ops if op.type.startswith(UPDATE_OP_PREFIXES) or "gradients" in op.name]
    ordered = scheduled_step(step, forward_placement, devices, plan)
    imported = tf.Graph()
    with imported.as_default():
        tf.compat.v1.import_graph_def(ordered.placement.apply(ordered.graph), name="")
        variables = [imported.get_tensor_by_name(f"{op.name}:0") for op in step_ops if op.type == "ReadVariableOp"]
    assert len(variables) >= 8  # the towers' weights
    config = config_pb2.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=False)
    with tf.compat.v1.Session(graph=imported, config=config) as session:
        session.run(ordered.graph.init_op)
        before = session.run(variables)
        losses = [session.run([ordered.graph.train_op, ordered.graph.loss])[1] for _ in range(3)]
        after = session.run(variables)
    assert all(np.isfinite(losses))
    assert all(np.array_equal(b, a) for b, a in zip(before, after))


def test_a_training_plan_is_refused_for_the_forward_only_step(setup):
    graph, devices, placement, template, _ = setup
    inference = gpipe(template.forward_only(), MICRO_BATCHES)
    step, forward_placement = step_for_plan(inference, graph, placement, devices)
    with pytest.raises(ScheduleMismatchError, match="b@CPU:0"):
        scheduled_step(step, forward_placement, devices, gpipe(template, MICRO_BATCHES))


def test_an_inference_plan_of_another_placement_is_refused(setup):
    graph, devices, placement, template, _ = setup
    other = shape_template("pipeline", 2).forward_only()
    step, forward_placement = step_for_plan(gpipe(template.forward_only(), MICRO_BATCHES), graph, placement, devices)
    with pytest.raises(ScheduleMismatchError, match="blocks"):
        scheduled_step(step, forward_placement, devices, gpipe(other, MICRO_BATCHES))
