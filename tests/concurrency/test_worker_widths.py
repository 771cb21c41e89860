"""Workers of different widths: target specs, the widths a device set carries, ops that ask for more threads
than their device has, and the simulator's CPU devices timed by a performance model at their width."""

import os

import pytest
import tensorflow as tf

from placer.concurrency.widths import check_op_widths, op_widths, width_mismatches
from placer.devices import Link, machine_from_dict
from placer.errors import DeviceSpecError, OpWidthError
from placer.graph import graph_from_function
from placer.measure.targets import LocalTestbed, parse_target
from placer.placement import Placement
from placer.simulate import Simulator, SimulatorConfig

CORES = sorted(os.sched_getaffinity(0))
two_cores = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")


@two_cores
def test_local_n_still_means_n_one_core_workers_and_reads_back_the_same():
    target = parse_target("local:2")
    assert target == LocalTestbed(2)
    assert str(target) == "local:2"
    assert [(w.cores, w.intra_op_threads) for w in target.layout()] == [((CORES[0],), 1), ((CORES[1],), 1)]


@two_cores
@pytest.mark.parametrize("text, layout", [
    ("local:widths=2", [((CORES[0], CORES[1]), 2, 3)]),
    ("local:widths=1+1", [((CORES[0],), 1, 2), ((CORES[1],), 1, 2)]),
    ("local:widths=2,intra=1,inter=2", [((CORES[0], CORES[1]), 1, 2)]),
    ("local:widths=1+1,inter=1+2", [((CORES[0],), 1, 1), ((CORES[1],), 1, 2)]),
    (f"local:cores={CORES[1]}+{CORES[0]}", [((CORES[1],), 1, 2), ((CORES[0],), 1, 2)]),
])
def test_each_worker_gets_its_own_cores_and_thread_pools_and_the_spec_reads_back_the_same(text, layout):
    target = parse_target(text)
    assert [(w.cores, w.intra_op_threads, w.inter_op_threads) for w in target.layout()] == layout
    assert parse_target(str(target)) == target


@two_cores
@pytest.mark.parametrize("text, complaint", [
    ("local:widths=1+1,intra=2", "worker 0 has 1 core .* but intra=2"),
    ("local:widths=2,intra=3", "worker 0 has 2 cores .* but intra=3"),
    ("local:widths=1+1,inter=3", "inter=3: give it 1 to 2"),
    ("local:widths=2+1", "need 3 cores but this process may use 2"),
    ("local:cores=0+0", "core 0 is in more than one worker's core set"),
    ("local:cores=0++1", "worker 1 has an empty core set"),
    ("local:cores=1-0", "worker 0 has an empty core set"),
    ("local:cores=0+99", r"cores \[99\] are not among the cores this process may use"),
    ("local:widths=0+1", "every worker needs at least one core"),
    ("local:widths=1+1,intra=1+1+1", "3 thread counts for 2 workers"),
    ("local:widths=1,threads=2", "not 'threads=2'"),
])
def test_impossible_widths_are_refused_naming_the_cores_available(text, complaint):
    with pytest.raises(DeviceSpecError, match=complaint) as error:
        parse_target(text)
    if "not 'threads" not in complaint and "thread counts" not in complaint:
        assert str(CORES) in str(error.value) or "1 to 2" in str(error.value)


def towers():
    """Two independent chains of three 256x256 matmuls, each summed into one variable."""
    def build():
        outputs = []
        for tower in (0, 1):
            with tf.name_scope(f"tower{tower}"):
                x = tf.random.uniform([256, 256], seed=tower)
                for _ in range(3):
                    x = tf.matmul(x, x)
                outputs.append(tf.reduce_sum(x))
        total = tf.compat.v1.get_variable("total", [], use_resource=True)
        return tf.group(total.assign_add(tf.add_n(outputs)), name="train_op")

    return graph_from_function(build, name="towers")


@pytest.fixture(scope="module")
def graph():
    return towers()


class PerfectlyParallelMatmuls:
    """A performance model whose answer is known: every MatMul takes 10 ms on one thread and speeds up
    perfectly with threads; every other op takes no time."""

    def predict(self, graph, op, threads):
        return 10e-3 / threads if op.type == "MatMul" else 0.0


def machine(*workers):
    """CPU devices of the given (cores, intra, inter), with links so fast that transfers cost nothing."""
    return machine_from_dict({"devices": [
        {"name": f"/job:worker/task:{i}/device:CPU:0", "cores": cores, "intra_op_threads": intra,
         "inter_op_threads": inter} for i, (cores, intra, inter) in enumerate(workers)]})


def by_tower(graph, devices):
    """Tower 1's ops on the last device, everything else on the first."""
    return Placement.from_op_devices(graph, devices, {
        op.name: devices[-1].name if op.name.startswith("tower1/") else devices[0].name for op in graph.ops})


def simulate(graph, devices, placement):
    config = SimulatorConfig(default_link=Link("", "", bandwidth=1e18))
    return Simulator(graph, devices, PerfectlyParallelMatmuls(), config).simulate(placement).step_time


def test_a_device_set_carries_each_workers_cores_and_threads_and_ops_see_their_width(graph):
    devices = machine((2, 2, 3), (1, 1, 2))
    assert [(d.cores, d.width, d.inter_op_threads) for d in devices] == [(2, 2, 3), (1, 1, 2)]
    widths = op_widths(graph, by_tower(graph, devices), devices)
    assert {widths[op.name] for op in graph.ops if op.name.startswith("tower1/")} == {1}
    assert {widths[op.name] for op in graph.ops if op.name.startswith("tower0/")} == {2}


def test_a_two_thread_op_on_a_one_core_worker_is_refused_and_a_one_thread_op_on_a_wide_one_is_reported(graph):
    devices = machine((1, 1, 2), (1, 1, 2))
    placement = by_tower(graph, devices)
    matmul = next(op.name for op in graph.ops if op.type == "MatMul" and op.name.startswith("tower1/"))
    with pytest.raises(OpWidthError, match=r"asks for 2 threads but worker:1/CPU:0 runs it on 1 thread\b.*1 threads on 1 cores"):
        check_op_widths(graph, placement, devices, {matmul: 2})
    check_op_widths(graph, placement, devices, {matmul: 1})
    wide = machine((2, 2, 3))
    mismatches = width_mismatches(graph, Placement.on_device(graph, wide, 0), wide, {matmul: 1})
    assert [(m.op, m.requested, m.width) for m in mismatches] == [(matmul, 1, 2)]


def test_a_wide_device_runs_each_op_at_its_width_one_at_a_time(graph):
    # Six matmuls, each 10 ms / 2 threads, one after another.
    devices = machine((2, 2, 1))
    assert simulate(graph, devices, Placement.on_device(graph, devices, 0)) == pytest.approx(30e-3)


def test_two_one_core_workers_run_the_towers_side_by_side_at_one_thread_each(graph):
    devices = machine((1, 1, 1), (1, 1, 1))
    assert simulate(graph, devices, by_tower(graph, devices)) == pytest.approx(30e-3)
    assert simulate(graph, devices, Placement.on_device(graph, devices, 0)) == pytest.approx(60e-3)


def test_one_thread_ops_co_running_on_one_core_share_it_and_on_two_cores_overlap_at_full_speed(graph):
    # Two ops of one thread at once on one core: half a core each, so nothing is gained over one at a time.
    shared = machine((1, 1, 2))
    assert simulate(graph, shared, Placement.on_device(graph, shared, 0)) == pytest.approx(60e-3)
    # Two ops of one thread at once on two cores: the towers overlap at full speed.
    spread = machine((2, 1, 2))
    assert simulate(graph, spread, Placement.on_device(graph, spread, 0)) == pytest.approx(30e-3)


def test_the_performance_model_simulates_only_cpu_devices_of_a_known_width(graph):
    unknown = machine_from_dict({"devices": [{"name": "CPU:0"}]})
    with pytest.raises(DeviceSpecError, match="known width"):
        Simulator(graph, unknown, PerfectlyParallelMatmuls())
    gpu = machine_from_dict({"devices": [{"name": "GPU:0"}]})
    with pytest.raises(DeviceSpecError, match="known width"):
        Simulator(graph, gpu, PerfectlyParallelMatmuls())


def test_a_machine_file_refuses_more_threads_than_cores():
    with pytest.raises(DeviceSpecError, match="intra_op_threads=2 exceeds its 1 cores"):
        machine((1, 2, 1))


@two_cores
@pytest.mark.slow
@pytest.mark.testbed
def test_a_testbed_of_one_wide_worker_and_one_of_two_narrow_ones_run_a_placement_and_report_their_widths(mlp):
    from placer.measure import MeasureConfig, Measurer
    from placer.testbed import isolation_available

    if not isolation_available():
        pytest.skip("no private network namespace on this machine")
    config = MeasureConfig(warmup_steps=1, timed_steps=1)
    for text, widths, cores in (("local:widths=2", [(2, 2, 3)], [CORES]),
                                ("local:widths=1+1,inter=1+2", [(1, 1, 1), (1, 1, 2)], [[CORES[0]], [CORES[1]]])):
        with Measurer(text, config) as measurer:
            devices = measurer.devices
            assert [(d.cores, d.intra_op_threads, d.inter_op_threads) for d in devices] == widths
            assert measurer.testbed_info["cores"] == cores
            result = measurer.measure(mlp, Placement.round_robin(mlp, devices))
            assert result.ok, result.failure


@two_cores
@pytest.mark.slow
@pytest.mark.testbed
def test_each_worker_process_starts_the_thread_pools_its_spec_gives(mlp):
    from placer.measure import Measurer
    from placer.testbed import isolation_available

    if not isolation_available():
        pytest.skip("no private network namespace on this machine")
    # Step times cannot show it here (on this machine's two vCPUs a matmul runs no faster on two intra-op
    # threads than on one), so count the worker's threads: TensorFlow starts both pools with the server.
    threads = {}
    for intra, inter in ((1, 1), (2, 1), (1, 3)):
        with Measurer(f"local:widths=2,intra={intra},inter={inter}") as measurer:
            assert measurer.measure(mlp, Placement.on_device(mlp, measurer.devices, 0)).ok
            (pid,) = measurer.testbed_info["pids"]
            threads[intra, inter] = len(os.listdir(f"/proc/{pid}/task"))
    assert threads[2, 1] == threads[1, 1] + 1, threads
    assert threads[1, 3] == threads[1, 1] + 2, threads
