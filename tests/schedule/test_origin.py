"""What a plan was made for: recorded in its file, and a plan for another model, placement or micro-batch
count refused from the files alone, before any graph is built."""

import dataclasses

import pytest

from placer.errors import MicroBatchError, ScheduleMismatchError
from placer.placement import PlacementFile
from placer.schedule import gpipe, read_schedule_file, shape_template
from placer.schedule.origin import PlanOrigin, check_plan_fits, placement_digest, plan_origin, with_origin

CPU0, CPU1 = "/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"


def _placement_file(op_devices, fingerprint="f" * 64, source="placement.json"):
    return PlacementFile(source, "tiny-model", fingerprint, (CPU0, CPU1), op_devices, {}, {})


def _template(micro_batches=4, batch_size=64):
    template = shape_template("pipeline", 2)
    return dataclasses.replace(template, metadata={"micro_batches": micro_batches, "batch_size": batch_size})


@pytest.fixture
def placed():
    placement = _placement_file({"a": CPU0, "b": CPU1})
    plan = with_origin(gpipe(_template(), 4), PlanOrigin.of("tiny-model", "tiny", placement))
    return placement, plan


def test_a_plan_fits_the_placement_it_was_made_for(placed):
    placement, plan = placed
    check_plan_fits(plan, placement)


def test_a_plan_file_keeps_what_it_was_made_for(placed, tmp_path):
    placement, plan = placed
    read = read_schedule_file(plan.save(tmp_path / "plan.json"))
    assert plan_origin(read) == PlanOrigin("tiny-model", "tiny", "tiny-model", "f" * 64, placement_digest(placement.op_devices))
    check_plan_fits(read, placement)


def test_a_plan_for_another_model_is_refused(placed):
    _, plan = placed
    other = _placement_file({"a": CPU0, "b": CPU1}, fingerprint="e" * 64, source="other.json")
    with pytest.raises(ScheduleMismatchError, match="was made for tiny-model .* but other.json places graph"):
        check_plan_fits(plan, other)


def test_a_plan_for_another_placement_of_the_model_is_refused(placed):
    _, plan = placed
    moved = _placement_file({"a": CPU1, "b": CPU1}, source="moved.json")
    with pytest.raises(ScheduleMismatchError, match="made for another placement of tiny-model than moved.json"):
        check_plan_fits(plan, moved)


def test_a_placement_digest_does_not_depend_on_how_devices_are_spelled():
    assert placement_digest({"a": CPU0, "b": CPU1}) == placement_digest({"a": "CPU:0", "b": "/device:CPU:1"})
    assert placement_digest({"a": CPU0, "b": CPU1}) != placement_digest({"a": CPU1, "b": CPU0})


def test_a_plan_of_other_micro_batches_than_its_blocks_were_measured_for_is_refused():
    plan = gpipe(_template(micro_batches=4), 2)
    with pytest.raises(ScheduleMismatchError, match="orders 2 micro-batches, but its blocks were measured for 4"):
        check_plan_fits(plan, _placement_file({"a": CPU0}))


def test_a_plan_whose_micro_batches_do_not_divide_the_batch_is_refused():
    plan = gpipe(_template(micro_batches=3, batch_size=64), 3)
    with pytest.raises(MicroBatchError, match="3 micro-batches do not divide the batch of 64"):
        check_plan_fits(plan, _placement_file({"a": CPU0}))


def test_a_plan_made_without_a_model_is_left_to_the_check_against_the_built_step():
    plan = gpipe(shape_template("pipeline", 2), 4)  # a modeled shape: no model, no placement recorded
    assert plan_origin(plan) is None
    check_plan_fits(plan, _placement_file({"a": CPU0}))
