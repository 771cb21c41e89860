"""Every way to schedule a template, under one set of names: the standard schedules, the two Tessel searches,
and ZB-H1 for templates whose backward is split into input and weight gradients."""

from __future__ import annotations

from placer.errors import ScheduleError
from placer.schedule.standard import STANDARD_SCHEDULES, zero_bubble_h1
from placer.schedule.blocks import BlockTemplate
from placer.schedule.plan import SchedulePlan
from placer.schedule.tessel import DEFAULT_TIME_LIMIT, tessel, tessel_fast

METHODS = ("sequential", "gpipe", "1f1b", "tessel", "tessel-fast")
"""The methods any template can be scheduled by."""
SPLIT_METHODS = ("zb-h1",)
"""The methods that need weight-gradient blocks (`blocks_from_placement(..., split_weight_gradients=True)`)."""
ALL_METHODS = METHODS + SPLIT_METHODS


def methods_for(template: BlockTemplate) -> tuple[str, ...]:
    """The methods that can schedule `template`."""
    return ALL_METHODS if template.splits_weight_gradients else METHODS


def make_schedule(method: str, template: BlockTemplate, micro_batches: int, memory_limit: int | None = None, *,
                  time_limit: float = DEFAULT_TIME_LIMIT) -> SchedulePlan:
    """A plan by `method` (one of ALL_METHODS). GPipe ignores the memory limit, as GPipe does: compare its
    peak. zb-h1 refuses a template without weight-gradient blocks."""
    if method in STANDARD_SCHEDULES:
        return STANDARD_SCHEDULES[method](template, micro_batches, memory_limit)
    if method == "zb-h1":
        return zero_bubble_h1(template, micro_batches, memory_limit)
    if method == "tessel":
        return tessel(template, micro_batches, memory_limit, time_limit=time_limit)
    if method == "tessel-fast":
        return tessel_fast(template, micro_batches, memory_limit, time_limit=time_limit)
    raise ScheduleError(f"unknown schedule method {method!r}; known: {', '.join(ALL_METHODS)}")
