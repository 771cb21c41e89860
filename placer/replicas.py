"""Data parallelism in a plan: how many replicas run the step, each on its own group of devices and its own slice
of the batch, and how their gradients are combined; which device of the machine each replica's devices are.

A replica is the step built at the slice's batch, placed on the devices of one group; every replica has the same
placement, on its own group. Degree 1 is a plan without replicas.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from placer.devices import DeviceSet
from placer.errors import ReplicaError

if TYPE_CHECKING:
    from placer.graph.opgraph import OpGraph
    from placer.placement import Placement

GRADIENT_EXCHANGES = ("all-reduce", "one-device")
"""How replicas combine their gradients: a ring all-reduce over the devices that hold a gradient in each replica
(NCCL's, as MirroredStrategy and DDP run it), or a sum on the one device the replicas share that holds the
variable (a parameter server)."""


@dataclass(frozen=True)
class Replicas:
    """`degree` replicas of the step, each running `batch` samples of the batch."""

    degree: int
    batch: int
    """The slice of the batch each replica runs: the model's batch / degree."""
    gradients: str = "all-reduce"

    def __post_init__(self):
        for name, value in (("degree", self.degree), ("batch", self.batch)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ReplicaError(f"replicas: {name} must be a positive whole number, got {value!r}")
        if self.gradients not in GRADIENT_EXCHANGES:
            raise ReplicaError(f"replicas: gradients are combined by {' or '.join(GRADIENT_EXCHANGES)}, "
                               f"not {self.gradients!r}")

    @classmethod
    def of_batch(cls, batch: int | None, degree: int, gradients: str = "all-reduce") -> Replicas:
        """`degree` replicas of a step of `batch` samples; refuses a degree that does not divide the batch."""
        if batch is None:
            raise ReplicaError("replicas need a model that can be built at another batch (a built-in model with a "
                               "batch: placer models); this one cannot, so it cannot be sliced over replicas")
        if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
            raise ReplicaError(f"the number of replicas must be a positive whole number, got {degree!r}")
        if batch % degree:
            raise ReplicaError(f"{degree} replicas do not divide the batch of {batch} samples: give a divisor of "
                               f"{batch} ({', '.join(str(d) for d in range(2, batch + 1) if batch % d == 0)})")
        return cls(degree, batch // degree, gradients)

    @property
    def name(self) -> str:
        """"data parallel x8" (one word per concept: the plan's row names it so)."""
        return f"data parallel x{self.degree}"

    def to_json_dict(self) -> dict[str, Any]:
        return {"degree": self.degree, "batch": self.batch, "gradients": self.gradients}

    @classmethod
    def from_json_dict(cls, data: Any, source: str = "replicas") -> Replicas:
        if not isinstance(data, Mapping) or not {"degree", "batch"} <= set(data):
            raise ReplicaError(f"{source}: replicas are {{'degree': D, 'batch': B, 'gradients': ...}}, got {data!r}")
        return cls(data["degree"], data["batch"], data.get("gradients", "all-reduce"))


def replica_degrees(gpus: int, batch: int | None, *, least: int = 2) -> tuple[int, ...]:
    """The numbers of replicas a machine of `gpus` GPUs can run a step of `batch` samples in: every divisor of the
    GPUs from `least` up that divides the batch too, the most replicas (one GPU each) first; none where the model
    cannot be built at another batch (`batch` None)."""
    if batch is None:
        return ()
    return tuple(d for d in range(gpus, least - 1, -1) if gpus % d == 0 and batch % d == 0)


def check_replicas_fit(graph: OpGraph, machine: DeviceSet, degree: int, bytes_per_parameter: int = 4) -> None:
    """Refuses `degree` replicas when one replica's weights and optimizer state alone (every replica holds a copy),
    spread evenly over its share of the GPUs, do not fit a GPU's memory: no placement of the replica can fit then.
    Activations come on top, so a degree that passes may still run out of memory when priced."""
    gpus = [d for d in machine.devices if d.kind == "GPU" and d.memory_bytes]
    if not gpus or degree < 1 or len(gpus) % degree:
        return
    state = graph.num_parameters * bytes_per_parameter
    per_gpu, smallest = state / (len(gpus) // degree), min(gpus, key=lambda d: d.memory_bytes)
    if per_gpu > smallest.memory_bytes:
        raise ReplicaError(f"{degree} replicas do not fit {machine.name}: each holds {graph.name}'s weights and "
                           f"optimizer state, {state / 1e9:.2f} GB, which over its {len(gpus) // degree} GPU(s) is "
                           f"{per_gpu / 1e9:.2f} GB a GPU, more than {smallest.name}'s {smallest.memory_bytes / 1e9:.2f} "
                           f"GB: give fewer replicas")


def replica_devices(machine: DeviceSet, replica_machine: DeviceSet, degree: int) -> list[dict[str, str]]:
    """For each replica, its devices' names on `replica_machine` (the group one replica is placed on) -> the device
    of `machine` it runs on. Devices of each kind are dealt out in order, a group after another (replica r's
    GPU:j is the machine's GPU:(r k + j) for k GPUs a group); a kind the machine has too few of for a group each
    (the host CPU of a GPU server) is shared by every replica. Refuses groups the machine has no room for."""
    by_kind: dict[str, list[str]] = {}
    for device in machine.devices:
        by_kind.setdefault(device.kind, []).append(device.name)
    wanted = Counter(device.kind for device in replica_machine.devices)
    mapping: list[dict[str, str]] = [{} for _ in range(degree)]
    position: Counter = Counter()
    for device in replica_machine.devices:
        kind = device.kind
        have = by_kind.get(kind, [])
        if len(have) < wanted[kind]:
            raise ReplicaError(f"a replica's group needs {wanted[kind]} {kind} device(s), and {machine.name} has "
                               f"{len(have)}")
        index = position[kind]
        position[kind] += 1
        shared = len(have) < degree * wanted[kind]
        if shared and kind != "CPU":
            raise ReplicaError(f"{degree} replicas of {wanted[kind]} {kind} device(s) each need {degree * wanted[kind]}; "
                               f"{machine.name} has {len(have)}: give a degree that divides its {kind}s")
        for replica in range(degree):
            mapping[replica][device.name] = have[index if shared else replica * wanted[kind] + index]
    return mapping


def first_group(machine: DeviceSet, degree: int) -> DeviceSet:
    """The devices replica 0 runs on, when `degree` replicas share `machine`: of each kind, the first 1 / degree
    (a kind too few for a share each, the host CPU of a GPU server, is shared whole: its first device)."""
    by_kind: dict[str, list] = {}
    for device in machine.devices:
        by_kind.setdefault(device.kind, []).append(device)
    chosen = []
    for kind, devices in by_kind.items():
        share = len(devices) // degree
        if share == 0 and kind != "CPU":
            raise ReplicaError(f"{degree} replicas need a {kind} each, and {machine.name} has {len(devices)}")
        chosen += devices[:max(share, 1)]
    names = {d.name for d in chosen}
    order = tuple(d for d in machine.devices if d.name in names)
    return DeviceSet(order, tuple(l for l in machine.links if l.source in names and l.target in names),
                     f"{machine.name}, replica 0 of {degree}")


def data_parallel_step(replica_graph: OpGraph, replica_placement: Placement, machine: DeviceSet,
                       degree: int) -> tuple[OpGraph, Placement]:
    """The data-parallel step as TensorFlow runs it on one machine or cluster: `degree` in-graph copies of
    `replica_graph` (the step at one replica's slice of the batch) in one graph, copy r on replica r's devices
    (`replica_devices`), each placed as `replica_placement` places replica 0 (on `first_group`), the copies'
    gradients averaged where replica 0 holds each variable and applied there once ("one-device" exchange: the
    variables live with replica 0, the other replicas read them and send their gradients there).

    The copies are the micro-batched step's (`placer.schedule.micro_batch`): one builder of copies for pipelines
    and replicas."""
    from placer.schedule.micro_batch import micro_batched_step

    group = first_group(machine, degree)
    outside = sorted(set(replica_placement.devices) - set(group.names))
    if outside:
        raise ReplicaError(f"replica 0's placement uses {', '.join(outside)}, outside its group of {machine.name} "
                           f"({', '.join(d.short_name for d in group.devices)})")
    step = micro_batched_step(replica_graph, degree)
    mapping = replica_devices(machine, group, degree)
    return step.graph, step.replicate_placement(replica_placement, machine, mapping)


def fold_onto_group(placement: Placement, graph: OpGraph, group: DeviceSet) -> Placement:
    """`placement` (of `graph` over a whole machine) folded onto one replica's `group`: a device that is the p-th of
    its kind goes to the group's (p mod n)-th device of that kind, n the group's count of it (on 8 GPUs, a group of
    2: GPU:5 -> GPU:1). How a placement of the whole machine names one replica's placement."""
    from placer.placement import Placement

    kinds: dict[str, list[str]] = {}
    for device in group.devices:
        kinds.setdefault(device.kind, []).append(device.name)
    seen: dict[str, int] = {}
    folded: dict[str, str] = {}
    for name in placement.devices:
        kind = _kind_of(name)
        if kind not in kinds:
            raise ReplicaError(f"one replica's group ({', '.join(d.short_name for d in group.devices)}) has no {kind}")
        position = seen.get(kind, 0)
        seen[kind] = position + 1
        folded[name] = kinds[kind][position % len(kinds[kind])]
    op_devices = {op: folded[device] for op, device in placement.op_devices(graph).items()}
    return Placement.from_op_devices(graph, group, op_devices, placement.metadata)


def _kind_of(name: str) -> str:
    from placer.devices import name_parts

    return name_parts(name)[2]
