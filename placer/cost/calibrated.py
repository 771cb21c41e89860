"""The simulator of a real target: its devices with the links and overheads `placer calibrate` fitted there,
and op costs profiled on that target, cached next to the calibration file so each graph is profiled once.

`open_target(graph, "calibrated:calibration.json")` is the simulated twin of the target the calibration
was made on (e.g. `local:2`): milliseconds per placement instead of a real step.
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from placer.calibration import Calibration, calibration_digest, load_calibration
from placer.devices import Device, DeviceSet, machine_from_dict
from placer.errors import DeviceSpecError, ProfileError
from placer.graph.control_flow import CONTROL_FLOW_OPS
from placer.graph.opgraph import OpGraph

PREFIX = "calibrated:"
PROFILE_STEPS = 5


def calibrated_devices(calibration: Calibration, source: str) -> DeviceSet:
    """The calibrated target's devices, with the fitted links between every pair."""
    if not calibration.devices:
        raise DeviceSpecError(f"{source} does not record the devices it was made on (an older calibration): "
                              "calibrate again with `placer calibrate --target TARGET --out FILE`")
    names = machine_from_dict({"devices": [{"name": name} for name in calibration.devices]}, source=source)
    devices = DeviceSet(tuple(Device(d.name, d.kind) for d in names), name=f"calibrated {calibration.target}")
    return DeviceSet(devices.devices, calibration.links(devices), devices.name)


def cost_cache_dir(calibration_path: str | Path) -> Path:
    """Where op costs profiled on the calibrated target are kept: stale once the calibration is redone,
    since they were profiled net of its step overhead."""
    path = Path(calibration_path)
    return path.with_name(path.stem + ".costs")


def cost_cache(calibration_path: str | Path, graph: OpGraph) -> Path:
    """Where the op costs of `graph` profiled on the calibrated target are kept. The name carries a digest
    of the calibration file, so a calibration redone into the same file does not reuse costs profiled net
    of the old one's step overhead."""
    digest = calibration_digest(calibration_path)[:8]
    return cost_cache_dir(calibration_path) / f"{graph.name}-{graph.fingerprint[:16]}-{digest}.json"


def profiled_costs(graph: OpGraph, calibration: Calibration, calibration_path: str | Path, measurer=None):
    """Every op's cost on one device of the calibrated target: from the cache, else profiled there now
    (on `measurer`, an open `Measurer` of that target, when given; else on one started for it)."""
    from placer.profile import load_cost_table, profile_costs

    cached = cost_cache(calibration_path, graph)
    if cached.exists():
        table = load_cost_table(cached, graph)
        if "control_flow" in table.metadata or not any(op.type in CONTROL_FLOW_OPS for op in graph.step_ops):
            return table
        # profiled before loops were charged their bodies: each loop of this graph cost nothing there

    def profile(on) -> object:
        calibration.check_devices(on.devices)
        return profile_costs(graph, on, steps=PROFILE_STEPS, step_overhead=calibration.step_overhead,
                             label="calibrated")

    if measurer is not None:
        table = profile(measurer)
    else:
        from placer.measure import Measurer, parse_target

        try:
            target = parse_target(calibration.target)
        except DeviceSpecError as error:
            raise ProfileError(f"{calibration_path} was made on {calibration.target!r}, which cannot be opened here "
                               f"to profile {graph.name!r} ({error}); give the simulator cost tables (costs=...)") from None
        with Measurer(target) as opened:
            table = profile(opened)
    table.save(cached)
    return table


def calibration_variant(calibration_path: str | Path, changes: Mapping[str, object], into: str | Path) -> Path:
    """A copy of the calibration at `calibration_path` with `changes`, saved at `into`, with the op costs profiled
    for the original beside it: the same op costs, so that only the changed parameters move a prediction (each
    table is named after its calibration's digest, `cost_cache`), and nothing is profiled again."""
    if Path(into).resolve() == Path(calibration_path).resolve():
        raise ValueError(f"a variant of {calibration_path} is saved beside it, not over it")
    saved = replace(load_calibration(calibration_path), **changes).save(into)
    old, new = calibration_digest(calibration_path)[:8], calibration_digest(saved)[:8]
    target = cost_cache_dir(saved)
    shutil.rmtree(target, ignore_errors=True)  # tables of an earlier variant saved there: stale, and large
    target.mkdir(parents=True)
    for table in cost_cache_dir(calibration_path).glob(f"*-{old}.json"):
        shutil.copy(table, target / (table.name[:-len(f"{old}.json")] + f"{new}.json"))
    for constants in cost_cache_dir(calibration_path).glob("*-sent-constants.json"):  # a fact of the graph
        shutil.copy(constants, target / constants.name)
    return saved


def remove_calibration(path: str | Path) -> None:
    """Delete a calibration file and the op costs cached for it, where they exist."""
    Path(path).unlink(missing_ok=True)
    shutil.rmtree(cost_cache_dir(path), ignore_errors=True)


def sent_constants_cache(calibration_path: str | Path, graph: OpGraph) -> Path:
    """Where the small constants TensorFlow sends although they look replicated are kept for `graph`: a fact of
    the graph and TensorFlow, not of the calibration, kept beside the op costs that are."""
    return cost_cache_dir(calibration_path) / f"{graph.name}-{graph.fingerprint[:16]}-sent-constants.json"


def learned_sent_constants(graph: OpGraph, calibration_path: str | Path) -> frozenset[str]:
    """`placer.measure.partitions.constants_sent_when_cut` for `graph`: from the cache, else learned now from one
    in-process step (no target is measured) and cached."""
    import tensorflow as tf

    from placer.measure.partitions import constants_sent_when_cut

    cached = sent_constants_cache(calibration_path, graph)
    try:
        record = json.loads(cached.read_text())
        if record.get("graph") == graph.fingerprint and record.get("tensorflow") == tf.__version__:
            return frozenset(record["sent_constants"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, or unreadable: learn it again
    try:
        sent = constants_sent_when_cut(graph)
    except (tf.errors.OpError, ValueError) as error:
        warnings.warn(f"could not run {graph.name!r} in process to learn which small constants TensorFlow sends "
                      f"({str(error).splitlines()[0]}): the twin copies every small constant to its readers",
                      RuntimeWarning, stacklevel=2)
        return frozenset()
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps({"graph": graph.fingerprint, "tensorflow": tf.__version__,
                                  "sent_constants": sorted(sent)}, indent=1))
    return sent


def read_calibrated_spec(text: str) -> tuple[Calibration, Path]:
    path = Path(text[len(PREFIX):])
    if not path.is_file():
        raise DeviceSpecError(f"{text!r}: no calibration file {path}; make one with "
                              "`placer calibrate --target local:2 --out FILE`")
    try:
        return load_calibration(path), path
    except ProfileError as error:
        raise DeviceSpecError(str(error)) from None
