"""Target specs: which machine or cluster a placement is costed on, read from one string, before any work.

Simulated targets: "modeled:2xV100", "modeled:4xA100-nvlink3" (see `placer.hardware`), a machine file
(YAML/JSON with "devices"), a `DeviceSet`, or "calibrated:FILE", the simulator of the real target a
`placer calibrate` file was made on. Measured targets: "inprocess:N", "local:N" or "local:widths=2+1" (the
testbed, with workers of different widths), "env" ($PLACER_CLUSTER), or a TensorFlow cluster spec (JSON text or a file holding one).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from placer.devices import DeviceSet, load_machine
from placer.errors import DeviceSpecError
from placer.measure.targets import InProcess, LocalTestbed, RemoteCluster, parse_target

DEFAULT_TARGETS = {"simulated": "modeled:2xV100", "measured": "local:2"}
"""The target each backend uses when none is given: two modeled V100s, or the local 2-worker testbed."""

MODELED = re.compile(r"modeled:(\d+)x(\w+?)(?:-(\w[\w-]*))?")
MeasuredTarget = Union[InProcess, LocalTestbed, RemoteCluster]


@dataclass(frozen=True)
class TargetSpec:
    """A parsed target: for the simulator its devices, for real execution where the measurer runs."""

    text: str
    backend: str
    """"simulated" or "measured"."""
    devices: DeviceSet | None = None
    """Simulated: the modeled machine."""
    measured: MeasuredTarget | None = None
    """Measured: what `placer.measure.Measurer` runs on."""
    calibration: Any = None
    """"calibrated:FILE": the `placer.calibration.Calibration` (links, overheads) of the real target."""
    calibration_path: str | None = None

    def __str__(self) -> str:
        return self.text


def parse_target_spec(spec: str | DeviceSet | TargetSpec | MeasuredTarget | None = None, backend: str | None = None,
                      *, allow_exposed_ports: bool = False) -> TargetSpec:
    """Read a target spec, checking it fits `backend` ("simulated", "measured", or None to infer it).

    Nothing is started: a bad spec is refused here, before any expensive work."""
    if backend is not None and backend not in DEFAULT_TARGETS:
        raise DeviceSpecError(f"unknown backend {backend!r}: 'simulated' (the simulator) or 'measured' (real execution)")
    if spec is None:
        spec = DEFAULT_TARGETS[backend or "simulated"]
    if isinstance(spec, TargetSpec):
        parsed = spec
    elif isinstance(spec, DeviceSet):
        parsed = TargetSpec(spec.name or "machine", "simulated", devices=spec)
    elif isinstance(spec, (InProcess, LocalTestbed, RemoteCluster)):
        parsed = TargetSpec(str(spec), "measured", measured=spec)
    elif not isinstance(spec, str) or not spec.strip():
        raise DeviceSpecError(f"a target is a spec string such as 'modeled:2xV100' or 'local:2', not {spec!r}")
    else:
        parsed = _parse_text(spec.strip(), allow_exposed_ports)
    if backend is not None and parsed.backend != backend:
        if backend == "simulated":
            raise DeviceSpecError(
                f"{parsed.text!r} is a real target, and the simulated backend needs a modeled machine: use e.g. "
                f"'modeled:2xV100' or a machine file, or the measured backend for real execution on {parsed.text}")
        raise DeviceSpecError(
            f"{parsed.text!r} is a modeled machine, which cannot run anything: the measured backend needs a real "
            "target such as 'local:2' (the testbed), 'inprocess:2' or a cluster spec, or use the simulated backend")
    return parsed


def _parse_text(text: str, allow_exposed_ports: bool) -> TargetSpec:
    from placer.cost.calibrated import PREFIX, calibrated_devices, read_calibrated_spec

    if text.startswith(PREFIX):
        calibration, path = read_calibrated_spec(text)
        return TargetSpec(text, "simulated", devices=calibrated_devices(calibration, str(path)),
                          calibration=calibration, calibration_path=str(path))
    if text.startswith("modeled"):
        match = MODELED.fullmatch(text)
        if not match:
            raise DeviceSpecError(f"{text!r} is not a modeled machine: use e.g. 'modeled:2xV100' or "
                                  "'modeled:4xA100-nvlink3' (GPU count x GPU model, then an optional link)")
        from placer.hardware import modeled_machine

        gpus, gpu, link = int(match.group(1)), match.group(2), match.group(3)
        return TargetSpec(text, "simulated", devices=modeled_machine(gpus, gpu, link))
    if _is_machine_file(text):
        return TargetSpec(text, "simulated", devices=load_machine(text))
    measured = parse_target(text, allow_exposed_ports=allow_exposed_ports)
    return TargetSpec(str(measured), "measured", measured=measured)  # "env" and spec files: the address they name


def _is_machine_file(text: str) -> bool:
    """A file describing devices ("devices": [...]), as opposed to a cluster spec (job -> addresses)."""
    path = Path(text)
    if not path.is_file():
        return False
    if path.suffix in (".yaml", ".yml"):
        return True
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False  # parse_target reports what is wrong with it
    return isinstance(data, dict) and "devices" in data
