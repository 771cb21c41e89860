"""The GPU kernel table behind the modeled A100 and H100, and how well the fitted kernel model reproduces it.

    python experiments/gpu_kernels.py [--out results/gpu_kernels.json]
    python experiments/gpu_kernels.py --measure --gpu H200 [--gpus 8] [--gpu-link nvlink4] \\
        [--table-out kernels.json] [--machine-out machine.json] [--out results/gpu_kernels_MACHINE.json]

Without --measure: the packaged table (`placer.hardware.H200_KERNELS`, measured on an H200 on 2026-11-26) is
fitted (`placer.kernel_model.fit_kernel_model`), and each kernel's predicted time is set against its measured one.

With --measure, on a machine with an NVIDIA GPU and PyTorch (TensorFlow is not needed there: the kernels
are cuBLAS's and cuDNN's, the ones TensorFlow's GPU ops call): every kernel of `placer.kernel_model.PAPER_KERNELS`
is timed with CUDA events (5 warm-ups, the mean of 50 back-to-back launches) in FP32 and in TF32, and copies
from host to GPU of 4 KB to 64 MB from pinned memory. It writes the kernel table (`--table-out`), a machine
file of `--gpus` such GPUs and a host CPU (`--machine-out`: the fitted kernel model, the measured host link,
`--gpu-link` between GPUs), usable as `--target machine.json`, and the same report.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from experiments._report import write_report  # noqa: E402
from placer.hardware import H200_KERNELS, H200_PEAKS, H200_SOURCE, HOST_CPU, LINKS  # noqa: E402
from placer.kernel_model import (PAPER_KERNELS, KernelModel, KernelShape, KernelTiming, fit_kernel_model,  # noqa: E402
                            write_kernel_table)

GPU_PEAKS = {
    # FP32, dense TF32 on tensor cores, memory bandwidth (vendors' SXM figures).
    "A100": {"peak_flops": 19.5e12, "tensor_core_flops": 156e12, "memory_bandwidth": 1.555e12},
    "H100": {"peak_flops": 67e12, "tensor_core_flops": 494.7e12, "memory_bandwidth": 3.35e12},
    "H200": H200_PEAKS,
}
COLUMNS = ["kernel", "fp32_us", "fp32_fit", "fp32_held_out", "tf32_us", "tf32_fit", "tf32_held_out"]
COPY_BYTES = (4096, 1 << 20, 64 << 20)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="time the kernels on this machine's GPU (PyTorch)")
    parser.add_argument("--gpu", choices=sorted(GPU_PEAKS), default="H200",
                        help="the GPU's model, for its peaks (default H200)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs in the machine file (default 1)")
    parser.add_argument("--gpu-link", choices=sorted(LINKS), default="nvlink4",
                        help="link between the machine file's GPUs (not measured here; default nvlink4)")
    parser.add_argument("--table-out", default="kernels.json", help="with --measure: the kernel table")
    parser.add_argument("--machine-out", default="machine.json", help="with --measure: the machine file")
    parser.add_argument("--out", help="the report (default results/gpu_kernels.json)")
    args = parser.parse_args(argv)
    if args.gpus < 1:
        parser.error(f"--gpus must be at least 1, got {args.gpus}")
    peaks = GPU_PEAKS[args.gpu]
    if args.measure:
        timer = TorchTimer()
        timings = [KernelTiming(shape, timer.kernel(shape, tf32=False), timer.kernel(shape, tf32=True)
                                if shape.op_type in TF32_KERNELS else None) for shape in PAPER_KERNELS]
        copies = {size: timer.host_to_device(size) for size in COPY_BYTES}
        source = f"kernels measured on an {timer.device_name} ({timer.date}, cuBLAS/cuDNN through PyTorch)"
        device = {"name": timer.device_name, "gpu": args.gpu, "date": timer.date, "how": timer.how, **peaks,
                  "host_to_device_seconds": copies, "memory_bytes": timer.memory_bytes}
        write_kernel_table(args.table_out, timings, device)
        model = fit_kernel_model(timings, **peaks, source=source)
        write_machine(args.machine_out, args.gpu, args.gpus, args.gpu_link, peaks, timer.memory_bytes, model, copies)
        print(f"wrote {args.table_out} and {args.machine_out} (use it as --target {args.machine_out})")
    else:
        timings, source = list(H200_KERNELS), H200_SOURCE
        model = fit_kernel_model(timings, **peaks, source=source)
    rows = report_rows(timings, model, peaks, source)
    command = "python experiments/gpu_kernels.py" + (f" --measure --gpu {args.gpu}" if args.measure else "")
    write_report("gpu_kernels", COLUMNS, rows, args.out, command=command, source=source, gpu=args.gpu, peaks=peaks,
                 kernel_model=model.to_json_dict(), summary=error_summary(rows))
    for name, summary in error_summary(rows).items():
        print(f"{name}: predicted / measured over {summary['kernels']} kernels: median |error| "
              f"{summary['median_abs_error_pct']:.0f} %, ratio {summary['min_ratio']:.2f}-{summary['max_ratio']:.2f}")
    return 0


TF32_KERNELS = frozenset({"MatMul", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"})
"""The kernels TF32 changes; the others are timed once."""


def report_rows(timings, model: KernelModel, peaks, source: str) -> list[dict]:
    """Each kernel's measured time against the fitted model's prediction (ratio predicted / measured), in FP32
    and in TF32: fitted on the whole table ("fit"), and on the table without that kernel ("held_out")."""
    rows = []
    for index, timing in enumerate(timings):
        without = fit_kernel_model(timings[:index] + timings[index + 1:], **peaks, source=source)
        row = {"kernel": timing.shape.name, "fp32_us": timing.fp32_seconds * 1e6}
        for precision, seconds in (("fp32", timing.fp32_seconds), ("tf32", timing.tf32_seconds)):
            if seconds is None or (precision == "tf32" and not model.tensor_float_32):
                continue
            tf32 = precision == "tf32"
            for column, fitted in (("fit", model), ("held_out", without)):
                fitted = dataclasses.replace(fitted, tensor_float_32=tf32 and fitted.tensor_float_32)
                predicted = fitted.op_seconds(timing.op_type, timing.shape.flops, timing.shape.moved_bytes,
                                              peaks["peak_flops"], peaks["memory_bandwidth"])
                row[f"{precision}_{column}"] = predicted / seconds
            row[f"{precision}_us"] = seconds * 1e6
        rows.append(row)
    return rows


def error_summary(rows) -> dict:
    """Per precision and fit, the median |predicted / measured - 1| and the range of the ratio."""
    summary = {}
    for precision in ("fp32", "tf32"):
        for column in ("fit", "held_out"):
            ratios = [row[f"{precision}_{column}"] for row in rows if row.get(f"{precision}_{column}") is not None]
            if ratios:
                summary[f"{precision}_{column}"] = {
                    "kernels": len(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
                    "median_abs_error_pct": 100 * statistics.median(abs(r - 1) for r in ratios)}
    return summary


def write_machine(path, gpu: str, gpus: int, gpu_link: str, peaks, memory_bytes: int, model: KernelModel,
                  copies) -> None:
    """A machine file: a host CPU and `gpus` GPUs with the fitted kernel model; the host link from the copies
    (latency: the smallest copy; bandwidth: the largest), the GPUs joined by `gpu_link`."""
    from placer.devices import machine_from_dict
    from placer.files import write_json

    smallest, largest = min(copies), max(copies)
    host_link = {"bandwidth": largest / copies[largest], "latency": copies[smallest]}
    between = LINKS[gpu_link]
    cpu = {"name": "CPU:0", "kind": "CPU", "model": HOST_CPU.name, "memory": HOST_CPU.memory_bytes,
           "peak_flops": HOST_CPU.peak_flops, "memory_bandwidth": HOST_CPU.memory_bandwidth}
    devices = [cpu] + [{"name": f"GPU:{i}", "kind": "GPU", "model": gpu, "memory": memory_bytes,
                        "peak_flops": peaks["peak_flops"], "memory_bandwidth": peaks["memory_bandwidth"],
                        "kernels": model.to_json_dict()} for i in range(gpus)]
    links = []
    for a in devices:
        for b in devices:
            if a is not b:
                link = host_link if "CPU" in (a["kind"], b["kind"]) else {"bandwidth": between.bandwidth,
                                                                          "latency": between.latency}
                links.append({"source": a["name"], "target": b["name"], **link})
    data = {"name": f"{gpus}x{gpu}-{gpu_link}-measured", "devices": devices, "links": links}
    machine_from_dict(data, source=str(path))  # what is written reads back as a machine
    write_json(path, data)


class TorchTimer:
    """Times kernels on the first CUDA device through PyTorch (imported only here: placer does not need it)."""

    WARMUP, LAUNCHES = 5, 50

    def __init__(self):
        import time

        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--measure needs an NVIDIA GPU that PyTorch can use (torch.cuda.is_available() is False)")
        self.torch = torch
        self.device = torch.device("cuda:0")
        properties = torch.cuda.get_device_properties(0)
        self.device_name = properties.name
        self.memory_bytes = properties.total_memory
        self.date = time.strftime("%Y-%m-%d")
        self.how = (f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}), CUDA events, {self.WARMUP} warm-ups, "
                    f"mean of {self.LAUNCHES} back-to-back launches, FP32 inputs")

    def kernel(self, shape: KernelShape, tf32: bool) -> float:
        torch = self.torch
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        return self._time(self._launcher(shape))

    def _launcher(self, shape: KernelShape):
        torch, device, d = self.torch, self.device, shape.dims
        randn = lambda *size: torch.randn(*size, device=device)  # noqa: E731
        if shape.op_type == "MatMul":
            a, b = randn(d[0], d[1]), randn(d[1], d[2])
            return lambda: torch.mm(a, b)
        if shape.op_type.startswith("Conv2D"):
            batch, side, channels_in, channels_out, kernel = d
            x, w = randn(batch, channels_in, side, side), randn(channels_out, channels_in, kernel, kernel)
            dy = randn(batch, channels_out, side, side)
            padding = kernel // 2
            if shape.op_type == "Conv2D":
                return lambda: torch.nn.functional.conv2d(x, w, padding=padding)
            if shape.op_type == "Conv2DBackpropInput":
                return lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, padding=padding)
            return lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, padding=padding)
        if shape.op_type == "AddV2":
            a, b = randn(d[0]), randn(d[0])
            return lambda: torch.add(a, b)
        if shape.op_type == "Softmax":
            x = randn(d[0], d[1])
            return lambda: torch.softmax(x, dim=1)
        if shape.op_type == "Sum":
            x = randn(d[0], d[1])
            return lambda: x.sum(dim=1)
        table, ids = randn(d[0], d[1]), torch.randint(0, d[0], (d[2],), device=device)
        return lambda: torch.index_select(table, 0, ids)

    def _time(self, launch) -> float:
        torch = self.torch
        for _ in range(self.WARMUP):
            launch()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(self.LAUNCHES):
            launch()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / self.LAUNCHES

    def host_to_device(self, nbytes: int) -> float:
        """Seconds to copy `nbytes` from pinned host memory to the GPU (the median of 20 copies)."""
        torch = self.torch
        host = torch.empty(nbytes // 4, dtype=torch.float32).pin_memory()
        times = []
        for i in range(25):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            host.to(self.device, non_blocking=True)
            end.record()
            torch.cuda.synchronize()
            if i >= 5:
                times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
