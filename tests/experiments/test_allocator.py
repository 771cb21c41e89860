import pytest

from experiments.probes import allocator


@pytest.fixture
def no_processes(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("bad arguments must start no measuring process")

    monkeypatch.setattr(allocator, "Measurer", refuse)


def test_too_few_rounds_and_an_unknown_model_are_refused_before_any_process_starts(no_processes, capsys):
    for arguments, said in ((["--rounds", "1"], "at least 2 rounds"), (["--models", "two-tower", "gpt-5"], "gpt-5")):
        with pytest.raises(SystemExit) as stopped:
            allocator.main(arguments)
        assert stopped.value.code == 2
        assert said in capsys.readouterr().err


def test_a_row_reads_each_setting_over_rounds_and_the_median_of_the_rounds_ratios():
    reported = allocator.row("m", "p", {"default": [2.0, 4.0, 10.0], "fixed": [1.0, 4.0, 5.0]})
    assert reported["default_ms"] == 4.0 and reported["fixed_ms"] == 4.0
    assert reported["fixed_over_default"] == 0.5 and reported["ratio_range"] == [0.5, 1.0]
