"""A real multi-device testbed on one CPU machine: TensorFlow gRPC workers pinned to their own cores.

TensorFlow's gRPC server listens on every interface with no authentication, so the workers (and whoever
talks to them) run in a private network namespace that has only loopback (`unshare -rn`). Where that is
not possible, starting the testbed is refused unless the user opts in to exposed ports.

With a shaped link (`local:2,link=1gbit`) the second worker gets a network namespace of its own inside the
private one, joined to the first's by a veth pair whose two ends `tc` shapes to the link's rate (a token bucket:
this kernel has no netem, so the link adds bandwidth limits, not delay): two machines over one network link.

Run as `python -m placer.testbed serve ...` this module is one worker; `... up ...` starts a testbed in the
current (already private) namespace and runs a command next to it.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from placer import tf_logs
from placer.errors import NetworkIsolationUnavailable, TestbedError

JOB = "worker"
ISOLATED_BASE_PORT = 2222
_PR_SET_PDEATHSIG = 1


# -- network isolation ------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def isolation_available() -> bool:
    """True if `unshare -rn` can make a private network namespace here (root, or unprivileged userns)."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def isolated_command(command: list[str], *, allow_exposed_ports: bool = False) -> tuple[list[str], bool]:
    """`command` wrapped to run in a private network namespace; returns (command, isolated).

    Raises NetworkIsolationUnavailable when no namespace can be made and the user did not opt in.
    """
    if isolation_available():
        return ["unshare", "-rn", *command], True
    if not allow_exposed_ports:
        raise NetworkIsolationUnavailable(
            "cannot create a private network namespace here (`unshare -rn` failed: user namespaces may be "
            "disabled). TensorFlow's gRPC workers listen on every network interface with no authentication, "
            "so anyone who can reach this machine could run arbitrary code in them. Refusing to start. If this "
            "machine is not reachable from untrusted networks, opt in with allow_exposed_ports=True "
            "(--allow-exposed-ports on the command line)."
        )
    warnings.warn(
        "starting TensorFlow gRPC workers WITHOUT network isolation: their ports accept connections from any "
        "host that can reach this machine, with no authentication",
        RuntimeWarning,
        stacklevel=3,
    )
    return command, False


LINK_DEVICES = ("placer0", "placer1")
"""The veth pair's two ends: the first worker's (and the client's), the second worker's."""
LINK_ADDRESSES = ("10.77.0.1", "10.77.0.2")
"""The two workers' addresses on the link, in a /24 of their own."""
LINK_QUEUE_SECONDS = 0.1
"""How long a packet may wait in the token bucket's queue: long enough that many transfers at once queue rather than
drop (TCP halves its rate on every drop), as a switch's buffers would."""
LINK_BURST_SECONDS = 0.0005
"""The bucket holds this much of the link's traffic, never less than LINK_SMALLEST_BURST: a transfer smaller than
the bucket crosses at the veth pair's own speed, so the bucket is kept small for a link that, as the simulator
models one, carries every byte at its rate."""
LINK_SMALLEST_BURST = 8 * 1024
"""Bytes: a few full-size packets. The cost of a small bucket is the receiver's: it wakes per 1.5 KB packet, as
behind a NIC that coalesces nothing (26 ns of its core per byte received at 100 Mbit/s with an 8 KiB bucket,
4.2 with 256 KiB; 3.9 at 1 Gbit/s with 62.5 KB; sockets across the pair, quiet, 2026-11-29). `placer calibrate`
measures that cost on the workers' CPU time, and the simulator charges it to the receiving core."""


@lru_cache(maxsize=None)
def shaped_link_unavailable() -> str:
    """Why this machine cannot make the testbed's shaped link (a veth pair shaped by `tc` in a private network
    namespace), or "" when it can: tried once, in a namespace that vanishes with it."""
    missing = [tool for tool in ("ip", "tc", "nsenter") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found (install iproute2 and util-linux)"
    if not isolation_available():
        return "`unshare -rn` cannot make a private network namespace (user namespaces may be disabled)"
    trial = (f"ip link add {LINK_DEVICES[0]} type veth peer name {LINK_DEVICES[1]} && "
             f"{' '.join(_tbf_command(LINK_DEVICES[0], 1_000_000_000))}")
    try:
        tried = subprocess.run(["unshare", "-rn", "sh", "-c", trial], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"trying a shaped veth pair in a private namespace failed ({error})"
    if tried.returncode:
        said = (tried.stderr.strip().splitlines() or ["no message"])[-1]
        return f"a veth pair shaped by tc could not be made in a private namespace ({said})"
    return ""


def _tbf_command(device: str, bits_per_second: int) -> list[str]:
    """`tc` shaping `device`'s outgoing traffic to `bits_per_second` with a token bucket."""
    bytes_per_second = bits_per_second / 8
    burst = max(LINK_SMALLEST_BURST, int(bytes_per_second * LINK_BURST_SECONDS))
    return ["tc", "qdisc", "add", "dev", device, "root", "tbf", "rate", f"{bits_per_second}bit", "burst", str(burst),
            "latency", f"{LINK_QUEUE_SECONDS * 1000:g}ms"]


def join_by_shaped_link(peer_pid: int, bits_per_second: int, timeout: float = 10.0) -> None:
    """Join this network namespace and `peer_pid`'s (a process started under `unshare -n`) by a veth pair, each end
    addressed (LINK_ADDRESSES) and shaped to `bits_per_second` in its direction."""
    own = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + timeout
    while os.readlink(f"/proc/{peer_pid}/ns/net") == own:  # `unshare -n` has not made its namespace yet
        if time.monotonic() > deadline:
            raise TestbedError(f"the second testbed worker (pid {peer_pid}) made no network namespace of its own "
                               f"within {timeout:g} s")
        time.sleep(0.01)
    peer = ["nsenter", "-t", str(peer_pid), "-n"]
    commands = [["ip", "link", "add", LINK_DEVICES[0], "type", "veth", "peer", "name", LINK_DEVICES[1]],
                ["ip", "link", "set", LINK_DEVICES[1], "netns", str(peer_pid)],
                [*peer, "ip", "link", "set", "lo", "up"]]
    for side, (device, address) in enumerate(zip(LINK_DEVICES, LINK_ADDRESSES)):
        where = peer if side else []
        commands += [[*where, "ip", "addr", "add", f"{address}/24", "dev", device],
                     [*where, "ip", "link", "set", device, "up"],
                     [*where, *_tbf_command(device, bits_per_second)]]
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode:
            raise TestbedError(f"could not make the testbed's shaped link: `{' '.join(command)}` failed: "
                               f"{done.stderr.strip() or f'exit code {done.returncode}'}")


def bring_loopback_up() -> None:
    """A new network namespace starts with `lo` down; raise it without needing iproute2."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


def only_loopback() -> bool:
    """True inside a namespace whose only network interface is loopback."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def die_with_parent(parent: int | None = None, signal_number: int = signal.SIGKILL) -> None:
    """Ask the kernel to send this process `signal_number` when its parent dies, so no worker outlives the
    testbed. parent: the pid the parent must have (default: the present one); a process whose parent is
    already another has lost it, and exits."""
    parent = os.getppid() if parent is None else parent
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


# -- workers ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkerLayout:
    """One testbed worker: the cores it is pinned to and its session's thread pools. An op placed on it runs
    on `intra_op_threads` threads (its width); `inter_op_threads` ops of it run at once."""

    cores: tuple[int, ...]
    intra_op_threads: int
    inter_op_threads: int


def uniform_layout(workers: int, cores_per_worker: int) -> tuple[WorkerLayout, ...]:
    """`workers` workers of `cores_per_worker` consecutive cores each, among those this process may use
    (wrapping around, so workers share cores when there are too few), with today's default threads."""
    if workers < 1 or cores_per_worker < 1:
        raise TestbedError(f"a testbed needs at least one worker and one core per worker, got {workers} x {cores_per_worker}")
    available = sorted(os.sched_getaffinity(0))
    return tuple(
        WorkerLayout(tuple(available[(w * cores_per_worker + c) % len(available)] for c in range(cores_per_worker)),
                     cores_per_worker, default_inter_op_threads(cores_per_worker))
        for w in range(workers)
    )


def default_inter_op_threads(intra_op_threads: int) -> int:
    # One inter-op thread would queue cheap Send ops behind long compute chains and serialize the devices
    # (seen: a two-tower split gained 1.15x instead of ~2x); a second one keeps transfers flowing.
    return intra_op_threads + 1

def killed_note(returncode: int | None) -> str:
    """For a process that exited with `returncode`: a SIGKILL nobody here sent is how the kernel ends a process
    when the machine runs out of memory, so say so with the memory left."""
    if returncode != -signal.SIGKILL:
        return ""
    from placer.host import memory_available

    available = memory_available()
    left = "" if available is None else f", {available / 2**30:.1f} GiB of memory available now"
    return f" (killed: the kernel kills this way when the machine runs out of memory{left})"


@dataclass
class TestbedServers:
    """Running worker processes; `close()` (or leaving the `with` block) stops them all."""

    __test__ = False

    processes: list[subprocess.Popen]
    ports: list[int]
    cores: list[list[int]]
    log_dir: Path
    warnings: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    """Each worker's address; empty: all on localhost."""

    @property
    def cluster_spec(self) -> dict[str, list[str]]:
        return {JOB: [f"{host}:{port}" for host, port in zip(self.addresses, self.ports)]}

    @property
    def master(self) -> str:
        return f"grpc://{self.addresses[0]}:{self.ports[0]}"

    @property
    def addresses(self) -> list[str]:
        """Each worker's host: its link address, or localhost."""
        return self.hosts or ["localhost"] * len(self.ports)

    def check_alive(self) -> None:
        for task, process in enumerate(self.processes):
            if process.poll() is not None:
                raise TestbedError(f"testbed worker {task} exited with code {process.returncode}"
                                   f"{killed_note(process.returncode)}; {self.log_tail(task)}")

    def log_tail(self, task: int, lines: int = 5) -> str:
        """What the end of a worker's log says, for an error message (without TensorFlow's log lines)."""
        try:
            text = (self.log_dir / f"worker{task}.log").read_text(errors="replace")
        except OSError:
            return "it left no log"
        tail = tf_logs.log_tail(text, lines)
        return f"its log ends: {' | '.join(tail)}" if tail else "its log shows no error"

    def close(self, keep_logs: bool = False) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait()
        if not keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> TestbedServers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def start_servers(
    workers: int = 2, *, cores_per_worker: int = 1, layout: tuple[WorkerLayout, ...] | None = None,
    isolated: bool = True, ready_timeout: float = 120.0, link_bits_per_second: int | None = None,
    allocator_thresholds: Mapping[str, str] | None = None,
) -> TestbedServers:
    """Start gRPC worker processes on this machine, each pinned to its own cores: `layout`'s workers, or
    `workers` of `cores_per_worker` cores each.

    isolated: we are inside a private namespace (fixed ports are free); otherwise free ports are picked.
    link_bits_per_second: two workers joined by a link shaped to this rate (`join_by_shaped_link`), the second in a
    network namespace of its own; needs `isolated`.
    allocator_thresholds: glibc's, in the workers' environment (`worker_environment`; None: fixed).
    """
    layout = layout or uniform_layout(workers, cores_per_worker)
    environment = worker_environment(allocator_thresholds)
    workers = len(layout)
    if link_bits_per_second is not None and (workers != 2 or not isolated):
        raise TestbedError(f"a shaped link joins 2 workers in a private network namespace, not {workers} "
                           f"{'isolated' if isolated else 'exposed'} ones")
    available = sorted(os.sched_getaffinity(0))
    notes = []
    used = [core for worker in layout for core in worker.cores]
    if len(used) > len(set(used)) or not set(used) <= set(available):
        notes.append(
            f"the workers' cores {[list(w.cores) for w in layout]} overlap or lie outside the {len(available)} cores "
            f"available ({available}): workers share cores, so measured step times do not reflect a machine with "
            "that many devices"
        )
    cores = [list(worker.cores) for worker in layout]
    ports = [ISOLATED_BASE_PORT + w for w in range(workers)] if isolated else _free_ports(workers)
    hosts = list(LINK_ADDRESSES) if link_bits_per_second else ["localhost"] * workers
    spec = {JOB: [f"{host}:{port}" for host, port in zip(hosts, ports)]}
    log_dir = Path(tempfile.mkdtemp(prefix="placer-testbed-"))
    processes = []
    for task in range(workers):
        log = open(log_dir / f"worker{task}.log", "wb")
        command = [
            sys.executable, "-m", "placer.testbed", "serve", "--cluster", json.dumps(spec), "--task", str(task),
            "--cores", ",".join(map(str, cores[task])), "--threads", str(layout[task].intra_op_threads),
            "--inter-threads", str(layout[task].inter_op_threads),
        ]
        if link_bits_per_second and task > 0:  # `unshare` execs the worker: its pid is the worker's
            command = ["unshare", "-n", *command]
        processes.append(subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=environment))
        log.close()
    servers = TestbedServers(processes, ports, cores, log_dir, notes, hosts)
    try:
        if link_bits_per_second:
            join_by_shaped_link(processes[1].pid, link_bits_per_second)
        _wait_until_listening(servers, ready_timeout)
    except TestbedError as error:
        servers.close(keep_logs=True)
        raise TestbedError(f"{error}. The workers' full logs are in {log_dir}/") from None
    except BaseException:
        servers.close()
        raise
    return servers


def _wait_until_listening(servers: TestbedServers, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for task, (host, port) in enumerate(zip(servers.addresses, servers.ports)):
        while True:
            servers.check_alive()
            try:
                with socket.create_connection(("127.0.0.1" if host == "localhost" else host, port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TestbedError(f"testbed worker {task} did not listen on port {port} within {timeout:g} s "
                                       f"(is the machine overloaded?); {servers.log_tail(task)}")
                time.sleep(0.1)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


FIXED_ALLOCATOR_THRESHOLDS = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}
"""glibc's allocator thresholds in the testbed's workers (`start_servers`): blocks up to 32 MB come from the
heap, and freed memory stays with the process. By default glibc serves large blocks as fresh pages, faulted in
at about 2 us per 4 KB, and moves its threshold as they are freed, so whether a step's large buffers fault
depended on the process's allocation history: a 16 MB transfer's sender took either about 3.5 or 6.5-9 ms of CPU,
and the calibrated per-byte costs moved up to 39 % between calibrations minutes apart. Fixed, split two-tower
steps ran 13-22 % faster (`experiments/probes/allocator.py`, 2026-11-30). The measuring process, which runs the
one-process target as the user's own process runs it, keeps the user's environment: there a step's speed moved
with the process (two modes, 2.4-3.1 and 4.5-5.4 ms for two-tower `tiny`), not clearly with the setting."""


def _quiet_env() -> dict[str, str]:
    """The worker's environment: quiet TensorFlow logs, and placer importable even when not installed."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    package_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return env


def worker_environment(allocator_thresholds: Mapping[str, str] | None = None) -> dict[str, str]:
    """A testbed worker's environment: `_quiet_env`, with glibc's thresholds `FIXED_ALLOCATOR_THRESHOLDS` where this
    environment sets neither. `allocator_thresholds` replaces both instead ({} leaves glibc's moving default)."""
    env = _quiet_env()
    if allocator_thresholds is None:
        if not any(name in env for name in FIXED_ALLOCATOR_THRESHOLDS):
            env.update(FIXED_ALLOCATOR_THRESHOLDS)
        return env
    for name in FIXED_ALLOCATOR_THRESHOLDS:
        env.pop(name, None)
    env.update(allocator_thresholds)
    return env


def serve(cluster: dict, task: int, cores: list[int], threads: int, inter_threads: int | None = None) -> None:
    """Body of one worker process: pin, then serve until killed (or until the parent dies)."""
    die_with_parent()
    os.sched_setaffinity(0, cores)
    import tensorflow as tf

    # The server's config sizes the worker's CPU device pool (intra) and its executor's pool (inter).
    inter_threads = inter_threads or default_inter_op_threads(threads)
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=inter_threads)
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=JOB, task_index=task, config=config, start=True)
    server.join()


def run_up(workers: int, cores_per_worker: int, command: list[str], link_bits_per_second: int | None = None) -> int:
    """`placer cluster up`: inside the private namespace, start workers and run `command` next to them; with
    `link_bits_per_second`, two workers joined by a shaped link (`join_by_shaped_link`)."""
    isolated = os.environ.get("PLACER_TESTBED_EXPOSED") != "1"  # set by `placer cluster up --allow-exposed-ports`
    if isolated:
        bring_loopback_up()
        if not only_loopback():
            raise TestbedError("refusing to start: this network namespace has interfaces other than loopback")
    with start_servers(workers, cores_per_worker=cores_per_worker, isolated=isolated,
                       link_bits_per_second=link_bits_per_second) as servers:
        spec = json.dumps(servers.cluster_spec)
        over = f", over a link shaped to {link_bits_per_second / 1e6:g} Mbit/s" if link_bits_per_second else ""
        print(f"placer testbed: {workers} workers up{over}, cluster spec {spec} (cores {servers.cores})",
              file=sys.stderr)
        for note in servers.warnings:
            print(f"placer testbed: warning: {note}", file=sys.stderr)
        env = dict(os.environ, PLACER_CLUSTER=spec)
        if not command:
            command = [os.environ.get("SHELL", "/bin/sh")]
            print("placer testbed: starting a shell in the testbed's network namespace; $PLACER_CLUSTER holds the "
                  "cluster spec (use --target env); exit the shell to stop the testbed", file=sys.stderr)
        return subprocess.call(command, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m placer.testbed")
    sub = parser.add_subparsers(dest="action", required=True)
    serve_parser = sub.add_parser("serve", help="run one worker (internal)")
    serve_parser.add_argument("--cluster", required=True)
    serve_parser.add_argument("--task", type=int, required=True)
    serve_parser.add_argument("--cores", required=True)
    serve_parser.add_argument("--threads", type=int, default=1)
    serve_parser.add_argument("--inter-threads", type=int)
    up_parser = sub.add_parser("up", help="start workers here and run a command (internal: use `placer cluster up`)")
    up_parser.add_argument("--workers", type=int, default=2)
    up_parser.add_argument("--cores-per-worker", type=int, default=1)
    up_parser.add_argument("--link-bits", type=int, help="bits per second of a shaped link between the 2 workers")
    up_parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.action == "serve":
        serve(json.loads(args.cluster), args.task, [int(c) for c in args.cores.split(",")], args.threads,
              args.inter_threads)
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run_up(args.workers, args.cores_per_worker, command, args.link_bits)


if __name__ == "__main__":
    sys.exit(main())
