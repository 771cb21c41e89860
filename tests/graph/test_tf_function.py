"""Specification of placer.graph.tf_function: a TF2 training step as a standalone, fully inlined TF1 graph."""

import numpy as np
import pytest
import tensorflow as tf

from placer.errors import GraphBuildError
from placer.graph.build import graph_from_tf_function
from placer.graph.tf_function import CALL_OPS, FunctionStepError, FunctionStepGraph, trace_tf_function_step

STEPS = 20


def _all_nodes(graph: tf.Graph):
    graph_def = graph.as_graph_def()
    yield from graph_def.node
    for function in graph_def.library.function:
        yield from function.node_def


def function_call_ops(graph: tf.Graph) -> list[str]:
    """Ops that call a function: call ops and ops typed as a library function (control flow is not a call)."""
    library = {f.signature.name for f in graph.as_graph_def().library.function}
    return [op.name for op in graph.get_operations() if op.type in CALL_OPS or op.type in library]


def _variable_handles(graph: tf.Graph) -> list[tf.Operation]:
    return [op for op in graph.get_operations() if op.type == "VarHandleOp"]


def _read(step: FunctionStepGraph, session: tf.compat.v1.Session, variable: str) -> np.ndarray:
    handle = step.graph.get_operation_by_name(variable)
    with step.graph.as_default():
        value = tf.raw_ops.ReadVariableOp(resource=handle.outputs[0], dtype=handle.get_attr("dtype"))
    return session.run(value)


def _train(step: FunctionStepGraph, steps: int = STEPS) -> list[float]:
    with tf.compat.v1.Session(graph=step.graph) as session:
        session.run(step.init_op)
        return [session.run([step.train_op, step.loss])[1] for _ in range(steps)]


def _linear_regression_step():
    """Plain variables, a GradientTape and two levels of nested tf.functions; returns (step, variables)."""
    w = tf.Variable(tf.zeros([3, 1]), name="w")
    b = tf.Variable(0.0, name="b")
    true_w = tf.constant([[1.0], [-2.0], [0.5]])

    @tf.function
    def linear(x):
        return tf.matmul(x, w) + b

    @tf.function
    def predict(x):
        return linear(x)

    @tf.function
    def step():
        x = tf.random.stateless_normal([32, 3], seed=[1, 2])
        y = tf.matmul(x, true_w) + 0.3
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(predict(x) - y))
        grad_w, grad_b = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * grad_w)
        b.assign_sub(0.1 * grad_b)
        return loss

    return step, (w, b)


def test_nested_tf_functions_are_inlined():
    step_fn, _ = _linear_regression_step()
    assert any(n.op in CALL_OPS for n in step_fn.get_concrete_function().graph.as_graph_def().node)

    step = trace_tf_function_step(step_fn)

    assert not [n.name for n in step.graph.as_graph_def().node if n.op in CALL_OPS]
    assert function_call_ops(step.graph) == []
    names = [op.name for op in step.graph.get_operations()]
    assert any(name.startswith("StatefulPartitionedCall/StatefulPartitionedCall/") for name in names), (
        "body nodes of nested calls are prefixed with the call's name"
    )


def test_a_call_tensorflow_compiles_with_xla_stays_one_op_that_the_session_runs_compiled():
    """Keras's TensorFlow backend compiles grouped convolutions with XLA on CPU: placer's graph keeps such a call
    as one op, which a session compiles as TensorFlow does when it runs the step itself, so placer times the step
    `fit` runs; the ops around it are inlined as ever."""
    from tensorflow.core.protobuf import config_pb2

    v = tf.Variable(tf.ones([4, 4]), name="v")

    @tf.function(jit_compile=True)
    def compiled(x):
        return tf.matmul(x, x)

    @tf.function
    def inlined(x):
        return x * 0.01

    @tf.function
    def step():
        v.assign_add(inlined(compiled(v)))

    traced = trace_tf_function_step(step)
    calls = [op for op in traced.graph.get_operations() if op.type in CALL_OPS]
    assert len(calls) == 1 and calls[0].get_attr("_XlaMustCompile")
    with tf.compat.v1.Session(graph=traced.graph) as session:
        session.run(traced.init_op)
        session.run(traced.train_op)
        np.testing.assert_allclose(_read(traced, session, "v"), np.full([4, 4], 1.04), rtol=1e-6)
        metadata = config_pb2.RunMetadata()
        session.run(traced.train_op, options=config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE),
                    run_metadata=metadata)
    ran = {node.node_name for device in metadata.step_stats.dev_stats for node in device.node_stats}
    assert calls[0].name in ran
    assert not [name for name in ran if name.startswith(calls[0].name + "/")], "compiled: its body is not run op by op"


def test_inlined_step_trains_plain_variables_in_a_session():
    step_fn, (w, b) = _linear_regression_step()
    step = trace_tf_function_step(step_fn)

    with tf.compat.v1.Session(graph=step.graph) as session:
        session.run(step.init_op)
        before = _read(step, session, "w")
        losses = [session.run([step.train_op, step.loss])[1] for _ in range(STEPS)]
        after = _read(step, session, "w")

    np.testing.assert_allclose(before, w.numpy())
    assert not np.allclose(before, after)
    assert losses[-1] < 0.1 * losses[0]
    np.testing.assert_allclose(w.numpy(), np.zeros([3, 1]), err_msg="the eager variables are left untouched")


def test_keras3_mlp_with_adam_trains_in_a_session():
    keras = pytest.importorskip("keras")
    assert keras.backend.backend() == "tensorflow"
    seeded = keras.initializers.GlorotUniform
    model = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(16, activation="relu", kernel_initializer=seeded(seed=0)),
        keras.layers.Dense(1, kernel_initializer=seeded(seed=1)),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)  # not built: its variables appear on the first trace
    loss_fn = keras.losses.MeanSquaredError()

    @tf.function
    def train_step():
        x = tf.random.normal([64, 4], seed=7)
        y = tf.reduce_sum(x, axis=1, keepdims=True)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step = trace_tf_function_step(train_step)

    assert function_call_ops(step.graph) == []
    assert len(_variable_handles(step.graph)) == len(model.variables) + len(optimizer.variables)
    losses = _train(step)
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])


def test_keras3_compiled_train_step_with_lstm_keeps_its_loop_as_one_op():
    keras = pytest.importorskip("keras")
    model = keras.Sequential([
        keras.Input((6, 3)),
        keras.layers.LSTM(4, seed=0),
        keras.layers.BatchNormalization(),
        keras.layers.Dropout(0.1, seed=1),
        keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=2)),
    ])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.02), loss="mse", metrics=["mae"])

    @tf.function
    def train_step():
        x = tf.random.normal([32, 6, 3], seed=3)
        return model.train_step((x, tf.reduce_mean(x, axis=[1, 2])[:, None]))  # {"loss": ..., "mae": ...}

    step = trace_tf_function_step(train_step)

    assert function_call_ops(step.graph) == []
    assert "While" in {op.type for op in step.graph.get_operations()}
    losses = _train(step, steps=15)
    assert np.mean(losses[-3:]) < np.mean(losses[:3])


def test_every_variable_is_a_var_handle_that_init_op_initializes_and_no_node_has_a_device():
    w = tf.Variable(tf.eye(2), name="w")
    b = tf.Variable(0.5, name="b")

    @tf.function
    def update():
        with tf.device("/cpu:0"):
            w.assign(tf.matmul(w, w) * b)

    @tf.function
    def step():
        with tf.device("/cpu:0"):
            b.assign_add(1.0)
        update()

    assert any(n.device for n in step.get_concrete_function().graph.as_graph_def().node)
    expected_b = b.numpy()

    step_obj = trace_tf_function_step(step)

    handles = _variable_handles(step_obj.graph)
    assert sorted(op.name for op in handles) == ["b", "w"]
    assert len({op.get_attr("shared_name") for op in handles}) == len(handles)
    assert [op.get_attr("shape") for op in handles if op.name == "w"] == [w.shape]
    assert not [n.name for n in _all_nodes(step_obj.graph) if n.device]
    with step_obj.graph.as_default():
        initialized = [tf.raw_ops.VarIsInitializedOp(resource=op.outputs[0]) for op in handles]
    with tf.compat.v1.Session(graph=step_obj.graph) as session:
        assert not any(session.run(initialized))
        session.run(step_obj.init_op)
        assert all(session.run(initialized))
        assert _read(step_obj, session, "b") == expected_b


def test_large_variables_get_a_random_initializer_with_their_mean_std_and_range():
    rng = np.random.default_rng(0)
    values = rng.normal(0.5, 0.1, size=[1001, 1000]).astype(np.float32)
    big = tf.Variable(values, name="big")

    @tf.function
    def step():
        big.assign_add(tf.ones_like(big))

    step_obj = trace_tf_function_step(step)

    assert step_obj.graph.as_graph_def().ByteSize() < 100_000
    assert step_obj.loss is None
    with tf.compat.v1.Session(graph=step_obj.graph) as session:
        session.run(step_obj.init_op)
        value = _read(step_obj, session, "big")
    assert value.shape == (1001, 1000)
    assert abs(value.mean() - 0.5) < 0.01 and abs(value.std() - 0.1) < 0.01
    assert values.min() <= value.min() and value.max() <= values.max()


def test_many_mid_size_variables_leave_the_graph_small_and_repeated_values_exact():
    """A Keras model's weights and Adam's slots are mostly under a million elements each: stored in the GraphDef
    they made InceptionResNetV2's 607 MB, sent to and held by every session."""
    rng = np.random.default_rng(0)
    weights = [tf.Variable(rng.uniform(-0.1, 0.1, size=[100, 200]).astype(np.float32), name=f"w{i}")
               for i in range(20)]
    slots = [tf.Variable(tf.zeros([100, 200]), name=f"m{i}") for i in range(20)]
    scale = tf.Variable(tf.ones([300]), name="scale")
    small = tf.Variable([1.0, 2.0, 3.0], name="small")
    ids = tf.Variable(np.arange(2000, dtype=np.int32), name="ids")

    @tf.function
    def step():
        for weight, slot in zip(weights, slots):
            slot.assign_add(weight)
        scale.assign(scale * 2.0)
        small.assign(small * 2.0)
        ids.assign_add(tf.ones_like(ids))

    step_obj = trace_tf_function_step(step)

    # 40 variables of 20,000 floats stored exactly would take 3.2 MB.
    assert step_obj.graph.as_graph_def().ByteSize() < 200_000
    with tf.compat.v1.Session(graph=step_obj.graph) as session:
        session.run(step_obj.init_op)
        assert not _read(step_obj, session, "m3").any()
        assert (_read(step_obj, session, "scale") == 1.0).all()
        assert _read(step_obj, session, "small").tolist() == [1.0, 2.0, 3.0]
        assert _read(step_obj, session, "ids").tolist() == list(range(2000))
        drawn = _read(step_obj, session, "w3")
    assert -0.1 <= drawn.min() and drawn.max() <= 0.1 and drawn.std() > 0.03


def test_initial_values_are_made_in_their_variables_unit():
    big = tf.Variable(np.random.default_rng(0).normal(size=[50, 50]).astype(np.float32), name="big")
    zeros = tf.Variable(tf.zeros([50, 50]), name="zeros")

    @tf.function
    def step():
        big.assign_add(zeros)

    graph = graph_from_tf_function(step)

    for variable in ("big", "zeros"):
        made = [op for op in graph.ops if op.name.startswith(f"{variable}/Initializer/")]
        assert made
        assert {graph.group_of(op.name).index for op in made} == {graph.group_of(variable).index}


def test_a_compiled_call_is_one_op_of_the_step_that_a_roofline_says_it_cannot_see_into(compiled_call_step):
    """Modeled GPUs price ops from their FLOPs and bytes; a call compiled with XLA hides its body's, as a loop
    does, and the pricing says so rather than pricing the step too short in silence."""
    from placer.hardware import GPUS
    from placer.profile import roofline_costs

    graph = graph_from_tf_function(compiled_call_step)
    (call,) = [op.name for op in graph.step_ops if op.type in CALL_OPS]
    with pytest.warns(UserWarning, match=r"1 loops, conditionals or calls compiled with XLA of .*" + call):
        roofline_costs(graph, GPUS["V100"])


def test_nested_call_with_only_side_effects_runs_once_per_step():
    counter = tf.Variable(0, dtype=tf.int64, name="counter")

    @tf.function(jit_compile=True)
    def count():
        counter.assign_add(1)

    @tf.function
    def step():
        count()

    step_obj = trace_tf_function_step(step)  # the XLA-compiled call stays one op; its update runs in it

    with tf.compat.v1.Session(graph=step_obj.graph) as session:
        session.run(step_obj.init_op)
        for _ in range(3):
            session.run(step_obj.train_op)
        assert _read(step_obj, session, "counter") == 3


def test_functional_control_flow_stays_one_op_and_still_runs():
    total = tf.Variable(0.0, name="total")

    @tf.function
    def add_up(n):
        return tf.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + tf.cast(i, tf.float32)), [0, 0.0])[1]

    @tf.function
    def step():
        total.assign_add(add_up(tf.constant(4)))
        return total.read_value()

    step_obj = trace_tf_function_step(step)

    loops = [op for op in step_obj.graph.get_operations() if op.type in ("While", "StatelessWhile")]
    assert len(loops) == 1
    assert function_call_ops(step_obj.graph) == []
    assert step_obj.loss is not None
    with tf.compat.v1.Session(graph=step_obj.graph) as session:
        session.run(step_obj.init_op)
        assert [session.run([step_obj.train_op, step_obj.loss])[1] for _ in range(2)] == [6.0, 12.0]


def test_arguments_and_captured_tensors_become_constants():
    scale = tf.constant(2.0)
    acc = tf.Variable(0.0, name="acc")

    def step(x):  # a plain callable: wrapped in tf.function
        acc.assign_add(tf.reduce_sum(x) * scale)
        return acc.read_value()

    step_obj = trace_tf_function_step(step, tf.constant([1.0, 2.0]), name="my_step")

    assert step_obj.train_op == "my_step"
    assert not [op.name for op in step_obj.graph.get_operations() if op.type == "Placeholder"]
    with tf.compat.v1.Session(graph=step_obj.graph) as session:
        session.run(step_obj.init_op)
        assert session.run([step_obj.train_op, step_obj.loss])[1] == 6.0


def test_invalid_op_name_is_rejected():
    with pytest.raises(FunctionStepError, match="not a valid TensorFlow op name"):
        trace_tf_function_step(lambda: None, name="my step")


def test_non_callable_step_is_rejected():
    with pytest.raises(FunctionStepError, match="callable") as error:
        trace_tf_function_step(42)
    assert isinstance(error.value, ValueError) and isinstance(error.value, GraphBuildError)


def test_step_without_side_effects_or_outputs_is_rejected():
    def step():
        tf.constant(1.0) + 1.0

    with pytest.raises(FunctionStepError, match="no side effects and no outputs"):
        trace_tf_function_step(step)


def test_captured_resource_that_is_not_a_variable_is_rejected_by_name():
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant([1, 2], tf.int64), tf.constant([3.0, 4.0])), -1.0
    )
    counter = tf.Variable(0.0)

    @tf.function
    def step():
        counter.assign_add(table.lookup(tf.constant(1, tf.int64)))

    placeholders = [
        t.op.name for t in step.get_concrete_function().graph.internal_captures if t.dtype == tf.resource
    ]
    with pytest.raises(FunctionStepError, match="not a tf.Variable") as error:
        trace_tf_function_step(step)
    assert any(repr(name) in str(error.value) for name in placeholders)
