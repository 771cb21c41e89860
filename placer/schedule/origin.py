"""What a schedule plan was made for (the model, its placement, the micro-batch count) and the calibration its
step was priced on, recorded in the plan's file by `placer schedule --save` and checked by `placer apply
--schedule` before any TensorFlow work.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from placer.calibration import calibration_digest
from placer.cost.calibrated import PREFIX
from placer.cost.record import StepTime
from placer.cost.spec import TargetSpec
from placer.devices import short_name
from placer.errors import ScheduleMismatchError
from placer.placement import PlacementFile
from placer.schedule.from_placement import check_micro_batches
from placer.schedule.plan import SchedulePlan

METADATA_KEY = "made_for"
"""Where a plan's metadata keeps its `PlanOrigin`."""


def placement_digest(op_devices: Mapping[str, str]) -> str:
    """A short digest of which device each op runs on. Devices by short name, so that a placement read from
    its file and the same placement made in memory (full names spelled either way) digest alike."""
    pairs = sorted((op, short_name(device)) for op, device in op_devices.items())
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PlanOrigin:
    """The placed model a plan orders the blocks of."""

    model: str
    size: str
    graph: str
    fingerprint: str
    """Of the model's graph at its full batch: the fingerprint its placement file records."""
    placement: str
    """`placement_digest` of that placement."""

    @classmethod
    def of(cls, model: str, size: str, placement_file: PlacementFile) -> PlanOrigin:
        return cls(model, size, placement_file.graph_name, placement_file.fingerprint,
                   placement_digest(placement_file.op_devices))

    def to_json_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def with_origin(plan: SchedulePlan, origin: PlanOrigin) -> SchedulePlan:
    """`plan` with `origin` in its metadata, so that its file says what it was made for."""
    return dataclasses.replace(plan, metadata={**plan.metadata, METADATA_KEY: origin.to_json_dict()})


def plan_origin(plan: SchedulePlan) -> PlanOrigin | None:
    """What `plan` was made for, or None for a plan made without `placer schedule --model` (then only the
    blocks themselves can be checked, against the built graph: `placer.schedule.execute.block_chains`)."""
    recorded = plan.metadata.get(METADATA_KEY)
    if not isinstance(recorded, Mapping):
        return None
    try:
        return PlanOrigin(**{field.name: str(recorded[field.name]) for field in dataclasses.fields(PlanOrigin)})
    except KeyError as error:
        raise ScheduleMismatchError(f"the plan's record of what it was made for lacks {error}: make the plan again "
                                    "with `placer schedule --model MODEL --placement FILE --save PLAN`") from None


def check_plan_fits(plan: SchedulePlan, placement_file: PlacementFile, plan_source: str = "the plan") -> None:
    """Refuse, saying what differs, a plan made for another model, another placement or another number of
    micro-batches than `placement_file`'s: a check on the files alone, before any graph is built."""
    template_micro_batches = plan.template.metadata.get("micro_batches")
    if isinstance(template_micro_batches, int) and template_micro_batches != plan.micro_batches:
        raise ScheduleMismatchError(
            f"{plan_source} orders {plan.micro_batches} micro-batches, but its blocks were measured for "
            f"{template_micro_batches}: make the plan with the same --micro-batches as its template")
    batch = plan.template.metadata.get("batch_size")
    if isinstance(batch, int):
        check_micro_batches(batch, plan.micro_batches)
    origin = plan_origin(plan)
    if origin is None:
        return
    if origin.fingerprint != placement_file.fingerprint:
        raise ScheduleMismatchError(
            f"{plan_source} was made for {origin.model} ({origin.size}, graph {origin.graph!r}, fingerprint "
            f"{origin.fingerprint[:12]}), but {placement_file.source} places graph {placement_file.graph_name!r} "
            f"(fingerprint {placement_file.fingerprint[:12]}): make the plan for this placement with `placer schedule "
            f"--model MODEL --placement {placement_file.source} --save PLAN`")
    if origin.placement != placement_digest(placement_file.op_devices):
        raise ScheduleMismatchError(
            f"{plan_source} was made for another placement of {origin.model} than {placement_file.source} (its ops "
            f"run on other devices, so its blocks differ): make the plan for this placement with `placer schedule "
            f"--model {origin.model} --size {origin.size} --placement {placement_file.source} --save PLAN`")


PREDICTION_KEY = "predicted"
"""Where a plan's metadata keeps its `PlanPrediction`."""


@dataclass(frozen=True)
class PlanPrediction:
    """What a plan's step was predicted to take, and on which simulated target."""

    step_time: StepTime
    target: str
    """The simulated target's spec, e.g. "calibrated:calibration.json" or "modeled:2xV100"."""
    calibration: str = ""
    """`placer.cost.calibrated.calibration_digest` of the calibration it was priced on ("" when modeled)."""
    calibrated_on: str = ""
    """The real target that calibration was made on (e.g. "local:2"): the one whose steps it predicts."""

    @classmethod
    def on(cls, step_time: StepTime, spec: TargetSpec) -> PlanPrediction:
        if spec.calibration is None:
            return cls(step_time, str(spec))
        return cls(step_time, str(spec), calibration_digest(spec.calibration_path), spec.calibration.target)

    def to_json_dict(self) -> dict[str, Any]:
        return {"seconds": self.step_time.seconds if self.step_time.ok else None, "ok": self.step_time.ok,
                "failure": self.step_time.failure, "message": self.step_time.message, "target": self.target,
                "calibration": self.calibration, "calibrated_on": self.calibrated_on}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> PlanPrediction:
        if data.get("ok", True) and isinstance(data.get("seconds"), (int, float)):
            step_time = StepTime(float(data["seconds"]), "simulated", str(data.get("target", "")))
        else:
            step_time = StepTime.failed(str(data.get("failure") or "invalid"), str(data.get("message", "")),
                                        "simulated", str(data.get("target", "")))
        return cls(step_time, str(data.get("target", "")), str(data.get("calibration", "")),
                   str(data.get("calibrated_on", "")))

    def describe(self) -> str:
        if not self.step_time.ok:
            return f"op-level prediction on {self.target} failed ({self.step_time.failure}): {self.step_time.message}"
        return f"predicted {self.step_time.seconds * 1e3:.2f} ms op by op on {self.target}"


def with_prediction(plan: SchedulePlan, prediction: PlanPrediction) -> SchedulePlan:
    """`plan` with `prediction` in its metadata, so that its file says what its step should take."""
    return dataclasses.replace(plan, metadata={**plan.metadata, PREDICTION_KEY: prediction.to_json_dict()})


def plan_prediction(plan: SchedulePlan) -> PlanPrediction | None:
    """The op-level prediction `plan`'s file records, or None for a plan priced by its block spans alone."""
    recorded = plan.metadata.get(PREDICTION_KEY)
    return PlanPrediction.from_json_dict(recorded) if isinstance(recorded, Mapping) else None


def check_plan_calibration(plan: SchedulePlan, spec: TargetSpec, plan_source: str = "the plan") -> None:
    """Refuse a plan priced on one calibration where another applies, saying what to re-run: on a calibrated
    simulated `spec`, a plan priced on other calibration contents; on a measured `spec`, a plan priced on
    the calibration of another real target, or on a calibration file redone since. Plans priced on modeled
    targets, or never priced op by op, pass."""
    prediction = plan_prediction(plan)
    if prediction is None or not prediction.calibration:
        return
    origin = plan_origin(plan)
    subject = f"--model {origin.model} --size {origin.size}" if origin else "--model MODEL"
    calibration_file = prediction.target[len(PREFIX):] if prediction.target.startswith(PREFIX) else "FILE"

    def make_again(file: str) -> str:
        return (f"make the plan again on that calibration: `placer schedule {subject} --placement PLACEMENT "
                f"--micro-batches {plan.micro_batches} --method {plan.method} --cluster calibrated:{file} --save PLAN`")

    if spec.backend == "simulated":
        if spec.calibration is None:
            return
        digest = calibration_digest(spec.calibration_path)
        if digest != prediction.calibration:
            raise ScheduleMismatchError(
                f"{plan_source} was priced on {prediction.target} (calibration digest {prediction.calibration}, made "
                f"on {prediction.calibrated_on or 'its target'}), but {spec} holds another calibration (digest "
                f"{digest}): {make_again(str(spec.calibration_path))}")
        return
    if prediction.calibrated_on and str(spec) != prediction.calibrated_on:
        raise ScheduleMismatchError(
            f"{plan_source} was priced on {prediction.target}, a calibration of {prediction.calibrated_on}, so it "
            f"predicts steps there, not on {spec}: run it with --target {prediction.calibrated_on}, or calibrate "
            f"{spec} (`placer calibrate --target {spec} --out FILE`) and {make_again('FILE')}")
    if Path(calibration_file).is_file() and calibration_digest(calibration_file) != prediction.calibration:
        raise ScheduleMismatchError(
            f"{plan_source} was priced on {prediction.target}, but {calibration_file} has been calibrated again since "
            f"(digest {calibration_digest(calibration_file)}, the plan's {prediction.calibration}): "
            f"{make_again(calibration_file)}")
