"""Ties named as ties: a paired test over interleaved rounds, on synthetic rounds with known answers."""

import pytest

from placer.cost import StepTime
from placer.cost.compare import Compared, separated, spread, tie_set

MS = 1e-3


def _timed(name, *ms):
    return Compared(name, tuple(StepTime(m * MS, "measured", "local:2") if m is not None
                                else StepTime.failed("oom", "out of memory", "measured", "local:2") for m in ms))


def test_a_clear_winner_is_separated_and_a_close_one_only_with_more_rounds():
    fast = _timed("fast", 5.0, 5.2, 5.1)
    assert tie_set({"fast": fast, "slow": _timed("slow", 6.0, 6.1, 6.2)}) == ["fast"]  # 18-20 % slower each round
    # 1-10 % slower, unevenly, in three rounds: within what three rounds can tell
    assert tie_set({"fast": _timed("fast", 5.0, 5.0, 5.0), "close": _timed("close", 5.5, 5.05, 5.3)}) == ["fast", "close"]
    # the same rounds twice over separate them
    assert tie_set({"fast": _timed("fast", *[5.0] * 6),
                    "close": _timed("close", 5.5, 5.05, 5.3, 5.5, 5.05, 5.3)}) == ["fast"]


def test_placements_that_trade_rounds_are_a_tie_whatever_their_medians():
    # medians 5.0 against 5.3 ms, but each won some rounds: the machine drifted between rounds
    a = _timed("a", 5.0, 6.0, 4.8, 6.1, 5.0, 5.9, 4.9)
    b = _timed("b", 5.3, 5.2, 5.4, 5.3, 5.1, 5.3, 5.5)
    assert tie_set({"a": a, "b": b}) == ["a", "b"]
    assert spread(a) == pytest.approx((6.1 - 4.8) / 5.0)


def test_a_machine_wide_slow_round_does_not_hide_a_steady_winner():
    # the third round ran 40 % slow for both: the ratio within each round is what counts
    assert separated(_timed("fast", 5.0, 5.0, 7.0, 5.0), _timed("slow", 5.5, 5.5, 7.7, 5.6))


def test_a_failed_placement_is_never_tied_and_untimed_rounds_are_not_paired():
    fast = _timed("fast", 5.0, 5.0, 5.0)
    failed = _timed("failed", 5.1, None)
    assert separated(fast, failed)
    assert tie_set({"fast": fast, "failed": failed}) == ["fast"]
    one_round = Compared("one round", fast.timings[:1])  # the budget ended after its first round
    # one pair allows no test: its ratio is taken at its word
    assert separated(one_round, _timed("other", 6.0, 6.0, 6.0))
    assert not separated(one_round, _timed("as fast", 5.0, 4.0, 4.0))
