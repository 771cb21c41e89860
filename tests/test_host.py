"""What placer knows of the machine it runs on, and how a machine recorded elsewhere is told apart."""

import os
import platform

import placer.host as host

HERE = {"processor": "Example CPU @ 2.1GHz", "architecture": "x86_64", "cores": 2}


def test_a_machine_is_this_one_only_with_the_same_processor_and_cores():
    assert host.machine_differences(dict(HERE), HERE) == []
    assert host.machine_differences({**HERE, "cores": 64}, HERE) == ["cores 64 there, 2 here"]
    assert host.machine_differences({**HERE, "processor": "Other CPU"}, HERE) == [
        "processor 'Other CPU' there, 'Example CPU @ 2.1GHz' here"]


def test_a_record_that_named_only_the_architecture_is_held_to_the_architecture():
    """Calibrations and profiles from before the processor's model was recorded stored the architecture as
    "processor": they match any processor of that architecture, and no other."""
    assert host.machine_differences({"processor": "x86_64", "cores": 2}, HERE) == []
    assert host.machine_differences({"processor": "aarch64", "cores": 2}, HERE) == [
        "processor 'aarch64' there, 'x86_64' here"]


def test_this_machine_names_its_processor_model_architecture_and_usable_cores(monkeypatch):
    monkeypatch.setattr(host, "_cpuinfo", lambda: "processor\t: 0\nmodel name\t: Example CPU @ 2.1GHz\n")
    assert host.this_machine() == {"processor": "Example CPU @ 2.1GHz", "architecture": platform.machine(),
                                   "cores": len(os.sched_getaffinity(0))}
    monkeypatch.setattr(host, "_cpuinfo", lambda: "")  # no /proc/cpuinfo: the architecture is all there is
    assert host.processor_model() == (platform.processor() or platform.machine())


def test_sockets_count_the_physical_packages_of_the_usable_cores(monkeypatch):
    allowed = sorted(os.sched_getaffinity(0))
    packages = "".join(f"processor\t: {p}\nphysical id\t: {i % 2}\n" for i, p in enumerate(allowed))
    monkeypatch.setattr(host, "_cpuinfo", lambda: packages + "processor\t: 9999\nphysical id\t: 7\n")
    assert host.sockets() == min(len(allowed), 2)  # the package of a core this process may not use is not counted
    monkeypatch.setattr(host, "_cpuinfo", lambda: "")
    assert host.sockets() == 1


def test_a_process_trees_memory_counts_the_process_and_what_it_started():
    import os
    import subprocess

    child = subprocess.Popen(["sleep", "30"])
    try:
        tree = host.tree_resident_bytes(os.getpid())
        assert tree[os.getpid()] > 0 and child.pid in tree
        assert host.own_and_descendants_resident_bytes() >= tree[os.getpid()]
        assert os.getpid() not in host.tree_resident_bytes(child.pid)  # its parent is not below it
    finally:
        child.kill()
        child.wait()
