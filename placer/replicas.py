"""Data parallelism in a plan: how many replicas run the step, each on its own group of devices and its own slice
of the batch, and how their gradients are combined; which device of the machine each replica's devices are.

A replica is the step built at the slice's batch, placed on the devices of one group; every replica has the same
placement, on its own group. Degree 1 is a plan without replicas.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

from placer.devices import DeviceSet
from placer.errors import ReplicaError

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
