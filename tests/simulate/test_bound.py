"""The step time bound on hand-built graphs whose answer is known, and never above any placement's simulated step."""

import math

import numpy as np
import pytest

from placer.devices import machine_from_dict
from placer.graph.opgraph import ColocationGroup, OpGraph, OpNode
from placer.profile import CostTable
from placer.simulate import Simulator, SimulatorConfig, gap_closed, step_time_bound, times_bound
from placer.simulate.bound import StepTimeBound, work_bound

MS = 1e-3
MB = 10**6


def hand_built(ops, groups=None):
    """An OpGraph of `ops`, (name, type, data inputs, output bytes, parameters) in topological order; `groups`
    lists the colocation groups as tuples of op names (every other op is a group of its own)."""
    groups = list(groups or [])
    grouped = {name for group in groups for name in group}
    groups += [(name,) for name, *_ in ops if name not in grouped]
    group_of = {name: index for index, group in enumerate(groups) for name in group}
    nodes = tuple(OpNode(name, kind, tuple(inputs), (), (None,), ("float32",), (size,), frozenset({"CPU", "GPU"}),
                         group_of[name], 0, parameters, True) for name, kind, inputs, size, parameters in ops)
    colocation = tuple(ColocationGroup(i, group[0], tuple(group), frozenset({"CPU", "GPU"}))
                       for i, group in enumerate(groups))
    return OpGraph("hand-built", nodes, colocation, b"", nodes[-1].name, nodes[-1].name)


def machine(count=2, memory="1GiB", bandwidth="1e9", latency=0.0, models=None):
    names = [f"CPU:{i}" for i in range(count)]
    return machine_from_dict({
        "devices": [{"name": name, "memory": memory, **({"model": models[i]} if models else {})}
                    for i, name in enumerate(names)],
        "links": [{"source": a, "target": b, "bandwidth": bandwidth, "latency": latency}
                  for a in names for b in names if a != b],
    })


def table(graph, milliseconds, kind="CPU"):
    return CostTable(graph.fingerprint, kind, {name: ms * MS for name, ms in milliseconds.items()}, "hand-made")


def test_a_chain_is_bound_by_its_critical_path():
    graph = hand_built([("a", "RandomUniform", [], MB, 0), ("b", "Square", ["a:0"], MB, 0),
                        ("c", "Square", ["b:0"], MB, 0)])
    bound = step_time_bound(Simulator(graph, machine(2), table(graph, {"a": 1, "b": 2, "c": 3})))
    assert bound.critical_path == pytest.approx(6 * MS)
    assert bound.work == pytest.approx(3 * MS)  # 6 ms of work over two devices
    assert (bound.value, bound.binding) == (pytest.approx(6 * MS), "critical path")


def test_n_equal_independent_ops_on_n_devices_are_bound_by_the_total_over_n():
    graph = hand_built([(f"op{i}", "RandomUniform", [], MB, 0) for i in range(3)])
    bound = step_time_bound(Simulator(graph, machine(3), table(graph, {f"op{i}": 2 for i in range(3)})))
    assert bound.work == pytest.approx(6 * MS / 3)
    assert bound.value == pytest.approx(2 * MS)


def test_twice_as_many_independent_ops_as_devices_are_bound_by_the_work():
    graph = hand_built([(f"op{i}", "RandomUniform", [], MB, 0) for i in range(6)])
    simulator = Simulator(graph, machine(3), table(graph, {f"op{i}": 2 for i in range(6)}))
    bound = step_time_bound(simulator)
    assert (bound.value, bound.binding) == (pytest.approx(4 * MS), "work")
    assert simulator.simulate([0, 0, 1, 1, 2, 2]).step_time == pytest.approx(bound.value)  # and it is reached


def test_a_slow_device_counts_for_its_speed_in_the_work():
    """One device runs each op in 1 ms, the other in 3 ms: four ops need 3 ms (three on the fast one, one on the
    slow one), not the 2 ms of their cheapest costs over two devices."""
    graph = hand_built([(f"op{i}", "RandomUniform", [], MB, 0) for i in range(4)])
    devices = machine(2, models=["fast", "slow"])
    costs = {"fast": table(graph, {f"op{i}": 1 for i in range(4)}, "fast"),
             "slow": table(graph, {f"op{i}": 3 for i in range(4)}, "slow")}
    simulator = Simulator(graph, devices, costs)
    assert step_time_bound(simulator).work == pytest.approx(3 * MS)
    assert simulator.simulate([0, 0, 0, 1]).step_time == pytest.approx(3 * MS)


def test_the_work_of_three_kinds_of_device_is_a_valid_bound_near_the_exact_one():
    # Three devices of speeds 1, 2 and 4 ops per ms, 70 equal ops: 10 ms exactly (split 10 / 20 / 40).
    seconds = np.tile([1.0, 0.5, 0.25], (70, 1))
    bound = work_bound(seconds, np.ones(3))
    assert 9.0 <= bound <= 10.0 + 1e-9


def memory_graph():
    """Two variables of 600 MB (with their reads) that no 1 GiB device holds together: a tensor must cross."""
    ops = [("var_a", "VarHandleOp", [], 0, 150 * MB), ("read_a", "ReadVariableOp", ["var_a:0"], 4 * MB, 0),
           ("var_b", "VarHandleOp", [], 0, 150 * MB), ("read_b", "ReadVariableOp", ["var_b:0"], 4 * MB, 0),
           ("fa", "Square", ["read_a:0"], 100 * MB, 0), ("fb", "AddV2", ["fa:0", "read_b:0"], MB, 0)]
    return hand_built(ops, groups=[("var_a", "read_a"), ("var_b", "read_b")])


def test_memory_that_exceeds_one_device_forces_a_transfer_and_binds():
    graph = memory_graph()
    simulator = Simulator(graph, machine(2, bandwidth="1e9"), table(graph, {"fa": 1, "fb": 1}))
    bound = step_time_bound(simulator)
    assert bound.devices_needed == 2
    assert bound.critical_path == pytest.approx(2 * MS)
    # The cheapest cut: read_b's 4 MB at 1 GB/s, then fb (1 ms).
    assert (bound.memory, bound.binding) == (pytest.approx(5 * MS), "memory")
    # var_b's group on the second device reaches the bound; both variables on one device run out of memory.
    groups = [graph.group_of(name).index for name in ("var_b",)]
    placement = [1 if g in groups else 0 for g in range(len(graph.groups))]
    assert simulator.simulate(placement).step_time == pytest.approx(bound.value)
    assert not simulator.simulate([0] * len(graph.groups)).ok


def test_devices_forced_by_memory_pay_the_overhead_of_spanning_them():
    graph = memory_graph()
    config = SimulatorConfig(step_overhead=0.5 * MS, spanning_overhead=0.25 * MS)
    bound = step_time_bound(Simulator(graph, machine(2), table(graph, {"fa": 1, "fb": 1}), config))
    assert bound.overhead == pytest.approx(0.75 * MS)
    assert bound.value == pytest.approx(5.75 * MS)


def test_variables_larger_than_every_device_make_every_placement_infeasible():
    graph = memory_graph()
    bound = step_time_bound(Simulator(graph, machine(2, memory="500MB"), table(graph, {"fa": 1, "fb": 1})))
    assert not bound.feasible and bound.value == math.inf and bound.binding == "memory"
    assert bound.to_dict()["seconds"] is None


def random_graph(rng, ops=12):
    """A random DAG: each op reads up to two earlier ops; a few hold variables, some groups hold two ops."""
    spec = []
    for i in range(ops):
        inputs = sorted({f"op{j}:0" for j in rng.integers(0, i, size=min(i, int(rng.integers(0, 3))))})
        parameters = int(rng.integers(1, 40) * MB // 4) if rng.random() < 0.3 else 0
        spec.append((f"op{i}", "Square" if inputs else "RandomUniform", inputs, int(rng.integers(1, 8) * MB), parameters))
    pairs = [(f"op{i}", f"op{i + 1}") for i in range(0, ops - 1, 5)]
    return hand_built(spec, groups=pairs)


@pytest.mark.parametrize("seed", range(6))
def test_no_placement_simulates_below_the_bound(seed):
    rng = np.random.default_rng(seed)
    graph = random_graph(rng)
    devices = machine(3, memory="100MB", bandwidth="2e9", latency=1e-4, models=["m0", "m1", "m2"])
    costs = {model: table(graph, {op.name: float(rng.uniform(0.1, 3)) for op in graph.ops}, model)
             for model in ("m0", "m1", "m2")}
    configs = [SimulatorConfig(), SimulatorConfig(cpu_slots=2),
               SimulatorConfig(step_overhead=1e-4, spanning_overhead=2e-4, send_cpu=5e-5, recv_cpu_per_byte=1e-11)]
    for config in configs:
        simulator = Simulator(graph, devices, costs, config)
        bound = step_time_bound(simulator)
        ran = 0
        for _ in range(40):
            result = simulator.simulate(rng.integers(0, 3, size=len(graph.groups)))
            if result.ok:
                ran += 1
                assert result.step_time >= bound.value * (1 - 1e-9)
        assert ran > 0  # some placements fit: the comparison above was made


def test_times_bound_and_gap_closed_arithmetic():
    bound = StepTimeBound(critical_path=4 * MS, work=2 * MS, memory=0.0, overhead=0.0, devices_needed=1)
    assert times_bound(6 * MS, bound) == pytest.approx(1.5)
    # best heuristic 10 ms, bound 4 ms: a learned 7 ms closed half of the 6 ms gap
    assert gap_closed(10 * MS, 7 * MS, bound) == pytest.approx(0.5)
    assert gap_closed(10 * MS, 12 * MS, 4 * MS) == pytest.approx(-1 / 3)  # slower than the heuristic: negative
    assert gap_closed(4 * MS, 4 * MS, bound) is None  # the heuristic is at the bound: no gap to close
    assert gap_closed(math.inf, 7 * MS, bound) is None and times_bound(None, bound) is None


@pytest.mark.parametrize("model, size, machine_spec", [
    pytest.param("gpt2", "tiny", "modeled:2xH100", marks=pytest.mark.slow),  # the H100's measured kernels
    ("two-tower", "tiny", "modeled:2xV100"),
])
def test_slices_of_the_batch_never_do_less_work_than_the_whole_batch_so_the_machine_s_bound_holds(model, size,
                                                                                                   machine_spec):
    """The machine's bound takes the whole batch's work for every slicing of it: under the modeled op costs, k ops
    of B/k samples take at least one op of B. Checked op by op, at half the batch and at one sample."""
    from placer.cost import open_target
    from placer.models import build_model, model_batch
    from placer.schedule.micro_batch import batch_dependent_ops
    from placer.simulate.bound import machine_bound, sliced_step_bound

    whole = build_model(model, size)
    batch = model_batch(model, size)
    with open_target(whole, machine_spec) as target:
        whole_cost = dict(zip((op.name for op in whole.step_ops), target.op_cost))
        whole_bound = step_time_bound(target.simulator)
    for slices in (2, batch):
        sliced = build_model(model, size, batch=batch // slices)
        with open_target(sliced, machine_spec) as target:
            cost = dict(zip((op.name for op in sliced.step_ops), target.op_cost))
            sliced_bound = step_time_bound(target.simulator)
        for name, seconds in whole_cost.items():
            if name in cost:
                assert np.all(slices * cost[name] >= seconds * (1 - 1e-9)), (name, slices)
        # The bound of plans of k slices: k copies of the forward and backward, one update at least, over the
        # machine; never less work than the whole batch's, so the least over counts is never below the bound that
        # pairs the whole batch's work with the smallest slice's chain.
        with open_target(sliced, machine_spec) as target:
            dependent = batch_dependent_ops(sliced)
            of_slices = sliced_step_bound(target.simulator, slices,
                                          np.array([op.name in dependent for op in sliced.step_ops]))
        assert of_slices.slices == slices and of_slices.work >= whole_bound.work * (1 - 1e-9)
        assert of_slices.critical_path <= sliced_bound.critical_path
        bound = machine_bound([whole_bound, of_slices])
        assert bound.value == min(whole_bound.value, of_slices.value)
        assert bound.value >= max(whole_bound.work, min(whole_bound.critical_path, of_slices.critical_path)) * (1 - 1e-9)
