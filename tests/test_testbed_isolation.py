"""Where no private network namespace can be made, the testbed refuses to start unless the user opts in."""

import pytest

from placer import testbed
from placer.errors import NetworkIsolationUnavailable


def test_without_a_namespace_the_testbed_refuses_and_says_why(monkeypatch):
    monkeypatch.setattr(testbed, "isolation_available", lambda: False)
    with pytest.raises(NetworkIsolationUnavailable, match="every network interface with no authentication.*allow_exposed_ports"):
        testbed.isolated_command(["python", "-m", "placer.measure.worker"])


def test_opting_in_to_exposed_ports_warns(monkeypatch):
    monkeypatch.setattr(testbed, "isolation_available", lambda: False)
    with pytest.warns(RuntimeWarning, match="WITHOUT network isolation"):
        command, isolated = testbed.isolated_command(["true"], allow_exposed_ports=True)
    assert command == ["true"] and not isolated


def test_with_a_namespace_the_command_runs_under_unshare(monkeypatch):
    monkeypatch.setattr(testbed, "isolation_available", lambda: True)
    command, isolated = testbed.isolated_command(["true"])
    assert command == ["unshare", "-rn", "true"] and isolated
