"""A one-process plan's thread pools carried into your own TensorFlow 2 training (`placer.apply.use_plan_pools`)."""

import os
import subprocess
import sys

import pytest

from placer.devices import local_devices
from placer.errors import PlanFileError
from placer.placement import Placement
from placer.plan import Plan

CORES = len(os.sched_getaffinity(0))


def _plan_file(mlp, tmp_path, target: str):
    devices = local_devices(logical_cpus=1)
    plan = Plan.made_for("mlp", "tiny", mlp, Placement.on_device(mlp, devices, 0), target, made_by="test")
    return plan.save(tmp_path / "plan.json")


def _run(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh Python: TensorFlow fixes its pools when it starts, once per process."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


@pytest.mark.skipif(CORES < 2, reason="inter=2 needs two cores")
def test_a_one_process_plans_pools_are_what_tensorflow_runs_your_steps_with(mlp, tmp_path):
    path = _plan_file(mlp, tmp_path, "inprocess:1,intra=1,inter=2")
    run = _run(f"""
from placer.apply import use_plan_pools
print(use_plan_pools({str(path)!r}))
import tensorflow as tf
tf.linalg.matmul(tf.ones([4, 4]), tf.ones([4, 4]))  # the runtime starts with them
print(tf.config.threading.get_intra_op_parallelism_threads(), tf.config.threading.get_inter_op_parallelism_threads())
print(use_plan_pools({str(path)!r}))  # again, as set: nothing to refuse
""")
    assert run.returncode == 0, run.stderr[-2000:]
    said, threads, again = run.stdout.strip().splitlines()[-3:]
    assert said == again == "intra-op threads: 1, inter-op threads: 2"
    assert threads == "1 2"


@pytest.mark.skipif(CORES < 2, reason="inter=2 needs two cores")
def test_pools_asked_for_after_tensorflow_started_with_others_are_refused_with_what_to_do(mlp, tmp_path):
    path = _plan_file(mlp, tmp_path, "inprocess:1,intra=1,inter=2")
    run = _run(f"""
import tensorflow as tf
tf.linalg.matmul(tf.ones([4, 4]), tf.ones([4, 4]))  # started with TensorFlow's default pools
from placer.apply import use_plan_pools
use_plan_pools({str(path)!r})
""")
    assert run.returncode != 0
    assert "call use_plan_pools first thing, before any model or tensor is made" in run.stderr


def test_a_plan_that_does_not_run_in_one_process_is_refused(mlp):
    from placer.apply import use_plan_pools

    workers = Plan.made_for("mlp", "tiny", mlp, Placement.round_robin(mlp, _testbed_devices()),
                            "local:widths=1+1,intra=1,inter=1+2", made_by="test")
    with pytest.raises(PlanFileError, match="not in one process: run it with `placer apply PLAN.json`"):
        use_plan_pools(workers)


def test_tensorflows_default_pools_are_said_as_such(mlp, tmp_path):
    from placer.apply import use_plan_pools

    assert use_plan_pools(_plan_file(mlp, tmp_path, "inprocess:1")) == (
        "intra-op threads: TensorFlow's default, inter-op threads: TensorFlow's default")


def _testbed_devices():
    from placer.devices import cluster_devices

    return cluster_devices({"worker": ["localhost:2222", "localhost:2223"]})
