"""Fixtures shared by the agents' tests."""

import pytest


@pytest.fixture
def nothing_may_run(monkeypatch):
    """Fails the test if a graph is built or a target opened."""
    import placer.cost
    import placer.models

    def refuse(*args, **kwargs):
        raise AssertionError("work started before the input was checked")

    monkeypatch.setattr(placer.models, "load_model", refuse)
    monkeypatch.setattr(placer.cost, "open_target", refuse)
