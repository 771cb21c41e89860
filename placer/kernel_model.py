"""How fast one kind of device runs an op's kernel, against its peaks: the model behind simulated GPU op costs.

An op of `flops` FLOPs that moves `bytes` takes

    max(op_floor, fixed + flops / (peak * op efficiency), bytes / (memory bandwidth * efficiency)) + launch_overhead

where the peak is the tensor-core TF32 rate for the op types TF32 covers when TensorFloat-32 is on, and the
FP32 rate otherwise, and `fixed` an op type's seconds beyond its FLOPs (a kernel's ramp-up and tail: small
convolutions and matmuls reach less of the peak than large ones). A `KernelModel` holds the efficiencies and
fixed seconds (per op type, else one default efficiency and no fixed time), the floor (the least a kernel
costs back to back: launch and dispatch) and whether TF32 is on. `fit_kernel_model` derives one
from a table of measured kernels (`KernelTiming`), such as `placer.hardware.H200_KERNELS` or the table
`experiments/gpu_kernels.py` measures on any GPU machine.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from placer.errors import DeviceSpecError

DEFAULT_EFFICIENCY = 0.6
"""Fraction of the peaks an average kernel reaches, where nothing was measured."""
MEASURABLE_ABOVE_FLOOR = 1.5
"""A measured kernel tells a throughput only if it took this many times the floor; below, it timed the launch."""


@dataclass(frozen=True)
class KernelModel:
    """How close one kind of device's kernels come to its peaks."""

    efficiency: float = DEFAULT_EFFICIENCY
    """Fraction of the peak FLOP/s an op type without its own efficiency reaches, and of the memory bandwidth
    every op reaches."""
    op_efficiency: Mapping[str, float] = field(default_factory=dict)
    """Op type (TensorFlow's, e.g. "MatMul") -> fraction of the FP32 peak its kernels reach."""
    tensor_float_32: bool = False
    """Matmuls and convolutions run in TF32 on tensor cores: TensorFlow's default on Ampere and later GPUs
    (`tf.config.experimental.enable_tensor_float_32_execution`)."""
    tensor_core_flops: float | None = None
    """FLOP/s of TF32 on tensor cores (the vendor's dense peak); needed when `tensor_float_32` is on."""
    tf32_op_efficiency: Mapping[str, float] = field(default_factory=dict)
    """Op type -> fraction of `tensor_core_flops` its kernels reach in TF32. Exactly these op types run in TF32."""
    op_fixed_seconds: Mapping[str, float] = field(default_factory=dict)
    """Op type -> seconds its kernels take beyond their FLOPs at its FP32 efficiency."""
    tf32_op_fixed_seconds: Mapping[str, float] = field(default_factory=dict)
    """The same in TF32."""
    op_floor: float = 0.0
    """Seconds: the least an op costs when kernels run back to back (launch and dispatch)."""
    launch_overhead: float = 0.0
    """Seconds every op costs on top of its time (a roofline's per-op overhead, where no floor was measured)."""
    source: str = "roofline: the vendor's peaks"
    """Where the numbers come from, said wherever predictions from them are shown."""

    def __post_init__(self) -> None:
        where = f"kernel model ({self.source})"
        _check_fraction(self.efficiency, f"{where}: efficiency")
        for name, table in (("op_efficiency", self.op_efficiency), ("tf32_op_efficiency", self.tf32_op_efficiency)):
            for op_type, value in table.items():
                _check_fraction(value, f"{where}: {name}[{op_type}]")
        if self.tensor_float_32 and not (self.tensor_core_flops and self.tf32_op_efficiency):
            raise DeviceSpecError(f"{where}: tensor_float_32 needs tensor_core_flops and tf32_op_efficiency (the "
                                  "op types that run in TF32); re-measure with experiments/gpu_kernels.py")
        seconds = {"op_floor": self.op_floor, "launch_overhead": self.launch_overhead,
                   **{f"op_fixed_seconds[{k}]": v for k, v in self.op_fixed_seconds.items()},
                   **{f"tf32_op_fixed_seconds[{k}]": v for k, v in self.tf32_op_fixed_seconds.items()}}
        for name, value in seconds.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise DeviceSpecError(f"{where}: {name} is seconds per op, got {value!r}")

    def op_seconds(self, op_type: str, flops: float, moved_bytes: float, peak_flops: float,
                   memory_bandwidth: float) -> float:
        """Seconds one op takes on a device with these FP32 and memory peaks."""
        if self.tensor_float_32 and op_type in self.tf32_op_efficiency:
            flop_rate = self.tensor_core_flops * self.tf32_op_efficiency[op_type]
            fixed = self.tf32_op_fixed_seconds.get(op_type, 0.0)
        else:
            flop_rate = peak_flops * self.op_efficiency.get(op_type, self.efficiency)
            fixed = self.op_fixed_seconds.get(op_type, 0.0)
        return max(self.op_floor, fixed + flops / flop_rate, moved_bytes / (memory_bandwidth * self.efficiency)) \
            + self.launch_overhead

    def describe(self) -> str:
        mode = "TF32 on" if self.tensor_float_32 else "FP32"
        return f"{self.source}; {mode}"

    def to_json_dict(self) -> dict[str, Any]:
        return {"efficiency": self.efficiency, "op_efficiency": dict(self.op_efficiency),
                "tensor_float_32": self.tensor_float_32, "tensor_core_flops": self.tensor_core_flops,
                "tf32_op_efficiency": dict(self.tf32_op_efficiency), "op_fixed_seconds": dict(self.op_fixed_seconds),
                "tf32_op_fixed_seconds": dict(self.tf32_op_fixed_seconds), "op_floor": self.op_floor,
                "launch_overhead": self.launch_overhead, "source": self.source}


def unknown_op_types(op_types) -> list[str]:
    """The names TensorFlow registers no op type for (a typo such as "Matmul" would otherwise never match)."""
    from tensorflow.python.framework import op_def_registry

    return sorted(name for name in op_types if op_def_registry.get(name) is None)


@dataclass(frozen=True)
class KernelShape:
    """One kernel to time: an op type and its dimensions (what `experiments/gpu_kernels.py` runs).

    MatMul: (m, k, n), an [m, k] by [k, n] product (a gradient is a product too: of the forward's (m, k, n),
    the input gradient is (m, n, k) and the weight gradient (k, m, n)). Conv2D, Conv2DBackpropInput,
    Conv2DBackpropFilter: (batch, pixels per side, in channels, out channels, kernel side), "same" padding,
    stride 1. AddV2: (elements,). Softmax and Sum: (rows, columns), Sum over columns. ResourceGather: (table
    rows, columns, ids)."""

    op_type: str
    dims: tuple[int, ...]
    label: str = ""

    def __post_init__(self) -> None:
        arity = _ARITY.get(self.op_type)
        if arity is None:
            raise DeviceSpecError(f"no kernel shape for op type {self.op_type!r}; known: {', '.join(_ARITY)}")
        if len(self.dims) != arity or any(d < 1 for d in self.dims):
            raise DeviceSpecError(f"{self.op_type} takes {arity} positive dimensions, got {self.dims}")

    @property
    def flops(self) -> float:
        d = self.dims
        if self.op_type == "MatMul":
            return 2.0 * d[0] * d[1] * d[2]
        if self.op_type.startswith("Conv2D"):
            batch, side, channels_in, channels_out, kernel = d
            return 2.0 * batch * side * side * channels_in * channels_out * kernel * kernel
        if self.op_type == "AddV2":
            return float(d[0])
        if self.op_type == "Softmax":
            return 5.0 * d[0] * d[1]  # max, subtract, exp, sum, divide
        if self.op_type == "Sum":
            return float(d[0] * d[1])
        return 0.0  # a gather moves rows and computes nothing

    @property
    def moved_bytes(self) -> float:
        d = self.dims
        if self.op_type == "MatMul":
            return 4.0 * (d[0] * d[1] + d[1] * d[2] + d[0] * d[2])
        if self.op_type.startswith("Conv2D"):
            batch, side, channels_in, channels_out, kernel = d
            return 4.0 * (batch * side * side * (channels_in + channels_out) + kernel * kernel * channels_in * channels_out)
        if self.op_type == "AddV2":
            return 12.0 * d[0]
        if self.op_type == "Softmax":
            return 8.0 * d[0] * d[1]
        if self.op_type == "Sum":
            return 4.0 * (d[0] * d[1] + d[0])
        return 8.0 * d[1] * d[2]  # ids' rows read, and written

    @property
    def name(self) -> str:
        shape = "x".join(map(str, self.dims))
        return f"{self.op_type} {shape}" + (f" ({self.label})" if self.label else "")


_ARITY = {"MatMul": 3, "Conv2D": 5, "Conv2DBackpropInput": 5, "Conv2DBackpropFilter": 5, "AddV2": 1, "Softmax": 2,
          "Sum": 2, "ResourceGather": 3}

PAPER_KERNELS = (
    KernelShape("MatMul", (128, 2048, 4096), "NMT LSTM gates"),
    KernelShape("MatMul", (128, 1024, 32000), "NMT output projection"),
    KernelShape("MatMul", (3200, 512, 2048), "Transformer FFN"),
    KernelShape("MatMul", (16, 256, 512), "NMT tiny"),
    KernelShape("MatMul", (128, 4096, 2048), "NMT gates, input gradient"),
    KernelShape("MatMul", (2048, 128, 4096), "NMT gates, weight gradient"),
    KernelShape("MatMul", (3200, 2048, 512), "Transformer FFN, input gradient"),
    KernelShape("MatMul", (512, 3200, 2048), "Transformer FFN, weight gradient"),
    KernelShape("Conv2D", (32, 35, 64, 96, 3), "Inception"),
    KernelShape("Conv2D", (32, 56, 64, 64, 3), "ResNet"),
    KernelShape("Conv2D", (32, 35, 192, 64, 1), "Inception 1x1"),
    KernelShape("Conv2DBackpropInput", (32, 35, 64, 96, 3), "Inception"),
    KernelShape("Conv2DBackpropInput", (32, 56, 64, 64, 3), "ResNet"),
    KernelShape("Conv2DBackpropInput", (32, 35, 192, 64, 1), "Inception 1x1"),
    KernelShape("Conv2DBackpropFilter", (32, 35, 64, 96, 3), "Inception"),
    KernelShape("Conv2DBackpropFilter", (32, 56, 64, 64, 3), "ResNet"),
    KernelShape("Conv2DBackpropFilter", (32, 35, 192, 64, 1), "Inception 1x1"),
    KernelShape("AddV2", (2_500_000,)),
    KernelShape("Softmax", (128, 32000), "NMT output"),
    KernelShape("Sum", (128, 32000)),
    KernelShape("ResourceGather", (32000, 1024, 5120), "NMT embedding"),
)
"""The kernels of the papers' models at their shapes: what a kernel table holds."""


@dataclass(frozen=True)
class KernelTiming:
    """One kernel measured on a real device: back-to-back launches, mean seconds each."""

    shape: KernelShape
    fp32_seconds: float
    tf32_seconds: float | None = None
    """With TF32 on; None for kernels TF32 does not change."""

    @property
    def op_type(self) -> str:
        return self.shape.op_type

    def to_json_dict(self) -> dict[str, Any]:
        return {"op_type": self.shape.op_type, "dims": list(self.shape.dims), "label": self.shape.label,
                "flops": self.shape.flops, "moved_bytes": self.shape.moved_bytes,
                "fp32_seconds": self.fp32_seconds, "tf32_seconds": self.tf32_seconds}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> KernelTiming:
        shape = KernelShape(data["op_type"], tuple(data["dims"]), data.get("label", ""))
        return cls(shape, float(data["fp32_seconds"]),
                   None if data.get("tf32_seconds") is None else float(data["tf32_seconds"]))


def fit_kernel_model(timings: Sequence[KernelTiming], *, peak_flops: float, memory_bandwidth: float,
                     tensor_core_flops: float | None, source: str, tensor_float_32: bool = True) -> KernelModel:
    """The kernel model of the device `timings` were measured on, whose peaks are given.

    The floor is the fastest kernel's time. Only kernels that took measurably longer than the floor
    (`MEASURABLE_ABOVE_FLOOR`) say anything about throughput. Per op type, over its compute-bound kernels: with
    three or more of different sizes, a line through (FLOPs, seconds) (Theil-Sen: the median of pairwise
    slopes, so one odd kernel moves it little) gives the efficiency (its slope) and the fixed seconds (its
    intercept, at least 0); with fewer, the median of FLOPs / (peak x seconds). The memory efficiency is the
    median over memory-bound kernels, else `DEFAULT_EFFICIENCY` (kernels on the floor say nothing about
    bandwidth). Efficiencies above 1 (a peak understated) are capped at 1."""
    if not timings:
        raise DeviceSpecError("fitting a kernel model needs at least one measured kernel")
    floor = min(t.fp32_seconds for t in timings)
    fp32, tf32, memory = {}, {}, []
    for timing in timings:
        flops, moved = timing.shape.flops, timing.shape.moved_bytes
        if moved / memory_bandwidth > flops / peak_flops:  # memory-bound at the peaks
            if timing.fp32_seconds >= MEASURABLE_ABOVE_FLOOR * floor:
                memory.append(moved / (memory_bandwidth * timing.fp32_seconds))
            continue
        if timing.fp32_seconds >= MEASURABLE_ABOVE_FLOOR * floor:
            fp32.setdefault(timing.op_type, []).append((flops, timing.fp32_seconds))
        if tensor_core_flops and timing.tf32_seconds is not None and timing.tf32_seconds >= MEASURABLE_ABOVE_FLOOR * floor:
            tf32.setdefault(timing.op_type, []).append((flops, timing.tf32_seconds))
    fp32_fits = {op_type: _line(points, peak_flops) for op_type, points in sorted(fp32.items())}
    tf32_fits = {op_type: _line(points, tensor_core_flops) for op_type, points in sorted(tf32.items())}
    return KernelModel(
        efficiency=min(1.0, statistics.median(memory)) if memory else DEFAULT_EFFICIENCY,
        op_efficiency={op_type: fit[0] for op_type, fit in fp32_fits.items()},
        op_fixed_seconds={op_type: fit[1] for op_type, fit in fp32_fits.items() if fit[1] > 0},
        tensor_float_32=tensor_float_32 and bool(tf32_fits),
        tensor_core_flops=tensor_core_flops if tf32_fits else None,
        tf32_op_efficiency={op_type: fit[0] for op_type, fit in tf32_fits.items()},
        tf32_op_fixed_seconds={op_type: fit[1] for op_type, fit in tf32_fits.items() if fit[1] > 0},
        op_floor=floor,
        source=source,
    )


def _line(points: Sequence[tuple[float, float]], peak: float) -> tuple[float, float]:
    """(efficiency, fixed seconds) of one op type's (FLOPs, seconds) points."""
    slopes = [(b[1] - a[1]) / (b[0] - a[0]) for i, a in enumerate(points) for b in points[i + 1:] if b[0] != a[0]]
    if len({flops for flops, _ in points}) >= 3 and statistics.median(slopes) > 0:
        slope = max(statistics.median(slopes), 1.0 / peak)  # at most the peak
        fixed = max(0.0, statistics.median(seconds - slope * flops for flops, seconds in points))
        return 1.0 / (slope * peak), fixed
    return min(1.0, statistics.median(flops / (peak * seconds) for flops, seconds in points)), 0.0


KERNEL_TABLE_FORMAT = "placer.kernels"
KERNEL_TABLE_VERSION = 1


def write_kernel_table(path: str | Path, timings: Sequence[KernelTiming], device: Mapping[str, Any]) -> Path:
    """A kernel table file: the device it was measured on (name, peaks, date, how) and its kernels."""
    from placer.files import write_json

    return write_json(path, {"format": KERNEL_TABLE_FORMAT, "version": KERNEL_TABLE_VERSION, "device": dict(device),
                             "kernels": [t.to_json_dict() for t in timings]})


def read_kernel_table(path: str | Path) -> tuple[dict[str, Any], list[KernelTiming]]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise DeviceSpecError(f"cannot read kernel table {path}: {error}") from None
    if not isinstance(data, dict) or data.get("format") != KERNEL_TABLE_FORMAT:
        raise DeviceSpecError(f"{path} is not a kernel table (format {KERNEL_TABLE_FORMAT!r}); "
                              "experiments/gpu_kernels.py writes one")
    if data.get("version") != KERNEL_TABLE_VERSION:
        raise DeviceSpecError(f"{path} is kernel table version {data.get('version')}, this placer reads "
                              f"{KERNEL_TABLE_VERSION}: measure again with experiments/gpu_kernels.py")
    try:
        timings = [KernelTiming.from_json_dict(entry) for entry in data["kernels"]]
    except (KeyError, TypeError, ValueError) as error:
        raise DeviceSpecError(f"{path}: a kernel entry is malformed ({error})") from None
    return data["device"], timings


def _check_fraction(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise DeviceSpecError(f"{where} is a fraction of the peak in (0, 1], got {value!r}")
