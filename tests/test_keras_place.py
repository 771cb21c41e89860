"""placer.keras: a learned placement on a user's Keras 3 model, from `placer train` to `model.fit`, with the model
and the training script of the guide (docs/keras.md).

`model.fit` on two in-process CPU devices runs in a subprocess: TensorFlow's logical devices must be made before
it starts, and this test process has started it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "keras.md"

# Fits the model placed by the placement file argv[1] or, with "alternate", by a hand-made placement that puts
# every other layer on CPU:1; prints what the check, the loss and the step timer showed as JSON.
FIT = '''
import json, sys
from placer.keras import LayerPlacement, StepTimer, layer_paths, make_logical_cpus, place, trace_devices
make_logical_cpus(2)
import keras, numpy as np
sys.path.insert(0, sys.argv[2])
from my_model import build

keras.utils.set_random_seed(0)
keras.layers.Dense(3)  # a layer built before the model: its layers' names differ from the exported graph's
model = build()
if sys.argv[1] == "alternate":
    cpus = ["/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"]
    placement = LayerPlacement({path: cpus[(i + 1) % 2] for i, path in enumerate(layer_paths(model))})
else:
    placement = sys.argv[1]
placed = place(model, placement)
x = np.random.default_rng(0).normal(size=(512, 16)).astype("float32")
y = np.argmax(x[:, :4], axis=1)  # learnable: the loss falls within a few epochs
with trace_devices() as trace:
    first = model.fit(x, y, epochs=1, batch_size=64, verbose=0)
check = placed.check(trace)
timer = StepTimer(warmup=2)
later = model.fit(x, y, epochs=3, batch_size=64, verbose=0, callbacks=[timer])
print(json.dumps({
    "layers": dict(placed.layers.devices),
    "losses": first.history["loss"] + later.history["loss"],
    "ok": check.ok, "checked": check.ops_checked, "moved": [m.op for m in check.moved_ops],
    "not_traced": list(check.layers_not_traced), "describe": check.describe(),
    "on_cpu1": sorted(op for op, device in trace.ran_on.items() if device.endswith("CPU:1")),
    "step_times": timer.step_times, "median": timer.median,
}))
'''


def _python(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)


def _fit(placement: str, model_dir) -> dict:
    script = model_dir / "fit.py"
    script.write_text(FIT)
    run = _python(str(script), placement, str(model_dir))
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def guide_files() -> dict[str, str]:
    """The guide's Python files: each python block whose first line is "# NAME.py"."""
    files = {}
    for block in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.DOTALL):
        first = block.splitlines()[0]
        if re.fullmatch(r"# \w+\.py", first):
            files[first[2:]] = block
    return files


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A directory holding the guide's my_model.py and train.py."""
    directory = tmp_path_factory.mktemp("keras_model")
    files = guide_files()
    assert set(files) == {"my_model.py", "train.py"}
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def test_a_keras_model_goes_from_placer_train_through_export_to_model_fit_on_its_placement(model_dir, tmp_path):
    spec = f"{model_dir / 'my_model.py'}:build"
    train = _python("-m", "agents.cli", "train", spec, "--target", "inprocess:2", "--agent", "random", "--updates", "2",
                    "--samples-per-update", "2", "--repeats", "2", "--final-rounds", "1", "--no-progress",
                    "--runs", str(tmp_path / "runs"))
    assert train.returncode == 0, train.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    out = model_dir / "placement.json"  # where the guide's train.py reads it
    export = _python("-m", "agents.cli", "export", str(run_dir), "--out", str(out), "--keras")
    assert export.returncode == 0, export.stderr[-3000:]
    assert "0:Dense" in export.stdout and "3:Dense" in export.stdout

    layers = json.loads(out.read_text())["metadata"]["keras_layers"]["layers"]
    assert list(layers) == ["0:Dense", "1:Dropout", "2:Dense", "3:Dense"]
    fit = _fit(str(out), model_dir)
    assert fit["layers"] == layers
    assert fit["ok"], fit["describe"]
    assert fit["losses"][-1] < fit["losses"][0]
    assert len(fit["step_times"]) == 3 * 8 - 2 and fit["median"] > 0  # 3 epochs of 512 / 64 steps, 2 warm-up

    guide = subprocess.run([sys.executable, "train.py"], cwd=model_dir, capture_output=True, text=True, timeout=300)
    assert guide.returncode == 0, guide.stderr[-3000:]
    assert "placement check: all" in guide.stdout and "fit step time median" in guide.stdout, guide.stdout


def test_place_runs_each_layers_forward_gradients_and_optimizer_update_on_its_device(model_dir):
    fit = _fit("alternate", model_dir)
    assert fit["ok"], fit["describe"]
    assert fit["checked"] > 100 and fit["moved"] == [] and fit["not_traced"] == []
    on_cpu1 = fit["on_cpu1"]
    # layers 0 and 2 are on CPU:1: their forward ops, their gradients and their Adam updates ran there
    for scope in ("dense_", "gradients/", "placed_update"):
        assert any(scope in op for op in on_cpu1), (scope, on_cpu1[:20])
    assert fit["losses"][-1] < fit["losses"][0]


def _model(*layers):
    import keras

    model = keras.Sequential([keras.Input((16,)), *layers])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_placement_of_another_model_is_refused_before_any_step_naming_the_layers_that_differ():
    import keras

    from placer.keras import KerasPlacementError, LayerPlacement, place

    placement = LayerPlacement({"0:Dense": "/device:CPU:0", "1:Dropout": "/device:CPU:0", "2:Dense": "/device:CPU:0"})
    model = _model(keras.layers.Dense(8), keras.layers.Dense(4))
    with pytest.raises(KerasPlacementError, match=r"another model.*1:Dropout, 2:Dense.*1:Dense"):
        place(model, placement)
    assert int(model.optimizer.iterations.numpy()) == 0


def test_a_device_the_machine_lacks_is_refused_before_any_step_naming_it():
    import keras

    from placer.keras import KerasPlacementError, LayerPlacement, place

    model = _model(keras.layers.Dense(8), keras.layers.Dense(4))
    placement = LayerPlacement({"0:Dense": "/device:CPU:0", "1:Dense": "/job:worker/task:1/device:CPU:0"})
    with pytest.raises(KerasPlacementError, match=r"does not have \(the default device map: worker:1/CPU:0 -> CPU:1\)"
                                                  r".*make_logical_cpus"):
        place(model, placement)
    with pytest.raises(KerasPlacementError, match=r"does not have \(the device map: worker:1/CPU:0 -> GPU:3\)"):
        place(model, placement, device_map={0: "CPU:0", "worker:1/CPU:0": "GPU:3"})
    assert not model.optimizer.built


def test_a_device_map_given_to_place_overrides_the_default_and_place_reports_it():
    import keras

    from placer.keras import LayerPlacement, place

    model = _model(keras.layers.Dense(8), keras.layers.Dense(4))
    placement = LayerPlacement({"0:Dense": "/job:worker/task:0/device:CPU:0",
                                "1:Dense": "/job:worker/task:1/device:CPU:0"})
    placed = place(model, placement, device_map="0=CPU:0,1=CPU:0")  # this process has one CPU device
    assert set(placed.layers.devices.values()) == {"/job:localhost/replica:0/task:0/device:CPU:0"}
    assert placed.device_map.chosen_by == "user"
    assert placed.describe().splitlines()[:3] == ["placement devices -> devices of this process (device map):",
                                                  "  worker:0/CPU:0 -> CPU:0", "  worker:1/CPU:0 -> CPU:0"]
    assert all(variable.value.device.endswith("CPU:0") for variable in model.trainable_variables)


def test_layer_placement_takes_each_layers_majority_device_and_reports_the_layers_it_splits(model_dir, cpus2):
    from placer.keras import layer_placement
    from placer.models.loader import load_keras_model
    from placer.placement import Placement

    model, graph = load_keras_model(f"{model_dir / 'my_model.py'}:build")
    split = layer_placement(graph, Placement.round_robin(graph, cpus2), model)
    assert list(split.devices) == ["0:Dense", "1:Dropout", "2:Dense", "3:Dense"]
    assert split.split and all(sum(counts.values()) > 1 for counts in split.split.values())
    for path, counts in split.split.items():
        assert counts[split.devices[path]] == max(counts.values())

    on_second = layer_placement(graph, Placement.from_assignment(graph, cpus2, [1] * len(graph.groups)), model)
    assert not on_second.split and all(device.endswith("CPU:1") for device in on_second.devices.values())


def test_layer_placement_refuses_a_model_that_did_not_build_the_graph(model_dir, cpus2):
    import keras

    from placer.keras import KerasPlacementError, layer_placement
    from placer.models.loader import load_keras_model
    from placer.placement import Placement

    _, graph = load_keras_model(f"{model_dir / 'my_model.py'}:build")
    other = _model(keras.layers.Dense(8), keras.layers.Dense(4))
    with pytest.raises(KerasPlacementError, match="does not build graph"):
        layer_placement(graph, Placement.round_robin(graph, cpus2), other)


def test_the_layer_placement_travels_in_the_placement_file_and_a_file_without_one_says_how_to_add_it(
        model_dir, cpus2, tmp_path):
    from placer.keras import KerasPlacementError, add_layer_placement, read_layer_placement
    from placer.models.loader import load_model
    from placer.placement import Placement

    spec = f"{model_dir / 'my_model.py'}:build"
    graph = load_model(spec)
    path = Placement.round_robin(graph, cpus2).save(tmp_path / "placement.json", graph)
    with pytest.raises(KerasPlacementError, match="--keras"):
        read_layer_placement(path)
    written = add_layer_placement(path, spec)
    assert read_layer_placement(path) == written


def test_placement_of_layers_is_the_op_placement_whose_layer_placement_it_was_made_from(model_dir, cpus2):
    from placer.keras import LayerPlacement, layer_paths, layer_placement, placement_of_layers
    from placer.models.loader import load_keras_model

    model, graph = load_keras_model(f"{model_dir / 'my_model.py'}:build")
    layers = LayerPlacement({path: cpus2.names[i % 2] for i, path in enumerate(layer_paths(model))})
    placement = placement_of_layers(graph, model, layers, cpus2)
    again = layer_placement(graph, placement, model)
    assert again.devices == layers.devices and not again.split  # no layer split: its updates go with it too
    assert again.placement_devices == cpus2.names
    assert set(placement.group_devices) == {0, 1}


def test_a_grouped_convolution_s_compiled_call_and_its_gradient_go_with_its_layer(cpus2):
    """Keras compiles a grouped convolution with XLA on CPU: one call op forward, and a gradient call outside every
    layer's scope; `place` colocates the gradient with the forward call, on the layer's device, and so does the
    placement made from the layer placement."""
    import keras

    from placer.graph import graph_from_keras_model
    from placer.graph.control_flow import CALL_OPS
    from placer.keras import LayerPlacement, layer_paths, placement_of_layers
    from placer.keras.layers import layer_ops

    model = keras.Sequential([keras.Input((8, 8, 8), batch_size=4),
                              keras.layers.Conv2D(8, 3, padding="same", groups=4), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(4)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    graph = graph_from_keras_model(model)
    calls = {op.name for op in graph.step_ops if op.type in CALL_OPS}
    assert len(calls) == 2  # the convolution and its gradient, each compiled
    grouped = next(path for path in layer_paths(model) if path.endswith("Conv2D"))
    assert calls <= layer_ops(graph, model)[grouped]
    layers = LayerPlacement({path: cpus2.names[1] if path == grouped else cpus2.names[0] for path in layer_paths(model)})
    placement = placement_of_layers(graph, model, layers, cpus2)
    on = placement.op_devices(graph)
    assert {on[call] for call in calls} == {cpus2.names[1]}


def test_export_keras_refuses_a_run_whose_model_is_not_a_keras_model(simulated_run, tmp_path):
    export = _python("-m", "agents.cli", "export", str(simulated_run), "--out", str(tmp_path / "p.json"), "--keras")
    assert export.returncode == 2
    assert "is not a Keras model" in export.stderr and "Traceback" not in export.stderr


def test_the_step_timer_shares_each_call_of_a_multi_step_training_function_among_its_steps():
    import keras
    import numpy as np

    from placer.keras import StepTimer

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
    x = np.zeros((12 * 2, 8), "float32")  # 12 batches of 2: 3 calls of 4 steps
    timer = StepTimer(warmup=1)
    model.fit(x, np.zeros((24, 4), "float32"), batch_size=2, epochs=1, verbose=0, callbacks=[timer])
    assert len(timer.step_times) == 8  # the 2 calls after the warm-up one, 4 steps each
    assert timer.step_times[:4] == [timer.step_times[0]] * 4 and timer.step_times[4:] == [timer.step_times[4]] * 4
    assert "over 8 steps" in timer.describe()


LSTM_MODEL = '''
import keras


def build():
    model = keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(8), keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model
'''

# In a fresh process, as the guide's train.py: two CPU devices, the exported placement through its default device
# map, one traced epoch of fit; prints where each layer's variables live and what the check saw, as JSON.
LSTM_FIT = '''
import json, sys
from placer.keras import make_logical_cpus, place, trace_devices
make_logical_cpus(2)
import numpy as np
sys.path.insert(0, sys.argv[2])
from lstm_model import build

model = build()
placed = place(model, sys.argv[1])
x = np.random.default_rng(0).normal(size=(64, 5, 3)).astype("float32")
y = np.argmax(x[:, -1, :], axis=1)
with trace_devices() as trace:
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
check = placed.check(trace)
print(json.dumps({
    "layers": dict(placed.layers.devices), "map": dict(placed.device_map.devices), "report": placed.describe(),
    "variables": {path: sorted({v.value.device for v in layer.variables}) for path, layer in
                  zip(placed.layers.devices, [layer for layer in model.layers])},
    "losses": history.history["loss"], "checked": check.ops_checked, "moved": [m.op for m in check.moved_ops],
}))
'''


def _testbed_or_skip(target: str) -> None:
    import os

    from placer.testbed import isolation_available

    if target.startswith("local:") and (not isolation_available() or len(os.sched_getaffinity(0)) < 2):
        pytest.skip("local:2 needs a private network namespace and two cores")


# model.fit on a placement is covered by the train-to-fit test above; these add the device map on two targets.
@pytest.mark.parametrize("target", [pytest.param("inprocess:2", marks=pytest.mark.slow),
                                    pytest.param("local:2", marks=pytest.mark.slow)])  # about 27 s each
def test_a_keras_lstm_placed_on_a_target_goes_onto_the_users_model_in_a_fresh_process_through_the_device_map(
        target, tmp_path):
    _testbed_or_skip(target)
    (tmp_path / "lstm_model.py").write_text(LSTM_MODEL)
    train = _python("-m", "agents.cli", "train", f"{tmp_path / 'lstm_model.py'}:build", "--target", target,
                    "--agent", "random", "--updates", "1", "--samples-per-update", "2", "--repeats", "2",
                    "--final-rounds", "1", "--no-progress", "--runs", str(tmp_path / "runs"))
    assert train.returncode == 0, train.stderr[-3000:]
    note = ("model 'build' has no fixed batch; traced at 32 examples: to choose, give its model function a `batch` "
            "parameter with that default (def model(batch=64))")
    assert train.stdout.count(note) == 1 and ", batch 32)" in train.stdout, train.stdout
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    out = tmp_path / "placement.json"
    export = _python("-m", "agents.cli", "export", str(run_dir), "--out", str(out), "--keras")
    assert export.returncode == 0, export.stderr[-3000:]
    workers = json.loads(out.read_text())["devices"]
    assert json.loads(out.read_text())["graph"]["batch_size"] == 32
    assert "placement devices -> devices of the process that fits (the default" in export.stdout, export.stdout

    script = tmp_path / "fit.py"
    script.write_text(LSTM_FIT)
    fit = _python(str(script), str(out), str(tmp_path))
    assert fit.returncode == 0, fit.stderr[-3000:]
    result = json.loads(fit.stdout.strip().splitlines()[-1])
    here = [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(2)]
    assert result["map"] == dict(zip(workers, here))  # placement device i -> CPU:i: this process has no GPU
    assert set(result["layers"]) == {"0:LSTM", "1:Dense"} and set(result["layers"].values()) <= set(here)
    for path, devices in result["variables"].items():
        assert devices == [result["layers"][path]], (path, devices)
    assert result["checked"] > 0 and result["moved"] == [], result
    assert len(result["losses"]) == 2 and all(loss > 0 for loss in result["losses"])
    assert "placement devices -> devices of this process (default map):" in result["report"]


def test_export_refuses_a_device_map_naming_a_device_the_placement_lacks_in_one_line(simulated_run, tmp_path):
    # checked against the placement's devices before the model is built: a map of a run of any model shows it
    export = _python("-m", "agents.cli", "export", str(simulated_run), "--out", str(tmp_path / "p.json"), "--keras",
                     "--device-map", "0=CPU:0,7=GPU:1")
    assert export.returncode == 2
    (line,) = [line for line in export.stderr.splitlines() if "error:" in line]
    assert "names placement device '7', which the placement does not have" in line, export.stderr
    assert "Traceback" not in export.stderr
