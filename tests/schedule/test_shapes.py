"""Tessel's placement shapes as block templates on modeled devices."""

import pytest

from placer.errors import BlockTemplateError
from placer.schedule import SHAPES, shape_template


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("devices", [2, 4, 8])
def test_every_shape_uses_every_device_and_frees_what_it_keeps(shape, devices):
    template = shape_template(shape, devices)
    assert set(template.devices) == {device for block in template.blocks for device in block.devices}
    assert {block.kind for block in template.blocks} == {"forward", "backward"}  # and memory balances (checked)


def test_the_v_shape_folds_two_stages_onto_each_device():
    template = shape_template("v-shape", 4)
    assert [b.devices[0] for b in template.blocks if b.kind == "forward"] == ["dev0", "dev1", "dev2", "dev3",
                                                                               "dev3", "dev2", "dev1", "dev0"]
    assert template.device_load() == {f"dev{i}": 2 * (1 + 2) for i in range(4)}


def test_the_k_shape_joins_two_half_pipelines_with_a_block_on_every_device():
    template = shape_template("k-shape", 4)
    join = template.block("join_f")
    assert join.devices == ("dev0", "dev1", "dev2", "dev3") and set(join.after) == {"a_f1", "b_f1"}
    assert template.block("a_b1").after == ("join_b",) and template.block("b_b1").devices == ("dev3",)


def test_shapes_that_halve_the_devices_refuse_an_odd_count():
    with pytest.raises(BlockTemplateError, match="even number"):
        shape_template("k-shape", 3)
    with pytest.raises(BlockTemplateError, match="unknown shape"):
        shape_template("z-shape", 4)


def test_an_inference_template_keeps_the_forward_blocks_and_no_activations():
    from placer.schedule.standard import one_f_one_b, sequential
    from placer.schedule.shapes import shape_template

    training = shape_template("v-shape", 4)
    inference = training.forward_only()
    assert {b.kind for b in inference.blocks} == {"forward"} and all(b.memory == 0 for b in inference.blocks)
    assert len(inference.blocks) == sum(b.kind == "forward" for b in training.blocks)
    # forward blocks of different micro-batches overlap across devices: a pipeline beats one at a time
    assert one_f_one_b(inference, 4).makespan < sequential(inference, 4).makespan
