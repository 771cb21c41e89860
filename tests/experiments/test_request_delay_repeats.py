import pytest

from experiments.probes.request_delay_repeats import main, median_delay, senders_of


def test_too_few_rounds_or_repeats_are_refused_before_a_testbed_starts(no_testbed, capsys):
    for arguments in (["--rounds", "5", "1"], ["--repeats", "1"], ["--traced-steps", "2", "--skipped-steps", "2", "3"]):
        with pytest.raises(SystemExit) as stopped:
            main(arguments)
        assert stopped.value.code == 2
        assert "at least 2 rounds per repeat, at least 2 repeats and a reading" in capsys.readouterr().err


def test_the_median_average_is_the_median_busy_hop_less_the_median_idle_hop():
    assert median_delay({"idle": (1e-4, 3e-4, 9e-3), "busy": (1e-3, 4e-3, 5e-3)}) == pytest.approx(3.7e-3)
    assert median_delay({"idle": (5e-3,) * 3, "busy": (1e-3,) * 3}) == 0.0


def test_a_reading_names_its_senders_and_another_device_is_refused_before_a_testbed_starts(no_testbed, capsys):
    assert senders_of("0,1") == (0, 1) and senders_of("1") == (1,)
    for wrong in ("2", "0,0", "one"):
        with pytest.raises(SystemExit) as stopped:
            main(["--senders", wrong])
        assert stopped.value.code == 2
        assert "senders are 0, 1 or 0,1" in capsys.readouterr().err


def test_a_client_core_this_process_may_not_use_is_refused_before_a_testbed_starts(no_testbed, capsys):
    import os

    beyond = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(SystemExit) as stopped:
        main(["--client-cores", "0", str(beyond)])
    assert stopped.value.code == 2
    assert f"may not run on core(s) {beyond}" in capsys.readouterr().err
