"""What the experiment scripts' tests share."""

import pytest


@pytest.fixture
def no_testbed(monkeypatch):
    """Any measurement started fails the test: bad arguments and dry runs start no testbed."""
    import placer.measure

    def refuse(*args, **kwargs):
        raise AssertionError("this run must start no measurement")

    monkeypatch.setattr(placer.measure, "Measurer", refuse)
