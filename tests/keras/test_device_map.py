"""placer.keras.device_map: which device of the process that fits runs each device of a placement, by default
and as the user chooses, refused when it names a device the placement or the process lacks."""

from __future__ import annotations

import pytest

from placer.keras import DeviceMap, KerasPlacementError, default_device_map, device_map_from
from placer.keras.device_map import check_devices_exist, describe_default_map

WORKERS = ("/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0")
MODELED = ("/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:GPU:0",
           "/job:localhost/replica:0/task:0/device:GPU:1")
HERE = "/job:localhost/replica:0/task:0/device:"


def test_worker_i_runs_on_cpu_i_here_or_on_gpu_i_when_the_process_has_gpus():
    assert default_device_map(WORKERS, process_has_gpus=False).devices == dict(zip(WORKERS, (f"{HERE}CPU:0", f"{HERE}CPU:1")))
    assert default_device_map(WORKERS, process_has_gpus=True).devices == dict(zip(WORKERS, (f"{HERE}GPU:0", f"{HERE}GPU:1")))
    assert describe_default_map(WORKERS).splitlines() == [
        "worker:0/CPU:0 -> GPU:0 in a process with GPUs, else CPU:0",
        "worker:1/CPU:0 -> GPU:1 in a process with GPUs, else CPU:1"]


def test_a_modeled_gpu_machine_keeps_its_host_cpu_a_cpu_and_its_gpus_gpus():
    for has_gpus in (False, True):
        assert default_device_map(MODELED, has_gpus).devices == {device: device for device in MODELED}
    assert describe_default_map(MODELED).splitlines() == ["CPU:0 -> CPU:0", "GPU:0 -> GPU:0", "GPU:1 -> GPU:1"]


def test_a_users_map_takes_indices_or_device_names_and_is_printed_as_it_maps():
    chosen = device_map_from("0=GPU:1, worker:1/CPU:0=GPU:0", WORKERS, used=WORKERS)
    assert chosen == DeviceMap({WORKERS[0]: f"{HERE}GPU:1", WORKERS[1]: f"{HERE}GPU:0"}, "user")
    assert chosen.describe().splitlines() == ["worker:0/CPU:0 -> GPU:1", "worker:1/CPU:0 -> GPU:0"]
    assert device_map_from({0: "CPU:1", 1: "CPU:0"}, WORKERS, used=WORKERS)[WORKERS[0]] == f"{HERE}CPU:1"


@pytest.mark.parametrize("mapping, message", [
    ("2=GPU:0,0=GPU:1", r"names placement device '2', which the placement does not have.*0=worker:0/CPU:0"),
    ("CPU:0=GPU:0", r"names placement device 'CPU:0'.*or names ambiguously"),
    ("0=GPU:0", r"leaves placement device\(s\) worker:1/CPU:0 unmapped"),
    ("0=GPU:0,1=/job:worker/task:1/device:CPU:0", r"another machine's device"),
    ("0:GPU:0", r"PLACEMENT_DEVICE=DEVICE pairs"),
])
def test_a_map_naming_a_device_the_placement_lacks_or_leaving_one_unmapped_is_refused(mapping, message):
    with pytest.raises(KerasPlacementError, match=message):
        device_map_from(mapping, WORKERS, used=WORKERS)


def test_a_mapped_device_this_process_lacks_is_refused_saying_what_it_has_and_how_to_make_cpus():
    default = default_device_map(WORKERS, process_has_gpus=False)
    check_devices_exist(default, [f"{HERE}CPU:0", f"{HERE}CPU:1"], WORKERS)
    with pytest.raises(KerasPlacementError, match=r"does not have \(the default device map: worker:1/CPU:0 -> CPU:1\); "
                                                  r"it has CPU:0\b.*make_logical_cpus\(N\).*device_map="):
        check_devices_exist(default, [f"{HERE}CPU:0"], WORKERS)
