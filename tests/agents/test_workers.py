"""Parallel engines (agents/workers.py): the same results as the serial run, work of a
dead worker sent again, and a private Ray that nothing outside loopback can reach."""

import logging
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
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


@pytest.mark.slow  # 13 s; the default run pretrains on worker processes with one killed mid-run, and on Ray
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


class _Recorded(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


class _TimedEnv:
    """An environment whose evaluate step takes `fixed` seconds a batch plus `each` a placement, and prices a
    placement as the sum of its devices (as every copy of a simulator prices it alike)."""

    def __init__(self, fixed: float, each: float, local=None):
        self.fixed, self.each, self.local, self.workers, self.batches = fixed, each, local, [0, 1], 0

    def evaluate_batch(self, assignments):
        self.batches += 1
        time.sleep(self.fixed + self.each * len(assignments))
        return [sum(assignment) for assignment in assignments]


@pytest.mark.parametrize("here_each, workers_fixed, faster", [(0.001, 0.02, "here"), (0.02, 0.001, "workers")])
def test_the_evaluate_step_runs_where_it_is_faster_and_the_slower_way_is_timed_again_now_and_then(
        here_each, workers_fixed, faster):
    from agents.worker_envs import FasterOfHereAndWorkers, evaluation_log

    here = _TimedEnv(0.0, here_each)
    workers = _TimedEnv(workers_fixed, 0.0, local=here)
    env = FasterOfHereAndWorkers(workers)
    batches = 44
    said = _Recorded()
    evaluation_log.addHandler(said)
    try:
        evaluations = [env.evaluate_batch([[k, 1], [k, 2]]) for k in range(batches)]
    finally:
        evaluation_log.removeHandler(said)
    assert evaluations == [[k + 1, k + 2] for k in range(batches)]  # the same answers whichever way ran
    slower = workers if faster == "here" else here
    # a warm-up and FIRST_TIMINGS batches each to time both ways, then the slower every RETIME_EVERY-th batch
    retimed = len(range(FasterOfHereAndWorkers.RETIME_EVERY, batches, FasterOfHereAndWorkers.RETIME_EVERY))
    assert slower.batches == 1 + FasterOfHereAndWorkers.FIRST_TIMINGS + retimed
    assert here.batches + workers.batches == batches
    chosen = "in this process" if faster == "here" else "on the workers"
    assert any(f"evaluating placements {chosen}" in record.getMessage() for record in said.records)


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


SMALLEST_PRETRAINING = ["pretrain", "--models", "two-tower", "--generated", "0", "--target", "modeled:2xV100",
                        "--imitation-updates", "0", "--samples-per-update", "1", "--set", "hidden_size=8",
                        "--set", "message_rounds=1", "--ray", "auto", "--no-progress"]


def _private_pid_namespace_available() -> bool:
    try:
        return subprocess.run(["unshare", "-rnpf", "--mount-proc", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.slow  # about 20 s; the private Ray's loopback-only test stays in the default run
def test_ray_auto_starts_its_own_ray_beside_another_and_leaves_nothing_in_home_or_stdout(tmp_path):
    """Another Ray runs (started with `ray start`, the latest of the machine, and in RAY_ADDRESS, with a token
    of its own in RAY_AUTH_TOKEN): `--ray auto` still starts a private one, writes no ~/.ray/auth_token, prints
    none of Ray's lines, and leaves no process of it. All in private network and process namespaces, whose end
    stops the other Ray."""
    pytest.importorskip("ray")
    if not _private_pid_namespace_available():
        pytest.skip("no private network and process namespaces can be made here (`unshare -rnpf`)")
    home, ray_tmp = tmp_path / "home", tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # socket paths < 107 bytes
    home.mkdir()
    policy = tmp_path / "policy.npz"
    placer = shlex.join([sys.executable, "-m", "agents.cli", *SMALLEST_PRETRAINING, "--updates", "1",
                         "--out", str(policy)])
    script = f"""
set -e
python3 -c 'from placer.testbed import bring_loopback_up; bring_loopback_up()'
RAY_AUTH_MODE=token ray start --head --node-ip-address=127.0.0.1 --port=6379 --include-dashboard=false \
    --num-cpus=1 --disable-usage-stats >/dev/null 2>&1
test -e {ray_tmp}/ray/ray_current_cluster
export RAY_ADDRESS=127.0.0.1:6379
{placer} >{tmp_path}/out.txt 2>{tmp_path}/err.txt
ps -eo pid,args | grep -E 'placer-ray|ray::_Actor' | grep -v grep || true
"""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "HOME": str(home), "RAY_TMPDIR": ray_tmp, "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_AUTH_MODE", None)
    try:
        done = subprocess.run(["unshare", "-rnpf", "--mount-proc", "bash", "-c", script], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    out, err = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
    assert done.returncode == 0, err[-3000:] + done.stderr[-2000:]
    assert policy.exists()
    assert not (home / ".ray").exists(), "Ray wrote its token, or more, into the user's home"
    assert done.stdout == "", f"a process of the private Ray outlived the command: {done.stdout}"
    assert out.splitlines()[0] == f"pre-training on 2 Ray actors on 1 node; Ray's log: {tmp_path / 'policy.log'}"
    assert out.splitlines()[1].startswith(f"wrote {policy}") and len(out.splitlines()) == 3, out
    assert err == "", err
    assert "Token authentication" in (tmp_path / "policy.log").read_text()  # Ray's lines are in the log


def _process_start(pid: int) -> str | None:
    """`pid`'s start time (to tell it from a later process of the same pid), or None: gone, or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


# SIGKILL leaves the outer command no handler to clean up with, the harder case: it runs by default.
@pytest.mark.parametrize("how", [pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGKILL])
def test_killing_the_command_of_ray_auto_leaves_no_ray_process_or_folder_behind(tmp_path, how):
    """The command re-runs itself in a private network namespace, where it starts Ray: kill the outer one, and
    the re-run, Ray's servers, its actors and its private directory all go."""
    pytest.importorskip("ray")
    from placer.testbed import isolation_available

    if not isolation_available():
        pytest.skip("no private network namespace can be made here (`unshare -rn`)")
    command = [sys.executable, "-m", "agents.cli", *SMALLEST_PRETRAINING, "--updates", "10000",
               "--out", str(tmp_path / "policy.npz")]
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as stderr:
        outer = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr,
                                 env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline, seen = time.monotonic() + 120, {}
    try:
        while time.monotonic() < deadline and not any(
                "ray::_Actor" in command for command in seen.values()):  # its actors run: Ray is all up
            assert outer.poll() is None, f"the command ended before it was killed: {errors.read_text()[-2000:]}"
            for pid in _descendants(outer.pid):
                try:
                    seen[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    pass
            time.sleep(0.2)
        assert any("ray::_Actor" in command for command in seen.values()), "no Ray actor started in 2 minutes"
        starts = {pid: _process_start(pid) for pid in _descendants(outer.pid)}
        directories = {word.split("=", 1)[-1].split("/session", 1)[0] for command in seen.values()
                   for word in command.split() if "/placer-ray-" in word}
    finally:
        outer.send_signal(how)
        outer.wait()
    assert directories, "the private Ray's directory was not found in its servers' command lines"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [pid for pid, start in starts.items() if start is not None and _process_start(pid) == start]
        if not left:
            break
        time.sleep(0.5)
    assert not left, "still running: " + "; ".join(seen.get(pid, str(pid))[:80] for pid in left)
    # the re-run command got SIGTERM from the kernel, whatever signal ended the outer one, and removed it
    assert not any(Path(directory).exists() for directory in directories), directories


def _on_two_local_ray_nodes(command: list[str], port: int) -> subprocess.CompletedProcess:
    """Run `command` beside a Ray head and one more node started with `ray start` on 127.0.0.1, in a private
    network namespace, every node and the driver sharing one token (Ray's own authentication). Skips where
    Ray or a namespace is missing."""
    pytest.importorskip("ray")
    import secrets
    import tempfile

    from placer.testbed import isolation_available

    if not isolation_available():
        pytest.skip("no private network namespace can be made here (`unshare -rn`)")
    ray = str(Path(sys.executable).parent / "ray")
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay under 107 bytes
    script = f"""
set -e
python3 -c 'from placer.testbed import bring_loopback_up; bring_loopback_up()'
trap '{ray} stop --force >/dev/null 2>&1' EXIT
{ray} start --head --node-ip-address=127.0.0.1 --port={port} --include-dashboard=false --num-cpus=1 \
    --disable-usage-stats --temp-dir={ray_dir} >/dev/null
{ray} start --address=127.0.0.1:{port} --node-ip-address=127.0.0.1 --num-cpus=1 --disable-usage-stats >/dev/null
{' '.join(command)}
"""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    done = subprocess.run(["unshare", "-rn", "bash", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_a_two_node_ray_cluster_pretrains_the_serial_policy(tmp_path, serial_policy):
    """A head and one more node started with `ray start` on 127.0.0.1, in a private network namespace."""
    policy = tmp_path / "policy.npz"
    pretrain = [sys.executable, "-m", "agents.cli", "pretrain", "--models", "two-tower", "--generated", "1",
                "--target", "modeled:2xV100", "modeled:4xV100", "--updates", "6", "--imitation-updates", "3",
                "--samples-per-update", "3", *SMALL_POLICY, "--ray", "127.0.0.1:6380", "--workers", "2",
                "--no-progress", "--out", str(policy)]
    done = _on_two_local_ray_nodes(pretrain, 6380)
    assert "on 2 Ray actors on 2 nodes" in done.stdout + done.stderr
    _same_policy(policy, serial_policy)


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
@pytest.mark.parametrize("per_node, engine", [(False, "2 Ray actors on 2 nodes"),
                                              (True, "one Ray actor pinned to each of 2 nodes")])
def test_a_ray_node_that_dies_mid_run_loses_no_work(tmp_path, per_node, engine):
    """Two nodes of one CPU each; the second is stopped while its actor works: no CPU is left for a new actor
    (and a pinned actor's node is gone), so the first node's actor takes the dead one's tasks."""
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
with RayWorkers("127.0.0.1:6381", actor_start_seconds=10, per_node=sys.argv[2] == "True") as workers:
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
python3 {driver} $! {per_node}
"""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    done = subprocess.run(["unshare", "-rn", "bash", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert f"ENGINE {engine}" in done.stdout
    assert f"RESULTS {[2 * value for value in range(12)]}" in done.stdout
    assert "died while running task" in done.stdout and "no CPU is left for a new actor" in done.stdout
    # Ray's own lines about the dead node (its state, tens of lines) stay off the driver's output
    assert [line for line in done.stdout.splitlines()
            if not line.startswith(("ENGINE", "RESULTS", "WARNING:placer.workers:"))] == [], done.stdout


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


# -- measured rollouts ----------------------------------------------------------------------------------------

MEASURED = dict(model="two-tower", size="tiny", backend="measured", cluster="inprocess:2", agent="random", updates=2,
                samples_per_update=4, greedy_every=0, confirm_repeats=1, baselines=["single-device"], final_rounds=1,
                warmup_steps=1, timed_steps=1, progress=False)


def test_a_measured_run_records_where_each_measurement_ran_and_the_kind_of_its_target(tmp_path):
    from agents.experiment.config import ExperimentConfig
    from agents.experiment.run import run_experiment
    from agents.run_files import read_targets, read_trainer_state

    result = run_experiment(ExperimentConfig(**MEASURED, runs=str(tmp_path)), tmp_path / "run")
    state, targets = read_trainer_state(result.run_dir), read_targets(result.run_dir)
    assert len(state.measurements) == state.samples  # confirmations included
    assert [m["update"] for m in state.measurements] == sorted(m["update"] for m in state.measurements)
    assert targets.kind.tensorflow and targets.kind.processor and targets.workers == ()
    for measurement in state.measurements:
        assert measurement["host"] == os.uname().nodename and measurement["pid"] == os.getpid()
        assert measurement["target"] == "inprocess:2" and measurement["kind"] == targets.kind.fingerprint


class _EngineOn:
    """A stand-in for a parallel engine whose one worker answers every task with `answer`."""

    count = 1

    def __init__(self, answer):
        self.answer = answer

    def run(self, tasks):
        return [self.answer(task) for task in tasks]


def test_a_worker_on_another_kind_of_target_is_refused_before_the_run_exists(tmp_path):
    from dataclasses import replace

    from agents.experiment.config import ExperimentConfig
    from agents.experiment.run import _evaluated_on, _make_env
    from agents.worker_envs import WorkerTarget, describe_target
    from placer.cost.kind import TargetKindError

    config = ExperimentConfig(**MEASURED, runs=str(tmp_path))
    env = _make_env(config)
    try:
        here = describe_target(env)
        elsewhere = WorkerTarget({"host": "gpu-box", "pid": 7, "ray_node": "ab" * 28}, "inprocess:2",
                                 replace(here.kind, processor="AMD EPYC 7763", cores=64))
        with pytest.raises(TargetKindError, match=r"worker 0 \(inprocess:2 on host gpu-box \(pid 7, Ray node "
                                                  r"abababababab\)\) \(\"there\"\): processor .* here, 'AMD EPYC "
                                                  r"7763' there; cores \d+ here, 64 there"):
            _evaluated_on(config, env, _EngineOn(lambda task: elsewhere))
        same = WorkerTarget({"host": "twin", "pid": 8, "ray_node": None}, "inprocess:2", here.kind)
        evaluated_on, targets = _evaluated_on(config, env, _EngineOn(lambda task: same))
        assert evaluated_on.kind == here.kind.fingerprint and targets.workers == (same.origin,)
    finally:
        env.close()
    assert not (tmp_path / "two-tower").exists()


def test_a_measurement_from_another_kind_of_target_is_refused_not_compared():
    from agents.loop import MEASURED_ON, Evaluation
    from agents.worker_envs import EnvOnWorkers, EnvRecipe
    from placer.cost.kind import TargetKindError

    def measured_on(kind):
        return lambda task: [Evaluation(tuple(a), -1.0, 1.0, True, {MEASURED_ON: {"kind": kind, "host": "b"}})
                             for a in task.args[1]]

    recipe = EnvRecipe("two-tower", "tiny", "inprocess:2", "measured")
    assert len(EnvOnWorkers(recipe, _EngineOn(measured_on("k1")), kind="k1").evaluate_batch([[0], [1]])) == 2
    with pytest.raises(TargetKindError, match="measured on None on host b .* a target of kind k2, not of the run's"):
        EnvOnWorkers(recipe, _EngineOn(measured_on("k2")), kind="k1").evaluate_batch([[0], [1]])


def test_a_measured_run_is_not_resumed_on_another_kind_of_target(tmp_path):
    from dataclasses import replace

    from agents import run_files
    from agents.experiment.config import ExperimentError
    from placer.cost.kind import TargetKind

    kind = TargetKind("measured", (("/job:localhost/replica:0/task:0/device:CPU:0", "CPU", None, None, None, None),),
                      processor="Intel(R) Xeon(R) Processor", cores=2, tensorflow="2.21.0")
    origin = {"host": "a", "pid": 1, "ray_node": None, "target": "inprocess:1", "kind": kind.fingerprint}
    run_files.write_targets(tmp_path, run_files.MeasuredTargets(kind, origin))
    run_files.check_targets(tmp_path, run_files.MeasuredTargets(kind, {**origin, "host": "b"}))  # another host of it
    with pytest.raises(ExperimentError, match="measured on another kind of target .*cores 2 here, 16 there"):
        run_files.check_targets(tmp_path, run_files.MeasuredTargets(replace(kind, cores=16), origin))


@pytest.mark.slow  # 40 s; the default run keeps the private one-node cluster, killed actors and `--ray auto`
def test_a_two_node_ray_cluster_measures_on_each_node_and_records_which(tmp_path):
    """A head and one more node started with `ray start` on 127.0.0.1 in a private network namespace, each with
    its own actor measuring placements on its own inprocess:2 target."""
    import json

    run_dir = tmp_path / "run"
    train = [sys.executable, "-m", "agents.cli", "train", "two-tower", "--backend", "measured", "--target",
             "inprocess:2", "--agent", "random", "--updates", "2", "--samples-per-update", "4", "--greedy-every",
             "1", "--confirm-repeats", "1", "--baselines", "single-device", "--final-rounds", "1", "--warmup", "1",
             "--repeats", "1", "--ray", "127.0.0.1:6382", "--no-progress", "--run-dir", str(run_dir)]
    _on_two_local_ray_nodes(train, 6382)
    log = (run_dir / "log.txt").read_text()
    assert "evaluating placements on one Ray actor pinned to each of 2 nodes" in log
    assert "share one machine (127.0.0.1)" in log  # both nodes are this machine: said, not hidden
    assert "this process (baselines, final comparison) measures on inprocess:2" in log
    assert "worker 0 measures on inprocess:2" in log and "worker 1 measures on inprocess:2" in log
    state = json.loads((run_dir / "trainer_state.json").read_text())
    targets = json.loads((run_dir / "targets.json").read_text())
    measurements = state["measurements"]
    assert len(measurements) == state["samples"]
    workers = {worker["ray_node"]: worker for worker in targets["workers"]}
    assert len(workers) == 2 and targets["driver"]["ray_node"] in workers  # the driver's node is one of them
    assert {m["ray_node"] for m in measurements} == set(workers)  # each node measured
    for measurement in measurements:
        assert measurement["pid"] == workers[measurement["ray_node"]]["pid"]
        assert measurement["target"] == "inprocess:2" and measurement["kind"] == targets["kind"]["fingerprint"]
    # a lone placement (the greedy guess, confirmations) goes to the first actor: the driver's node
    lone = [m for m in measurements if m["update"] == 1][4:]
    assert lone and {m["ray_node"] for m in lone} == {targets["driver"]["ray_node"]}


# -- the driver killed --------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # about 30 s; a worker killed mid-run is tested in the default run
def test_a_killed_driver_leaves_no_worker_behind_and_resume_finishes_its_run(tmp_path):
    """`placer train --workers 2` killed (SIGKILL) once it has saved an update: its workers exit, and
    `placer train --resume RUN --workers 2` trains the rest of the updates on top of the saved ones."""
    import json

    run_dir = tmp_path / "run"
    train = [sys.executable, "-m", "agents.cli", "train", "two-tower", "--backend", "simulated", "--target",
             "modeled:4xV100", "--agent", "graph", *SMALL_POLICY, "--updates", "60", "--samples-per-update", "4",
             "--baselines", "single-device", "--no-progress"]
    driver = subprocess.Popen([*train, "--workers", "2", "--run-dir", str(run_dir)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    state_file = run_dir / "trainer_state.json"
    deadline = time.monotonic() + 300
    while not (state_file.exists() and json.loads(state_file.read_text())["updates"] >= 1):
        assert driver.poll() is None, driver.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no update saved in 5 minutes"
        time.sleep(0.05)
    workers = _descendants(driver.pid)
    assert len(workers) >= 2  # the two worker processes (and multiprocessing's helpers)
    driver.kill()
    driver.communicate()
    killed = json.loads(state_file.read_text())
    assert 1 <= killed["updates"] < 60, "the run ended before it was killed: give it more updates"
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in workers if _alive(pid)], "the killed driver's workers are still running"

    resumed = subprocess.run([sys.executable, "-m", "agents.cli", "train", "--resume", str(run_dir), "--workers", "2",
                              "--no-progress"], cwd=REPO, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    state = json.loads(state_file.read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert state["updates"] == summary["updates"] == 60
    assert [h["update"] for h in state["history"]] == list(range(1, 61))
    assert state["history"][:killed["updates"]] == killed["history"]  # it continues the killed run's history
    assert state["samples"] >= killed["samples"] + 4 * (60 - killed["updates"])


def test_ways_as_fast_as_each_other_do_not_swap_at_every_timing():
    from agents.worker_envs import FasterOfHereAndWorkers, evaluation_log

    here = _TimedEnv(0.0, 0.004)
    env = FasterOfHereAndWorkers(_TimedEnv(0.008, 0.0, local=here))  # 4 ms a placement either way
    said = _Recorded()
    evaluation_log.addHandler(said)
    try:
        for k in range(44):
            env.evaluate_batch([[k, 1], [k, 2]])
    finally:
        evaluation_log.removeHandler(said)
    assert len(said.records) == 1
