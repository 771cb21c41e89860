import pytest

from experiments.probes.request_delay_repeats import main, median_delay


def test_too_few_rounds_or_repeats_are_refused_before_a_testbed_starts(no_testbed, capsys):
    for arguments in (["--rounds", "5", "1"], ["--repeats", "1"], ["--traced-steps", "2", "--skipped-steps", "2", "3"]):
        with pytest.raises(SystemExit) as stopped:
            main(arguments)
        assert stopped.value.code == 2
        assert "at least 2 rounds per repeat, at least 2 repeats and a reading" in capsys.readouterr().err


def test_the_median_average_is_the_median_busy_hop_less_the_median_idle_hop():
    assert median_delay({"idle": (1e-4, 3e-4, 9e-3), "busy": (1e-3, 4e-3, 5e-3)}) == pytest.approx(3.7e-3)
    assert median_delay({"idle": (5e-3,) * 3, "busy": (1e-3,) * 3}) == 0.0
