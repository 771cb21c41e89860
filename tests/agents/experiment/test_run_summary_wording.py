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


def _judged(final_tied):
    learned, expert = 0.01139, 0.00959
    return RunSummary(
        model="two-tower", size="small", backend="measured", cluster="local:2", agent="hierarchical", updates=10,
        samples=40, wall_time=60.0, best_step_time=0.0085, best_update=3, step_time=learned,
        final_comparison={"learned": learned, "metis": learned, "expert": expert}, best_placement=None,
        baselines={"metis": learned, "expert": expert}, baselines_at_start={}, best_baseline="metis",
        best_baseline_step_time=learned, improvement_over_best_baseline=0.0, beaten_baselines=(),
        fastest="expert", fastest_step_time=expert, final_tied=final_tied, final_rounds=5)


def test_a_heuristic_faster_than_the_learned_placement_beyond_the_noise_is_said_so():
    """The README's first run: learned (METIS's placement) 11.39 ms, the expert 9.59 ms, separated over the
    final comparison's rounds."""
    table = describe(_judged(("expert",)), Path("runs/two-tower/x"))
    assert ("the fastest placement measured is expert's (9.590 ms), faster than the learned one beyond the noise "
            "(a paired test over 5 rounds)") in table
    assert "learned: as fast as the best baseline (metis)\n" in table + "\n"  # they share one placement


def test_a_faster_heuristic_within_the_noise_of_the_learned_placement_is_named_as_a_tie():
    table = describe(_judged(("expert", "learned", "metis")), Path("runs/two-tower/x"))
    assert "the fastest placement measured is expert's (9.590 ms), within the noise of the learned one" in table
    assert ("learned: as fast as the best baseline (metis); both within the noise of the fastest (a paired test "
            "over 5 rounds)") in table
    assert RunSummary.from_dict(_judged(("expert", "learned")).to_dict()).final_tied == ("expert", "learned")
