"""What a schedule plan was made for (the model, its placement, the micro-batch count), recorded in the plan's
file by `placer schedule --save` and checked by `placer apply --schedule` before any TensorFlow work.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping

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
