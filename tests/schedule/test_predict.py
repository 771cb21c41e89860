"""Plans priced op by op: a two-stage pipeline over two devices, two micro-batches, known op costs and a known
link, whose predicted step time is worked out by hand; the plan's order held in the simulated step; a plan
priced on one calibration refused with another; block spans priced from the simulated step, transfers and
overheads included."""

import json

import pytest
import tensorflow as tf

from placer.calibration import Calibration
from placer.host import this_machine
from placer.cost import open_target, parse_target_spec
from placer.devices import machine_from_dict
from placer.errors import ScheduleMismatchError
from placer.graph import graph_from_function
from placer.graph.order import order_violations
from placer.placement import Placement
from placer.profile import CostTable
from placer.schedule import gpipe, sequential
from placer.schedule.execute import scheduled_step
from placer.schedule.from_placement import blocks_from_placement
from placer.schedule.micro_batch import micro_batched_step
from placer.schedule.origin import check_plan_calibration, plan_prediction, with_prediction
from placer.schedule.plan import read_schedule_file
from placer.schedule.predict import costs_of_ordered_step, predict_plans, predict_scheduled_step, priced_template
from placer.simulate import Simulator

MS = 1e-3
MICRO_BATCHES = 2
# Milliseconds of the four ops that compute; every other op is free. Stage 0 on CPU:0, stage 1 on CPU:1.
OP_MS = {"s0/matmul": 1, "s1/matmul": 1, "gradients/s1/matmul_grad/MatMul": 2, "gradients/s0/matmul_grad/MatMul_1": 2}
LATENCY = 0.5 * MS
ACTIVATION_BYTES = 4 * 8 * 4  # a micro-batch of 4 rows of 8 floats
BANDWIDTH = ACTIVATION_BYTES / MS  # so an activation's bytes take 1 ms: 1.5 ms a transfer with the latency
DEVICES = ("/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1")


def two_devices():
    link = {"bandwidth": BANDWIDTH, "latency": LATENCY}
    return machine_from_dict({"devices": [{"name": "CPU:0"}, {"name": "CPU:1"}],
                              "links": [{"source": "CPU:0", "target": "CPU:1", **link},
                                        {"source": "CPU:1", "target": "CPU:0", **link}]})


@pytest.fixture(scope="module")
def pipeline():
    """A step built at the micro-batch size (4 rows): x -> s0/matmul -> s1/matmul -> loss, its gradients and
    updates with their stage's device, the loss's gradient seed on CPU:1. Returns the graph, devices,
    placement, block template, micro-batched step and its cost table."""
    def build():
        x = tf.random.uniform([4, 8], seed=1, name="input")
        with tf.compat.v1.variable_scope("s0"):
            h = tf.matmul(x, tf.compat.v1.get_variable("w", [8, 8], use_resource=True), name="matmul")
        with tf.compat.v1.variable_scope("s1"):
            y = tf.matmul(h, tf.compat.v1.get_variable("w", [8, 8], use_resource=True), name="matmul")
            loss = tf.reduce_sum(tf.square(y), name="loss")
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss), loss

    graph = graph_from_function(build, name="two-stage")
    devices = two_devices()
    second_stage = ("gradients/grad_ys", "gradients/Shape")
    placement = Placement.from_assignment(graph, devices, [
        int(any("s1/" in name or name.startswith(second_stage) for name in group.ops)) for group in graph.groups])
    table = CostTable(graph.fingerprint, "CPU", {name: ms * MS for name, ms in OP_MS.items()}, "hand-made")
    template = blocks_from_placement(Simulator(graph, devices, table), placement, MICRO_BATCHES, of_micro_batch=True)
    step = micro_batched_step(graph, MICRO_BATCHES)
    step_costs = CostTable(step.graph.fingerprint, "CPU", {copy: OP_MS.get(original, 0) * MS
                                                            for copy, (_, original) in step.copies.items()}, "hand-made")
    return graph, devices, placement, template, step, step_costs


def test_a_sequential_plan_is_predicted_as_worked_out_by_hand_with_its_transfers(pipeline):
    graph, devices, placement, template, step, step_costs = pipeline
    plan = sequential(template, MICRO_BATCHES)
    predicted = predict_scheduled_step(scheduled_step(step, placement, devices, plan), devices, costs=step_costs)
    # Per micro-batch: forward 1 on CPU:0, 1.5 to send, forward 1 and backward 2 on CPU:1, 1.5 back, backward 2 on
    # CPU:0 (8 ms); the second micro-batch's forward waits for the first's backward on CPU:0. The updates are free;
    # the train op's wait for CPU:1's update (0.5 ms of latency) is over before CPU:0 ends.
    assert predicted.ok and predicted.backend == "simulated"
    assert predicted.seconds == pytest.approx(2 * 9 * MS)
    # The blocks' spans alone leave out the four transfers.
    assert plan.seconds() == pytest.approx(2 * 6 * MS)


def test_gpipe_is_predicted_as_worked_out_by_hand(pipeline):
    graph, devices, placement, template, step, step_costs = pipeline
    predicted = predict_scheduled_step(scheduled_step(step, placement, devices, gpipe(template, MICRO_BATCHES)),
                                       devices, costs=step_costs)
    # CPU:0 forwards [0, 1] [1, 2]; CPU:1 forwards [2.5, 3.5] [3.5, 4.5], backwards [4.5, 6.5] [6.5, 8.5];
    # gradients back at 8 and 10; CPU:0 backwards [8, 10] [10, 12].
    assert predicted.seconds == pytest.approx(12 * MS)


def test_the_simulated_step_keeps_the_plans_order_which_the_free_step_does_not(pipeline):
    graph, devices, placement, template, step, step_costs = pipeline
    ordered = scheduled_step(step, placement, devices, gpipe(template, MICRO_BATCHES))
    with open_target(ordered.graph, devices, costs=costs_of_ordered_step(step_costs, ordered)) as simulated:
        assert order_violations(json.loads(simulated.trace(ordered.placement)), ordered.chains) == ()
    # Left to itself the executor starts the first backward on CPU:1 before the second forward (1F1B's order).
    with open_target(step.graph, devices, costs=step_costs) as free:
        violations = order_violations(json.loads(free.trace(step.lift_placement(placement, devices))), ordered.chains)
    assert ("CPU:1", "f@CPU:1 mb1", "b@CPU:1 mb0") in [(v.device, v.before, v.after) for v in violations]


def calibration(path, step_overhead: float = 1 * MS, target: str = "local:2"):
    """A calibration of the two devices written by hand: their link as in `two_devices`, no core costs."""
    Calibration(step_overhead=step_overhead, spanning_overhead=0.5 * MS, send_cpu=0.0, send_cpu_per_byte=0.0,
                recv_cpu=0.0, recv_cpu_per_byte=0.0, latency=LATENCY, bandwidth=BANDWIDTH, samples={}, target=target,
                devices=DEVICES, rounds=2, machine=this_machine()).save(path)
    return f"calibrated:{path}"


def test_a_calibrated_target_adds_its_fitted_overheads_to_the_ordered_step(pipeline, tmp_path):
    graph, devices, placement, template, step, step_costs = pipeline
    target = calibration(tmp_path / "calibration.json")
    [prediction] = predict_plans({"sequential": sequential(template, MICRO_BATCHES)}, graph, placement, target,
                                 costs={"CPU": step_costs}).values()
    # The hand-worked 18 ms, one step's overhead (1 ms) and the overhead of spanning a second worker (0.5 ms).
    assert prediction.step_time.seconds == pytest.approx(19.5 * MS)
    assert prediction.target == target and prediction.calibrated_on == "local:2" and prediction.calibration


def test_a_plan_priced_on_one_calibration_is_refused_with_another_naming_what_to_rerun(pipeline, tmp_path):
    graph, devices, placement, template, step, step_costs = pipeline
    first, other = calibration(tmp_path / "first.json"), calibration(tmp_path / "other.json", step_overhead=2 * MS)
    plan = gpipe(template, MICRO_BATCHES)
    [prediction] = predict_plans({"gpipe": plan}, graph, placement, first, costs={"CPU": step_costs}).values()
    priced = with_prediction(plan, prediction)
    recorded = plan_prediction(priced)
    assert recorded.step_time.seconds == pytest.approx(13.5 * MS)  # GPipe's 12 ms and the two overheads
    assert (recorded.target, recorded.calibrated_on, recorded.calibration) == (first, "local:2", prediction.calibration)
    with pytest.raises(ScheduleMismatchError, match=rf"another calibration.*--method gpipe --cluster {other}"):
        predict_plans({"gpipe": priced}, graph, placement, other, costs={"CPU": step_costs})
    check_plan_calibration(priced, parse_target_spec("local:2"))  # where the calibration was made: it fits
    with pytest.raises(ScheduleMismatchError, match="not on inprocess:2.*placer calibrate --target inprocess:2"):
        check_plan_calibration(priced, parse_target_spec("inprocess:2"))
    calibration(tmp_path / "first.json", step_overhead=3 * MS)  # calibrated again into the same file
    with pytest.raises(ScheduleMismatchError, match="calibrated again since.*placer schedule"):
        check_plan_calibration(priced, parse_target_spec("local:2"))


def test_priced_spans_include_the_transfers_each_block_receives(pipeline):
    graph, devices, placement, template, step, step_costs = pipeline
    priced = priced_template(template, graph, placement, devices, costs={"CPU": step_costs}, time_unit=0.5 * MS)
    # From the sequential step worked out above, per micro-batch: the forward on CPU:1 waits 1.5 ms for its
    # activation before its 1 ms, the backward on CPU:0 1.5 ms for its gradient before its 2 ms.
    # (The learning rate, which only the update reads, is in no block.)
    assert {b.name: b.span * 0.5 for b in priced.blocks} == {"f@CPU:0": 1, "f@CPU:1": 2.5, "b@CPU:1": 2, "b@CPU:0": 3.5}
    assert {b.name: b.span * 0.1 for b in template.blocks} == pytest.approx(  # op costs alone: no transfers
        {"f@CPU:0": 1, "f@CPU:1": 1, "b@CPU:1": 2, "b@CPU:0": 2})
    assert [(b.name, b.memory, b.after) for b in priced.blocks] == [(b.name, b.memory, b.after) for b in template.blocks]
    assert priced.tail_seconds == pytest.approx(0.0)  # the updates are free and modeled devices add no overhead
    assert sequential(priced, MICRO_BATCHES).seconds() == pytest.approx(2 * 9 * MS)  # as the step is predicted


def test_priced_spans_carry_the_calibrated_overheads_in_the_tail(pipeline, tmp_path):
    graph, devices, placement, template, step, step_costs = pipeline
    target = calibration(tmp_path / "calibration.json")
    priced = priced_template(template, graph, placement, target, costs={"CPU": step_costs}, time_unit=0.5 * MS)
    assert priced.tail_seconds == pytest.approx(1.5 * MS)  # one step's overhead and one more worker's
    assert sequential(priced, MICRO_BATCHES).seconds() == pytest.approx(19.5 * MS)
    assert priced.metadata["spans_priced_on"] == target
    saved = sequential(priced, MICRO_BATCHES).save(tmp_path / "plan.json")
    assert read_schedule_file(saved).template.tail_seconds == pytest.approx(1.5 * MS)


def test_pricing_transfers_turns_the_ranking_of_a_pipeline_and_one_device(pipeline):
    graph, _, placement, template, step, step_costs = pipeline
    link = {"bandwidth": BANDWIDTH, "latency": 1.5 * MS}  # 2.5 ms a transfer
    devices = machine_from_dict({"devices": [{"name": "CPU:0"}, {"name": "CPU:1"}],
                                 "links": [{"source": "CPU:0", "target": "CPU:1", **link},
                                           {"source": "CPU:1", "target": "CPU:0", **link}]})
    placement = Placement.from_assignment(graph, devices, list(placement.group_device_array))
    one_device = Placement.on_device(graph, devices, 0)
    costs = {"CPU": step_costs}
    table = CostTable(graph.fingerprint, "CPU", {name: ms * MS for name, ms in OP_MS.items()}, "hand-made")
    alone = blocks_from_placement(Simulator(graph, devices, table), one_device, MICRO_BATCHES, of_micro_batch=True)
    split = blocks_from_placement(Simulator(graph, devices, table), placement, MICRO_BATCHES, of_micro_batch=True)
    # Op costs alone: the pipeline overlaps its stages (9 ms) and beats one device (2 x 6 ms).
    assert gpipe(split, MICRO_BATCHES).seconds() == pytest.approx(9 * MS)
    assert sequential(alone, MICRO_BATCHES).seconds() == pytest.approx(12 * MS)
    # Priced with its four transfers of 2.5 ms the pipeline is slower, as the step simulated op by op says.
    pipelined = gpipe(priced_template(split, graph, placement, devices, costs=costs), MICRO_BATCHES)
    single = sequential(priced_template(alone, graph, one_device, devices, costs=costs), MICRO_BATCHES)
    assert single.seconds() == pytest.approx(12 * MS) and pipelined.seconds() > 14 * MS
    by_op = {name: prediction.step_time.seconds for name, prediction in [
        *predict_plans({"pipeline": pipelined}, graph, placement, devices, costs=costs).items(),
        *predict_plans({"one device": single}, graph, one_device, devices, costs=costs).items()]}
    assert by_op["one device"] == pytest.approx(12 * MS) and by_op["pipeline"] == pytest.approx(14 * MS)
