"""A data-parallel plan on a user's Keras 3 model: `MirroredStrategy` over the plan's replicas, and one `fit` step
under it updates the weights as the same step on one device does. In a subprocess: TensorFlow's logical devices
must be made before it starts."""

import json
import subprocess
import sys

import pytest

FIT = '''
import json, sys
from placer.keras import make_logical_cpus, mirrored_strategy
make_logical_cpus(2)
import keras, numpy as np

def build():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model

mirrored = mirrored_strategy(sys.argv[1])
x = np.random.default_rng(0).normal(size=(mirrored.batch_size, 6)).astype("float32")
y = np.arange(mirrored.batch_size) % 3
with mirrored.strategy.scope():
    replicated = build()
replicated.fit(x, y, batch_size=mirrored.batch_size, epochs=1, shuffle=False, verbose=0)
single = build()
single.fit(x, y, batch_size=mirrored.batch_size, epochs=1, shuffle=False, verbose=0)
print(json.dumps({"devices": list(mirrored.devices), "batch": mirrored.batch_size,
                  "replicas": mirrored.strategy.num_replicas_in_sync, "describe": mirrored.describe(),
                  "largest_difference": max(float(np.max(np.abs(a - b)))
                                            for a, b in zip(replicated.get_weights(), single.get_weights())),
                  "moved": max(float(np.max(np.abs(a - b)))
                               for a, b in zip(single.get_weights(), build().get_weights()))}))
'''


def _plan(tmp_path, replicas=2):
    from placer.devices import local_devices
    from placer.models import build_model
    from placer.placement import Placement
    from placer.plan import Plan
    from placer.replicas import Replicas, first_group

    replica = Replicas.of_batch(64, replicas)
    graph = build_model("two-tower", "tiny", batch=replica.batch)
    placement = Placement.on_device(graph, first_group(local_devices(logical_cpus=2), replicas), 0)
    path = tmp_path / "plan.json"
    Plan.made_for("two-tower", "tiny", graph, placement, "inprocess:2", replicas=replica).save(path)
    return path


def test_one_fit_step_under_the_plan_s_strategy_updates_the_weights_as_one_device_does(tmp_path):
    done = subprocess.run([sys.executable, "-c", FIT, str(_plan(tmp_path))], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2 and result["batch"] == 64
    assert [d.split("device:")[-1] for d in result["devices"]] == ["CPU:0", "CPU:1"]
    assert result["moved"] > 1e-3  # the step changed the weights
    assert result["largest_difference"] < 1e-5  # and both ways changed them alike
    assert "model.fit(..., batch_size=64)" in result["describe"]


def test_a_plan_without_replicas_or_with_a_replica_over_several_devices_is_refused(tmp_path):
    from placer.keras import KerasPlacementError, mirrored_strategy
    from placer.models import build_model
    from placer.placement import Placement
    from placer.plan import Plan

    from placer.devices import local_devices

    graph = build_model("two-tower", "tiny")
    devices = local_devices(logical_cpus=2)
    Plan.made_for("two-tower", "tiny", graph, Placement.round_robin(graph, devices), "inprocess:2").save(
        tmp_path / "one.json")
    with pytest.raises(KerasPlacementError, match="no replicas: place it on the model with placer.keras.place"):
        mirrored_strategy(tmp_path / "one.json")
    from placer.replicas import Replicas, first_group

    replica = Replicas.of_batch(64, 2)
    sliced = build_model("two-tower", "tiny", batch=replica.batch)
    group = first_group(local_devices(logical_cpus=4), 2)  # two CPUs a replica: a hybrid
    Plan.made_for("two-tower", "tiny", sliced, Placement.round_robin(sliced, group), "inprocess:4",
                  replicas=replica).save(tmp_path / "hybrid.json")
    with pytest.raises(KerasPlacementError, match="replica runs on 2 devices; MirroredStrategy runs a replica on one "
                                                  "device: run this hybrid plan with `placer apply`"):
        mirrored_strategy(tmp_path / "hybrid.json")
