"""The kernel model behind modeled GPUs: its effects on hand-built ops whose answer is known, its fit from a
kernel table, and the machine files that carry it."""

import json
from dataclasses import replace

import pytest

from placer.cost import open_target, parse_target_spec
from placer.devices import load_machine
from placer.errors import DeviceSpecError
from placer.hardware import GPUS, H200_KERNELS, H200_PEAKS, MEASURED_KERNELS, modeled_machine
from placer.kernel_model import (KernelModel, KernelShape, KernelTiming, fit_kernel_model, read_kernel_table,
                            write_kernel_table)
from placer.placement import Placement

PEAK, BANDWIDTH, TENSOR_CORES = 10e12, 1e12, 80e12
MODEL = KernelModel(efficiency=0.5, op_efficiency={"MatMul": 0.8}, op_fixed_seconds={"MatMul": 5e-6},
                    tensor_float_32=False, tensor_core_flops=TENSOR_CORES, tf32_op_efficiency={"MatMul": 0.25},
                    op_floor=10e-6, source="test")


def seconds(model, op_type, flops, moved=0.0):
    return model.op_seconds(op_type, flops, moved, PEAK, BANDWIDTH)


def test_an_op_below_the_floor_costs_the_floor_and_launch_overhead_adds_to_every_op():
    assert seconds(MODEL, "AddV2", 1e3, 1e3) == pytest.approx(10e-6)
    assert seconds(replace(MODEL, launch_overhead=2e-6), "AddV2", 1e3, 1e3) == pytest.approx(12e-6)


def test_an_op_type_runs_at_its_own_efficiency_plus_its_fixed_seconds_others_at_the_default():
    # 8e9 FLOPs at 0.8 x 10 TFLOP/s: 1 ms, plus 5 us fixed.
    assert seconds(MODEL, "MatMul", 8e9) == pytest.approx(1e-3 + 5e-6)
    # Conv2D has no efficiency of its own: 0.5 x 10 TFLOP/s, no fixed time.
    assert seconds(MODEL, "Conv2D", 8e9) == pytest.approx(8e9 / 5e12)


def test_tf32_runs_its_op_types_at_the_tensor_core_rate_and_leaves_the_others_in_fp32():
    tf32 = replace(MODEL, tensor_float_32=True)
    # 8e9 FLOPs at 0.25 x 80 TFLOP/s: 0.4 ms (no TF32 fixed time given).
    assert seconds(tf32, "MatMul", 8e9) == pytest.approx(0.4e-3)
    assert seconds(tf32, "Conv2D", 8e9) == seconds(MODEL, "Conv2D", 8e9)


def test_a_memory_bound_op_moves_its_bytes_at_the_memory_efficiency():
    # 1 GB at 0.5 x 1 TB/s: 2 ms, though its FLOPs alone take 0.2 us.
    assert seconds(MODEL, "AddV2", 1e6, 1e9) == pytest.approx(2e-3)


def test_the_fit_recovers_a_known_model_from_its_own_kernel_times():
    truth = replace(MODEL, tensor_float_32=True, tf32_op_fixed_seconds={"MatMul": 3e-6})
    shapes = [KernelShape("MatMul", (m, 1024, 1024)) for m in (512, 1024, 2048, 4096)] + [KernelShape("AddV2", (1000,))]
    timings = [KernelTiming(shape, seconds(replace(truth, tensor_float_32=False), shape.op_type, shape.flops,
                                          shape.moved_bytes),
                            seconds(truth, shape.op_type, shape.flops, shape.moved_bytes)) for shape in shapes]
    fitted = fit_kernel_model(timings, peak_flops=PEAK, memory_bandwidth=BANDWIDTH, tensor_core_flops=TENSOR_CORES,
                              source="synthetic")
    assert fitted.op_floor == pytest.approx(10e-6)
    assert fitted.op_efficiency["MatMul"] == pytest.approx(0.8)
    assert fitted.op_fixed_seconds["MatMul"] == pytest.approx(5e-6)
    assert fitted.tf32_op_efficiency["MatMul"] == pytest.approx(0.25)
    assert fitted.tf32_op_fixed_seconds["MatMul"] == pytest.approx(3e-6)
    assert fitted.tensor_float_32


def test_one_odd_kernel_moves_the_fit_little():
    shapes = [KernelShape("MatMul", (m, 1024, 1024)) for m in (256, 512, 1024, 2048, 4096)]
    exact = [KernelTiming(s, seconds(MODEL, "MatMul", s.flops)) for s in shapes]
    odd = exact[:2] + [KernelTiming(shapes[2], 3 * exact[2].fp32_seconds)] + exact[3:]
    fitted = fit_kernel_model(odd, peak_flops=PEAK, memory_bandwidth=BANDWIDTH, tensor_core_flops=None, source="odd")
    assert fitted.op_efficiency["MatMul"] == pytest.approx(0.8, rel=0.1)


def test_the_fitted_h200_model_reproduces_every_kernel_of_its_table_within_its_fit_error():
    for timing in H200_KERNELS:
        shape = timing.shape
        fp32 = replace(MEASURED_KERNELS, tensor_float_32=False).op_seconds(
            shape.op_type, shape.flops, shape.moved_bytes, H200_PEAKS["peak_flops"], H200_PEAKS["memory_bandwidth"])
        assert 0.55 < fp32 / timing.fp32_seconds < 1.4, shape.name
    assert MEASURED_KERNELS.tensor_float_32 and MEASURED_KERNELS.op_floor == pytest.approx(11.1e-6)


def test_modeled_a100_and_h100_say_their_costs_rest_on_measured_kernels_and_older_gpus_on_a_roofline(mlp):
    for gpu, word in (("H100", "measured on an H200"), ("A100", "no A100 measured"), ("V100", "roofline")):
        with open_target(mlp, f"modeled:2x{gpu}") as target:
            assert word in target.op_cost_sources[gpu]
    assert "TF32 on" in open_target(mlp, "modeled:1xH100").op_cost_sources["H100"]
    # TF32, on as TensorFlow runs it, makes the H100's large matmuls 2-5x faster than in FP32.
    h100 = GPUS["H100"]
    projection = KernelShape("MatMul", (128, 1024, 32000))
    tf32, fp32 = (kernels.op_seconds("MatMul", projection.flops, projection.moved_bytes, h100.peak_flops,
                                     h100.memory_bandwidth)
                  for kernels in (h100.kernels, replace(h100.kernels, tensor_float_32=False)))
    assert 2 < fp32 / tf32 < 5
    with open_target(mlp, "modeled:1xH100") as target:
        assert target.evaluate(Placement.on_device(mlp, target.devices, 1)).ok
    # An H100 machine's host link is the measured PCIe 5, not PCIe 3.
    machine = modeled_machine(1, "H100", "nvlink4")
    host = next(link for link in machine.links if "CPU" in link.source)
    assert host.bandwidth == pytest.approx(53e9)


def machine_file(tmp_path, kernels):
    path = tmp_path / "machine.json"
    path.write_text(json.dumps({"devices": [{"name": "GPU:0", "kind": "GPU", "peak_flops": "67T",
                                             "memory_bandwidth": "3.35T", "memory": "80GiB", "kernels": kernels}]}))
    return path


def test_a_machine_file_carries_efficiencies_a_floor_and_tf32(tmp_path, mlp):
    path = machine_file(tmp_path, {"op_efficiency": {"MatMul": 0.5}, "op_floor": "11e-6", "tensor_float_32": True,
                                   "tensor_core_flops": "495T", "tf32_op_efficiency": {"MatMul": 0.3},
                                   "source": "my GPU"})
    device = load_machine(path)[0]
    assert device.kernels.op_floor == pytest.approx(11e-6) and device.kernels.tensor_float_32
    with open_target(mlp, str(path)) as target:
        assert target.op_cost_sources == {"GPU": "my GPU; TF32 on"}
        assert target.op_cost[target.op_cost > 0].min() == pytest.approx(11e-6)  # bookkeeping ops are free


@pytest.mark.parametrize("kernels, message", [
    ({"op_efficiency": {"Matmul": 0.5}}, "op types TensorFlow does not have: Matmul"),
    ({"op_efficiency": {"MatMul": 1.5}}, r"in \(0, 1\], got 1.5"),
    ({"efficiency": 0}, r"in \(0, 1\], got 0"),
    ({"tensor_float_32": True}, "needs tensor_core_flops and tf32_op_efficiency"),
    ({"tensor_float_32": "yes"}, "true or false"),
    ({"floor": 1e-5}, "unknown keys floor"),
    ({"op_floor": 2}, "seconds per op"),
])
def test_a_bad_kernels_entry_is_refused_with_what_is_wrong(tmp_path, kernels, message):
    with pytest.raises(DeviceSpecError, match=message):
        parse_target_spec(str(machine_file(tmp_path, kernels)))


def test_a_kernel_table_round_trips_and_another_file_is_refused(tmp_path):
    path = write_kernel_table(tmp_path / "kernels.json", H200_KERNELS, {"name": "H200"})
    device, timings = read_kernel_table(path)
    assert device == {"name": "H200"} and tuple(timings) == H200_KERNELS
    (tmp_path / "other.json").write_text('{"format": "placer.costs"}')
    with pytest.raises(DeviceSpecError, match="not a kernel table"):
        read_kernel_table(tmp_path / "other.json")


def test_the_measuring_script_writes_a_machine_file_the_simulator_runs(tmp_path, mlp):
    from experiments.gpu_kernels import write_machine

    copies = {4096: 14e-6, 1 << 20: 36e-6, 64 << 20: 1.27e-3}
    path = tmp_path / "machine.json"
    write_machine(path, "H200", 2, "nvlink4", H200_PEAKS, 141 * 2**30, MEASURED_KERNELS, copies)
    machine = load_machine(path)
    assert [d.kind for d in machine] == ["CPU", "GPU", "GPU"]
    host = next(link for link in machine.links if "CPU" in link.source)
    assert host.latency == pytest.approx(14e-6) and host.bandwidth == pytest.approx((64 << 20) / 1.27e-3)
    with open_target(mlp, str(path)) as target:
        assert "measured on an H200" in target.op_cost_sources["H200"]
        assert target.evaluate(Placement.on_device(mlp, target.devices, 1)).ok
