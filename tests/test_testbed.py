"""The local gRPC testbed: isolated from the network, pinned, and placement matters on it."""

import os
import socket

import pytest

from placer.measure import LocalTestbed, MeasureConfig, Measurer
from placer.models import build_model
from placer.models.two_tower import tower_of
from placer.placement import Placement
from placer.testbed import FIXED_ALLOCATOR_THRESHOLDS, isolation_available

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.skipif(not isolation_available(), reason="no private network namespace on this machine"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="local:2 needs two cores of its own"),
]


def _listening_ports(tcp_table: str) -> set[int]:
    ports = set()
    for path in (tcp_table, tcp_table + "6"):
        try:
            lines = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _host_addresses() -> list[str]:
    addresses = set()
    for family in (socket.AF_INET,):
        try:
            for info in socket.getaddrinfo(socket.gethostname(), None, family):
                addresses.add(info[4][0])
        except OSError:
            pass
    return sorted(a for a in addresses if not a.startswith("127."))


@pytest.fixture(scope="module")
def testbed():
    with Measurer(LocalTestbed(workers=2), MeasureConfig(warmup_steps=3, timed_steps=7)) as measurer:
        yield measurer


def test_workers_listen_only_inside_their_private_network_namespace(testbed):
    info = testbed.testbed_info
    assert info["isolated"]
    for pid, port in zip(info["pids"], info["ports"]):
        assert port in _listening_ports(f"/proc/{pid}/net/tcp"), "the worker should listen in its namespace"
        assert port not in _listening_ports("/proc/net/tcp"), f"port {port} is open in the host's namespace"
        for address in ["127.0.0.1", *_host_addresses()]:
            with pytest.raises(OSError):
                socket.create_connection((address, port), timeout=2).close()


def test_each_worker_is_pinned_to_its_own_core(testbed):
    info = testbed.testbed_info
    cores = [tuple(sorted(os.sched_getaffinity(pid))) for pid in info["pids"]]
    assert cores == [tuple(c) for c in info["cores"]]
    assert len(set(cores)) == 2


def test_one_tower_per_worker_is_at_least_1_4x_faster_than_one_worker(testbed):
    graph = build_model("two-tower", "small")
    devices = testbed.devices
    single = Placement.on_device(graph, devices, 0)
    split = Placement.from_groups(
        graph, devices, {g.name: devices[1 if tower_of(g.ops[0]) == "tower_b" else 0].name for g in graph.groups}
    )
    # Alternate the two so that drift of the machine hits both alike; compare medians of medians.
    single_times, split_times = [], []
    for _ in range(2):
        single_times.append(testbed.measure(graph, single).median)
        split_times.append(testbed.measure(graph, split).median)
    speedup = sorted(single_times)[0] / sorted(split_times)[0]
    assert speedup >= 1.4, f"single {single_times}, split {split_times}: speed-up {speedup:.2f}"


def test_expert_and_single_device_placements_of_a_tiny_benchmark_model_run_on_the_testbed(testbed):
    from placer.heuristics import make_heuristic

    graph = build_model("nmt-2", "tiny")
    placements = {name: make_heuristic(name, graph, testbed.devices, model="nmt-2") for name in ("expert", "single-device")}
    for name in ("expert", "single-device"):
        result = testbed.measure(graph, placements[name])
        assert result.ok, f"{name}: {result.failure}"
        # Only grappler's fusions may differ from what was asked; soft placement moved nothing.
        assert all(moved.ran_as for moved in result.moved_ops), [m for m in result.moved_ops if not m.ran_as][:3]
    assert len(set(placements["expert"].group_devices)) == 2


def test_a_started_testbed_is_idle_so_the_next_timing_has_the_cores_to_itself():
    """`Measurer.start()` returns once its worker has loaded what measuring runs: a testbed's worker that imported
    TensorFlow after saying it was ready took a core for 2.3 s, beside the next candidate's first timing."""
    import time

    from placer.host import descendants, processes

    def cpu_seconds(pid: int) -> float:
        table = processes()
        return sum(table[p].cpu_ticks for p in {pid} | descendants(table, pid) if p in table) / os.sysconf("SC_CLK_TCK")

    with Measurer("local:2") as measurer:
        before = cpu_seconds(measurer.worker_pid)
        time.sleep(1.5)
        used = cpu_seconds(measurer.worker_pid) - before
    assert used < 0.3, f"the testbed's processes used {used:.2f} CPU seconds in the 1.5 s after it started"


def test_no_process_survives_the_testbed():
    measurer = Measurer("local:2")
    measurer.start()
    pids = [measurer.worker_pid, *measurer.testbed_info["pids"]]
    measurer.close()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_no_process_survives_when_the_parent_is_killed(tmp_path):
    """Kill -9 the process that owns the testbed: its worker and the gRPC servers die with it."""
    import json
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import json, sys, time\n"
        "from placer.measure import Measurer\n"
        "m = Measurer('local:2'); m.start()\n"
        "print(json.dumps([m.worker_pid, *m.testbed_info['pids']]), flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids = json.loads(owner.stdout.readline())
    assert all(os.path.exists(f"/proc/{pid}") for pid in pids)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 15
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"]
        time.sleep(0.2)
    assert not alive, f"processes outlived their parent: {alive}"


@pytest.mark.slow  # about 15 s; the testbed's own start and isolation are tested in the default run
def test_cluster_up_runs_a_command_against_the_testbed_by_its_cluster_spec():
    import json
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "placer.cli", "cluster", "up", "--workers", "2", "--",
         sys.executable, "-m", "placer.cli", "measure", "mlp", "--target", "env", "--placement", "round-robin",
         "--repeats", "2", "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["target"] == "grpc://localhost:2222" and report["result"]["ok"]


def test_a_measured_command_line_run_prints_no_tensorflow_log_line():
    import re
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "placer.cli", "measure", "two-tower", "--target", "local:2",
                          "--repeats", "1", "--warmup", "1"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    output = run.stdout + run.stderr
    assert "step time median" in run.stdout
    tf_lines = [line for line in output.splitlines()
                if re.match(r"[IWEF]\d{4} ", line) or re.search(r"oneDNN|cuInit|cuda|absl", line, re.IGNORECASE)]
    assert not tf_lines, tf_lines


def test_a_measurement_reports_the_cpu_time_each_worker_spent_per_step(testbed):
    from placer.calibrate import Probe, probe_placements

    graph, on_worker_0, sent_to_worker_1 = probe_placements(Probe("free", 1_000_000, 4), testbed.devices)
    alone, sent = (testbed.measure(graph, p) for p in (on_worker_0, sent_to_worker_1))
    assert len(alone.worker_cpu) == len(sent.worker_cpu) == 2
    assert alone.worker_cpu[1] < 0.2e-3 < alone.worker_cpu[0]  # worker 1 idles while worker 0 does the step
    assert sent.worker_cpu[1] > 1e-3  # receiving 16 MB costs worker 1's core milliseconds
    assert sent.worker_cpu[0] > alone.worker_cpu[0]  # and sending them costs worker 0's


def test_calibrated_simulator_predicts_the_two_tower_speed_up_measured_on_the_testbed(testbed):
    from placer.calibrate import calibrate, default_probes
    from placer.profile import profile_costs
    from placer.simulate import Simulator, SimulatorConfig

    # the fewest probes a fit takes, and 3 rounds, the fewest whose median shrugs off one disturbed round: the
    # fit's physics, not its precision (with 2 rounds and a 40 ms busy chain, the per-byte receive cost came out
    # 0 in 2 of 3 runs on 2026-11-25)
    probes = default_probes(sizes=(1_000, 1_000_000), counts=(4, 16), hops=(2, 8))
    calibration = calibrate(testbed, probes=[p for p in probes if p.family != "both-ways"], rounds=3)
    assert calibration.core_fit == "cpu-time"
    assert calibration.latency >= 0 and calibration.step_overhead > 0
    # moving a megabyte costs both cores more than a kilobyte does
    assert calibration.recv_seconds(4e6) > calibration.recv_seconds(4e3) > 0
    assert calibration.send_seconds(4e6) > calibration.send_seconds(4e3)

    graph = build_model("two-tower", "small")
    devices, config = calibration.apply(testbed.devices, SimulatorConfig(cpu_slots=1))
    simulator = Simulator(graph, devices, profile_costs(graph, testbed, steps=3), config)
    single = Placement.on_device(graph, testbed.devices, 0)
    split = Placement.from_groups(
        graph, testbed.devices, {g.name: testbed.devices[1 if tower_of(g.ops[0]) == "tower_b" else 0].name for g in graph.groups}
    )
    predicted = {name: simulator.simulate(p).step_time for name, p in (("single", single), ("split", split))}
    measured = {name: testbed.measure(graph, p).median for name, p in (("single", single), ("split", split))}
    assert predicted["single"] / predicted["split"] >= 1.4, predicted
    for name in predicted:
        assert abs(predicted[name] - measured[name]) / measured[name] < 0.35, (predicted, measured)


def test_the_measuring_client_runs_on_the_first_workers_core(testbed):
    """The session's client shares the core of the worker that runs the master (`placer.measure.worker.pin_to_cores`)."""
    info = testbed.testbed_info
    assert info["client_cores"] == list(info["cores"][0])
    checked = 0
    for thread in os.listdir(f"/proc/{testbed.worker_pid}/task"):
        try:
            cores = os.sched_getaffinity(int(thread))
        except ProcessLookupError:  # TensorFlow's pools end threads while this loop reads them
            continue
        assert sorted(cores) == list(info["cores"][0])
        checked += 1
    assert checked > 0


def test_the_workers_run_with_the_allocators_thresholds_fixed_and_the_measuring_process_as_the_user_runs(testbed):
    """A step's large transfers should not fault in fresh pages by allocation history (`FIXED_ALLOCATOR_THRESHOLDS`),
    while one process is measured in the environment the user's own process has."""
    def environment(pid: int) -> dict[str, str]:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return dict(item.decode().split("=", 1) for item in environ.read().split(b"\0") if b"=" in item)

    for pid in testbed.testbed_info["pids"]:
        for name, value in FIXED_ALLOCATOR_THRESHOLDS.items():
            assert environment(pid).get(name) == value, f"worker {pid}: {name}={environment(pid).get(name)}"
    measuring = environment(testbed.worker_pid)
    assert all(measuring.get(name) == os.environ.get(name) for name in FIXED_ALLOCATOR_THRESHOLDS)


@pytest.mark.slow  # a testbed of its own, about 10 s; the default run checks the fixed thresholds on the shared one
def test_a_testbed_can_leave_glibcs_moving_thresholds():
    with Measurer(LocalTestbed(workers=2, allocator_thresholds=())) as measurer:
        for pid in measurer.testbed_info["pids"]:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                assert b"MALLOC_MMAP_THRESHOLD_" not in environ.read()


def test_a_server_killed_by_sigkill_is_said_to_be_what_the_kernel_does_out_of_memory(monkeypatch):
    import signal

    import placer.host
    from placer.testbed import killed_note

    monkeypatch.setattr(placer.host, "memory_available", lambda: 3 * 2**30)
    assert killed_note(-signal.SIGKILL) == (" (killed: the kernel kills this way when the machine runs out of memory, "
                                            "3.0 GiB of memory available now)")
    assert killed_note(1) == "" and killed_note(-signal.SIGSEGV) == ""
