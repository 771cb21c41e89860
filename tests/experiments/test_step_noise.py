import pytest

from experiments.probes.step_noise import block_spread, main, noise_rows


def test_bad_arguments_are_refused_before_a_testbed_starts(no_testbed, capsys):
    for arguments in (["--steps", "10"], ["--steps", "0", "10"], ["--calls", "4"]):
        with pytest.raises(SystemExit) as stopped:
            main(arguments)
        assert stopped.value.code == 2, arguments
    assert "at least two step counts" in capsys.readouterr().err


def test_blocks_of_one_session_spread_by_their_medians():
    samples = [1.0] * 10 + [1.2] * 10 + [1.1] * 10
    assert block_spread(samples, 10) == pytest.approx(100 * 0.2 / 1.1)
    assert block_spread(samples[:15], 10) is None  # one whole block only


def test_each_step_count_gets_a_row_and_the_largest_the_spread_within_its_sessions():
    medians = {10: [0.9, 1.0, 1.1, 1.0, 1.2], 100: [1.0, 1.01, 0.99, 1.0, 1.0]}
    sessions = [[1.0] * 50 + [1.1] * 50]
    rows = noise_rows("m", medians, sessions)
    assert [row["timed_steps"] for row in rows] == [10, 100]
    assert rows[0]["p10_p90_pct"] > rows[1]["p10_p90_pct"]
    assert rows[0]["blocks_within_session_pct"] is None
    assert rows[1]["blocks_within_session_pct"] == pytest.approx(100 * 0.1 / 1.05)  # blocks of 1.0 and 1.1
    assert rows[1]["median_ms"] == pytest.approx(1000.0)
