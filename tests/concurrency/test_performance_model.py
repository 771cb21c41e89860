"""The performance model of op time against intra-op threads, on profiles whose answer is known."""

import math

import pytest
import tensorflow as tf

from placer.concurrency.performance_model import (
    ANY_TYPE, ThreadProfile, accuracy, fit_performance_model, op_features,
)
from placer.errors import ProfileError
from placer.graph import graph_from_function


def matmuls(sizes, name):
    def build():
        total = []
        for size in sizes:
            x = tf.random.uniform([size, size], seed=size)
            total.append(tf.reduce_sum(tf.matmul(x, x, name=f"matmul{size}")))
        accumulator = tf.compat.v1.get_variable("accumulator", [], use_resource=True)
        return tf.group(accumulator.assign_add(tf.add_n(total)), name="train_op")

    return graph_from_function(build, name=name)


@pytest.fixture(scope="module")
def seen():
    return matmuls([64, 96, 128, 192, 256, 384], "seen")


@pytest.fixture(scope="module")
def unseen():
    return matmuls([80, 160, 320], "unseen")


def amdahl_profile(graph, parallel_fraction=0.8, seconds_per_flop=1e-10):
    """MatMuls take FLOPs x 0.1 ns on one thread and speed up by Amdahl's law; other ops a flat 50 us."""
    def seconds(op, threads):
        if op.type != "MatMul":
            return 50e-6
        single = op.flops * seconds_per_flop
        return single * (1 - parallel_fraction + parallel_fraction / threads)

    return ThreadProfile(graph.name, graph.fingerprint,
                         {p: {op.name: seconds(op, p) for op in graph.step_ops} for p in (1, 2)}, 1.0)


def test_the_model_recovers_amdahls_law_for_matmuls_it_never_profiled(seen, unseen):
    # Noise-free profiles leave no log-space bias to correct (a correction would only scale the model of all
    # ops up by its misfit across types, which the ops of unseen types use here).
    model = fit_performance_model([(seen, amdahl_profile(seen))], bias_correction="none")
    assert "MatMul" in model.types and ANY_TYPE in model.types
    for op in unseen.step_ops:
        if op.type == "MatMul":
            single = op.flops * 1e-10
            assert model.predict(unseen, op, 1) == pytest.approx(single, rel=0.05)
            assert model.predict(unseen, op, 2) == pytest.approx(single * 0.6, rel=0.05)
    report = accuracy(model, unseen, amdahl_profile(unseen))
    assert report["mape_pct"][1] < 10 and report["mape_pct"][2] < 10


def test_an_op_type_the_fit_never_saw_gets_the_model_of_all_ops(seen):
    model = fit_performance_model([(seen, amdahl_profile(seen))], min_ops=100)
    assert set(model.types) == {ANY_TYPE}
    matmul = next(op for op in seen.step_ops if op.type == "MatMul")
    assert model.predict(seen, matmul, 2) > 0


def test_features_count_what_an_op_reads_and_writes(seen):
    matmul = seen.op("matmul64")
    flops, moved = op_features(seen, matmul)
    assert flops == 2 * 64 ** 3
    assert moved == 3 * 64 * 64 * 4  # reads x twice, writes one 64x64 float32


def test_a_profile_of_another_graph_is_refused(seen, unseen):
    with pytest.raises(ProfileError, match="another graph"):
        fit_performance_model([(seen, amdahl_profile(unseen))])


@pytest.mark.slow  # about 20 s of profiling; the model's decisions on given costs are tested in the default run
def test_the_model_runs_two_serial_matmuls_at_once_and_gives_parallel_ones_both_threads(seen):
    from placer.concurrency.choose import choose_setting
    from placer.concurrency.settings import ThreadSetting

    # Independent matmuls that barely speed up with threads: two at once, whatever the intra-op pool.
    serial = fit_performance_model([(seen, amdahl_profile(seen, parallel_fraction=0.05))])
    choice = choose_setting(seen, serial, cores=2)
    assert choice.setting.explicit(2).inter_op_threads == 2
    two_at_once = max(choice.predicted[ThreadSetting(1, 2)], choice.predicted[ThreadSetting(2, 2)])
    assert two_at_once < 0.8 * min(choice.predicted[ThreadSetting(1, 1)], choice.predicted[ThreadSetting(2, 1)])
    # Perfectly parallel matmuls: two threads each, the pool shared when two run at once.
    parallel = fit_performance_model([(seen, amdahl_profile(seen, parallel_fraction=1.0))])
    choice = choose_setting(seen, parallel, cores=2)
    assert choice.setting.explicit(2).intra_op_threads == 2
    assert choice.predicted[ThreadSetting(2, 1)] < 0.8 * choice.predicted[ThreadSetting(1, 1)]


def noisy_profile(graph, spread=0.5):
    """`amdahl_profile` with each op's times multiplied by exp(+spread) or exp(-spread) in turn: the log-space
    noise is symmetric, so the geometric mean is right and the arithmetic mean is cosh(spread) above it."""
    clean = amdahl_profile(graph)
    sign = {op.name: (-1) ** i for i, op in enumerate(graph.step_ops)}
    return ThreadProfile(graph.name, graph.fingerprint, {
        p: {name: seconds * math.exp(sign[name] * spread) for name, seconds in times.items()}
        for p, times in clean.op_seconds.items()}, 1.0)


@pytest.fixture(scope="module")
def pairs():
    """Two matmuls of each size, so that noise of opposite signs on the two cannot be fitted away."""
    return matmuls([64, 64, 128, 128, 256, 256, 384, 384], "pairs")


@pytest.mark.parametrize("correction", ["smearing", "ratio"])
def test_a_bias_correction_brings_the_total_of_a_log_space_fit_back_up_to_the_measured_one(pairs, correction):
    profile = noisy_profile(pairs)
    uncorrected = accuracy(fit_performance_model([(pairs, profile)], bias_correction="none"), pairs, profile)
    corrected = accuracy(fit_performance_model([(pairs, profile)], bias_correction=correction), pairs, profile)
    # cosh(0.5) = 1.13: the geometric mean is 11 % below the arithmetic one.
    assert uncorrected["total_error_pct"][1] < -7
    assert abs(corrected["total_error_pct"][1]) < 5 and abs(corrected["total_error_pct"][2]) < 5


def test_without_noise_the_bias_correction_changes_nothing(seen):
    profile = amdahl_profile(seen)
    plain = fit_performance_model([(seen, profile)], bias_correction="none")
    smeared = fit_performance_model([(seen, profile)], bias_correction="smearing")
    assert smeared.types["MatMul"].scale == pytest.approx(1.0, abs=0.02)
    op = seen.op("matmul128")
    assert smeared.predict(seen, op, 2) == pytest.approx(plain.predict(seen, op, 2), rel=0.02)


def test_an_unknown_bias_correction_is_refused(seen):
    with pytest.raises(ValueError, match="smearing"):
        fit_performance_model([(seen, amdahl_profile(seen))], bias_correction="median")


def test_a_thread_profile_saves_and_loads_on_the_machine_it_was_made_on(seen, tmp_path):
    from placer.host import this_machine

    profile = ThreadProfile(seen.name, seen.fingerprint, amdahl_profile(seen).op_seconds, 1.0, this_machine())
    profile.save(tmp_path / "profile.json")
    assert ThreadProfile.load(tmp_path / "profile.json") == profile


def test_a_thread_profile_made_on_another_machine_is_refused_naming_both(seen, tmp_path):
    stranger = ThreadProfile(seen.name, seen.fingerprint, amdahl_profile(seen).op_seconds, 1.0,
                             {"processor": "some-other-cpu", "cores": 64})
    stranger.save(tmp_path / "profile.json")
    with pytest.raises(ProfileError, match=r"another machine \(some-other-cpu, 64 cores\).*profile again"):
        ThreadProfile.load(tmp_path / "profile.json")


def test_a_file_that_is_not_a_thread_profile_is_refused(tmp_path):
    (tmp_path / "profile.json").write_text('{"graph": "x"}')
    with pytest.raises(ProfileError, match="is not a thread profile"):
        ThreadProfile.load(tmp_path / "profile.json")


def test_the_model_refuses_a_width_it_was_not_profiled_at(seen):
    model = fit_performance_model([(seen, amdahl_profile(seen))])
    assert model.max_threads == 2
    op = seen.op("matmul128")
    assert model.predict(seen, op, 2) > 0
    with pytest.raises(ProfileError, match="up to 2 intra-op threads.*width of 4"):
        model.predict(seen, op, 4)


def test_profiles_of_two_machines_are_not_fitted_together(seen, unseen):
    here = ThreadProfile(seen.name, seen.fingerprint, amdahl_profile(seen).op_seconds, 1.0, {"processor": "a", "cores": 2})
    there = ThreadProfile(unseen.name, unseen.fingerprint, amdahl_profile(unseen).op_seconds, 1.0,
                          {"processor": "b", "cores": 8})
    with pytest.raises(ProfileError, match="different machines"):
        fit_performance_model([(seen, here), (unseen, there)])
