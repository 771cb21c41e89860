"""Loops and conditionals of a traced step: priced by the body they run, kept with what starts them, and named
where a cost model cannot see their bodies."""

import keras
import pytest

from placer.graph.control_flow import iterations, owner

TIMESTEPS = 6


@pytest.fixture(scope="module")
def lstm_graph():
    from placer.graph import graph_from_keras_model
    from placer.graph.keras_model import keras_names_from_zero

    with keras_names_from_zero():
        inputs = keras.Input((TIMESTEPS, 4), batch_size=4)
        outputs = keras.layers.Dense(3)(keras.layers.LSTM(8)(inputs))
        model = keras.Model(inputs, outputs)
        model.compile(optimizer="sgd", loss="mse")
        return graph_from_keras_model(model)


def _loops(graph):
    return [op for op in graph.step_ops if op.type in ("While", "StatelessWhile")]


def test_a_lowered_node_belongs_to_the_outermost_loop_its_name_is_under():
    loops = frozenset({"rnn/while", "rnn/while/body/_3/inner/while", "grad/rnn/while_grad"})
    assert owner("rnn/while/body/_3/cell/MatMul", loops) == "rnn/while"
    assert owner("rnn/while/body/_3/inner/while/body/_1/Add", loops) == "rnn/while"  # nested: the outer op
    assert owner("Func/rnn/while/body/_3/input/_9", loops) == "rnn/while"  # an inlined body's input Identity
    assert owner("grad/rnn/while_grad/merge/_4", loops) == "grad/rnn/while_grad"
    assert owner("rnn/while_grad_other/Add", loops) is None  # a name that merely starts like a loop's
    assert owner("dense/MatMul", loops) is None
    assert owner("rnn/while/body/_3/cell/MatMul", frozenset()) is None


def test_a_loops_iterations_are_its_outer_conditions_runs_less_the_one_that_leaves():
    assert iterations([21]) == 20
    assert iterations([6, 30]) == 5  # an inner loop's condition runs more often than the outer one's
    assert iterations([]) is None


def test_a_loop_and_the_ops_that_start_it_are_one_placeable_unit_with_its_variables(lstm_graph):
    forward, backward = sorted(_loops(lstm_graph), key=lambda op: op.type)[::-1]
    group = lstm_graph.groups[forward.group]
    assert forward.type == "While" and backward.type == "StatelessWhile"
    assert backward.group == forward.group  # the gradient loop starts from the forward loop's outputs
    assert "lstm/lstm_cell/kernel" in group.ops  # the weights its body reads every iteration
    for tensor in forward.data_inputs:
        assert lstm_graph.op(tensor.rsplit(":", 1)[0]).group == forward.group
    # the rest of the model stays placeable apart from the loop
    assert lstm_graph.group_of("dense/kernel").index != forward.group


def test_a_loop_is_charged_the_body_it_ran_every_iteration_in_a_profile(lstm_graph):
    from placer.measure import Measurer
    from placer.measure.targets import InProcess
    from placer.profile import profile_costs

    with Measurer(InProcess(1)) as measurer:
        table = profile_costs(lstm_graph, measurer, steps=2, rounds=1, warmup_rounds=0)
    loops = table.metadata["control_flow"]
    assert {name for name in loops} == {op.name for op in _loops(lstm_graph)}
    for name, loop in loops.items():
        assert loop["iterations"] == TIMESTEPS
        assert loop["nodes_per_step"] > 10 * TIMESTEPS  # the body's ops and the frame's, once per iteration
        # a body of two matmuls and a dozen element-wise ops per step costs more than any single op outside it
        outside = max(seconds for op, seconds in table.op_seconds.items() if op not in loops)
        assert table.op_seconds[name] > outside
    assert table.metadata["unattributed_seconds"] < 0.1 * table.total_seconds


def test_a_traced_loops_body_nodes_count_as_the_loop_and_its_condition_gives_its_iterations():
    from tensorflow.core.protobuf import config_pb2

    from placer.measure.runner import op_times_from_traces

    metadata = config_pb2.RunMetadata()
    device = metadata.step_stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
    clock = 0

    def ran(name, op_type, micros):
        nonlocal clock
        device.node_stats.add(node_name=name, all_start_micros=clock, op_start_rel_micros=0,
                              op_end_rel_micros=micros, timeline_label=f"{name} = {op_type}(x)")
        clock += micros

    ran("rnn/while/loop_counter", "Const", 1)  # an op of the graph under the loop's name stays itself
    for _ in range(3):
        ran("rnn/while/LoopCond/_5", "LoopCond", 1)
        ran("rnn/while/body/_2/cell/MatMul", "MatMul", 100)
        ran("rnn/while/next_iteration/_7", "NextIteration", 1)
    ran("rnn/while/LoopCond/_5", "LoopCond", 1)
    ran("dense/MatMul", "MatMul", 50)
    op_types = {"rnn/while": "While", "rnn/while/loop_counter": "Const", "dense/MatMul": "MatMul"}

    times = op_times_from_traces([metadata], op_types=op_types)
    assert set(times) == set(op_types)
    assert times["rnn/while"].seconds == pytest.approx((3 * 102 + 1) * 1e-6)
    assert times["rnn/while"].iterations == 3 and times["rnn/while"].runs == 10
    assert times["rnn/while"].ran_as == "While"
    assert times["dense/MatMul"].runs == 1 and times["dense/MatMul"].iterations is None
    # without the graph's op types the body keeps the names TensorFlow gave it, and the loop costs nothing
    assert "rnn/while" not in op_times_from_traces([metadata])


def test_a_roofline_names_the_loops_whose_bodies_it_cannot_price(lstm_graph):
    from placer.hardware import GPUS
    from placer.profile import roofline_costs

    with pytest.warns(UserWarning, match=r"2 loops, conditionals or calls compiled with XLA of .* priced as one cheap op each"):
        table = roofline_costs(lstm_graph, GPUS["V100"])
    assert set(table.metadata["control_flow_not_priced"]) == {op.name for op in _loops(lstm_graph)}


def _lstm_model(timesteps):
    inputs = keras.Input((timesteps, 4), batch_size=4)
    recurrent = keras.layers.Bidirectional(keras.layers.LSTM(8, return_sequences=True))(inputs)
    outputs = keras.layers.Dense(3)(keras.layers.GRU(8)(recurrent))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_recurrent_layers_unrolled_on_request_give_placeable_ops_per_time_step():
    from placer.graph import graph_from_keras_model

    model = _lstm_model(TIMESTEPS)
    looped = graph_from_keras_model(model)
    unrolled = graph_from_keras_model(model, unroll_loops=True)
    assert len(_loops(looped)) == 6  # forward and gradient loops of both directions and of the GRU
    assert _loops(unrolled) == []
    assert len(unrolled.groups) > len(looped.groups) + 5 * TIMESTEPS
    assert all(not layer.unroll for layer in (model.layers[1].forward_layer, model.layers[2]))  # left as they were


def test_a_recurrent_layer_without_a_fixed_sequence_length_unrolls_at_the_length_it_is_traced_on():
    from placer.graph import SyntheticTensor, graph_from_keras_model

    graph = graph_from_keras_model(_lstm_model(None), unroll_loops=True, inputs=SyntheticTensor((4, 5, 4)),
                                   targets=SyntheticTensor((4, 3)))
    assert _loops(graph) == []
    matmuls = [op for op in graph.step_ops if op.type == "MatMul" and "gru" in op.name and "grad" not in op.name]
    assert len(matmuls) == 2 * 5  # the GRU's input and recurrent matmuls, once per time step


def test_a_cached_profile_that_priced_no_loop_is_profiled_again(lstm_graph, mlp, tmp_path, monkeypatch):
    import placer.profile
    from placer.cost.calibrated import cost_cache, profiled_costs
    from placer.profile import CostTable

    calibration_path = tmp_path / "calibration.json"
    calibration_path.write_text("{}")
    calibration = type("Calibration", (), {"step_overhead": 0.0, "check_devices": lambda self, devices: None})()
    fresh = []

    def profile(graph, measurer, **options):
        fresh.append(graph.name)
        return CostTable(graph.fingerprint, "calibrated", {}, "profiled", {"control_flow": {}})

    monkeypatch.setattr(placer.profile, "profile_costs", profile)
    for graph in (lstm_graph, mlp):  # tables profiled before loops were charged their bodies
        CostTable(graph.fingerprint, "calibrated", {}, "profiled", {}).save(cost_cache(calibration_path, graph))
        profiled_costs(graph, calibration, calibration_path, measurer=type("Measurer", (), {"devices": ()})())
    assert fresh == [lstm_graph.name]  # a graph without loops keeps its table
    profiled_costs(lstm_graph, calibration, calibration_path, measurer=None)  # now cached with its loops
    assert fresh == [lstm_graph.name]


def test_unrolling_refuses_a_loop_whose_trip_count_depends_on_the_data():
    import keras
    import tensorflow as tf

    from placer.errors import GraphBuildError
    from placer.graph import graph_from_keras_model

    class HalveUntilSmall(keras.layers.Layer):
        """Halves its input until its norm is below 1: how many times depends on the batch."""

        def call(self, x):
            return tf.while_loop(lambda y: tf.norm(y) > 1.0, lambda y: [y * 0.5], [x])[0]

    inputs = keras.Input((4,), batch_size=4)
    model = keras.Model(inputs, keras.layers.Dense(2)(HalveUntilSmall()(keras.layers.Dense(4)(inputs))))
    model.compile(optimizer="adam", loss="mse")
    assert _loops(graph_from_keras_model(model))  # left as a loop, it is placed as one unit
    with pytest.raises(GraphBuildError, match=r"still has \d+ loops? that .*not one: .*trip count depends on the data"):
        graph_from_keras_model(model, unroll_loops=True)
