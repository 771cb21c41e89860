"""The kind of a target: what a step time depends on besides the placement (devices, their widths, the
processor, TensorFlow's version), so that step times are compared only between targets of one kind.

Two machines give comparable measurements only if they are the same kind of target: `target_kind(target)`
describes one, `TargetKind.fingerprint` names it in a few characters, and `check_same_kind` refuses a set
of targets of different kinds with an error that names what differs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from placer.errors import PlacerError
from placer.host import processor_model, usable_cores


class TargetKindError(PlacerError):
    """Targets of different kinds where step times would be compared (their rewards mean different things)."""


@dataclass(frozen=True)
class TargetKind:
    """What a target's step times depend on besides the placement. A simulated target's predictions depend
    on its modeled devices only, so its machine fields are empty."""

    backend: str
    devices: tuple[tuple[str, str, str | None, int | None, int | None, int | None], ...]
    """Per device: full name, kind (CPU/GPU), model, cores of its own, intra-op and inter-op threads."""
    processor: str = ""
    """The CPU model the measuring process runs on (/proc/cpuinfo's model name)."""
    cores: int = 0
    """Cores the measuring process may use (`placer.host.usable_cores`)."""
    gpus: tuple[str, ...] = ()
    """The machine's GPU models, as TensorFlow names them."""
    tensorflow: str = ""

    @property
    def fingerprint(self) -> str:
        """A short hash of the whole description: equal fingerprints, the same kind of target."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def differences(self, other: TargetKind) -> list[str]:
        """What differs between this kind and `other`, one phrase each ("processor 'A' here, 'B' there")."""
        found = []
        for name in ("backend", "processor", "cores", "gpus", "tensorflow"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                found.append(f"{name} {mine!r} here, {theirs!r} there")
        if len(self.devices) != len(other.devices):
            found.append(f"{len(self.devices)} devices here, {len(other.devices)} there")
        else:
            fields = ("name", "kind", "model", "cores", "intra-op threads", "inter-op threads")
            for mine, theirs in zip(self.devices, other.devices):
                for field, a, b in zip(fields, mine, theirs):
                    if a != b:
                        found.append(f"device {mine[0]}: {field} {a!r} here, {b!r} there")
        return found

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TargetKind:
        return cls(backend=str(data["backend"]), devices=tuple(tuple(d) for d in data["devices"]),
                   processor=str(data.get("processor", "")), cores=int(data.get("cores", 0)),
                   gpus=tuple(data.get("gpus", ())), tensorflow=str(data.get("tensorflow", "")))


def target_kind(target) -> TargetKind:
    """The kind of an open target (`placer.cost.open_target`), described from the process that measures on it."""
    devices = tuple((d.name, d.kind, d.model, d.cores, d.intra_op_threads, d.inter_op_threads)
                    for d in target.devices)
    if target.backend != "measured":
        return TargetKind(target.backend, devices)
    import tensorflow as tf

    gpus = tuple(tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)
                 for gpu in tf.config.list_physical_devices("GPU"))
    return TargetKind(target.backend, devices, processor=processor_model(), cores=usable_cores(),
                      gpus=gpus, tensorflow=tf.__version__)


def check_same_kind(reference: tuple[str, TargetKind], others: Mapping[str, TargetKind]) -> None:
    """Refuse `others` (by where they are) unless each is the kind of `reference` (where, kind): measurements
    of different kinds of target would be compared as if they were one machine's."""
    where, kind = reference
    problems = [f"{name} (\"there\"): {'; '.join(kind.differences(other))}" for name, other in others.items()
                if other.fingerprint != kind.fingerprint]
    if problems:
        raise TargetKindError(
            f"targets of another kind than {where} (\"here\"): " + " | ".join(problems) + ". Step times "
            "from different kinds of target cannot be compared: give every node the same kind of machine and "
            "target, or leave the others out of the cluster")
