"""Cost tables: profiled from traced steps, estimated by roofline for hardware this machine lacks."""

import pytest

from placer.errors import DeviceSpecError, ProfileError
from placer.hardware import GPUS, LINKS, modeled_machine
from placer.measure import Measurer
from placer.profile import FREE_OP_TYPES, load_cost_table, profile_costs, roofline_costs


def test_profiled_costs_cover_the_step_and_round_trip_through_a_file(mlp, two_tower, tmp_path):
    with Measurer("inprocess:1") as measurer:
        table = profile_costs(mlp, measurer, steps=3)
    assert table.source == "profiled" and table.device_kind == "CPU"
    matmuls = [op.name for op in mlp.step_ops if op.type == "MatMul"]
    # A MatMul grappler fused with its BiasAdd has its time under the fused node's name.
    assert sum(table.seconds(name) for name in matmuls) + table.metadata["unattributed_seconds"] > 0
    assert 0 < table.total_seconds < 3 * table.metadata["step_time_median"]
    assert table.metadata["ops_traced"] > len(mlp.step_ops) // 2

    path = table.save(tmp_path / "mlp.costs.json")
    assert load_cost_table(path, mlp) == table
    with pytest.raises(ProfileError, match="profile this graph"):
        load_cost_table(path, two_tower)


def test_a_file_that_is_not_a_cost_table_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"format": "something else"}')
    with pytest.raises(ProfileError, match="not a placer cost table"):
        load_cost_table(path)


def test_roofline_cost_is_the_slower_of_compute_and_memory_plus_launch(mlp):
    v100 = GPUS["V100"]
    table = roofline_costs(mlp, v100)
    matmul = max((op for op in mlp.step_ops if op.type == "MatMul"), key=lambda op: op.flops)
    inputs = sum(sum(mlp.op(src).output_bytes) for src in matmul.producers)
    kernels = v100.kernels
    expected = max(matmul.flops / (v100.peak_flops * kernels.efficiency),
                   (sum(matmul.output_bytes) + inputs) / (v100.memory_bandwidth * kernels.efficiency)) + kernels.launch_overhead
    assert table.seconds(matmul.name) == pytest.approx(expected)
    assert all(table.seconds(op.name) == 0 for op in mlp.step_ops if op.type in FREE_OP_TYPES)
    # At tiny sizes a GPU op costs its launch (an H100's tiny TF32 matmul was measured slower than the K80's
    # roofline guess); a large matmul shows the K80 slower.
    large = {gpu: GPUS[gpu].kernels.op_seconds("MatMul", 8e9, 1e8, GPUS[gpu].peak_flops, GPUS[gpu].memory_bandwidth)
             for gpu in ("K80", "H100")}
    assert large["K80"] > 10 * large["H100"]


def test_modeled_machine_joins_every_pair_of_devices():
    machine = modeled_machine(gpus=4, gpu="A100", link="nvlink3")
    assert [d.kind for d in machine] == ["CPU", "GPU", "GPU", "GPU", "GPU"]
    assert machine[1].model == "A100" and machine[1].memory_bytes == GPUS["A100"].memory_bytes
    assert len(machine.links) == 5 * 4
    gpu_link = next(link for link in machine.links if "GPU:0" in link.source and "GPU:1" in link.target)
    assert gpu_link.bandwidth == LINKS["nvlink3"].bandwidth
    with pytest.raises(DeviceSpecError, match="unknown device model"):
        modeled_machine(gpus=2, gpu="TPU")


class _RoundsMeasurer:
    """Answers each profiling round with the next of `slowdowns`: every op and step that much slower."""

    def __init__(self, devices, slowdowns):
        from placer.measure import MeasureConfig

        self.devices, self.config = devices, MeasureConfig()
        self.slowdowns = list(slowdowns)

    def measure(self, graph, placement, config):
        from placer.measure.result import Measurement, OpTime

        slow = self.slowdowns.pop(0)
        traced = config.profile_steps > 0
        ops = {op.name: OpTime(self.devices[0].name, 1e-4 * slow) for op in graph.step_ops} if traced else {}
        return Measurement(samples=(len(graph.step_ops) * 1e-4 * slow,) * 3, op_times=ops)


def test_one_slow_profiling_round_moves_no_op_cost_and_is_warned_about(mlp, cpus2):
    steady = profile_costs(mlp, _RoundsMeasurer(cpus2, [1, 1, 1, 1]))
    with pytest.warns(UserWarning, match="profile it again on a quiet machine"):
        slow_once = profile_costs(mlp, _RoundsMeasurer(cpus2, [1, 1, 2.5, 1]))
    assert slow_once.op_seconds == steady.op_seconds
    assert slow_once.metadata["round_step_medians"][1] == pytest.approx(2.5 * steady.metadata["step_time_median"])


def test_the_slow_first_measurement_of_a_graph_is_thrown_away(mlp, cpus2):
    """A graph's first measurement on a testbed is slower than its later ones (`PROFILE_WARMUP_ROUNDS`)."""
    steady = profile_costs(mlp, _RoundsMeasurer(cpus2, [1, 1, 1, 1]))
    warmed = profile_costs(mlp, _RoundsMeasurer(cpus2, [3, 1, 1, 1]))
    assert warmed.op_seconds == steady.op_seconds
    assert warmed.metadata["step_time_median"] == steady.metadata["step_time_median"]
    cold = profile_costs(mlp, _RoundsMeasurer(cpus2, [3]), rounds=1, warmup_rounds=0)
    assert cold.metadata["round_step_medians"][0] == pytest.approx(3 * steady.metadata["step_time_median"])


def test_a_profile_of_no_rounds_is_refused(mlp, cpus2):
    with pytest.raises(ProfileError, match="at least one round"):
        profile_costs(mlp, _RoundsMeasurer(cpus2, []), rounds=0)


def test_a_short_step_is_timed_for_long_enough_to_set_the_level(mlp, cpus2):
    """The rounds' untraced steps set every prediction's level: each round times ENOUGH_TIMED_SECONDS of them."""
    from placer.measure.config import ENOUGH_TIMED_SECONDS

    measurer = _RoundsMeasurer(cpus2, [1, 1, 1, 1])
    asked = []
    measure = measurer.measure
    measurer.measure = lambda graph, placement, config: asked.append(config) or measure(graph, placement, config)
    profile_costs(mlp, measurer)
    assert asked[0].profile_steps == 0  # the warm-up round, thrown away
    assert [c.timed_seconds for c in asked[1:]] == [ENOUGH_TIMED_SECONDS] * 3
    assert all(c.timed_steps == measurer.config.timed_steps for c in asked)
