"""The heuristics by name: which exist, where each can be made, and the one single-device placement."""

import pytest

from placer.devices import Device, DeviceSet
from placer.heuristics import (
    HeuristicError, applicable_heuristics, check_heuristic, heuristics, make_heuristic, single_device_placement,
)

EVERY_HEURISTIC = ("single-device", "round-robin", "expert", "balanced-stages", "cpu-only", "random",
                   "m-etf", "m-sct", "m-topo", "metis", "scotch", "exact")
LAYER_STACKS_ONLY = ("balanced-stages",)


@pytest.fixture(scope="module")
def modeled_target(two_tower):
    from placer.cost import open_target

    with open_target(two_tower, "modeled:2xV100") as target:
        yield target


def test_every_heuristic_is_registered_without_installed_entry_points():
    assert tuple(heuristics()) == EVERY_HEURISTIC


@pytest.mark.parametrize("name", [name for name in EVERY_HEURISTIC if name not in LAYER_STACKS_ONLY])
def test_every_heuristic_places_a_built_in_model_on_a_modeled_gpu_machine(name, two_tower, modeled_target):
    if name == "scotch":
        pytest.importorskip("pyscotch")
    placement = make_heuristic(name, two_tower, modeled_target.devices, model="two-tower",
                               simulator=modeled_target.simulator)
    assert placement.metadata["method"] == name
    assert len(placement.group_devices) == len(two_tower.groups)
    assert modeled_target.evaluate(placement).ok  # a placement of this graph on these devices


def test_heuristics_that_read_no_costs_place_on_in_process_cpus(two_tower, cpus2):
    names = applicable_heuristics(builtin_model=True, simulator=False, include_trivial=True)
    assert names == ["single-device", "round-robin", "expert", "cpu-only", "random"]
    for name in names:
        placement = make_heuristic(name, two_tower, cpus2, model="two-tower")
        assert placement.devices == cpus2.names and placement.metadata["method"] == name


def test_balanced_stages_are_offered_and_made_only_for_a_stack_of_layers(two_tower, modeled_target):
    assert "balanced-stages" in applicable_heuristics(builtin_model=True, simulator=True, model="gpt2")
    assert "balanced-stages" not in applicable_heuristics(builtin_model=True, simulator=True, model="two-tower")
    with pytest.raises(HeuristicError, match="splits a stack of layers into pipeline stages.*it splits: gpt2, llama"):
        make_heuristic("balanced-stages", two_tower, modeled_target.devices, model="two-tower",
                       simulator=modeled_target.simulator)


def test_a_heuristic_that_reads_costs_is_refused_without_a_simulator(two_tower, cpus2):
    with pytest.raises(HeuristicError, match="m-etf baseline reads the simulator's op costs"):
        make_heuristic("m-etf", two_tower, cpus2)


def test_the_expert_placement_is_refused_for_a_users_model():
    with pytest.raises(HeuristicError, match="exists only for built-in models"):
        check_heuristic("expert", builtin_model=False, simulator=True)


def test_an_unknown_name_lists_the_known_ones_and_the_old_alias_still_works(two_tower, cpus2):
    with pytest.raises(HeuristicError, match="unknown baseline 'bogus'; baselines: single-device, round-robin"):
        check_heuristic("bogus", builtin_model=True, simulator=True)
    assert make_heuristic("single", two_tower, cpus2).metadata["method"] == "single-device"


def test_a_random_placement_depends_only_on_its_seed(two_tower, cpus2):
    first, again, other = (make_heuristic("random", two_tower, cpus2, seed=seed) for seed in (0, 0, 1))
    assert first == again and first != other


# -- the one single-device placement --------------------------------------------------------------


def _device(short: str, kind: str) -> Device:
    return Device(f"/job:localhost/replica:0/task:0/device:{short}", kind)


def test_single_device_is_the_first_gpu_and_an_op_without_a_kernel_there_moves_to_a_device_that_has_one(
        string_op_graph):
    graph = string_op_graph
    devices = DeviceSet((_device("CPU:0", "CPU"), _device("GPU:0", "GPU"), _device("GPU:1", "GPU")))
    placement = single_device_placement(graph, devices)
    text_group = graph.op("loss_as_text").group
    assert placement.group_devices[text_group] == 0  # the CPU: AsString has no GPU kernel
    assert {d for g, d in enumerate(placement.group_devices) if g != text_group} == {1}  # GPU:0, not CPU:0
    assert make_heuristic("single-device", graph, devices) == placement


def test_single_device_without_a_gpu_is_the_first_device(mlp, cpus2):
    assert set(single_device_placement(mlp, cpus2).group_devices) == {0}


def test_the_improvement_rewards_reference_is_the_single_device_heuristic():
    from envs.placement import PlacementEnv

    env = PlacementEnv(model="two-tower", backend="simulated", devices="modeled:2xV100", reward="improvement")
    try:
        expected = single_device_placement(env.graph, env.devices).group_devices
        assert tuple(env.reference_assignment()) == expected
        assert env.devices[expected[0]].kind == "GPU"
    finally:
        env.close()
