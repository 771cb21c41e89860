"""The probes behind the memory and step of Keras graphs without their initial values."""

import pytest

from experiments.probes.initial_values_step import main as initial_values_main
from experiments.probes.session_memory import main as session_memory_main, placements_to_measure


def test_the_memory_probe_measures_each_device_alone_then_round_robin_and_starts_over(mlp, cpus2):
    devices = cpus2
    names = [name for name, _ in placements_to_measure(mlp, devices, 4)]
    assert names == [f"single-device {devices.names[0]}", f"single-device {devices.names[1]}", "round-robin",
                     f"single-device {devices.names[0]}"]


@pytest.mark.parametrize("main, flag", [(session_memory_main, "--placements"), (initial_values_main, "--rounds")])
def test_bad_counts_are_refused_before_any_model_is_built(main, flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([flag, "0"])
    assert exit_info.value.code == 2 and flag in capsys.readouterr().err
