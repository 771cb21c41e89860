"""Rewards from step times. Pure functions: the environments and the agents' tests share them."""

from __future__ import annotations

import math
from dataclasses import dataclass

REWARD_KINDS = ("neg_sqrt", "neg_time", "improvement")


@dataclass(frozen=True)
class RewardConfig:
    kind: str = "neg_sqrt"
    """"neg_sqrt": -sqrt(step seconds), the hierarchical planner's reward; "neg_time": -seconds;
    "improvement": (reference - step) / reference, the fraction of the reference step time saved."""
    failing_step_time: float = 100.0
    """Step time (seconds) charged to a failed placement (out of memory, invalid, timeout), as the planner's
    `failing_signal`."""

    def __post_init__(self):
        if self.kind not in REWARD_KINDS:
            raise ValueError(f"unknown reward {self.kind!r}; choose one of {', '.join(REWARD_KINDS)}")


def reward(step_time: float | None, config: RewardConfig, reference: float | None = None) -> float:
    """The reward of a placement whose step took `step_time` seconds (None or inf: it failed)."""
    seconds = config.failing_step_time if step_time is None or not math.isfinite(step_time) else step_time
    if config.kind == "neg_sqrt":
        return -math.sqrt(seconds)
    if config.kind == "neg_time":
        return -seconds
    if reference is None or reference <= 0:
        raise ValueError("the 'improvement' reward needs the reference placement's step time")
    return (reference - seconds) / reference
