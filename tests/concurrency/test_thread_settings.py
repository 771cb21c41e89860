"""Session thread settings: named in the target spec, checked against the cores, honoured by the real runtime."""

import os

import pytest
import tensorflow as tf

from placer.concurrency import ThreadSetting, recommended_setting, tune, tuning_candidates
from placer.cost import parse_target_spec
from placer.errors import DeviceSpecError
from placer.graph import graph_from_function
from placer.measure import InProcess, MeasureConfig
from placer.measure.runner import session_config_for

CORES = len(os.sched_getaffinity(0))
QUICK = MeasureConfig(warmup_steps=1, timed_steps=2, step_timeout=30)


def test_an_inprocess_target_names_its_thread_pools_and_reads_back_the_same():
    spec = parse_target_spec("inprocess:1,intra=1,inter=1")
    assert spec.measured == InProcess(1, intra_op_threads=1, inter_op_threads=1)
    assert str(spec) == "inprocess:1,intra=1,inter=1"
    assert parse_target_spec(str(InProcess(2, inter_op_threads=1))).measured == InProcess(2, None, 1)


@pytest.mark.parametrize("text, complaint", [
    (f"inprocess:1,intra={CORES + 1}", f"1 to {CORES} threads"),
    ("inprocess:1,inter=0", f"1 to {CORES} threads"),
    ("inprocess:1,threads=2", "intra=I and inter=J"),
    ("inprocess:1,intra=1,intra=1", "each at most once"),
])
def test_impossible_thread_settings_are_refused_before_anything_starts(text, complaint):
    with pytest.raises(DeviceSpecError, match=complaint):
        parse_target_spec(text)


def test_the_session_gets_the_thread_pools_asked_for():
    config = session_config_for(QUICK, None, (1, 2))
    assert (config.intra_op_parallelism_threads, config.inter_op_parallelism_threads) == (1, 2)
    default = session_config_for(QUICK)
    assert (default.intra_op_parallelism_threads, default.inter_op_parallelism_threads) == (0, 0)  # TF decides


def test_tuning_times_the_default_the_recommended_setting_and_the_whole_sweep_once_each():
    candidates = tuning_candidates(2)
    settings = list(candidates.values())
    assert len(settings) == len(set(settings))
    assert ThreadSetting() in settings and recommended_setting() in settings
    assert {(s.intra_op_threads, s.inter_op_threads) for s in settings} >= {(1, 1), (1, 2), (2, 1), (2, 2)}
    assert any("recommended" in name and "intra" in name for name in candidates)  # the sweep's twin is named so


@pytest.fixture(scope="module")
def two_chains():
    """Two independent chains of matmuls, written to a variable."""
    def build():
        total = []
        for chain in range(2):
            x = tf.random.uniform([384, 384], seed=chain)
            for link in range(4):
                x = tf.matmul(x, x, name=f"chain{chain}/matmul{link}") * 0.001
            total.append(tf.reduce_sum(x))
        # Written to a variable: grappler prunes work whose result nothing observes.
        accumulator = tf.compat.v1.get_variable("accumulator", [], use_resource=True)
        return tf.group(accumulator.assign_add(tf.add_n(total)), name="train_op")

    return graph_from_function(build, name="two-chains")


def test_tune_times_each_setting_side_by_side_and_names_the_fastest(two_chains):
    settings = {"one thread": ThreadSetting(1, 1), "default": ThreadSetting()}
    result = tune(two_chains, settings, rounds=2, measure_config=QUICK)
    assert set(result.medians) == set(settings) and not result.failures
    assert all(len(rounds) == 2 and all(r and r > 0 for r in rounds) for rounds in result.rounds.values())
    assert result.best in settings and result.medians[result.best] == min(result.medians.values())
    assert "best" in result.describe()
