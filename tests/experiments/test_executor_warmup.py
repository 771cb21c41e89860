import pytest

from experiments.probes.executor_warmup import main


def test_a_negative_warm_up_or_no_round_is_refused_before_a_testbed_starts(no_testbed, capsys):
    for arguments in (["--warmups", "2", "-1"], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as stopped:
            main(arguments)
        assert stopped.value.code == 2
        assert "warm-ups of 0 steps or more" in capsys.readouterr().err
