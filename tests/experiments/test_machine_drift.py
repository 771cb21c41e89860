import statistics

import pytest

from experiments.probes.machine_drift import drift_rows, lag_drift, main, spread


def test_bad_arguments_are_refused_before_a_testbed_starts(no_testbed, capsys):
    for arguments in (["--interval", "0"], ["--minutes", "0.5", "--interval", "20"], ["--lags", "0"],
                      ["--minutes", "5", "--lags", "5"]):
        with pytest.raises(SystemExit) as stopped:
            main(arguments)
        assert stopped.value.code == 2, arguments
    assert "leave room in the run" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["--request-rounds", "-1"])
    assert stopped.value.code == 2 and "--request-rounds must be 0 (none) or more" in capsys.readouterr().err


def test_drift_at_a_lag_compares_only_samples_that_far_apart():
    # A step that is 10 % slower every other minute: a minute apart it moved 10 % up (4 pairs) or 9.1 % down (3),
    # two minutes apart not at all.
    samples = [(60.0 * i, 1.1 if i % 2 else 1.0) for i in range(8)]
    assert lag_drift(samples, 60, tolerance=5) == pytest.approx(10.0)
    assert lag_drift(samples, 120, tolerance=5) == pytest.approx(0.0)
    assert lag_drift(samples, 1000, tolerance=5) is None


def test_spread_is_the_tenth_and_ninetieth_percentiles_against_the_median():
    low, high = spread([1.0] * 8 + [0.5, 2.0])
    assert low == pytest.approx(-5.0)  # 10th percentile between 0.5 and 1.0: 0.95
    assert high == pytest.approx(10.0)  # 90th between 1.0 and 2.0: 1.1
    # A share of late hops mostly 0: no spread about a median of nothing.
    assert all(value != value for value in spread([0.0, 0.0, 0.25]))


def test_a_series_keeps_its_samples_count_and_each_lags_drift():
    rows = drift_rows({("m", "worker 0"): [(0.0, 1.0), (60.0, 1.2), (120.0, 1.0)]}, [1, 2], tolerance=10)
    assert rows[0]["samples"] == 3 and rows[0]["median"] == pytest.approx(1.0)
    assert rows[0]["drift_1min_pct"] == pytest.approx(statistics.median([20.0, 100 * (1 - 1 / 1.2)]))
    assert rows[0]["drift_2min_pct"] == pytest.approx(0.0)

