"""The scale-out benchmark's projection for N machines (the benchmark itself takes minutes)."""

import pytest

from experiments.scale_out import projection


def test_a_perfect_two_worker_speed_up_projects_linearly_until_the_work_runs_out_of_pieces():
    assert projection(2.0, machines=4, cores=2, units=100) == pytest.approx(8.0)
    assert projection(2.0, machines=16, cores=2, units=6) == pytest.approx(6.0)  # 6 folds: at most 6 at once


def test_no_two_worker_speed_up_projects_none_and_a_partial_one_follows_amdahl():
    assert projection(1.0, machines=8, cores=16, units=1000) == pytest.approx(1.0)
    assert projection(0.5, machines=8, cores=16, units=1000) == pytest.approx(1.0)  # slower with 2: serial share 1
    # S2 = 1.6 means a serial share of 2 / 1.6 - 1 = 0.25: 4 cores give 1 / (0.25 + 0.75 / 4)
    assert projection(1.6, machines=2, cores=2, units=1000) == pytest.approx(1 / (0.25 + 0.75 / 4))
