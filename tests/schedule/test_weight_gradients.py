"""The backward split into its input-gradient chain (B) and its weight gradients (W), as ZeroBubble splits it:
which ops go where on a graph small enough to split by hand, the blocks and memory it gives, ZB-H1's order,
the refusals, and a two-tower step whose W blocks run late for real with the unscheduled step's results."""

import numpy as np
import pytest

from placer.errors import BlockTemplateError, ScheduleError
from placer.placement import Placement
from placer.profile import CostTable
from placer.schedule import BlockSpec, BlockTemplate, one_f_one_b, tessel, zero_bubble_h1
from placer.schedule.blocks import BACKWARD, WEIGHT_GRADIENT
from placer.schedule.from_placement import blocks_from_placement, gradient_gates, weight_gradient_split
from placer.schedule.methods import make_schedule, methods_for
from placer.simulate import Simulator

MICRO_BATCHES = 2


@pytest.fixture(scope="module")
def two_stages():
    """x -> relu(x @ w0) on the first device; @ w1, the loss on the second: one gradient crosses back."""
    import tensorflow as tf

    from placer.graph import graph_from_function

    def build():
        with tf.compat.v1.variable_scope("stage0"):
            x = tf.random.uniform([8, 4], seed=1, name="x")
            h = tf.nn.relu(tf.matmul(x, tf.compat.v1.get_variable("w0", [4, 3], use_resource=True)), name="h")
        with tf.compat.v1.variable_scope("stage1"):
            y = tf.matmul(h, tf.compat.v1.get_variable("w1", [3, 1], use_resource=True), name="y")
            loss = tf.reduce_mean(tf.square(y), name="loss")
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss), loss

    return graph_from_function(build, name="two-stages")


def placed(graph, devices, first_device_ops):
    return Placement.from_op_devices(graph, devices, {
        op.name: devices[0].name if first_device_ops(op.name) else devices[1].name for op in graph.ops})


def test_input_gradients_another_device_waits_for_are_b_and_weight_gradients_are_w(two_stages, cpus2):
    placement = placed(two_stages, cpus2, lambda name: "stage0" in name)
    split = weight_gradient_split(two_stages, placement.op_devices(two_stages))
    b = {name for name, kind in split.kinds.items() if kind == BACKWARD}
    w = {name for name, kind in split.kinds.items() if kind == WEIGHT_GRADIENT}
    # B: the loss's gradient down to dh = dy @ w1^T, which the first device's backward reads
    assert b == {"gradients/Shape", "gradients/grad_ys_0/Const", "gradients/grad_ys_0",
                 *(f"gradients/stage1/loss_grad/{op}" for op in ("Reshape/shape", "Reshape", "Const", "Tile", "Const_1",
                                                                 "truediv")),
                 "gradients/stage1/Square_grad/Const", "gradients/stage1/Square_grad/Mul",
                 "gradients/stage1/Square_grad/Mul_1", "gradients/stage1/y_grad/MatMul",
                 "gradients/stage1/y_grad/tuple/control_dependency"}
    # W: dw1 = h^T dy on the second device and the whole first stage's backward (nothing of it crosses back);
    # the learning rate, which only the update reads, is in no block
    assert "GradientDescent/learning_rate" not in split.kinds
    assert w == {"gradients/stage1/y_grad/MatMul_1", "gradients/stage1/y_grad/tuple/group_deps",
                 "gradients/stage1/y_grad/tuple/control_dependency_1", "gradients/stage0/h_grad/ReluGrad",
                 "gradients/stage0/MatMul_grad/MatMul", "gradients/stage0/MatMul_grad/MatMul_1",
                 "gradients/stage0/MatMul_grad/tuple/group_deps",
                 "gradients/stage0/MatMul_grad/tuple/control_dependency_1"}
    # TensorFlow gates dh on dw1 (both outputs of y's gradient released together); the split drops that edge
    assert split.gates == {("gradients/stage1/y_grad/tuple/control_dependency", "gradients/stage1/y_grad/tuple/group_deps")}


def test_the_split_template_has_w_blocks_after_b_and_w_frees_what_b_no_longer_needs(two_stages, cpus2):
    placement = placed(two_stages, cpus2, lambda name: "stage0" in name)
    costs = CostTable(two_stages.fingerprint, "CPU", {op.name: 1e-6 for op in two_stages.step_ops}, "roofline")
    simulator = Simulator(two_stages, cpus2, {"CPU": costs})
    whole = blocks_from_placement(simulator, placement, MICRO_BATCHES, memory_unit=1)
    split = blocks_from_placement(simulator, placement, MICRO_BATCHES, memory_unit=1, split_weight_gradients=True)
    assert not whole.splits_weight_gradients and split.splits_weight_gradients
    blocks = {b.name: b for b in split.blocks}
    assert set(blocks) == {"f@CPU:0", "f@CPU:1", "b@CPU:1", "w@CPU:0", "w@CPU:1"}
    assert blocks["w@CPU:1"].after == ("b@CPU:1", "f@CPU:0")  # dw1 reads dy and h
    assert blocks["w@CPU:0"].after == ("b@CPU:1", "f@CPU:0")  # the first stage waits for dh only
    assert blocks["b@CPU:1"].kind == BACKWARD and blocks["w@CPU:1"].kind == WEIGHT_GRADIENT
    # Bytes per micro-batch (the graph's batch of 8 rows split in 2): the second device keeps y (4 rows, 16
    # bytes), which only B reads (the square's gradient); B hands dy (16 bytes) to W, which frees it.
    assert blocks["f@CPU:1"].memory == 16 and blocks["b@CPU:1"].memory == -16 + 16 and blocks["w@CPU:1"].memory == -16
    # The first device keeps x and h (64 + 48 bytes) for its weight gradients: freed by W, as B is elsewhere.
    assert blocks["f@CPU:0"].memory == 112 and blocks["w@CPU:0"].memory == -112
    assert {b.name: b.memory for b in whole.blocks}["b@CPU:1"] == -16


def test_a_backward_that_does_not_split_is_refused_saying_why(two_stages, cpus2):
    one_device = placed(two_stages, cpus2, lambda name: True)
    with pytest.raises(BlockTemplateError, match="no gradient crosses devices"):
        weight_gradient_split(two_stages, one_device.op_devices(two_stages))
    # w1, its gradient and the learning rate on the first device: the second computes only the input gradients
    # the first waits for, the first only weight gradients
    moved = {"stage1/w1", "stage1/y/ReadVariableOp", "gradients/stage1/y_grad/MatMul_1", "GradientDescent/learning_rate",
             "gradients/stage1/y_grad/tuple/group_deps", "gradients/stage1/y_grad/tuple/control_dependency_1"}
    stage1_without_weights = placed(two_stages, cpus2, lambda name: "stage0" in name or name in moved or "w1/" in name)
    with pytest.raises(BlockTemplateError, match="no device has weight gradients to run after its chain"):
        weight_gradient_split(two_stages, stage1_without_weights.op_devices(two_stages))


def pipeline_with_split_backward() -> BlockTemplate:
    """Two stages with ZeroBubble's unit spans: forward, input gradient and weight gradient 1 each."""
    return BlockTemplate("zb-pipeline", ("d0", "d1"), (
        BlockSpec("f0", "forward", 1, 1, ("d0",)), BlockSpec("f1", "forward", 1, 1, ("d1",), ("f0",)),
        BlockSpec("b1", BACKWARD, 1, 0, ("d1",), ("f1",)), BlockSpec("w1", WEIGHT_GRADIENT, 1, -1, ("d1",), ("b1",)),
        BlockSpec("b0", BACKWARD, 1, 0, ("d0",), ("b1",)), BlockSpec("w0", WEIGHT_GRADIENT, 1, -1, ("d0",), ("b0",))))


def order(plan, device):
    return [f"{b.spec.name}{b.micro_batch}" for b in sorted(plan.blocks, key=lambda b: b.start) if device in b.spec.devices]


def idle_units(plan):
    return plan.makespan * len(plan.template.devices) - sum(plan.busy_time().values())


def test_zb_h1_runs_weight_gradients_where_1f1b_would_wait():
    template = pipeline_with_split_backward()
    plan = zero_bubble_h1(template, 4)
    # The last stage runs two B before its first W (B first, the next F admitted), and its W fill the time
    # it waits for the first stage; the first stage defers W behind the B the last stage waits for.
    assert order(plan, "d1") == ["f10", "b10", "f11", "b11", "w10", "w11", "f12", "b12", "f13", "b13", "w12", "w13"]
    assert order(plan, "d0") == ["f00", "f01", "b00", "w00", "b01", "f02", "w01", "f03", "b02", "w02", "b03", "w03"]
    assert plan.makespan == 13 and idle_units(plan) == 2
    # 1F1B over the same blocks, and over the unsplit backward (one block of span 2): more idle time
    assert one_f_one_b(template, 4).makespan == 14 and idle_units(one_f_one_b(template, 4)) == 4
    whole = BlockTemplate("pipeline", ("d0", "d1"), (
        BlockSpec("f0", "forward", 1, 1, ("d0",)), BlockSpec("f1", "forward", 1, 1, ("d1",), ("f0",)),
        BlockSpec("b1", BACKWARD, 2, -1, ("d1",), ("f1",)), BlockSpec("b0", BACKWARD, 2, -1, ("d0",), ("b1",))))
    assert one_f_one_b(whole, 4).makespan == 15 and idle_units(one_f_one_b(whole, 4)) == 6
    # as many micro-batches in flight as 1F1B (a micro-batch holds its activations until its W)
    assert max(plan.peak_memory().values()) == max(one_f_one_b(template, 4).peak_memory().values()) == 2
    assert zero_bubble_h1(template, 4, memory_limit=2).makespan == 13
    # Tessel's search is over any blocks: it schedules W blocks too, no worse than ZB-H1 without a limit
    assert tessel(template, 4, time_limit=20).makespan <= plan.makespan


def test_zb_h1_is_a_method_only_for_templates_with_weight_gradient_blocks():
    from placer.schedule import shape_template

    assert "zb-h1" in methods_for(pipeline_with_split_backward())
    assert "zb-h1" not in methods_for(shape_template("pipeline", 2))
    assert make_schedule("zb-h1", pipeline_with_split_backward(), 4).method == "zb-h1"
    with pytest.raises(ScheduleError, match="has none: make it with blocks_from_placement"):
        make_schedule("zb-h1", shape_template("pipeline", 2), 4)


# -- run for real --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def measurer():
    from placer.measure import MeasureConfig, Measurer

    with Measurer("inprocess:2", MeasureConfig(warmup_steps=1, timed_steps=2)) as measurer:
        yield measurer


def first_step(graph, placement, fetches):
    """`fetches` of `graph` placed by `placement` in the first step of a fresh session on two CPU devices."""
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2

    imported = tf.Graph()
    with imported.as_default():
        tf.compat.v1.import_graph_def(placement.apply(graph), name="")
    config = config_pb2.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=False)
    with tf.compat.v1.Session(graph=imported, config=config) as session:
        session.run(graph.init_op)
        return session.run(fetches)


def test_a_zb_h1_plan_of_two_tower_runs_in_its_order_and_computes_the_unscheduled_step(measurer):
    from placer.heuristics import make_heuristic
    from placer.schedule.execute import run_schedule, scheduled_step, step_for_plan
    from placer.schedule.micro_batch import build_micro_batch_graph, micro_batched_step

    micro_batches = 4
    graph = build_micro_batch_graph("two-tower", "tiny", micro_batches)
    devices = measurer.devices
    placement = make_heuristic("expert", graph, devices, model="two-tower")  # a tower per device, the loss on CPU:0
    costs = CostTable(graph.fingerprint, "CPU", {op.name: 1e-6 + op.flops / 1e10 for op in graph.step_ops}, "roofline")
    template = blocks_from_placement(Simulator(graph, devices, {"CPU": costs}), placement, micro_batches,
                                     of_micro_batch=True, split_weight_gradients=True)
    assert {b.name for b in template.blocks} == {"f@CPU:0", "f@CPU:1", "b@CPU:0", "w@CPU:0", "w@CPU:1"}
    plan = zero_bubble_h1(template, micro_batches)
    # the loss's device runs a W of an earlier micro-batch after a later micro-batch's B
    on_loss_device = order(plan, "CPU:0")
    assert on_loss_device.index("b@CPU:01") < on_loss_device.index("w@CPU:00")
    step, step_placement = step_for_plan(plan, graph, placement, devices)
    assert step.dropped_control_edges  # the gradient gates between B and W
    ordered = scheduled_step(step, step_placement, devices, plan)
    run = run_schedule(measurer, ordered)
    assert run.ok and run.order_kept, run.describe()
    assert run.links_traced == run.links == len(template.blocks) * micro_batches

    # the same loss and gradients as the unscheduled micro-batched step (two-tower seeds its inputs, so both draw
    # the same micro-batches)
    unscheduled = micro_batched_step(graph, micro_batches)
    updates = sorted(op.name for op in unscheduled.graph.step_ops if op.type == "ResourceApplyGradientDescent")
    assert len(updates) == 8

    def loss_and_gradients(g, p):
        return first_step(g, p, [g.loss, *(g.op(name).data_inputs[2] for name in updates)])

    expected = loss_and_gradients(unscheduled.graph, unscheduled.lift_placement(placement, devices))
    actual = loss_and_gradients(ordered.graph, ordered.placement)
    assert expected[0] > 0
    for value, reference in zip(actual, expected):
        assert np.abs(reference).max() > 0
        np.testing.assert_allclose(value, reference, rtol=1e-6, atol=1e-9 * np.abs(reference).max())


def test_every_gradient_gate_is_found_and_the_split_drops_only_some_of_them(two_stages, cpus2):
    """The schedules' bound leaves out every gate: the split of any placement drops a subset of them."""
    gates = gradient_gates(two_stages)
    step = {op.name: op for op in two_stages.step_ops}
    assert gates and all(step[gate].type == "NoOp" and gate in step[op].control_inputs for op, gate in gates)
    # the two matmuls' gradients each gate their two outputs (the input and the weight gradient)
    assert {gate for _, gate in gates} == {"gradients/stage1/y_grad/tuple/group_deps",
                                           "gradients/stage0/MatMul_grad/tuple/group_deps"}
    placement = placed(two_stages, cpus2, lambda name: "stage0" in name)
    assert weight_gradient_split(two_stages, placement.op_devices(two_stages)).gates <= gates
