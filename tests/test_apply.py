"""Using an exported placement in the user's own training: check the graph, place it, run it (placer.apply)."""

import json
import math
import subprocess
import sys

import pytest
import tensorflow as tf

from placer.apply import (
    ExportedPlacement, load_exported_placement, place_graph, place_tf_function, placement_mapping, run_training,
)
from placer.errors import PlacementError, PlacementFileError
from placer.graph import graph_from_function, graph_from_tf_function
from placer.measure import MeasureConfig
from placer.placement import Placement


def _dense_step(batch=16):
    """A user's graph-mode training step: the same function builds the placer graph and the real one."""
    x = tf.random.uniform((batch, 8), name="features")
    w = tf.compat.v1.get_variable("w", (8, 4))
    b = tf.compat.v1.get_variable("b", (4,), initializer=tf.compat.v1.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b), name="loss")
    return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train"), loss


def _keras_step():
    import tf_keras

    x = tf.random.uniform((16, 8), name="features")
    y = tf.random.uniform((16,), 0, 4, dtype=tf.int32, name="labels")
    model = tf_keras.Sequential([tf_keras.layers.Dense(16, activation="relu"), tf_keras.layers.Dense(4)])
    loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True), name="loss")
    gradients = tf.compat.v1.gradients(loss, model.trainable_variables)
    train = tf_keras.optimizers.legacy.Adam(0.01).apply_gradients(zip(gradients, model.trainable_variables))
    return train, loss


def _user_graph(build, **kwargs):
    graph = tf.Graph()
    with graph.as_default():
        train_op, loss = build(**kwargs)
    return graph, train_op, loss


def _same_device(a: str, b: str) -> bool:
    return tf.DeviceSpec.from_string(a) == tf.DeviceSpec.from_string(b)


@pytest.fixture(scope="module")
def dense_file(tmp_path_factory, cpus2):
    graph = graph_from_function(_dense_step, name="dense")
    path = tmp_path_factory.mktemp("apply") / "dense.json"
    Placement.round_robin(graph, cpus2).with_metadata(step_time=0.002).save(path, graph)
    return graph, path


def test_placement_round_trips_onto_a_graph_the_user_built_the_same_way(dense_file):
    graph, path = dense_file
    user, _, _ = _user_graph(_dense_step)
    report = place_graph(user, path)

    saved = json.loads(path.read_text())["ops"]
    assert report.graph.fingerprint == graph.fingerprint
    assert report.init_op is None  # placer_init was rebuilt for the check only; the user's graph is not changed
    assert "placer_init" not in {op.name for op in user.get_operations()}
    covered = [op for op in user.get_operations() if op.name in saved]
    assert report.placed_ops == len(covered) == len(graph.ops) - 3  # placer_init and its two "init" groups
    for op in covered:
        assert _same_device(op.device, saved[op.name]), op.name
    assert len({op.device for op in covered}) == 2
    # get_variable's IsInitialized/Read ops are not in the step: each is reported, none left silently
    assert {op.name for op in report.uncovered} == {op.name for op in user.get_operations()} - set(saved)
    assert all(op.reason for op in report.uncovered)

    from_op_graph = place_graph(graph, path).graph_def
    assert {node.name: node.device for node in from_op_graph.node} == saved


def test_users_own_initializer_and_saver_do_not_break_the_check_and_are_reported(dense_file):
    _, path = dense_file
    user, train_op, loss = _user_graph(_dense_step)
    with user.as_default():
        init = tf.compat.v1.global_variables_initializer()  # takes the name "init" that placer_init's group had
        saver = tf.compat.v1.train.Saver()
    report = place_graph(user, path)

    uncovered = {op.name: op for op in report.uncovered}
    assert "init" in uncovered and any(name.startswith("save/") for name in uncovered)
    saved = load_exported_placement(path).op_devices
    reads_w = [op for op in user.get_operations() if op.type == "ReadVariableOp" and op.inputs[0].op.name == "w"
               and op.name in uncovered]
    assert reads_w and all(_same_device(op.device, saved["w"]) for op in reads_w)  # a reader goes with its variable
    assert "not in the placement" in report.describe()
    with pytest.raises(PlacementError, match="not in the placement"):
        place_graph(user, path, uncovered="error")

    with tf.compat.v1.Session(graph=user, config=tf.compat.v1.ConfigProto(device_count={"CPU": 2})) as session:
        session.run(init)
        losses = [session.run([train_op, loss])[1] for _ in range(30)]
        # each step draws a new batch, so compare averages: three single steps once went up (0.166 -> 0.181)
        assert all(math.isfinite(value) for value in losses) and sum(losses[-5:]) < sum(losses[:5])
        assert saver.save(session, str(path.parent / "ckpt" / "model"))


def test_placement_for_another_batch_size_is_refused_saying_what_differs(dense_file):
    _, path = dense_file
    user, _, _ = _user_graph(_dense_step, batch=32)
    with pytest.raises(PlacementFileError) as refused:
        place_graph(user, path)
    message = str(refused.value)
    assert "was made for graph 'dense'" in message and "every op name matches" in message
    assert "size, batch or optimizer" in message
    assert message.count("fingerprint") == 2


def test_placement_for_another_model_is_refused_naming_missing_ops(dense_file):
    _, path = dense_file
    user, _, _ = _user_graph(_keras_step)
    with pytest.raises(PlacementFileError, match="your graph has no op 'train'"):
        place_graph(user, path)
    with pytest.raises(PlacementFileError, match=r"ops it names read 1 ops it does not name \('SparseSoftmax"):
        place_graph(user, path, train_op=user.get_operation_by_name("loss"), loss="loss:0")


@pytest.mark.parametrize("content, reason", [
    ("{not json", "not valid JSON"),
    ('{"format": "something-else"}', "not a placer placement file"),
    ('{"format": "placer.placement", "format_version": 9}', "format version 9"),
    ('{"format": "placer.placement", "format_version": 1, "graph": {}, "devices": ["/cpu:0"], "ops": {"a": "/cpu:0"}}',
     "fingerprint"),
    ('{"format": "placer.placement", "format_version": 1, "graph": {"fingerprint": "f"}, "devices": ["/cpu:0"], "ops": []}',
     "op name -> device"),
    ('{"format": "placer.placement", "format_version": 1, "graph": {"fingerprint": "f"}, "devices": ["/cpu:0"], '
     '"ops": {"a": "/gpu:3"}}', "puts op 'a' on '/gpu:3'"),
])
def test_malformed_placement_file_is_refused_with_the_reason(tmp_path, content, reason):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(PlacementFileError, match=reason):
        load_exported_placement(path)


def test_mapping_and_metadata_are_readable_without_the_graph(dense_file):
    graph, path = dense_file
    exported = load_exported_placement(path)
    assert isinstance(exported, ExportedPlacement) and exported.fingerprint == graph.fingerprint
    assert (exported.train_op, exported.init_op, exported.loss) == (graph.train_op, graph.init_op, graph.loss)
    assert exported.recorded_step_time == 0.002
    mapping = placement_mapping(path)
    assert set(mapping) == {op.name for op in graph.ops} and exported.device_for("w") == mapping["w"]
    assert exported.device_for("no-such-op") is None


def test_tf_keras_model_in_graph_mode_is_placed(tmp_path, cpus2):
    graph = graph_from_function(_keras_step, name="keras-dense")
    path = Placement.round_robin(graph, cpus2).save(tmp_path / "keras.json", graph)
    user, train_op, loss = _user_graph(_keras_step)
    report = place_graph(user, path)
    saved = load_exported_placement(path).op_devices
    assert report.graph.fingerprint == graph.fingerprint
    kernel = user.get_operation_by_name("sequential/dense/kernel")
    assert _same_device(kernel.device, saved["sequential/dense/kernel"])
    assert all(_same_device(op.device, saved[op.name]) for op in user.get_operations() if op.name in saved)


def test_tf_function_step_trains_with_its_placement_through_the_graph_route(tmp_path, cpus2):
    def make_step():
        w = tf.Variable(tf.random.normal((8, 4)), name="w")

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(tf.random.uniform((16, 8)), w)))
            w.assign_sub(0.1 * tape.gradient(loss, w))
            return loss

        return step

    graph = graph_from_tf_function(make_step(), name="tf2-step")
    path = Placement.round_robin(graph, cpus2).save(tmp_path / "tf2.json", graph)
    report = place_tf_function(make_step(), path)
    assert report.graph.fingerprint == graph.fingerprint
    assert {node.name: node.device for node in report.graph_def.node} == placement_mapping(path)

    run = run_training(report.graph, path, "inprocess:2", MeasureConfig(warmup_steps=1, timed_steps=2))
    assert run.ok, run.describe()
    assert len(run.samples) == 2 and run.backend == "measured" and run.target == "inprocess:2"
    assert run.ops_checked > 0


def _placer(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "placer.cli", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory, mlp, cpus2):
    path = tmp_path_factory.mktemp("apply-cli") / "mlp.json"
    placement = Placement.round_robin(mlp, cpus2).with_metadata(model="mlp", size="tiny", step_time=0.004,
                                                                 step_time_kind="measured median", cluster="inprocess:2")
    return placement.save(path, mlp)


def test_cli_apply_trains_a_tiny_model_on_two_inprocess_devices(mlp_file):
    run = _placer("apply", str(mlp_file), "mlp", "--steps", "3", "--warmup", "1")  # on the recorded inprocess:2
    assert run.returncode == 0, run.stderr[-2000:]
    assert "on inprocess:2: 4 training steps (1 warm-up)" in run.stdout and "step time median" in run.stdout
    assert "placement check" in run.stdout or "TensorFlow moved" in run.stdout
    assert "recorded step time 4.00 ms (measured median) on inprocess:2" in run.stdout


def test_cli_apply_refuses_a_placement_made_for_another_size_in_one_line(mlp_file):
    run = _placer("apply", str(mlp_file), "--size", "small", "--target", "inprocess:2")  # the model the file records
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("placer: error:")]
    assert len(errors) == 1 and "'mlp-tiny'" in errors[0] and "'mlp-small'" in errors[0]
    assert "Traceback" not in run.stderr


def test_cli_apply_refuses_a_binary_file_in_one_line(tmp_path):
    path = tmp_path / "weights.h5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n\x00\xff" + bytes(range(256)))
    run = _placer("apply", str(path), "mlp")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("placer: error:")]
    assert len(errors) == 1 and f"{path} is not a placement file: it holds binary data" in errors[0]


@pytest.fixture(scope="module")
def two_tower_schedule(tmp_path_factory, cpus2):
    """The expert placement of two-tower on two CPUs, a round-robin one, and the 1F1B plans (training and
    inference) of the expert one over 4 micro-batches, as `placer schedule` saves them (spans profiled on
    inprocess:2)."""
    from placer.cli import main
    from placer.heuristics import make_heuristic
    from placer.models import load_model

    folder = tmp_path_factory.mktemp("apply-schedule")
    graph = load_model("two-tower", "tiny")
    expert = make_heuristic("expert", graph, cpus2, model="two-tower").save(folder / "expert.json", graph)
    round_robin = Placement.round_robin(graph, cpus2).save(folder / "round-robin.json", graph)
    plan, inference = folder / "plan.json", folder / "inference.json"
    for flags, path in (([], plan), (["--inference"], inference)):
        assert main(["schedule", "--model", "two-tower", "--placement", str(expert), "--target", "inprocess:2",
                     "--micro-batches", "4", "--method", "1f1b", *flags, "--save", str(path)]) == 0
    return expert, round_robin, plan, inference


def test_cli_apply_runs_a_placement_with_its_schedule_and_the_traced_step_keeps_the_order(two_tower_schedule, capsys):
    from placer.cli import main

    expert, _, plan, _ = two_tower_schedule
    capsys.readouterr()
    status = main(["apply", str(expert), "two-tower", "--schedule", str(plan), "--target", "inprocess:2",
                   "--repeats", "2", "--warmup", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert report["method"] == "1f1b" and report["micro_batches"] == 4
    assert report["order_kept"] is True and report["violations"] == []
    assert report["blocks_traced"] == report["blocks"] == 16  # 2 devices x (forward, backward) x 4 micro-batches
    assert report["step_time"]["ok"] and len(report["step_time"]["samples"]) == 2
    assert report["step_time"]["seconds"] > 0 and report["predicted_seconds"] > 0


def test_cli_apply_refuses_a_plan_for_another_placement_before_building_any_graph(two_tower_schedule):
    _, round_robin, plan, _ = two_tower_schedule
    run = subprocess.run([sys.executable, "-c", (
        "import sys; from placer.cli import main; status = main(sys.argv[1:]); "
        "print('tensorflow loaded' if 'tensorflow' in sys.modules else 'tensorflow not loaded'); sys.exit(status)"),
        "apply", str(round_robin), "two-tower", "--schedule", str(plan), "--target", "inprocess:2"],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("placer: error:")]
    assert len(errors) == 1 and "made for another placement of two-tower" in errors[0], run.stderr[-2000:]
    assert "tensorflow not loaded" in run.stdout


def test_cli_apply_runs_an_inference_plan_as_forward_only_steps(two_tower_schedule, capsys):
    from placer.cli import main

    expert, _, _, inference = two_tower_schedule
    capsys.readouterr()
    status = main(["apply", str(expert), "two-tower", "--schedule", str(inference), "--target", "inprocess:2",
                   "--steps", "2", "--warmup", "1"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "3 inference (forward-only) steps (1 warm-up)" in printed
    assert "order kept (8/8 blocks traced)" in printed
