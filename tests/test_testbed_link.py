"""Two testbed workers over a shaped link (`local:2,link=RATE`): the target's spelling, its refusals, and a transfer
that crosses the link at the link's rate, not loopback's."""

from __future__ import annotations

import os

import pytest

from agents.cli import main
from placer.errors import DeviceSpecError
from placer.measure import LocalTestbed, MeasureConfig, Measurer, parse_target
from placer.measure.targets import format_rate, parse_rate
from placer import testbed as testbed_module


@pytest.mark.parametrize("text, bits", [("1gbit", 10**9), ("100mbit", 10**8), ("2.5gbit", 2_500_000_000),
                                        ("1500kbit", 1_500_000), ("1000000", 10**6)])
def test_a_link_rate_reads_as_tc_writes_it(text, bits):
    assert parse_rate(text) == bits


def test_a_rate_is_written_in_its_shortest_unit_and_reads_back():
    for bits in (10**9, 10**8, 2_500_000_000, 1_500_000, 1_234_567):
        assert parse_rate(format_rate(bits)) == bits
    assert format_rate(10**9) == "1gbit" and format_rate(2_500_000_000) == "2500mbit"


@pytest.mark.parametrize("text, reason", [
    ("local:2,link=fast", "is not a link rate"),
    ("local:2,link=10kbit", "slower than the 1mbit"),
    ("local:2,link=1gbit,link=2gbit", "one link=RATE at most"),
])
def test_a_bad_link_is_refused_with_what_to_write(text, reason):
    with pytest.raises(DeviceSpecError, match=reason):
        parse_target(text)


def test_a_link_joins_two_workers_only(monkeypatch):
    monkeypatch.setattr(testbed_module, "shaped_link_unavailable", lambda: "")
    with pytest.raises(DeviceSpecError, match="joins 2 workers"):
        LocalTestbed(1, link_bits_per_second=10**9)
    with pytest.raises(DeviceSpecError, match="private network namespaces"):
        LocalTestbed(2, link_bits_per_second=10**9, allow_exposed_ports=True)


def test_a_linked_target_names_its_link_and_passes_it_to_the_workers(monkeypatch):
    monkeypatch.setattr(testbed_module, "shaped_link_unavailable", lambda: "")
    target = parse_target("local:2,intra=1,link=100mbit")
    assert target.link_bits_per_second == 10**8
    assert str(target) == "local:widths=1+1,intra=1+1,link=100mbit"
    assert parse_target(str(target)) == target
    assert target.worker_args()[-2:] == ["--testbed-link", str(10**8)]
    assert str(parse_target("local:2")) == "local:2", "a testbed without a link is spelled as before"


def test_where_no_shaped_link_can_be_made_the_command_exits_2_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(testbed_module, "shaped_link_unavailable", lambda: "tc not found (install iproute2 and util-linux)")
    status = main(["calibrate", "--target", "local:2,link=1gbit", "--out", str(tmp_path / "calibration.json")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "cannot be made here: tc not found" in err
    assert not (tmp_path / "calibration.json").exists()


@pytest.mark.testbed
@pytest.mark.skipif(bool(testbed_module.shaped_link_unavailable()), reason="no shaped link on this machine")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="local:2 needs two cores of its own")
def test_a_transfer_between_linked_workers_goes_at_the_links_rate():
    from placer.calibrate import Probe, probe_placements

    rate = 100_000_000
    megabytes = 4  # 0.32 s over 100 Mbit/s, about 3 ms over loopback
    with Measurer(LocalTestbed(2, link_bits_per_second=rate), MeasureConfig(warmup_steps=1, timed_steps=3)) as linked:
        info = linked.testbed_info
        assert info["link_bits_per_second"] == rate
        assert len({os.readlink(f"/proc/{pid}/ns/net") for pid in info["pids"]}) == 2, \
            "the two workers should sit in network namespaces of their own"
        graph, together, apart = probe_placements(Probe("free", megabytes * 250_000, 1), linked.devices)
        crossing = linked.measure(graph, apart)
        local = linked.measure(graph, together)
    assert crossing.ok and local.ok, (crossing.failure, local.failure)
    wire = megabytes * 1e6 * 8 / rate
    # The token bucket lets its burst (128 KiB) through at the pair's speed; the rest waits for the rate.
    assert crossing.median >= 0.9 * wire, f"{crossing.median * 1e3:.1f} ms for {megabytes} MB over {rate / 1e6:g} Mbit/s"
    assert local.median < 0.2 * wire


def test_a_plan_made_over_a_link_keeps_it_and_runs_only_over_the_same_link(monkeypatch, tmp_path, mlp):
    from placer.devices import cluster_devices
    from placer.errors import PlanFileError
    from placer.placement import Placement
    from placer.plan import Plan, read_plan_file

    monkeypatch.setattr(testbed_module, "shaped_link_unavailable", lambda: "")
    workers = cluster_devices({"worker": ["localhost:1", "localhost:2"]})
    plan = Plan.made_for("mlp", "tiny", mlp, Placement.round_robin(mlp, workers), "local:2,link=1gbit")
    back = read_plan_file(plan.save(tmp_path / "plan.json"))
    assert back.machine.link_bits_per_second == 10**9
    assert "over a link shaped to 1gbit" in back.describe()
    assert back.check_target("local:2,link=1gbit").link_bits_per_second == 10**9
    for other in ("local:2", "local:2,link=100mbit"):
        with pytest.raises(PlanFileError, match=f"not for {other}"):
            back.check_target(other)


@pytest.mark.parametrize("argv, said", [
    (["--workers", "3", "--link", "1gbit"], "joins 2 workers over one shaped link, not 3"),
    (["--link", "1gbit", "--allow-exposed-ports"], "needs the testbed's private network namespaces"),
    (["--link", "fast"], "is not a link rate"),
])
def test_cluster_up_refuses_a_link_it_cannot_make_in_one_line_before_starting_anything(monkeypatch, capsys, argv,
                                                                                         said):
    monkeypatch.setattr(testbed_module, "shaped_link_unavailable", lambda: "")
    monkeypatch.setattr(os, "execvpe", lambda *a: pytest.fail("the testbed was started"))
    status = main(["cluster", "up", *argv, "--", "true"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and said in err, err


def test_cluster_up_where_no_shaped_link_can_be_made_says_why(monkeypatch, capsys):
    monkeypatch.setattr(testbed_module, "shaped_link_unavailable", lambda: "tc not found (install iproute2 and util-linux)")
    monkeypatch.setattr(os, "execvpe", lambda *a: pytest.fail("the testbed was started"))
    assert main(["cluster", "up", "--link", "100mbit", "--", "true"]) == 2
    assert "--link 100mbit cannot be made here: tc not found" in capsys.readouterr().err


def test_cluster_up_passes_the_link_to_the_workers_it_starts(monkeypatch):
    started = {}
    monkeypatch.setattr(testbed_module, "shaped_link_unavailable", lambda: "")
    monkeypatch.setattr(os, "execvpe", lambda path, command, env: started.setdefault("command", command))
    main(["cluster", "up", "--link", "100mbit", "--", "true"])
    command = started["command"]
    assert command[command.index("--link-bits") + 1] == str(10**8)

    class Servers:
        cluster_spec = {"worker": ["10.0.0.1:2222", "10.0.0.2:2223"]}
        cores, warnings = [[0], [1]], []

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def start_servers(workers, **options):
        started.update(options, workers=workers)
        return Servers()

    monkeypatch.setattr(testbed_module, "start_servers", start_servers)
    monkeypatch.setattr(testbed_module, "bring_loopback_up", lambda: None)
    monkeypatch.setattr(testbed_module, "only_loopback", lambda: True)
    monkeypatch.delenv("PLACER_TESTBED_EXPOSED", raising=False)
    assert testbed_module.main(command[command.index("up"):]) == 0  # runs `true` beside the (fake) workers
    assert started["workers"] == 2 and started["link_bits_per_second"] == 10**8 and started["isolated"]


@pytest.mark.testbed
@pytest.mark.skipif(bool(testbed_module.shaped_link_unavailable()), reason="no shaped link on this machine")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="local:2 needs two cores of its own")
def test_cluster_up_over_a_link_gives_the_command_workers_at_the_links_two_addresses():
    import json
    import subprocess
    import sys

    show = "import json, os; print(json.dumps(json.loads(os.environ['PLACER_CLUSTER'])))"
    done = subprocess.run([sys.executable, "-m", "agents.cli", "cluster", "up", "--link", "100mbit", "--",
                           sys.executable, "-c", show], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    hosts = [address.rsplit(":", 1)[0] for address in json.loads(done.stdout.strip().splitlines()[-1])["worker"]]
    assert hosts == list(testbed_module.LINK_ADDRESSES)
    assert "over a link shaped to 100 Mbit/s" in done.stderr
