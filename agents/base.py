"""The small interface every placement agent implements, so one training loop drives them all.

An agent proposes complete placements (one device per unit) and learns from their rewards. Its whole
state (weights, optimizer, baseline, random generators) lives in `checkpoint_objects()` (tf.train
trackables) and `numpy_state()`/`load_numpy_state()` (plain data), so training can resume exactly.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from placer.errors import PlacerError


class AgentOptionError(PlacerError):
    """An agent name or option that does not exist, has the wrong type, or does not fit the graph."""


class PlacementAgent(Protocol):
    name: str

    def propose(self, count: int) -> list[np.ndarray]:
        """`count` placements to evaluate, each [U] device indices."""

    def learn(self, assignments: Sequence[np.ndarray], rewards: Sequence[float]) -> Mapping[str, float]:
        """Update from the rewards of the proposed placements; returns metrics to log."""

    def best_guess(self) -> np.ndarray:
        """The placement the agent currently believes best (greedy decoding, the mode, ...)."""

    def checkpoint_objects(self) -> Mapping[str, Any]:
        ...

    def numpy_state(self) -> Mapping[str, Any]:
        ...

    def load_numpy_state(self, state: Mapping[str, Any]) -> None:
        ...
