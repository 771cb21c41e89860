import json

import pytest

from placer.devices import Device, DeviceSet
from placer.errors import PlacementError, PlacementFileError
from placer.models.two_tower import tower_of
from placer.placement import (
    Placement, load_placement, placement_file_from_json_dict, placement_from_json_dict, read_placement_file,
)


def test_round_robin_uses_every_device_and_keeps_groups_whole(mlp, cpus2):
    placement = Placement.round_robin(mlp, cpus2)
    assert set(placement.group_devices) == {0, 1}
    op_devices = placement.op_devices(mlp)
    for group in mlp.groups:
        assert len({op_devices[op] for op in group.ops}) == 1


def test_unknown_device_is_named_in_the_error(mlp, cpus2):
    mapping = {g.name: "CPU:0" for g in mlp.groups}
    mapping[mlp.groups[3].name] = "CPU:7"
    with pytest.raises(PlacementError, match=rf"group '{mlp.groups[3].name}'.*unknown device 'CPU:7'"):
        Placement.from_groups(mlp, cpus2, mapping)


def test_a_unit_left_out_is_named(mlp, cpus2):
    mapping = {g.name: "CPU:0" for g in mlp.groups[1:]}
    with pytest.raises(PlacementError, match=rf"left out.*'{mlp.groups[0].name}'"):
        Placement.from_groups(mlp, cpus2, mapping)


def test_op_without_a_kernel_on_the_device_type_is_named(string_op_graph):
    graph = string_op_graph
    cpu_and_gpu = DeviceSet((Device("/job:localhost/replica:0/task:0/device:CPU:0", "CPU"),
                             Device("/job:localhost/replica:0/task:0/device:GPU:0", "GPU")))
    assert "GPU" not in graph.op("loss_as_text").kernel_devices
    assignment = [0] * len(graph.groups)
    assignment[graph.op("loss_as_text").group] = 1
    with pytest.raises(PlacementError, match=r"op 'loss_as_text' \(AsString\) has no GPU kernel.*GPU:0"):
        Placement.from_assignment(graph, cpu_and_gpu, assignment)
    # round-robin skips devices without kernels instead of failing
    assert Placement.round_robin(graph, cpu_and_gpu).device_of_group(graph.op("loss_as_text").group).endswith("CPU:0")


def test_splitting_a_colocation_group_is_refused(mlp, cpus2):
    op_devices = Placement.on_device(mlp, cpus2, 0).op_devices(mlp)
    group = mlp.group("dense/kernel")
    op_devices[group.ops[1]] = cpus2[1].name
    with pytest.raises(PlacementError, match="one colocation group"):
        Placement.from_op_devices(mlp, cpus2, op_devices)


def test_placement_file_round_trip_keeps_devices_and_metadata(two_tower, cpus2, tmp_path):
    mapping = {g.name: ("CPU:1" if tower_of(g.ops[0]) == "tower_b" else "CPU:0") for g in two_tower.groups}
    placement = Placement.from_groups(two_tower, cpus2, mapping, {"step_time": 0.5})
    path = placement.save(tmp_path / "p.json", two_tower)
    data = json.loads(path.read_text())
    assert data["format_version"] == 1 and data["graph"]["fingerprint"] == two_tower.fingerprint
    assert len(data["ops"]) == len(two_tower.ops)
    loaded = load_placement(path, two_tower, cpus2)
    assert loaded == placement
    assert loaded.metadata["step_time"] == 0.5


def test_placement_file_for_another_graph_is_refused(two_tower, mlp, cpus2, tmp_path):
    path = Placement.on_device(two_tower, cpus2, 0).save(tmp_path / "p.json", two_tower)
    with pytest.raises(PlacementFileError, match="was made for graph 'two-tower-tiny'"):
        load_placement(path, mlp, cpus2)


def test_placement_file_for_other_devices_is_refused(two_tower, cpus2, tmp_path):
    path = Placement.on_device(two_tower, cpus2, "CPU:1").save(tmp_path / "p.json", two_tower)
    one_cpu = DeviceSet(cpus2.devices[:1])
    with pytest.raises(PlacementFileError, match="does not have.*CPU:1"):
        load_placement(path, two_tower, one_cpu)


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ('{"hello": 1}', "not a placer placement file"),
        ('{"format": "placer.placement", "format_version": 99}', "format version 99"),
    ],
)
def test_malformed_placement_files_give_a_clear_error(two_tower, cpus2, tmp_path, content, message):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(PlacementFileError, match=message):
        load_placement(path, two_tower, cpus2)


def test_placement_file_with_missing_ops_is_refused(two_tower, cpus2, tmp_path):
    path = Placement.on_device(two_tower, cpus2, 0).save(tmp_path / "p.json", two_tower)
    data = json.loads(path.read_text())
    del data["ops"][two_tower.ops[5].name]
    path.write_text(json.dumps(data))
    with pytest.raises(PlacementFileError, match="have no device in the placement"):
        load_placement(path, two_tower, cpus2)


def test_binary_placement_file_is_refused_as_not_text(two_tower, cpus2, tmp_path):
    path = tmp_path / "model.ckpt"
    path.write_bytes(b"\x89HDF\r\n\x1a\n\x00\xff\xfe" + bytes(range(256)))
    for read in (lambda: read_placement_file(path), lambda: load_placement(path, two_tower, cpus2)):
        with pytest.raises(PlacementFileError, match=r"model\.ckpt is not a placement file: it holds binary data.*0x89"):
            read()


@pytest.mark.parametrize("make, message", [
    (lambda path: path.write_text(""), "is empty"),
    (lambda path: path.write_text(" \n"), "is empty"),
    (lambda path: path.mkdir(), "is a directory, not a placement file"),
    (lambda path: None, "there is no placement file"),
])
def test_empty_missing_or_directory_placement_file_is_a_placement_file_error(two_tower, cpus2, tmp_path, make, message):
    path = tmp_path / "p.json"
    make(path)
    with pytest.raises(PlacementFileError, match=message):
        read_placement_file(path)
    with pytest.raises(PlacementFileError, match=message):
        load_placement(path, two_tower, cpus2)


def test_reading_the_file_and_making_the_placement_check_the_format_once(two_tower, cpus2):
    data = Placement.on_device(two_tower, cpus2, 0).to_json_dict(two_tower)
    data["ops"][two_tower.ops[0].name] = "/device:GPU:3"
    for read in (lambda: placement_from_json_dict(data, two_tower, cpus2, source="edited"),
                 lambda: placement_file_from_json_dict(data, source="edited")):
        with pytest.raises(PlacementFileError, match=f"edited puts op '{two_tower.ops[0].name}' on '/device:GPU:3'"):
            read()


def test_placement_file_is_read_without_the_graph_and_rewritten_with_more_metadata(two_tower, cpus2, tmp_path):
    import numpy as np

    placement = Placement.round_robin(two_tower, cpus2).with_metadata(step_time=0.5)
    path = placement.save(tmp_path / "best.json", two_tower)
    read = read_placement_file(path)
    assert read == placement.to_file(two_tower, source=str(path))
    assert read.fingerprint == two_tower.fingerprint and read.recorded_step_time == 0.5
    assert read.op_devices == placement.op_devices(two_tower)

    out = read.with_metadata(model="two-tower", step_time=np.float32(0.25), updates=np.int64(3)).save(tmp_path / "out" / "x.json")
    assert not list(out.parent.glob("*.tmp"))
    data = json.loads(out.read_text())
    assert data["metadata"] == {"method": "round-robin", "step_time": 0.25, "model": "two-tower", "updates": 3}
    assert {key: value for key, value in data.items() if key != "metadata"} == {
        key: value for key, value in json.loads(path.read_text()).items() if key != "metadata"}
    reloaded = load_placement(out, two_tower, cpus2)
    assert reloaded == placement and reloaded.metadata["model"] == "two-tower"


def test_summary_lists_ops_and_parameters_per_device(two_tower, cpus2):
    text = Placement.on_device(two_tower, cpus2, 0).summary(two_tower, cpus2)
    assert "CPU:0" in text and f"{two_tower.num_parameters:,}" in text
