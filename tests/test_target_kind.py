"""The kind of a target (placer/cost/kind.py): step times are compared only between targets of one kind."""

from dataclasses import replace

import pytest

from placer.cost.kind import TargetKind, TargetKindError, check_same_kind, target_kind

CPUS = (("/job:worker/replica:0/task:0/device:CPU:0", "CPU", None, 1, 1, 2),
        ("/job:worker/replica:0/task:1/device:CPU:0", "CPU", None, 1, 1, 2))
HERE = TargetKind("measured", CPUS, processor="Intel(R) Xeon(R) Gold 6338", cores=2, tensorflow="2.21.0")


def test_the_same_description_has_the_same_fingerprint_and_no_differences():
    again = TargetKind.from_dict(HERE.to_dict())
    assert again == HERE and again.fingerprint == HERE.fingerprint
    assert HERE.differences(again) == []
    check_same_kind(("this process", HERE), {"worker 0": again, "worker 1": again})


def test_a_different_processor_or_device_width_is_another_kind_and_the_error_names_each_difference():
    other_cpu = replace(HERE, processor="AMD EPYC 7763")
    wider = replace(HERE, devices=(CPUS[0], (*CPUS[1][:3], 2, 2, 3)))
    assert len({HERE.fingerprint, other_cpu.fingerprint, wider.fingerprint}) == 3
    with pytest.raises(TargetKindError) as error:
        check_same_kind(("this process", HERE), {"worker 0": HERE, "worker 1 (host b)": other_cpu,
                                                 "worker 2 (host c)": wider})
    message = str(error.value)
    assert "worker 0" not in message
    assert message.startswith('targets of another kind than this process ("here"): ')
    assert "worker 1 (host b) (\"there\"): processor 'Intel(R) Xeon(R) Gold 6338' here, 'AMD EPYC 7763' there" \
        in message
    assert "worker 2 (host c) (\"there\"): device /job:worker/replica:0/task:1/device:CPU:0: cores 1 here, 2 there" \
        in message
    assert "intra-op threads 1 here, 2 there" in message


def test_another_tensorflow_gpu_or_device_count_is_another_kind():
    for other, phrase in ((replace(HERE, tensorflow="2.20.0"), "tensorflow '2.21.0' here, '2.20.0' there"),
                          (replace(HERE, gpus=("NVIDIA H100 80GB HBM3",)), "gpus () here"),
                          (replace(HERE, devices=CPUS[:1]), "2 devices here, 1 there")):
        assert other.fingerprint != HERE.fingerprint
        assert any(phrase in difference for difference in HERE.differences(other))


def test_a_measured_target_describes_the_machine_it_runs_on_and_a_simulated_one_only_its_devices():
    import os

    import tensorflow as tf

    from placer.cost import open_target
    from placer.models import load_model

    graph = load_model("two-tower", "tiny")
    with open_target(graph, "inprocess:2") as first, open_target(graph, "inprocess:2") as second:
        measured = target_kind(first)
        assert target_kind(second).fingerprint == measured.fingerprint  # a kind, not an instance
    assert measured.backend == "measured" and measured.tensorflow == tf.__version__
    assert measured.cores == len(os.sched_getaffinity(0)) and measured.processor
    assert [device[1] for device in measured.devices] == ["CPU", "CPU"]
    with open_target(graph, "modeled:2xV100") as modeled:
        simulated = target_kind(modeled)
    assert simulated.processor == "" and simulated.tensorflow == "" and simulated.cores == 0
    assert [device[2] for device in simulated.devices if device[1] == "GPU"] == ["V100", "V100"]
