"""Specifications of hardware that is not on this machine, for modeled machines and roofline costs.

Numbers are the vendors' published peaks (FP32 without tensor cores, HBM/GDDR bandwidth, per-direction
link bandwidth); real kernels reach a fraction of them, which `DeviceModel.efficiency` accounts for.
`modeled_machine(gpus=4, gpu="V100", link="nvlink2")` builds a `DeviceSet` from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from placer.devices import Device, DeviceSet, Link
from placer.errors import DeviceSpecError

GiB = 2**30


@dataclass(frozen=True)
class DeviceModel:
    name: str
    kind: str
    memory_bytes: int
    peak_flops: float
    """FP32 FLOP/s (no tensor cores: TF's default FP32 matmuls do not use them before Ampere's TF32)."""
    memory_bandwidth: float
    """Bytes per second."""
    launch_overhead: float
    """Seconds every op costs on top of its roofline time (kernel launch and executor bookkeeping)."""
    efficiency: float = 0.6
    """Fraction of the peaks an average kernel reaches."""


@dataclass(frozen=True)
class LinkModel:
    name: str
    bandwidth: float
    """Bytes per second, per direction."""
    latency: float
    """Seconds per transfer."""


GPUS = {
    # One K80 board is two GK210 GPUs; TensorFlow sees each as a device, so these are per GK210.
    "K80": DeviceModel("K80", "GPU", 12 * GiB, 4.37e12, 240e9, 10e-6),
    "P100": DeviceModel("P100", "GPU", 16 * GiB, 10.6e12, 732e9, 8e-6),
    "V100": DeviceModel("V100", "GPU", 16 * GiB, 15.7e12, 900e9, 6e-6),
    "A100": DeviceModel("A100", "GPU", 40 * GiB, 19.5e12, 1555e9, 5e-6),
    "H100": DeviceModel("H100", "GPU", 80 * GiB, 67e12, 3350e9, 4e-6),
}
# The host CPU of a GPU server, as the papers' machines had (e.g. a Haswell Xeon with 16 cores).
HOST_CPU = DeviceModel("host-cpu", "CPU", 256 * GiB, 1.0e12, 60e9, 10e-6)

LINKS = {
    "pcie3": LinkModel("pcie3", 12e9, 10e-6),  # x16, effective
    "pcie4": LinkModel("pcie4", 24e9, 8e-6),
    "nvlink2": LinkModel("nvlink2", 50e9, 5e-6),  # V100: two bricks of 25 GB/s between a pair
    "nvlink3": LinkModel("nvlink3", 300e9, 4e-6),  # A100 through NVSwitch
    "nvlink4": LinkModel("nvlink4", 450e9, 3e-6),  # H100 through NVSwitch
    "ethernet-10g": LinkModel("ethernet-10g", 1.25e9, 50e-6),
    "ethernet-100g": LinkModel("ethernet-100g", 12.5e9, 20e-6),
}


def device_model(name: str) -> DeviceModel:
    if name in GPUS:
        return GPUS[name]
    if name == HOST_CPU.name:
        return HOST_CPU
    raise DeviceSpecError(f"unknown device model {name!r}; known: {', '.join([*GPUS, HOST_CPU.name])}")


def link_model(name: str) -> LinkModel:
    if name not in LINKS:
        raise DeviceSpecError(f"unknown link {name!r}; known: {', '.join(LINKS)}")
    return LINKS[name]


def modeled_machine(gpus: int = 2, gpu: str = "V100", link: str = "nvlink2", host_link: str = "pcie3") -> DeviceSet:
    """A host CPU and `gpus` GPUs: every GPU pair joined by `link`, the CPU to each GPU by `host_link`."""
    if gpus < 1:
        raise DeviceSpecError(f"a modeled GPU machine needs at least one GPU, got {gpus}")
    gpu_model, between, to_host = device_model(gpu), link_model(link), link_model(host_link)
    cpu = _device("CPU:0", HOST_CPU)
    devices = [cpu] + [_device(f"GPU:{i}", gpu_model) for i in range(gpus)]
    links = []
    for a in devices:
        for b in devices:
            if a is not b:
                spec = to_host if "CPU" in (a.kind, b.kind) else between
                links.append(Link(a.name, b.name, spec.bandwidth, spec.latency))
    return DeviceSet(tuple(devices), tuple(links), name=f"{gpus}x{gpu}-{link}")


def _device(short: str, model: DeviceModel) -> Device:
    return Device(f"/job:localhost/replica:0/task:0/device:{short}", model.kind, model.memory_bytes,
                  model.peak_flops, model.memory_bandwidth, model.name)
