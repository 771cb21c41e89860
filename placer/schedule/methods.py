"""Every way to schedule a template, under one set of names: the standard schedules and the two Tessel searches."""

from __future__ import annotations

from placer.errors import ScheduleError
from placer.schedule.standard import STANDARD_SCHEDULES
from placer.schedule.blocks import BlockTemplate
from placer.schedule.plan import SchedulePlan
from placer.schedule.tessel import DEFAULT_TIME_LIMIT, tessel, tessel_fast

METHODS = ("sequential", "gpipe", "1f1b", "tessel", "tessel-fast")


def make_schedule(method: str, template: BlockTemplate, micro_batches: int, memory_limit: int | None = None, *,
                  time_limit: float = DEFAULT_TIME_LIMIT) -> SchedulePlan:
    """A plan by `method` (one of METHODS). GPipe ignores the memory limit, as GPipe does: compare its peak."""
    if method in STANDARD_SCHEDULES:
        return STANDARD_SCHEDULES[method](template, micro_batches, memory_limit)
    if method == "tessel":
        return tessel(template, micro_batches, memory_limit, time_limit=time_limit)
    if method == "tessel-fast":
        return tessel_fast(template, micro_batches, memory_limit, time_limit=time_limit)
    raise ScheduleError(f"unknown schedule method {method!r}; known: {', '.join(METHODS)}")
