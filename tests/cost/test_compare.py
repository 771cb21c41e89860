"""Placements timed side by side: the leaders of a comparison are timed again before it decides."""

from placer.cost import StepTime, compare_and_retime_leaders


def _timed_by(seconds):
    """An evaluate whose placements (names) give their timings in turn, and the order it was called in."""
    queues = {name: iter(values) for name, values in seconds.items()}
    calls = []

    def evaluate(name):
        calls.append(name)
        value = next(queues[name])
        return StepTime(value, "measured", "fake") if value is not None else StepTime.failed("oom", "out of memory", "measured", "fake")

    return evaluate, calls


def test_placements_close_to_the_fastest_are_timed_again_and_judged_on_all_their_rounds():
    evaluate, calls = _timed_by({"a": [5.0, 5.2, 4.4, 4.4, 4.4, 4.4],  # first rounds' median 5.0, then lower
                                 "b": [4.8, 4.9, 4.7, 5.0, 5.0, 5.0],  # fastest of the first rounds
                                 "far": [9.0, 9.1, 8.9]})
    compared = compare_and_retime_leaders(evaluate, {"a": "a", "b": "b", "far": "far"}, rounds=3, within=0.10)
    assert calls == ["a", "b", "far"] * 3 + ["a", "b"] * 3  # side by side again, never the one far behind
    assert len(compared["a"].timings) == 6 and len(compared["far"].timings) == 3
    # over six rounds a is the faster: three rounds alone had ranked b first
    assert compared["a"].median < compared["b"].median and compared["far"].median == 9.0


def test_a_clear_winner_or_a_failure_is_not_timed_again():
    evaluate, calls = _timed_by({"fast": [1.0, 1.0], "slow": [2.0, 2.0], "broken": [None]})
    compared = compare_and_retime_leaders(evaluate, {"fast": "fast", "slow": "slow", "broken": "broken"}, rounds=2)
    assert calls == ["fast", "slow", "broken", "fast", "slow"]
    assert not compared["broken"].ok and compared["fast"].median == 1.0


def test_no_timing_is_started_that_its_last_one_says_would_end_past_the_deadline():
    import time

    from placer.cost import compare

    costs = {"quick": 0.02, "slow": 0.3}  # what one timing of each takes: a fake slow target

    def evaluate(name):
        time.sleep(costs[name])
        return StepTime(costs[name], "measured", "fake")

    started = time.monotonic()
    compared = compare(evaluate, {"quick": "quick", "slow": "slow"}, rounds=20, deadline=started + 0.5)
    elapsed = time.monotonic() - started
    assert elapsed <= 0.5 + 0.02, f"the comparison ended {elapsed - 0.5:.3f} s past its deadline"
    # a second slow timing would have ended at 0.62 s: the quick one goes on in the time left instead
    assert len(compared["slow"].timings) == 1 and len(compared["quick"].timings) >= 5
