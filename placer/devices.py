"""The devices a graph is placed on: the local machine, a TF cluster, or a modeled machine from a file.

Device names are TensorFlow's full names ("/job:worker/replica:0/task:1/device:CPU:0"); users may write
any unambiguous short form ("CPU:1", "task:1/CPU:0", or "worker:1/CPU:0" as `short_name` shows it) wherever
a device is named.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Mapping

from placer.errors import DeviceSpecError
from placer.kernel_model import KernelModel, unknown_op_types

_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


@dataclass(frozen=True)
class Device:
    """One device ops can be placed on, with what a cost model needs to know about it."""

    name: str
    """Full TensorFlow device name, e.g. /job:localhost/replica:0/task:0/device:CPU:0."""
    kind: str
    """Device type: "CPU" or "GPU"."""
    memory_bytes: int | None = None
    peak_flops: float | None = None
    """Peak floating-point operations per second."""
    memory_bandwidth: float | None = None
    """Bytes per second between the device and its memory."""
    model: str | None = None
    """Hardware model, e.g. "V100"; informative."""
    cores: int | None = None
    """CPU cores this device's threads run on, its own (a testbed worker's core set); None if not known or
    shared with the other devices (logical CPU devices of one process)."""
    intra_op_threads: int | None = None
    """Threads one op runs on here (its width); None: TensorFlow's default (one per core)."""
    inter_op_threads: int | None = None
    """Ops that run here at once; None: TensorFlow's default."""
    kernels: KernelModel | None = None
    """How close its kernels come to its peaks (per-op-type efficiencies, a floor, TF32); None: the roofline's
    defaults, or the model's in `placer.hardware` when `model` names one."""

    @property
    def width(self) -> int | None:
        """Threads an op placed here runs on: the intra-op threads, else the device's own cores, else None."""
        return self.intra_op_threads or self.cores

    @property
    def short_name(self) -> str:
        """The name a person reads: "CPU:1" on one machine, "worker:1/CPU:0" on a cluster (`short_name`)."""
        return short_name(self.name)


@dataclass(frozen=True)
class Link:
    """A connection between two devices, for the simulator: latency plus bytes / bandwidth."""

    source: str
    target: str
    bandwidth: float
    """Bytes per second."""
    latency: float = 0.0
    """Seconds per transfer."""


@dataclass(frozen=True)
class DeviceSet:
    """An ordered list of devices (the order is the index an action or placement uses) and their links."""

    devices: tuple[Device, ...]
    links: tuple[Link, ...] = ()
    name: str = "devices"

    def __post_init__(self):
        if not self.devices:
            raise DeviceSpecError(f"device set {self.name!r} is empty: a placement needs at least one device")
        names = [d.name for d in self.devices]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise DeviceSpecError(f"device set {self.name!r} lists {duplicates} more than once")

    def __len__(self) -> int:
        return len(self.devices)

    def __iter__(self):
        return iter(self.devices)

    def __getitem__(self, index: int) -> Device:
        return self.devices[index]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    def index(self, name: str) -> int:
        """Index of the device a (possibly short) name refers to; DeviceSpecError if none or several match."""
        found = self._indices.get(name)
        if found is None:
            found = self._indices[name] = self.names.index(self.resolve(name).name)
        return found

    @cached_property
    def _indices(self) -> dict[str, int]:
        """Names already resolved: a placement of a paper-size micro-batched step resolves 10^5 op devices, and
        parsing each name took seconds per placement."""
        return {}

    def resolve(self, name: str) -> Device:
        wanted = _spec(name)
        if wanted is None:
            raise DeviceSpecError(f"{name!r} is not a device name; expected e.g. 'CPU:0' or '{self.devices[0].name}'")
        matches = [d for d in self.devices if _matches(wanted, _spec(d.name))]
        if len(matches) == 1:
            return matches[0]
        known = ", ".join(d.short_name for d in self.devices)
        if not matches:
            raise DeviceSpecError(f"unknown device {name!r}; the devices of {self.name!r} are: {known}")
        raise DeviceSpecError(f"device name {name!r} is ambiguous in {self.name!r} ({known}); give the job and task too")

    def with_widths(self, widths) -> DeviceSet:
        """The same devices, the i-th carrying widths[i] = (cores, intra-op threads, inter-op threads): e.g. the
        testbed's workers, each pinned to cores of its own."""
        from dataclasses import replace

        widths = list(widths)
        if len(widths) != len(self.devices):
            raise DeviceSpecError(f"{len(widths)} widths for the {len(self.devices)} devices of {self.name!r}: give one each")
        devices = tuple(replace(device, cores=cores, intra_op_threads=intra, inter_op_threads=inter)
                        for device, (cores, intra, inter) in zip(self.devices, widths))
        return DeviceSet(devices, self.links, self.name)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "devices": [asdict(d) for d in self.devices], "links": [asdict(l) for l in self.links]}


def short_name(name: str) -> str:
    """A device's name as tables, charts and traces show it: without the parts every device of a single-task
    machine shares ("CPU:1", "GPU:0"), with job and task otherwise ("worker:1/CPU:0"), so that two devices
    never share a label. The one shortening of device names in placer: use it wherever a person reads one."""
    job, task, kind, index = _parts(name)
    prefix = "" if (job, task) == ("localhost", 0) else f"{job}:{task}/"
    return f"{prefix}{kind}:{index}"


def name_parts(name: str) -> tuple[str, int, str, int]:
    """(job, task, kind, index) of a full or short device name, e.g. to sort names; DeviceSpecError if none."""
    return _parts(name)


def local_devices(logical_cpus: int = 1, intra_op_threads: int | None = None,
                  inter_op_threads: int | None = None) -> DeviceSet:
    """The devices of an in-process TensorFlow session: `logical_cpus` CPU devices (with the session's thread
    pools, which they share), then every local GPU.

    The CPU devices share one thread pool: placement across them exercises the machinery but changes step
    time little; the local gRPC testbed (`local:N`) is where placement matters on a CPU-only machine.
    """
    import tensorflow as tf

    if logical_cpus < 1:
        raise DeviceSpecError(f"logical_cpus must be at least 1, got {logical_cpus}")
    devices = [Device(f"/job:localhost/replica:0/task:0/device:CPU:{i}", "CPU", intra_op_threads=intra_op_threads,
                      inter_op_threads=inter_op_threads) for i in range(logical_cpus)]
    for index, _ in enumerate(tf.config.list_physical_devices("GPU")):
        devices.append(Device(f"/job:localhost/replica:0/task:0/device:GPU:{index}", "GPU"))
    return DeviceSet(tuple(devices), name=f"local ({logical_cpus} CPU)")


def cluster_devices(cluster_spec: Mapping[str, Iterable[str]], *, gpus_per_task: int = 0) -> DeviceSet:
    """One CPU (and `gpus_per_task` GPUs) per task of every job of a ClusterSpec-like mapping."""
    if not isinstance(cluster_spec, Mapping) or not cluster_spec:
        raise DeviceSpecError(f"a cluster spec maps job names to lists of 'host:port' addresses, got {cluster_spec!r}")
    devices = []
    for job in sorted(cluster_spec):
        tasks = cluster_spec[job]
        if isinstance(tasks, str) or not isinstance(tasks, (list, tuple, dict)):
            raise DeviceSpecError(f"job {job!r} of the cluster spec must list addresses, got {tasks!r}")
        task_ids = sorted(tasks) if isinstance(tasks, dict) else range(len(tasks))
        for task in task_ids:
            devices.append(Device(f"/job:{job}/replica:0/task:{task}/device:CPU:0", "CPU"))
            for gpu in range(gpus_per_task):
                devices.append(Device(f"/job:{job}/replica:0/task:{task}/device:GPU:{gpu}", "GPU"))
    return DeviceSet(tuple(devices), name="cluster")


def load_machine(path: str | Path) -> DeviceSet:
    """Read a modeled machine from YAML or JSON (see docs in README: devices with kind, memory, speed; links)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise DeviceSpecError(f"cannot read machine file {path}: {error.strerror}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as error:  # both parsers' errors say where the syntax broke
        raise DeviceSpecError(f"machine file {path} is not valid {path.suffix[1:].upper() or 'JSON'}: {error}") from None
    return machine_from_dict(data, source=str(path))


def machine_from_dict(data: Any, *, source: str = "machine") -> DeviceSet:
    if not isinstance(data, Mapping) or not isinstance(data.get("devices"), list):
        raise DeviceSpecError(f"{source}: a machine needs a 'devices' list")
    devices = []
    for i, entry in enumerate(data["devices"]):
        where = f"{source}: devices[{i}]"
        if not isinstance(entry, Mapping) or "name" not in entry:
            raise DeviceSpecError(f"{where} needs at least a 'name' (e.g. GPU:0)")
        name = _full_name(str(entry["name"]), where)
        kind = str(entry.get("kind", _parts(name)[2])).upper()
        if kind not in ("CPU", "GPU"):
            raise DeviceSpecError(f"{where}: kind must be CPU or GPU, got {kind!r}")
        devices.append(
            Device(
                name=name,
                kind=kind,
                memory_bytes=_quantity(entry.get("memory"), f"{where}.memory", integer=True),
                peak_flops=_quantity(entry.get("peak_flops"), f"{where}.peak_flops"),
                memory_bandwidth=_quantity(entry.get("memory_bandwidth"), f"{where}.memory_bandwidth"),
                model=entry.get("model"),
                kernels=None if entry.get("kernels") is None else _kernels(entry["kernels"], f"{where}.kernels"),
                **_widths(entry, where, kind),
            )
        )
    device_set = DeviceSet(tuple(devices), name=str(data.get("name", source)))
    links = []
    for i, entry in enumerate(data.get("links") or []):
        where = f"{source}: links[{i}]"
        if not isinstance(entry, Mapping) or not {"source", "target", "bandwidth"} <= set(entry):
            raise DeviceSpecError(f"{where} needs source, target and bandwidth")
        links.append(
            Link(
                source=device_set.resolve(str(entry["source"])).name,
                target=device_set.resolve(str(entry["target"])).name,
                bandwidth=_quantity(entry["bandwidth"], f"{where}.bandwidth"),
                latency=_quantity(entry.get("latency", 0.0), f"{where}.latency"),
            )
        )
    return DeviceSet(device_set.devices, tuple(links), device_set.name)


def _widths(entry: Mapping[str, Any], where: str, kind: str) -> dict[str, int]:
    """A modeled CPU device's cores and thread pools (a partitioned worker), checked against each other."""
    found = {}
    for key in ("cores", "intra_op_threads", "inter_op_threads"):
        value = entry.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DeviceSpecError(f"{where}.{key} must be a positive whole number, got {value!r}")
        found[key] = value
    if found and kind != "CPU":
        raise DeviceSpecError(f"{where}: cores and thread pools describe CPU devices, not {kind}")
    cores, intra = found.get("cores"), found.get("intra_op_threads")
    if cores is not None and intra is not None and intra > cores:
        raise DeviceSpecError(f"{where}: intra_op_threads={intra} exceeds its {cores} cores: an op here runs on at "
                              f"most {cores} threads")
    return found


def _kernels(data: Any, where: str) -> KernelModel:
    """A device's `kernels:` entry, checked: known keys, op types TensorFlow has, efficiencies in (0, 1]."""
    if not isinstance(data, Mapping):
        raise DeviceSpecError(f"{where} is a mapping (efficiency, op_efficiency, tensor_float_32, ...), got {data!r}")
    known = set(KernelModel.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise DeviceSpecError(f"{where}: unknown keys {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values = dict(data)
    for key in ("efficiency", "tensor_core_flops", "op_floor", "launch_overhead"):
        if values.get(key) is not None:
            values[key] = _quantity(values[key], f"{where}.{key}")
    for key in ("op_efficiency", "tf32_op_efficiency", "op_fixed_seconds", "tf32_op_fixed_seconds"):
        if key not in values:
            continue
        if not isinstance(values[key], Mapping):
            raise DeviceSpecError(f"{where}.{key} maps op types to numbers, got {values[key]!r}")
        values[key] = {str(op_type): _quantity(value, f"{where}.{key}[{op_type}]")
                       for op_type, value in values[key].items()}
        unknown = unknown_op_types(values[key])
        if unknown:
            raise DeviceSpecError(f"{where}.{key} names op types TensorFlow does not have: {', '.join(unknown)} "
                                  "(op types are TensorFlow's, e.g. MatMul, Conv2D)")
    if not isinstance(values.get("tensor_float_32", False), bool):
        raise DeviceSpecError(f"{where}.tensor_float_32 is true or false, got {values['tensor_float_32']!r}")
    values.setdefault("source", f"{where} (no source given)")
    return KernelModel(**values)


def _quantity(value: Any, where: str, integer: bool = False) -> Any:
    """Numbers, or strings with SI / binary suffixes: "16GiB", "900e9", "15.7T"."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([kKmMgGtT]i?)?[bB]?(?:/s)?\s*", str(value))
        if not match:
            raise DeviceSpecError(f"{where}: cannot read {value!r} as a number (e.g. 16GiB, 900e9)")
        try:
            number = float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
        except ValueError:
            raise DeviceSpecError(f"{where}: cannot read {value!r} as a number") from None
    if number < 0:
        raise DeviceSpecError(f"{where} must not be negative, got {value!r}")
    return int(number) if integer else number


# TensorFlow's full name and its short forms; also "worker:1/CPU:0", the form `short_name` gives a cluster's devices.
_NAME = re.compile(
    r"^(?:(?:/?job:(?P<job>[^/]+))?(?:/replica:(?P<replica>\d+))?(?:/?task:(?P<task>\d+))?"
    r"|(?P<short_job>[A-Za-z_][\w-]*):(?P<short_task>\d+)/)"
    r"/?(?:device:)?(?P<kind>[A-Za-z_]+):(?P<index>\d+)$"
)


def _spec(name: str) -> dict[str, Any] | None:
    match = _NAME.match(name.strip())
    if not match:
        return None
    parts = match.groupdict()
    job, task = parts["job"] or parts["short_job"], parts["task"] or parts["short_task"]
    return {
        "job": job,
        "task": None if task is None else int(task),
        "kind": parts["kind"].upper(),
        "index": int(parts["index"]),
    }


def _matches(wanted: Mapping[str, Any], actual: Mapping[str, Any] | None) -> bool:
    return actual is not None and all(v is None or actual[k] == v for k, v in wanted.items())


def _parts(name: str) -> tuple[str, int, str, int]:
    spec = _spec(name)
    if spec is None:
        raise DeviceSpecError(f"{name!r} is not a device name")
    return spec["job"] or "localhost", spec["task"] or 0, spec["kind"], spec["index"]


def _full_name(name: str, where: str) -> str:
    if _spec(name) is None:
        raise DeviceSpecError(f"{where}: {name!r} is not a device name (e.g. GPU:0 or /job:worker/task:1/device:GPU:0)")
    job, task, kind, index = _parts(name)
    return f"/job:{job}/replica:0/task:{task}/device:{kind}:{index}"
