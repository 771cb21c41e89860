import pytest

from placer.devices import DeviceSet, cluster_devices, load_machine, short_name
from placer.errors import DeviceSpecError


def test_short_device_names_resolve_to_full_names(cpus2):
    assert cpus2.resolve("CPU:1").name == "/job:localhost/replica:0/task:0/device:CPU:1"
    assert cpus2.index("/device:CPU:0") == 0


def test_unknown_device_error_lists_the_available_devices(cpus2):
    with pytest.raises(DeviceSpecError, match=r"unknown device 'GPU:0'.*CPU:0, CPU:1"):
        cpus2.resolve("GPU:0")


def test_cluster_spec_gives_one_cpu_per_task_and_ambiguous_names_are_refused():
    devices = cluster_devices({"worker": ["localhost:1", "localhost:2"]})
    assert devices.names == ("/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0")
    assert devices.resolve("task:1/CPU:0").short_name == "worker:1/CPU:0"
    with pytest.raises(DeviceSpecError, match="ambiguous"):
        devices.resolve("CPU:0")


def test_short_names_keep_two_workers_devices_apart_and_drop_only_what_one_machine_shares():
    assert [short_name(name) for name in cluster_devices({"worker": ["a:1", "b:2"]}, gpus_per_task=1).names] == [
        "worker:0/CPU:0", "worker:0/GPU:0", "worker:1/CPU:0", "worker:1/GPU:0"]
    assert short_name("/job:localhost/replica:0/task:0/device:GPU:1") == "GPU:1"
    with pytest.raises(DeviceSpecError, match="not a device name"):
        short_name("worker one")


def test_a_device_is_found_by_the_short_name_it_is_shown_under():
    devices = cluster_devices({"worker": ["a:1", "b:2"], "ps": ["c:3"]}, gpus_per_task=1)
    assert [devices.resolve(d.short_name) for d in devices] == list(devices)
    assert devices.resolve("task:1/CPU:0").name == "/job:worker/replica:0/task:1/device:CPU:0"  # ps has task 0 only


def test_modeled_machine_file_reads_units_and_links(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: 2xV100\n"
        "devices:\n"
        "  - {name: GPU:0, memory: 16GiB, peak_flops: 15.7T, memory_bandwidth: 900e9, model: V100}\n"
        "  - {name: GPU:1, memory: 16GiB, peak_flops: 15.7T, memory_bandwidth: 900e9, model: V100}\n"
        "links:\n"
        "  - {source: GPU:0, target: GPU:1, bandwidth: 25GB, latency: 1e-5}\n"
    )
    machine = load_machine(path)
    assert machine.name == "2xV100"
    assert machine[0].kind == "GPU" and machine[0].memory_bytes == 16 * 2**30
    assert machine[1].peak_flops == pytest.approx(15.7e12)
    assert machine.links[0].bandwidth == pytest.approx(25e9)


@pytest.mark.parametrize(
    "text, message",
    [
        ("devices: 3\n", "needs a 'devices' list"),
        ("devices:\n  - {name: TPU:0}\n", "kind must be CPU or GPU"),
        ("devices:\n  - {name: GPU:0, memory: lots}\n", "cannot read 'lots'"),
        ("devices: [\n", "not valid YAML"),
    ],
)
def test_malformed_machine_files_say_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(DeviceSpecError, match=message):
        load_machine(path)


def test_empty_device_set_is_refused():
    with pytest.raises(DeviceSpecError, match="empty"):
        DeviceSet(())


@pytest.mark.parametrize("spec, between_gpus, to_host", [
    ("modeled:4xH100", 450e9, 53e9),          # NVSwitch of an HGX H100; PCIe 5
    ("modeled:8xA100", 300e9, 24e9),          # NVSwitch of an HGX A100; PCIe 4
    ("modeled:2xV100", 50e9, 12e9),           # the papers' machines: NVLink 2, PCIe 3
    ("modeled:4xH100-nvlink2", 50e9, 53e9),   # a link named in the spec replaces the GPU's own
])
def test_a_modeled_machine_joins_its_gpus_by_the_link_its_servers_have(spec, between_gpus, to_host):
    from placer.cost.spec import parse_target_spec

    machine = parse_target_spec(spec).devices
    bandwidth = {(link.source, link.target): link.bandwidth for link in machine.links}
    gpus = [device.name for device in machine if device.kind == "GPU"]
    cpu = next(device.name for device in machine if device.kind == "CPU")
    assert bandwidth[(gpus[0], gpus[1])] == pytest.approx(between_gpus)
    assert bandwidth[(gpus[-1], gpus[0])] == pytest.approx(between_gpus)
    assert bandwidth[(cpu, gpus[0])] == pytest.approx(to_host)
