"""Schedules of micro-batches for a placement (Tessel): blocks, schedule plans, the standard schedules (sequential,
GPipe, 1F1B, ZB-H1) and the z3 repetend search; plans executed for real as micro-batched steps (`micro_batch`, `execute`).
"""

from placer.schedule.standard import STANDARD_SCHEDULES, gpipe, list_schedule, one_f_one_b, sequential, zero_bubble_h1
from placer.schedule.blocks import BACKWARD, FORWARD, WEIGHT_GRADIENT, BlockSpec, BlockTemplate
from placer.schedule.plan import SchedulePlan, ScheduledBlock, plan_from_json_dict, read_schedule_file
from placer.schedule.shapes import SHAPES, shape_template
from placer.schedule.tessel import tessel, tessel_fast

__all__ = [
    "BACKWARD", "STANDARD_SCHEDULES", "FORWARD", "SHAPES", "BlockSpec", "BlockTemplate", "SchedulePlan", "ScheduledBlock",
    "gpipe", "list_schedule", "one_f_one_b", "plan_from_json_dict", "read_schedule_file", "sequential",
    "shape_template", "tessel", "tessel_fast", "WEIGHT_GRADIENT", "zero_bubble_h1",
]
