"""Where measurements run: logical CPU devices in one process, the local gRPC testbed, or a TF cluster.

`parse_target("inprocess:2" | "local:2" | "env" | CLUSTER_SPEC_JSON | path.json)` reads the command-line form.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from placer.errors import DeviceSpecError
from placer.host import usable_cores


@dataclass(frozen=True)
class InProcess:
    """N logical CPU devices (plus local GPUs) in the measurement worker's own TensorFlow runtime, with its
    session's thread pools: intra-op threads (how many run one op) and inter-op threads (how many ops run at
    once); None leaves TensorFlow's default (one per core for both)."""

    logical_cpus: int = 1
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None

    def __post_init__(self) -> None:
        # Thread pools wider than the cores would time the operating system's scheduler, not the setting.
        cores = usable_cores()
        for name, threads in (("intra", self.intra_op_threads), ("inter", self.inter_op_threads)):
            if threads is not None and not 1 <= threads <= cores:
                raise DeviceSpecError(
                    f"{name}={threads}: a thread pool needs 1 to {cores} threads here (this process may use {cores} "
                    f"cores: {sorted(os.sched_getaffinity(0))})"
                )

    def __str__(self) -> str:
        threads = [f"{name}={value}" for name, value in (("intra", self.intra_op_threads),
                                                          ("inter", self.inter_op_threads)) if value is not None]
        return ",".join([f"inprocess:{self.logical_cpus}", *threads])

    def worker_args(self) -> list[str]:
        args = ["--logical-cpus", str(self.logical_cpus)]
        if self.intra_op_threads is not None:
            args += ["--intra-op-threads", str(self.intra_op_threads)]
        if self.inter_op_threads is not None:
            args += ["--inter-op-threads", str(self.inter_op_threads)]
        return args


@dataclass(frozen=True)
class LocalTestbed:
    """N gRPC worker processes on this machine, each pinned to its own cores, in a private network namespace.

    `local:N` gives N workers of `cores_per_worker` cores; `worker_cores` gives each worker its own core set
    (workers of different widths: an op placed on a worker runs on that worker's intra-op threads), and
    `intra_op_threads` / `inter_op_threads` its session's thread pools (default: its cores, and one more)."""

    workers: int = 2
    cores_per_worker: int = 1
    allow_exposed_ports: bool = False
    """Run without a private network namespace where none can be made. The ports are then reachable from
    the network with no authentication: only for machines no untrusted host can reach."""
    worker_cores: tuple[tuple[int, ...], ...] | None = None
    """Each worker's cores (ids among those this process may use); None: `cores_per_worker` consecutive ones."""
    intra_op_threads: tuple[int, ...] | None = None
    """Per worker: threads that run one op; None: one per core of the worker."""
    inter_op_threads: tuple[int, ...] | None = None
    """Per worker: ops that run at once; None: its intra-op threads plus one (to keep transfers flowing)."""
    link_bits_per_second: int | None = None
    """Two workers in two network namespaces joined by a veth pair shaped to this rate with `tc` (token bucket), as
    two machines over one network link (`local:2,link=1gbit`); None: every worker talks over loopback."""
    allocator_thresholds: tuple[tuple[str, str], ...] | None = None
    """glibc's allocator thresholds in the workers' environment, as (variable, value) pairs; () leaves glibc's moving
    default; None: `placer.testbed.FIXED_ALLOCATOR_THRESHOLDS`, unless the environment sets them."""

    def __post_init__(self) -> None:
        cores = sorted(os.sched_getaffinity(0))
        if self.link_bits_per_second is not None:
            _check_link(self)
        if self.worker_cores is None:
            # Refused here rather than when the workers start: workers beyond the cores would share them (so
            # the step times would not be those of that many devices), and so many TensorFlow processes on few
            # cores may start so slowly that the testbed gives up only after minutes.
            wanted = self.workers * self.cores_per_worker
            if wanted > len(cores):
                per_worker = f" with {self.cores_per_worker} cores each" if self.cores_per_worker > 1 else ""
                fits = len(cores) // self.cores_per_worker
                instead = f"use local:{fits} or fewer{per_worker}" if fits else f"give each worker at most {len(cores)} cores"
                raise DeviceSpecError(
                    f"{self}{per_worker} needs {wanted} cores (one testbed worker per device, each pinned to cores of "
                    f"its own), but this process may use only {len(cores)}. {instead[0].upper()}{instead[1:]}; for "
                    f"more devices than cores, inprocess:{self.workers} gives logical CPU devices that share the "
                    "cores, and `placer train --backend simulated` models a bigger machine."
                )
        else:
            _check_core_sets(self.worker_cores, cores)
            if self.workers != len(self.worker_cores):
                raise DeviceSpecError(f"LocalTestbed: workers={self.workers} but {len(self.worker_cores)} core sets "
                                      "are given; give one core set per worker")
        for name, threads in (("intra", self.intra_op_threads), ("inter", self.inter_op_threads)):
            if threads is not None and len(threads) != self.workers:
                raise DeviceSpecError(f"{name}={'+'.join(map(str, threads))} gives {len(threads)} thread counts for "
                                      f"{self.workers} workers: give one per worker, or one for all")
        for task, worker in enumerate(self.layout()):
            _check_worker_threads(task, worker, cores)

    def layout(self):
        """Each worker's cores and thread pools (`placer.testbed.WorkerLayout`), as the testbed starts them."""
        from placer.testbed import WorkerLayout, default_inter_op_threads, uniform_layout

        core_sets = self.worker_cores or tuple(w.cores for w in uniform_layout(self.workers, self.cores_per_worker))
        workers = []
        for task, worker_cores in enumerate(core_sets):
            intra = self.intra_op_threads[task] if self.intra_op_threads else len(worker_cores)
            inter = self.inter_op_threads[task] if self.inter_op_threads else default_inter_op_threads(intra)
            workers.append(WorkerLayout(tuple(worker_cores), intra, inter))
        return tuple(workers)

    def __str__(self) -> str:
        if self.worker_cores is None:
            head = f"local:{self.workers}" if self.cores_per_worker == 1 else f"local:widths={'+'.join([str(self.cores_per_worker)] * self.workers)}"
        elif self.worker_cores == _consecutive(tuple(map(len, self.worker_cores))):
            head = f"local:widths={'+'.join(str(len(c)) for c in self.worker_cores)}"
        else:
            head = f"local:cores={'+'.join(_core_range(c) for c in self.worker_cores)}"
        threads = [f"{name}={'+'.join(map(str, value))}" for name, value in (("intra", self.intra_op_threads),
                                                                           ("inter", self.inter_op_threads)) if value]
        link = [f"link={format_rate(self.link_bits_per_second)}"] if self.link_bits_per_second else []
        return ",".join([head, *threads, *link])

    def worker_args(self) -> list[str]:
        link = ["--testbed-link", str(self.link_bits_per_second)] if self.link_bits_per_second else []
        allocator = ([] if self.allocator_thresholds is None else
                     ["--testbed-allocator", json.dumps(dict(self.allocator_thresholds))])
        return ["--testbed-layout", json.dumps([[list(w.cores), w.intra_op_threads, w.inter_op_threads]
                                                for w in self.layout()]), *link, *allocator]


LINK_WORKERS = 2
"""Workers a shaped link joins: one veth pair joins two namespaces."""
SLOWEST_LINK = 1_000_000
"""The slowest link accepted, in bits per second: below it a calibration's megabyte probes take minutes each."""
RATE_UNITS = {"gbit": 1_000_000_000, "mbit": 1_000_000, "kbit": 1_000, "bit": 1}
"""`tc`'s rate units (decimal, as tc reads them), largest first."""


def parse_rate(text: str, where: str = "") -> int:
    """Bits per second of "1gbit", "100mbit", "2.5gbit" or a plain number of bits per second."""
    lowered = text.strip().lower()
    for unit, scale in RATE_UNITS.items():
        if lowered.endswith(unit):
            number = lowered[: -len(unit)]
            break
    else:
        number, scale = lowered, 1
    try:
        rate = float(number) * scale
    except ValueError:
        raise DeviceSpecError(f"{where or text!r}: {text!r} is not a link rate; write it as tc does, e.g. 1gbit, "
                              "100mbit or 2.5gbit") from None
    if not rate >= SLOWEST_LINK:
        raise DeviceSpecError(f"{where or text!r}: a link of {text} is slower than the {format_rate(SLOWEST_LINK)} "
                              "a testbed link may be (a calibration's probes would take minutes each)")
    return int(rate)


def format_rate(bits_per_second: int) -> str:
    """The shortest of tc's spellings: 1_000_000_000 -> "1gbit", 2_500_000_000 -> "2500mbit"."""
    for unit, scale in RATE_UNITS.items():
        if bits_per_second % scale == 0:
            return f"{bits_per_second // scale}{unit}"
    return f"{bits_per_second}bit"


def _check_link(testbed: "LocalTestbed") -> None:
    """Refuse, in one line, a shaped link this machine cannot make or a testbed it cannot join."""
    check_shaped_link(testbed.workers, testbed.link_bits_per_second, testbed.allow_exposed_ports,
                      spelled=f"local:{testbed.workers},link={format_rate(testbed.link_bits_per_second)}")


def check_shaped_link(workers: int, bits_per_second: int, allow_exposed_ports: bool, spelled: str) -> None:
    """Refuse, in one line, a shaped link (`spelled` as the user wrote it) between other than two workers, without
    the private network namespaces, or on a machine that cannot make one (`placer.testbed.shaped_link_unavailable`)."""
    from placer.testbed import shaped_link_unavailable

    if workers != LINK_WORKERS:
        raise DeviceSpecError(f"{spelled}: a link of {format_rate(bits_per_second)} joins {LINK_WORKERS} workers over "
                              f"one shaped link, not {workers}")
    if allow_exposed_ports:
        raise DeviceSpecError(f"{spelled}: a shaped link needs the testbed's private network namespaces, which "
                              "--allow-exposed-ports goes without: leave the link out, or run where `unshare -rn` works")
    why = shaped_link_unavailable()
    if why:
        raise DeviceSpecError(f"{spelled} cannot be made here: {why}")


def _check_core_sets(core_sets: tuple[tuple[int, ...], ...], available: list[int]) -> None:
    """Refuse empty, overlapping or unavailable core sets (so the workers never need more cores than this process
    may use)."""
    where = f"this process may use {len(available)} cores: {available}"
    if not core_sets:
        raise DeviceSpecError(f"a testbed needs at least one worker with at least one core ({where})")
    for task, cores in enumerate(core_sets):
        if not cores:
            raise DeviceSpecError(f"worker {task} has an empty core set: give every worker at least one core ({where})")
    used = [core for cores in core_sets for core in cores]
    shared = sorted({core for core in used if used.count(core) > 1})
    if shared:
        raise DeviceSpecError(f"core {shared[0]} is in more than one worker's core set ({where}): each worker needs "
                              "cores of its own, or their step times measure the scheduler, not the widths")
    outside = sorted(set(used) - set(available))
    if outside:
        raise DeviceSpecError(f"cores {outside} are not among the cores this process may use ({where})")


def _check_worker_threads(task: int, worker, available: list[int]) -> None:
    cores = len(worker.cores)
    if not 1 <= worker.intra_op_threads <= cores:
        raise DeviceSpecError(
            f"worker {task} has {cores} core{'s' * (cores > 1)} ({list(worker.cores)}) but intra={worker.intra_op_threads}: "
            f"an op on it runs on at most {cores} thread{'s' * (cores > 1)}; give it more cores (the process may use {available}) "
            "or fewer intra-op threads"
        )
    # One inter-op thread beyond the intra-op ones is the testbed's default (transfers); more would only
    # time the operating system's scheduler.
    if not 1 <= worker.inter_op_threads <= cores + 1:
        raise DeviceSpecError(
            f"worker {task} has {cores} core{'s' * (cores > 1)} ({list(worker.cores)}) but inter={worker.inter_op_threads}: "
            f"give it 1 to {cores + 1} inter-op threads (its cores, and one more for transfers)"
        )


def _consecutive(widths: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Core sets of the given widths, side by side from the first core this process may use."""
    available = sorted(os.sched_getaffinity(0))
    if any(w < 1 for w in widths):
        raise DeviceSpecError(f"widths={'+'.join(map(str, widths))}: every worker needs at least one core (this "
                              f"process may use {len(available)} cores: {available})")
    if sum(widths) > len(available):
        raise DeviceSpecError(
            f"widths={'+'.join(map(str, widths))} need {sum(widths)} cores but this process may use {len(available)}: "
            f"{available}; give the workers at most {len(available)} cores in all"
        )
    starts = [sum(widths[:i]) for i in range(len(widths))]
    return tuple(tuple(available[s:s + w]) for s, w in zip(starts, widths))


def _core_range(cores: tuple[int, ...]) -> str:
    if len(cores) > 1 and list(cores) == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ".".join(map(str, cores))


@dataclass(frozen=True)
class RemoteCluster:
    """An existing TensorFlow cluster, reached through the master of its first task (or `master`)."""

    cluster_spec: dict = field(hash=False)
    master: str | None = None

    def __str__(self) -> str:
        return self.target

    @property
    def target(self) -> str:
        if self.master:
            return self.master
        job = sorted(self.cluster_spec)[0]
        tasks = self.cluster_spec[job]
        first = tasks[sorted(tasks)[0]] if isinstance(tasks, dict) else tasks[0]
        return f"grpc://{first}"

    def worker_args(self) -> list[str]:
        return ["--target", self.target, "--cluster-spec", json.dumps(self.cluster_spec)]


Target = Union[InProcess, LocalTestbed, RemoteCluster]


def parse_target(text: str, *, allow_exposed_ports: bool = False) -> Target:
    """Read `inprocess:N` (optionally `inprocess:N,intra=I,inter=J`), `local:N` (optionally `local:widths=2+1`,
    `local:cores=0-1+2`, with `intra=` and `inter=` per worker as in `intra=2+1`, or one for all), `env` ($PLACER_CLUSTER, set by `placer cluster up`), a JSON cluster
    spec such as '{"worker": ["localhost:2222", "localhost:2223"]}', or a path to a file holding one."""
    text = text.strip()
    kind, _, count = text.partition(":")
    if kind == "inprocess":
        return _parse_inprocess(text)
    if kind == "local":
        return _parse_local(text, allow_exposed_ports)
    if text == "env":
        if "PLACER_CLUSTER" not in os.environ:
            raise DeviceSpecError("--target env needs $PLACER_CLUSTER, which `placer cluster up` sets in its shell")
        text = os.environ["PLACER_CLUSTER"]
    elif not text.startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise DeviceSpecError(
                f"{text!r} is not a cluster: use inprocess:N, local:N, env, a JSON cluster spec or a path to one"
            )
        text = path.read_text()
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as error:
        raise DeviceSpecError(f"cluster spec is not valid JSON: {error.msg}") from None
    if not isinstance(spec, dict) or not spec:
        raise DeviceSpecError('a cluster spec maps job names to address lists, e.g. {"worker": ["localhost:2222"]}')
    return RemoteCluster(spec)


def _parse_inprocess(text: str) -> InProcess:
    """`inprocess:N`, optionally with thread pools: `inprocess:1,intra=2,inter=1`."""
    count, *settings = text.partition(":")[2].split(",")
    if not count.isdigit() or int(count) < 1:
        raise DeviceSpecError(f"{text!r}: expected inprocess:N with N a positive number of devices, e.g. inprocess:2")
    threads: dict[str, int] = {}
    for setting in settings:
        name, _, value = setting.partition("=")
        if name not in ("intra", "inter") or not value.isdigit() or name in threads:
            raise DeviceSpecError(
                f"{text!r}: after inprocess:N come thread pools as intra=I and inter=J (each at most once), "
                f"e.g. inprocess:1,intra=1,inter=2; not {setting!r}"
            )
        threads[name] = int(value)
    return InProcess(int(count), threads.get("intra"), threads.get("inter"))


def _parse_local(text: str, allow_exposed_ports: bool) -> LocalTestbed:
    """`local:N`, `local:widths=W1+W2+...` (consecutive cores) or `local:cores=0-1+2` (each worker's core
    range or dot-separated cores), optionally with per-worker threads: `local:widths=2+1,intra=1+1,inter=2+2`,
    and for two workers a shaped link between them: `local:2,link=1gbit`."""
    head, *settings = text.partition(":")[2].split(",")
    usage = ("expected local:N, local:widths=W1+W2 or local:cores=0-1+2, then optionally intra=I and inter=J "
             "(one count for all workers, or one per worker: intra=2+1) and link=RATE (two workers over a link shaped "
             "to RATE), e.g. local:widths=1+1,intra=1 or local:2,link=1gbit")
    links = [setting for setting in settings if setting.startswith("link=")]
    if len(links) > 1:
        raise DeviceSpecError(f"{text!r}: one link=RATE at most; {usage}")
    link = parse_rate(links[0].partition("=")[2], text) if links else None
    settings = [setting for setting in settings if setting not in links]
    name, _, value = head.partition("=")
    if head.isdigit() and int(head) >= 1:
        workers, core_sets = int(head), None
    elif name == "widths" and value:
        core_sets = _consecutive(tuple(_count(part, text, usage) for part in value.split("+")))
        workers = len(core_sets)
    elif name == "cores" and value:
        core_sets = tuple(_cores(part, text) for part in value.split("+"))
        workers = len(core_sets)
    else:
        raise DeviceSpecError(f"{text!r}: {usage}")
    threads: dict[str, tuple[int, ...]] = {}
    for setting in settings:
        name, _, value = setting.partition("=")
        if name not in ("intra", "inter") or name in threads or not value:
            raise DeviceSpecError(f"{text!r}: not {setting!r}; {usage}")
        counts = tuple(_count(part, text, usage) for part in value.split("+"))
        threads[name] = counts * workers if len(counts) == 1 else counts
    if core_sets is None and not threads:
        return LocalTestbed(workers, allow_exposed_ports=allow_exposed_ports, link_bits_per_second=link)
    return LocalTestbed(workers, allow_exposed_ports=allow_exposed_ports,
                        worker_cores=core_sets or _consecutive((1,) * workers),
                        intra_op_threads=threads.get("intra"), inter_op_threads=threads.get("inter"),
                        link_bits_per_second=link)


def _count(part: str, text: str, usage: str) -> int:
    if not part.isdigit():
        raise DeviceSpecError(f"{text!r}: {part!r} is not a count; {usage}")
    return int(part)


def _cores(part: str, text: str) -> tuple[int, ...]:
    """One worker's cores: "2", "0-3" or "0.2" (dots, as commas separate the settings)."""
    low, dash, high = part.partition("-")
    try:
        if dash:
            return tuple(range(int(low), int(high) + 1))
        return tuple(int(core) for core in part.split(".")) if part else ()
    except ValueError:
        raise DeviceSpecError(f"{text!r}: {part!r} is not a core set; write a core (2), a range (0-3) or cores "
                              "joined by dots (0.2), and separate workers with +") from None
