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
        cores = len(os.sched_getaffinity(0))
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
    """N gRPC worker processes on this machine, each pinned to its own cores, in a private network namespace."""

    workers: int = 2
    cores_per_worker: int = 1
    allow_exposed_ports: bool = False
    """Run without a private network namespace where none can be made. The ports are then reachable from
    the network with no authentication: only for machines no untrusted host can reach."""

    def __post_init__(self) -> None:
        # Refused here rather than when the workers start: workers beyond the cores would share them (so the
        # step times would not be those of that many devices), and so many TensorFlow processes on few cores
        # may start so slowly that the testbed gives up only after minutes.
        cores = len(os.sched_getaffinity(0))
        wanted = self.workers * self.cores_per_worker
        if wanted > cores:
            per_worker = f" with {self.cores_per_worker} cores each" if self.cores_per_worker > 1 else ""
            fits = cores // self.cores_per_worker
            instead = f"use local:{fits} or fewer{per_worker}" if fits else f"give each worker at most {cores} cores"
            raise DeviceSpecError(
                f"{self}{per_worker} needs {wanted} cores (one testbed worker per device, each pinned to cores of "
                f"its own), but this process may use only {cores}. {instead[0].upper()}{instead[1:]}; for more "
                f"devices than cores, inprocess:{self.workers} gives logical CPU devices that share the cores, "
                "and `placer train --backend simulated` models a bigger machine."
            )

    def __str__(self) -> str:
        return f"local:{self.workers}"

    def worker_args(self) -> list[str]:
        return ["--testbed-workers", str(self.workers), "--cores-per-worker", str(self.cores_per_worker)]


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
    """Read `inprocess:N` (optionally `inprocess:N,intra=I,inter=J`), `local:N`, `env` ($PLACER_CLUSTER, set by `placer cluster up`), a JSON cluster
    spec such as '{"worker": ["localhost:2222", "localhost:2223"]}', or a path to a file holding one."""
    text = text.strip()
    kind, _, count = text.partition(":")
    if kind == "inprocess":
        return _parse_inprocess(text)
    if kind == "local":
        if not count.isdigit() or int(count) < 1:
            raise DeviceSpecError(f"{text!r}: expected {kind}:N with N a positive number of devices, e.g. {kind}:2")
        return LocalTestbed(int(count), allow_exposed_ports=allow_exposed_ports)
    if text == "env":
        if "PLACER_CLUSTER" not in os.environ:
            raise DeviceSpecError("--cluster env needs $PLACER_CLUSTER, which `placer cluster up` sets in its shell")
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
