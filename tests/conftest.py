"""Shared fixtures: tiny graphs, built once per test session (building imports TensorFlow)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("WANDB_MODE", "disabled")

import pytest


@pytest.fixture(scope="session")
def mlp():
    from placer.models import build_model

    return build_model("mlp", "tiny")


@pytest.fixture(scope="session")
def two_tower():
    from placer.models import build_model

    return build_model("two-tower", "tiny")


@pytest.fixture(scope="session")
def string_op_graph():
    """A step with a string op, which has no GPU kernel: where a placement must move or refuse it."""
    import tensorflow as tf

    from placer.graph import graph_from_function

    def build():
        w = tf.compat.v1.get_variable("w", [4], use_resource=True)
        loss = tf.reduce_sum(tf.square(w), name="loss")
        as_text = tf.strings.as_string(loss, name="loss_as_text")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        return tf.group(train, as_text), loss

    return graph_from_function(build, name="with-string-op")


@pytest.fixture(scope="session")
def slow_graph():
    """A step of about a tenth of a second on one core (five 800x800 matmuls): long enough to kill its worker
    in the middle of measuring it."""
    import tensorflow as tf

    from placer.graph import graph_from_function

    def build():
        w = tf.compat.v1.get_variable("w", [800, 800], use_resource=True)
        x = w
        for _ in range(5):
            x = tf.matmul(x, w)
        loss = tf.reduce_mean(x)
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss), loss

    return graph_from_function(build, name="slow")


@pytest.fixture
def compiled_call_step():
    """A tf.function training step whose matmul TensorFlow compiles with XLA (`jit_compile=True`), as Keras's
    TensorFlow backend compiles grouped convolutions on CPU."""
    import tensorflow as tf

    weights = tf.Variable(tf.ones([8, 8]), name="w")

    @tf.function(jit_compile=True)
    def compiled(x):
        return tf.matmul(x, x)

    @tf.function
    def step():
        weights.assign_add(compiled(weights) * 0.01)

    return step


@pytest.fixture(scope="session")
def cpus2():
    from placer.devices import local_devices

    return local_devices(logical_cpus=2)


# Runs of `placer train` as a user makes them, shared by the notebook's and the pictures' tests.
RUN_UPDATES = 3


def _train(runs, *flags: str):
    import subprocess
    import sys

    train = subprocess.run([sys.executable, "-m", "agents.cli", "train", "two-tower", "--agent", "random",
                            "--updates", str(RUN_UPDATES), "--runs", str(runs), "--no-progress", *flags],
                           capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    (run,) = (runs / "two-tower").iterdir()
    return run


@pytest.fixture(scope="session")
def simulated_run(tmp_path_factory):
    """PROJECT/runs/two-tower/<timestamp>: a short simulated run on modeled GPUs (about 10 s: random search builds
    no policy)."""
    return _train(tmp_path_factory.mktemp("simulated") / "runs")


@pytest.fixture(scope="session")
def measured_run(tmp_path_factory):
    """A short measured run on the local testbed (about 30 s): two workers, would-be bests timed side by side, the
    baselines measured again at the end, and a traced real step."""
    from placer.testbed import isolation_available

    if not isolation_available() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("local:2 needs a private network namespace and two cores")
    return _train(tmp_path_factory.mktemp("measured") / "runs", "--target", "local:2", "--samples-per-update", "2",
                  "--repeats", "2", "--final-rounds", "1")
