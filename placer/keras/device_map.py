"""Which device of the process that fits runs each device of a placement: a placement made on `local:N`, a cluster,
a modeled GPU machine or `inprocess:N` names that target's devices, and `place` puts its layers on this process's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placer.devices import Device, DeviceSet, name_parts, short_name
from placer.errors import DeviceSpecError, KerasPlacementError


@dataclass(frozen=True)
class DeviceMap:
    """Placement device -> device of the process that fits, both full TensorFlow names."""

    devices: Mapping[str, str]
    chosen_by: str = "default"
    """"default": `default_device_map`'s rule; "user": given to `place(device_map=)` or `placer export --device-map`."""

    def __getitem__(self, placement_device: str) -> str:
        return self.devices[placement_device]

    def describe(self) -> str:
        """One line per device: "worker:1/CPU:0 -> CPU:1"."""
        width = max((len(short_name(d)) for d in self.devices), default=0)
        return "\n".join(f"{short_name(placement):<{width}} -> {short_name(here)}" for placement, here in self.devices.items())


def default_device_map(placement_devices: Sequence[str], process_has_gpus: bool) -> DeviceMap:
    """The map `place` uses when given none. A placement on one kind of device (`local:N`'s workers, `inprocess:N`'s
    CPUs, a cluster's tasks): its device i (in the placement file's order) -> GPU:i in a process with GPUs, else
    CPU:i. A placement on CPUs and GPUs (a modeled GPU machine, a cluster with GPUs) keeps each device's kind:
    its j-th GPU -> GPU:j, its j-th CPU -> CPU:j."""
    return DeviceMap({device: _process_device(kind, index)
                      for device, (kind, index) in _default_targets(placement_devices, process_has_gpus).items()})


def describe_default_map(placement_devices: Sequence[str]) -> str:
    """`default_device_map` before the process that fits is known: one line per placement device."""
    with_gpus = _default_targets(placement_devices, True)
    without = _default_targets(placement_devices, False)
    width = max((len(short_name(d)) for d in placement_devices), default=0)
    return "\n".join(f"{short_name(device):<{width}} -> {':'.join(map(str, with_gpus[device]))}"
                     + ("" if with_gpus[device] == without[device] else
                        f" in a process with GPUs, else {':'.join(map(str, without[device]))}")
                     for device in placement_devices)


def _default_targets(placement_devices: Sequence[str], process_has_gpus: bool) -> dict[str, tuple[str, int]]:
    kinds = [name_parts(device)[2] for device in placement_devices]
    if len(set(kinds)) > 1:
        seen: dict[str, int] = {}
        targets = {}
        for device, kind in zip(placement_devices, kinds):
            targets[device] = (kind, seen.get(kind, 0))
            seen[kind] = targets[device][1] + 1
        return targets
    kind = "GPU" if process_has_gpus else "CPU"
    return {device: (kind, i) for i, device in enumerate(placement_devices)}


def device_map_from(mapping: Mapping[str | int, str] | str, placement_devices: Sequence[str],
                    used: Sequence[str] = ()) -> DeviceMap:
    """A map a user gave, checked against the placement: `{placement device or its index: device here}` (names in
    any short form, "worker:1/CPU:0" or "GPU:1"), or the command line's "0=GPU:0,1=GPU:1". Refused: a key the
    placement does not have, a device of `used` (those the layers run on) left unmapped, a target that is
    another machine's device."""
    if isinstance(mapping, str):
        mapping = parse_device_map(mapping)
    placement = DeviceSet(tuple(Device(name, name_parts(name)[2]) for name in placement_devices), name="the placement")
    known = ", ".join(f"{i}={short_name(d)}" for i, d in enumerate(placement_devices))
    mapped: dict[str, str] = {}
    for key, target in mapping.items():
        index = _index(key)
        if index is not None and 0 <= index < len(placement_devices):
            device = placement_devices[index]
        else:
            try:
                device = placement.resolve(str(key)).name if index is None else None
            except DeviceSpecError:
                device = None
            if device is None:
                raise KerasPlacementError(f"the device map names placement device {key!r}, which the placement does "
                                          f"not have (or names ambiguously); its devices are {known}")
        mapped[device] = _here(target, key)
    unmapped = [short_name(d) for d in dict.fromkeys(used) if d not in mapped]
    if unmapped:
        raise KerasPlacementError(f"the device map leaves placement device(s) {', '.join(unmapped)} unmapped, and "
                                  f"layers run there: map every device the layers use (the placement's: {known})")
    return DeviceMap({device: mapped[device] for device in placement_devices if device in mapped}, "user")


def parse_device_map(text: str) -> dict[str, str]:
    """"0=GPU:0,1=GPU:1" (or "worker:1/CPU:0=GPU:0") -> {placement device: device here}, as written."""
    mapping = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, equals, target = (side.strip() for side in item.partition("="))
        if not equals or not key or not target:
            raise KerasPlacementError(f"a device map is PLACEMENT_DEVICE=DEVICE pairs, e.g. 0=GPU:0,1=GPU:1; got "
                                      f"{item!r} in {text!r}")
        mapping[key] = target
    if not mapping:
        raise KerasPlacementError(f"the device map {text!r} maps nothing: give e.g. 0=GPU:0,1=GPU:1")
    return mapping


def check_devices_exist(device_map: DeviceMap, process_devices: Sequence[str], used: Sequence[str]) -> None:
    """Refuse, before any step, a map that sends a device the layers use to a device this process lacks."""
    here = {local_device(name) for name in process_devices}
    missing = {device: device_map.devices.get(device) for device in dict.fromkeys(used)}
    missing = {device: target for device, target in missing.items() if target is None or local_device(target) not in here}
    if not missing:
        return
    cpus = sum(name_parts(name)[2] == "CPU" for name in process_devices)
    shown = ", ".join(f"{short_name(device)} -> {short_name(target) if target else '(unmapped)'}"
                      for device, target in missing.items())
    which = "the default device map" if device_map.chosen_by == "default" else "the device map"
    raise KerasPlacementError(
        f"the placement puts layers on devices this process does not have ({which}: {shown}); it has "
        f"{', '.join(sorted(short_name(name) for name in process_devices))}. Call placer.keras.make_logical_cpus(N) "
        f"before TensorFlow starts for N in-process CPU devices (it has {cpus} CPU device(s) now), or map the "
        "placement's devices onto this process's: place(model, placement, device_map={0: 'GPU:0', ...}) or "
        "`placer export --keras --device-map 0=GPU:0,...`")


def local_device(name: str) -> str:
    """A device name as this process knows it: "/device:CPU:1" for "/job:localhost/replica:0/task:0/device:CPU:1"
    (another job's device keeps its full name, so it is never found here)."""
    from placer.measure.runner import canonical_device

    full = canonical_device(name)
    return full[len(_LOCAL_TASK):] if full.startswith(_LOCAL_TASK) else full


_LOCAL_TASK = "/job:localhost/replica:0/task:0"


def _process_device(kind: str, index: int) -> str:
    return f"{_LOCAL_TASK}/device:{kind}:{index}"


def _index(key: str | int) -> int | None:
    """A key that numbers a placement device (0, "1"), else None (a device name)."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    return int(key) if isinstance(key, str) and key.strip().lstrip("-").isdigit() else None


def _here(target: str, key: str | int) -> str:
    """`target` as a full name of this process's device; refused if it names another job's or task's."""
    try:
        job, task, kind, index = name_parts(str(target))
    except DeviceSpecError:
        raise KerasPlacementError(f"the device map sends placement device {key!r} to {target!r}, which is not a "
                                  "device name (e.g. GPU:0 or CPU:1)") from None
    if (job, task) != ("localhost", 0):
        raise KerasPlacementError(f"the device map sends placement device {key!r} to {target!r}, another machine's "
                                  "device: name a device of the process that fits (e.g. GPU:0 or CPU:1)")
    return _process_device(kind, index)
