"""Specifications of hardware that is not on this machine, for modeled machines and their op costs.

Peaks are the vendors' (FP32 without tensor cores, TF32 on tensor cores, HBM bandwidth, per-direction link
bandwidth). How close kernels come to them is each model's `KernelModel` (`placer.kernel_model`): for the A100 and
H100 it is fitted from kernels measured on a real H200 (`H200_KERNELS`), with TensorFloat-32 on as TensorFlow
runs them; for the K80, P100 and V100 it is the roofline's default efficiency, never checked on those GPUs.
`modeled_machine(gpus=4, gpu="V100")` builds a `DeviceSet` from them, with the links such a machine has.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from placer.devices import Device, DeviceSet, Link
from placer.errors import DeviceSpecError
from placer.kernel_model import PAPER_KERNELS, KernelModel, KernelTiming, fit_kernel_model

GiB = 2**30


@dataclass(frozen=True)
class DeviceModel:
    name: str
    kind: str
    memory_bytes: int
    peak_flops: float
    """FP32 FLOP/s without tensor cores."""
    memory_bandwidth: float
    """Bytes per second."""
    kernels: KernelModel = KernelModel()
    """How close its kernels come to the peaks."""


@dataclass(frozen=True)
class LinkModel:
    name: str
    bandwidth: float
    """Bytes per second, per direction."""
    latency: float
    """Seconds per transfer."""


def _roofline(launch_overhead: float) -> KernelModel:
    return KernelModel(launch_overhead=launch_overhead,
                       source="roofline: the vendor's peaks at 60 %, not checked on this GPU")


# Measured on one NVIDIA H200 on 2026-11-26 through PyTorch 2.11 (CUDA 13), which calls the cuBLAS and cuDNN
# kernels TensorFlow's GPU ops call: CUDA events, 5 warm-ups, mean of 50 back-to-back launches, FP32 inputs;
# seconds FP32, then TF32 (None: TF32 does not change the kernel), for `PAPER_KERNELS` in order.
# `experiments/gpu_kernels.py --measure` measures this table again on any GPU machine.
_H200_SECONDS = (
    (54.8e-6, 27.2e-6), (169.8e-6, 45.3e-6), (173.0e-6, 33.0e-6), (11.1e-6, 24.9e-6),
    (63.4e-6, 19.0e-6), (53.5e-6, 21.7e-6), (158.7e-6, 26.7e-6), (139.9e-6, 48.8e-6),
    (150.2e-6, 50.8e-6), (254.9e-6, 83.0e-6), (48.1e-6, 25.3e-6),
    (195.2e-6, 81.1e-6), (165.1e-6, 86.0e-6), (65.9e-6, 54.0e-6),
    (213.4e-6, 130.9e-6), (299.0e-6, 122.0e-6), (72.5e-6, 61.9e-6),
    (11.3e-6, None), (12.5e-6, None), (12.6e-6, None), (12.9e-6, None),
)
H200_KERNELS = tuple(KernelTiming(shape, fp32, tf32) for shape, (fp32, tf32) in zip(PAPER_KERNELS, _H200_SECONDS))
H200_PEAKS = {"peak_flops": 67e12, "tensor_core_flops": 494.7e12, "memory_bandwidth": 4.8e12}
"""The H200's vendor peaks (SXM): FP32, dense TF32 on tensor cores, HBM3e."""
H200_SOURCE = "kernels measured on an H200 (2026-11-26, cuBLAS/cuDNN through PyTorch)"
MEASURED_KERNELS = fit_kernel_model(H200_KERNELS, **H200_PEAKS, source=H200_SOURCE)
"""Efficiencies and floor of the H200's kernels: the H100 is the same chip with less HBM bandwidth; the A100's
peaks differ, and these fractions of them are an assumption (no A100 was measured)."""

GPUS = {
    # One K80 board is two GK210 GPUs; TensorFlow sees each as a device, so these are per GK210.
    "K80": DeviceModel("K80", "GPU", 12 * GiB, 4.37e12, 240e9, _roofline(10e-6)),
    "P100": DeviceModel("P100", "GPU", 16 * GiB, 10.6e12, 732e9, _roofline(8e-6)),
    "V100": DeviceModel("V100", "GPU", 16 * GiB, 15.7e12, 900e9, _roofline(6e-6)),
    "A100": DeviceModel("A100", "GPU", 40 * GiB, 19.5e12, 1555e9, replace(
        MEASURED_KERNELS, tensor_core_flops=156e12,
        source=f"{H200_SOURCE}, as fractions of the A100's peaks (no A100 measured)")),
    "H100": DeviceModel("H100", "GPU", 80 * GiB, 67e12, 3350e9, replace(
        MEASURED_KERNELS, tensor_core_flops=494.7e12, source=f"{H200_SOURCE}, as fractions of the H100's peaks")),
}
# The host CPU of a GPU server, as the papers' machines had (e.g. a Haswell Xeon with 16 cores).
HOST_CPU = DeviceModel("host-cpu", "CPU", 256 * GiB, 1.0e12, 60e9,
                       KernelModel(launch_overhead=10e-6, source="roofline: a 16-core server CPU's peaks at 60 %"))

LINKS = {
    "pcie3": LinkModel("pcie3", 12e9, 10e-6),  # x16, effective
    "pcie4": LinkModel("pcie4", 24e9, 8e-6),
    "nvlink2": LinkModel("nvlink2", 50e9, 5e-6),  # V100: two bricks of 25 GB/s between a pair
    "nvlink3": LinkModel("nvlink3", 300e9, 4e-6),  # A100 through NVSwitch
    "nvlink4": LinkModel("nvlink4", 450e9, 3e-6),  # H100 through NVSwitch
    # Measured host to H200 (2026-11-26): 4 KB in 14 us, 1 MB in 36 us, 64 MB at 53 GB/s, from pinned host memory
    # (pageable: 5-10 GB/s).
    "pcie5": LinkModel("pcie5", 53e9, 14e-6),
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


GPU_LINKS = {"A100": "nvlink3", "H100": "nvlink4"}
"""The link between two GPUs of a modeled machine of these, where it is not NVLink 2 (the papers' V100 machines):
the NVSwitch of the 4- and 8-GPU servers these GPUs come in. An H100 joined by NVLink 2 has a ninth of its
interconnect, and placements priced there pay for transfers no such server has (`modeled:4xH100-nvlink2` still
names that machine)."""
HOST_LINKS = {"A100": "pcie4", "H100": "pcie5"}
"""The host link a modeled machine of these GPUs has, where it is not PCIe 3 (the papers' machines)."""


def modeled_machine(gpus: int = 2, gpu: str = "V100", link: str | None = None,
                    host_link: str | None = None) -> DeviceSet:
    """A host CPU and `gpus` GPUs: every GPU pair joined by `link`, the CPU to each GPU by `host_link` (by default
    the GPU's own: `GPU_LINKS`, else NVLink 2, and `HOST_LINKS`, else PCIe 3)."""
    if gpus < 1:
        raise DeviceSpecError(f"a modeled GPU machine needs at least one GPU, got {gpus}")
    link = link or GPU_LINKS.get(gpu, "nvlink2")
    host_link = host_link or HOST_LINKS.get(gpu, "pcie3")
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
                  model.peak_flops, model.memory_bandwidth, model.name, kernels=model.kernels)
