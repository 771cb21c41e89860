"""Parallel engines (agents/workers.py): the same results as the serial run, work of a
dead worker sent again, and a private Ray that nothing outside loopback can reach."""

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

PAIRS = dict(models=("two-tower",), sizes=("tiny",), machines=("modeled:2xV100", "modeled:4xV100"), generated=1)
SMALL_POLICY = ["--set", "hidden_size=16", "--set", "message_rounds=2"]
REPO = Path(__file__).resolve().parents[2]


def _config(updates: int = 6, imitation_updates: int = 0):
    from agents.graph_policy.agent import GraphAgentConfig
    from agents.graph_policy.pretrain import PretrainConfig

    return PretrainConfig(**PAIRS, updates=updates, imitation_updates=imitation_updates, samples_per_update=3,
                          agent=GraphAgentConfig(hidden_size=16, message_rounds=2), progress=False)


@pytest.fixture(scope="module")
def serial_policy(tmp_path_factory):
    """The policy and best step times of the serial pre-training every engine must reproduce."""
    from agents.graph_policy import load_policy
    from agents.graph_policy.pretrain import pretrain

    result = pretrain(_config(imitation_updates=3), tmp_path_factory.mktemp("serial") / "policy.npz")
    return load_policy(result.path)[0].weights(), result.best_step_times


def _same_policy(path, serial_policy) -> None:
    from agents.graph_policy import load_policy

    weights = load_policy(path)[0].weights()
    assert len(weights) == len(serial_policy[0])
    for mine, serial in zip(weights, serial_policy[0]):
        np.testing.assert_array_equal(mine, serial)


def _die_once(marker: str, value: int) -> int:
    """A task whose first run kills its worker (SIGKILL, as the kernel's OOM killer would)."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return 2 * value


def _double(value: int) -> int:
    return 2 * value


def test_pretraining_on_two_worker_processes_gives_the_serial_policy(tmp_path, serial_policy):
    from agents.graph_policy.pretrain import pretrain
    from agents.workers import ProcessWorkers

    with ProcessWorkers(2) as workers:
        result = pretrain(_config(imitation_updates=3), tmp_path / "policy.npz", workers)
    _same_policy(result.path, serial_policy)
    assert result.best_step_times == serial_policy[1]


def test_a_worker_that_dies_mid_task_has_it_sent_again_to_a_new_one_and_the_log_says_so(tmp_path, caplog):
    from agents.workers import ProcessWorkers, Task

    with ProcessWorkers(2) as workers, caplog.at_level(logging.WARNING, logger="placer.workers"):
        first = workers.pids()
        results = workers.run([Task(_die_once, (str(tmp_path / "died"), value), worker=1) for value in range(4)]
                              + [Task(_double, (10,), worker=0)])
        assert results == [0, 2, 4, 6, 20]  # in the order given, none lost
        assert workers.pids()[0] == first[0] and workers.pids()[1] != first[1]
    assert "worker 1 (pid %d) died (exit code -9) while running task 0 (_die_once); sending it again" % first[1] \
        in caplog.text


def test_a_task_that_kills_every_worker_it_meets_is_given_up_with_a_clear_error():
    from agents.workers import ProcessWorkers, Task, WorkerError

    with ProcessWorkers(1) as workers:
        with pytest.raises(WorkerError, match=r"task 0 \(_die_always\) killed 3 workers"):
            workers.run([Task(_die_always)])


def _die_always() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_pretraining_survives_a_worker_killed_while_it_runs_and_gives_the_serial_policy(tmp_path, serial_policy,
                                                                                        caplog):
    from agents.graph_policy.pretrain import pretrain
    from agents.workers import ProcessWorkers

    with ProcessWorkers(2) as workers, caplog.at_level(logging.WARNING, logger="placer.workers"):
        victim = workers.pids()[1]
        # while the workers build their pairs' graphs and targets (seconds: each imports TensorFlow first)
        killer = threading.Timer(1.0, os.kill, (victim, signal.SIGKILL))
        killer.start()
        result = pretrain(_config(imitation_updates=3), tmp_path / "policy.npz", workers)
        killer.join()
    _same_policy(result.path, serial_policy)
    assert f"worker 1 (pid {victim}) died (exit code -9)" in caplog.text


def test_simulated_training_on_workers_gives_the_serial_run(tmp_path):
    from agents.experiment.config import ExperimentConfig
    from agents.experiment.run import run_experiment
    from agents import run_files
    from agents.run_files import read_trainer_state

    settings = dict(model="two-tower", size="tiny", backend="simulated", cluster="modeled:4xV100", agent="graph",
                    agent_options={"hidden_size": 16, "message_rounds": 2}, updates=4, samples_per_update=5,
                    greedy_every=2, baselines=["single-device"], runs=str(tmp_path), progress=False)
    serial = run_experiment(ExperimentConfig(**settings), tmp_path / "serial")
    parallel = run_experiment(ExperimentConfig(**settings, workers=2), tmp_path / "workers")
    assert "evaluating placements on 2 local worker processes" in (parallel.run_dir / run_files.LOG).read_text()
    serial_state, parallel_state = (read_trainer_state(r.run_dir) for r in (serial, parallel))
    assert parallel_state.best_assignment == serial_state.best_assignment
    assert parallel_state.samples == serial_state.samples
    assert [{k: v for k, v in h.items() if k != "wall_time"} for h in parallel_state.history] == \
        [{k: v for k, v in h.items() if k != "wall_time"} for h in serial_state.history]


@pytest.mark.parametrize("flags, message", [
    (["--workers", "0"], "workers must be a whole number of at least 1"),
    (["--ray", "somewhere"], "--ray takes 'auto' or a Ray cluster's ADDRESS as host:port"),
    (["--backend", "measured", "--target", "local:2", "--workers", "2"], "would run 2 testbeds at once"),
    (["--backend", "measured", "--target", "local:2", "--ray", "127.0.0.1:6379", "--workers", "2"], "drop --workers"),
])
def test_bad_worker_settings_are_refused_before_any_work(flags, message, capsys):
    from agents.cli import main

    assert main(["train", "two-tower", "--no-progress", *flags]) == 2
    assert message in capsys.readouterr().err


# -- Ray ----------------------------------------------------------------------------------------------------


def _listening_sockets(pid: int) -> list[str]:
    """The addresses that sockets in `pid`'s network namespace listen on (its /proc/PID/net/tcp{,6})."""
    addresses = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                addresses.append(fields[1])
    return addresses


def _interfaces(pid: int) -> set[str]:
    return {line.split(":")[0].strip() for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]}


def _descendants(root: int) -> list[int]:
    """Every process under `root`, from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _ray_processes(root: int) -> list[int]:
    found = []
    for pid in _descendants(root):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(name in command for name in ("gcs_server", "raylet", "ray::")):
            found.append(pid)
    return found


def test_a_private_ray_listens_only_on_loopback_and_pretrains_the_serial_policy(tmp_path, serial_policy):
    pytest.importorskip("ray")
    from placer.testbed import isolation_available

    if not isolation_available():
        pytest.skip("no private network namespace can be made here (`unshare -rn`)")
    policy = tmp_path / "policy.npz"
    command = [sys.executable, "-m", "agents.cli", "pretrain", "--models", "two-tower", "--generated", "1",
               "--target", "modeled:2xV100", "modeled:4xV100", "--updates", "6", "--imitation-updates", "3",
               "--samples-per-update", "3", *SMALL_POLICY, "--ray", "auto", "--workers", "2", "--no-progress",
               "--out", str(policy)]
    run = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, tuple[set[str], list[str]]] = {}
    while run.poll() is None:
        for pid in _ray_processes(run.pid):
            try:
                seen[pid] = (_interfaces(pid), _listening_sockets(pid))
            except OSError:
                pass
        time.sleep(0.5)
    out, err = run.communicate()
    assert run.returncode == 0, err[-3000:]
    assert seen, "no Ray process was seen while the run went"
    assert any(sockets for _, sockets in seen.values()), "the Ray processes were seen listening on nothing"
    for pid, (interfaces, _) in seen.items():
        # Ray's servers listen on every interface of their namespace: there, that is loopback alone
        assert interfaces == {"lo"}, f"Ray process {pid} can be reached through {interfaces}"
    _same_policy(policy, serial_policy)


@pytest.mark.slow
def test_a_two_node_ray_cluster_pretrains_the_serial_policy(tmp_path, serial_policy):
    """A head and one more node started with `ray start` on 127.0.0.1, in a private network namespace."""
    pytest.importorskip("ray")
    from placer.testbed import isolation_available

    if not isolation_available():
        pytest.skip("no private network namespace can be made here (`unshare -rn`)")
    import tempfile

    ray = str(Path(sys.executable).parent / "ray")
    policy = tmp_path / "policy.npz"
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay under 107 bytes
    pretrain = [sys.executable, "-m", "agents.cli", "pretrain", "--models", "two-tower", "--generated", "1",
                "--target", "modeled:2xV100", "modeled:4xV100", "--updates", "6", "--imitation-updates", "3",
                "--samples-per-update", "3", *SMALL_POLICY, "--ray", "127.0.0.1:6380", "--workers", "2",
                "--no-progress", "--out", str(policy)]
    script = f"""
set -e
python3 -c 'from placer.testbed import bring_loopback_up; bring_loopback_up()'
trap '{ray} stop --force >/dev/null 2>&1' EXIT
{ray} start --head --node-ip-address=127.0.0.1 --port=6380 --include-dashboard=false --num-cpus=1 \
    --disable-usage-stats --temp-dir={ray_dir} >/dev/null
{ray} start --address=127.0.0.1:6380 --node-ip-address=127.0.0.1 --num-cpus=1 --disable-usage-stats >/dev/null
{' '.join(pretrain)}
"""
    import secrets

    # every node and the driver share one token: Ray's own authentication, besides the namespace
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    done = subprocess.run(["unshare", "-rn", "bash", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "on 2 Ray actors on 2 nodes" in done.stdout + done.stderr
    _same_policy(policy, serial_policy)


@pytest.mark.slow
def test_a_ray_actor_that_dies_mid_task_has_its_tasks_sent_again_to_a_new_actor(tmp_path):
    pytest.importorskip("ray")
    from placer.testbed import isolation_available

    if not isolation_available():
        pytest.skip("no private network namespace can be made here (`unshare -rn`)")
    script = f"""
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
from agents.workers import RayWorkers, Task
from tests.agents.test_workers import _die_once, _double
with RayWorkers("auto", 2) as workers:
    first = workers.pids()
    results = workers.run([Task(_die_once, ({str(tmp_path / 'died')!r}, value), worker=1) for value in range(3)]
                          + [Task(_double, (10,), worker=0)])
    print("RESULTS", results, workers.pids()[0] == first[0], workers.pids()[1] != first[1])
"""
    done = subprocess.run(["unshare", "-rn", sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULTS [0, 2, 4, 20] True True" in done.stdout
    assert "Ray actor 1 died while running task 0 (_die_once); sending it and 2 later task(s)" in done.stdout


def _slowly_doubled(value: int) -> int:
    time.sleep(1.0)
    return 2 * value


@pytest.mark.slow
def test_a_ray_node_that_dies_mid_run_loses_no_work(tmp_path):
    """Two nodes of one CPU each; the second is stopped while its actor works: no CPU is left for a new actor,
    so the first node's actor takes the dead one's tasks."""
    pytest.importorskip("ray")
    import secrets
    import tempfile

    from placer.testbed import isolation_available

    if not isolation_available():
        pytest.skip("no private network namespace can be made here (`unshare -rn`)")
    ray = str(Path(sys.executable).parent / "ray")
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    driver = tmp_path / "driver.py"
    driver.write_text("""
import logging, os, signal, sys, threading
logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
from agents.workers import RayWorkers, Task
from tests.agents.test_workers import _descendants, _slowly_doubled
with RayWorkers("127.0.0.1:6381", actor_start_seconds=10) as workers:
    print("ENGINE", workers.description)
    node = [int(sys.argv[1]), *_descendants(int(sys.argv[1]))]  # its raylet, and the actor under it
    threading.Timer(3.0, lambda: [os.kill(pid, signal.SIGKILL) for pid in node]).start()
    print("RESULTS", workers.run([Task(_slowly_doubled, (value,), worker=value % 2) for value in range(12)]))
""")
    script = f"""
set -e
python3 -c 'from placer.testbed import bring_loopback_up; bring_loopback_up()'
trap '{ray} stop --force >/dev/null 2>&1' EXIT
{ray} start --head --node-ip-address=127.0.0.1 --port=6381 --include-dashboard=false --num-cpus=1 \
    --disable-usage-stats --temp-dir={ray_dir} >/dev/null
{ray} start --address=127.0.0.1:6381 --node-ip-address=127.0.0.1 --num-cpus=1 --disable-usage-stats --block \
    >/dev/null 2>&1 &
sleep 5
python3 {driver} $!
"""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    done = subprocess.run(["unshare", "-rn", "bash", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "ENGINE 2 Ray actors on 2 nodes" in done.stdout
    assert f"RESULTS {[2 * value for value in range(12)]}" in done.stdout
    assert "died while running task" in done.stdout and "no CPU is left for a new actor" in done.stdout


def _fail_on(value: int, bad: int) -> int:
    if value == bad:
        raise ValueError(f"no placement for {value}")
    return 2 * value


def test_a_task_that_raises_raises_in_the_driver_and_leaves_the_workers_ready_for_the_next_work():
    from agents.workers import ProcessWorkers, Task

    with ProcessWorkers(2) as workers:
        with pytest.raises(ValueError, match="no placement for 1"):
            workers.run([Task(_fail_on, (value, 1)) for value in range(6)])
        assert workers.run([Task(_fail_on, (value, -1)) for value in range(4)]) == [0, 2, 4, 6]
