"""Blocks from a real placement: two-tower (tiny) with one tower per modeled GPU, scheduled end to end."""

import pytest

from placer.errors import MicroBatchError
from placer.hardware import GPUS, HOST_CPU, modeled_machine
from placer.placement import Placement
from placer.profile import roofline_costs
from placer.schedule import one_f_one_b, read_schedule_file, tessel
from placer.schedule.from_placement import blocks_from_placement, infer_batch_size
from placer.simulate import Simulator


@pytest.fixture(scope="module")
def machine():
    return modeled_machine(gpus=2)


@pytest.fixture(scope="module")
def simulator(two_tower, machine):
    tables = {"V100": roofline_costs(two_tower, GPUS["V100"]), "host-cpu": roofline_costs(two_tower, HOST_CPU)}
    return Simulator(two_tower, machine, tables)


@pytest.fixture(scope="module")
def tower_per_gpu(two_tower, machine):
    from placer.models.two_tower import tower_of

    # tower_a (forward and gradients) on GPU:0; tower_b and the loss on GPU:1: two contiguous stages
    return Placement.from_groups(two_tower, machine, {
        group.name: "GPU:0" if all(tower_of(op) == "tower_a" for op in group.ops) else "GPU:1" for group in two_tower.groups})


def test_a_two_stage_placement_becomes_forward_and_backward_blocks_per_device(two_tower, simulator, tower_per_gpu):
    template = blocks_from_placement(simulator, tower_per_gpu, 4)
    assert template.devices == ("GPU:0", "GPU:1")
    blocks = {b.name: b for b in template.blocks}
    assert set(blocks) == {"f@GPU:0", "f@GPU:1", "b@GPU:0", "b@GPU:1"}
    assert blocks["f@GPU:1"].after == ("f@GPU:0",)  # the loss reads tower_a's output
    assert "b@GPU:1" in blocks["b@GPU:0"].after  # tower_a's gradients start from the loss's
    assert blocks["f@GPU:0"].memory > 0 and blocks["b@GPU:0"].memory == -blocks["f@GPU:0"].memory
    assert blocks["b@GPU:1"].span > blocks["f@GPU:1"].span  # a backward costs more than its forward
    assert template.metadata["batch_size"] == infer_batch_size(two_tower) == 64


def test_spans_scale_with_the_micro_batch(two_tower, simulator, tower_per_gpu):
    unit = 1e-6
    spans = {mb: {b.name: b.span for b in blocks_from_placement(simulator, tower_per_gpu, mb,
                                                                  time_unit=unit).blocks} for mb in (2, 8)}
    assert spans[2]["b@GPU:1"] == pytest.approx(4 * spans[8]["b@GPU:1"], rel=0.1)


def test_tessel_schedules_a_real_placement_and_the_plan_round_trips(two_tower, simulator, tower_per_gpu, tmp_path):
    template = blocks_from_placement(simulator, tower_per_gpu, 4)
    plan = tessel(template, 4, memory_limit=2 * template.blocks[0].memory, time_limit=10)
    assert plan.makespan <= one_f_one_b(template, 4, memory_limit=2 * template.blocks[0].memory).makespan
    assert plan.seconds() == pytest.approx(plan.makespan * template.time_unit)
    assert read_schedule_file(plan.save(tmp_path / "plan.json")) == plan


def test_micro_batches_that_do_not_divide_the_batch_are_refused(two_tower, simulator, tower_per_gpu):
    with pytest.raises(MicroBatchError, match="3 micro-batches do not divide the batch of 64: choose a divisor"):
        blocks_from_placement(simulator, tower_per_gpu, 3)


def test_a_placement_whose_data_comes_back_to_a_device_gets_a_block_per_phase(two_tower, machine, simulator):
    from placer.schedule.standard import one_f_one_b

    zigzag = Placement.round_robin(two_tower, machine)  # layers alternate between devices (and the CPU)
    template = blocks_from_placement(simulator, zigzag, 4)  # one block per device would wait for itself
    names = [b.name for b in template.blocks]
    assert len(names) > 2 * len(template.devices) and any(name[1].isdigit() for name in names)
    # every block waits for blocks of earlier phases only, so micro-batches can be scheduled
    plan = one_f_one_b(template, 4)
    assert plan.makespan > 0 and len(plan.blocks) == 4 * len(names)


def test_nmt_s_layer_wise_expert_placement_is_schedulable():
    # NMT's layers alternate between the GPUs and attention reads the encoder's outputs: data comes back to
    # a device, which one block per device could not express
    from placer.cost import open_target
    from placer.heuristics import make_heuristic
    from placer.models import build_model
    from placer.schedule.standard import one_f_one_b

    graph = build_model("nmt-2", "tiny")
    with open_target(graph, "modeled:2xV100") as target:
        expert = make_heuristic("expert", graph, target.devices, model="nmt-2")
        template = blocks_from_placement(target.simulator, expert, 2)
    assert {b.devices[0] for b in template.blocks} == {"GPU:0", "GPU:1"}
    assert one_f_one_b(template, 2).makespan > 0
