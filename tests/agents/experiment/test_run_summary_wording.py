"""agents.experiment.results: the run's table says how much faster or slower, not a signed percentage."""

from pathlib import Path

import pytest

from agents.experiment.results import describe, times_as_fast
from agents.run_files import RunSummary


@pytest.mark.parametrize("ratio, words", [(3.091, "3.1× slower than"), (0.8, "1.25× faster than"),
                                          (1.004, "as fast as"), (1.5, "1.50× slower than"),
                                          (float("nan"), "not comparable with")])
def test_a_ratio_reads_as_times_faster_or_slower(ratio, words):
    assert times_as_fast(ratio) == words


def test_the_table_says_the_learned_placement_is_3_1_times_slower_than_one_worker():
    best, learned = 0.010, 0.03091
    summary = RunSummary(
        model="two-tower", size="tiny", backend="measured", cluster="local:2", agent="hierarchical", updates=1,
        samples=4, wall_time=10.0, best_step_time=learned, best_update=1, step_time=learned, final_comparison=None,
        best_placement=None, baselines={"single-device": best, "expert": 0.02}, baselines_at_start={},
        best_baseline="single-device", best_baseline_step_time=best,
        improvement_over_best_baseline=(best - learned) / best, beaten_baselines=())
    table = describe(summary, Path("runs/two-tower/x"))
    assert "learned: 3.1× slower than the best baseline (single-device)" in table
    assert "%" not in table and "positive:" not in table
