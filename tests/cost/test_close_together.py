"""Closing a search's targets: at once, every one of them, a failure to close still said."""

import time

import pytest

from placer.cost.targets import close_together


class _SlowToClose:
    def __init__(self, seconds: float, fails: bool = False):
        self.seconds, self.fails, self.closed = seconds, fails, False

    def close(self) -> None:
        time.sleep(self.seconds)
        self.closed = True
        if self.fails:
            raise RuntimeError("worker would not stop")


def test_targets_are_closed_at_once_not_one_after_another():
    targets = [_SlowToClose(0.3) for _ in range(4)]
    started = time.monotonic()
    close_together(targets)
    assert all(t.closed for t in targets)
    assert time.monotonic() - started < 0.9, "four 0.3 s closes took as long as one after another"


def test_a_target_that_fails_to_close_leaves_the_others_closed_and_is_said():
    targets = [_SlowToClose(0.05, fails=True), _SlowToClose(0.05)]
    with pytest.raises(RuntimeError, match="would not stop"):
        close_together(targets)
    assert all(t.closed for t in targets)
