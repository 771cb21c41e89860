"""Search baselines behind the agent interface: random search and the cross-entropy method.

Both keep their whole state in numpy (including the random generator's), so a checkpoint restores them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class RandomSearchConfig:
    seed: int = 0
    """Seeds the random generator."""


@dataclass(frozen=True)
class CrossEntropyConfig(RandomSearchConfig):
    elite_fraction: float = 0.25
    """Share of each update's placements the distribution is refitted to."""
    smoothing: float = 0.7
    """Weight of the old distribution when mixing it with the refitted one."""

    def __post_init__(self):
        if not 0 < self.elite_fraction <= 1:
            raise ValueError(f"elite_fraction must be in (0, 1], got {self.elite_fraction}")
        if not 0 <= self.smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {self.smoothing}")


def _allowed(device_mask: np.ndarray) -> np.ndarray:
    """[U, D] float mask; a unit no device can run is left free (its placements fail and are charged)."""
    mask = device_mask.astype(np.float64)
    mask[mask.sum(axis=1) == 0] = 1.0
    return mask


class RandomSearch:
    """Uniformly random devices per unit, among those with kernels for it."""

    name = "random"

    def __init__(self, device_mask: np.ndarray, seed: int = 0, *, config: RandomSearchConfig | None = None):
        self.config = config or RandomSearchConfig(seed)
        self.mask = _allowed(device_mask)
        self.rng = np.random.default_rng(self.config.seed)
        self.best: np.ndarray | None = None
        self.best_reward = -np.inf

    def _draw(self, probabilities: np.ndarray, count: int) -> list[np.ndarray]:
        cumulative = probabilities.cumsum(axis=1)
        cumulative /= cumulative[:, -1:]
        return [(self.rng.random((len(cumulative), 1)) > cumulative).sum(axis=1) for _ in range(count)]

    def propose(self, count: int) -> list[np.ndarray]:
        return self._draw(self.mask, count)

    def learn(self, assignments: Sequence[np.ndarray], rewards: Sequence[float]) -> Mapping[str, float]:
        best = int(np.argmax(rewards))
        if rewards[best] > self.best_reward:
            self.best, self.best_reward = np.array(assignments[best]), float(rewards[best])
        return {}

    def best_guess(self) -> np.ndarray:
        return self.best if self.best is not None else self.propose(1)[0]

    def checkpoint_objects(self) -> Mapping[str, Any]:
        return {}

    def numpy_state(self) -> Mapping[str, Any]:
        return {"rng": self.rng.bit_generator.state, "best": None if self.best is None else self.best.tolist(),
                "best_reward": self.best_reward}

    def load_numpy_state(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.best = None if state["best"] is None else np.array(state["best"])
        self.best_reward = state["best_reward"]


class CrossEntropyMethod(RandomSearch):
    """A categorical distribution per unit; each update refits it to the elite placements of the batch
    and mixes it with the old one (smoothing), so it never collapses in one step."""

    name = "cem"

    def __init__(self, device_mask: np.ndarray, seed: int = 0, *, config: CrossEntropyConfig | None = None):
        config = config or CrossEntropyConfig(seed)
        super().__init__(device_mask, config=config)
        self.elite_fraction = config.elite_fraction
        self.smoothing = config.smoothing
        self.probabilities = self.mask / self.mask.sum(axis=1, keepdims=True)

    def propose(self, count: int) -> list[np.ndarray]:
        return self._draw(self.probabilities, count)

    def learn(self, assignments: Sequence[np.ndarray], rewards: Sequence[float]) -> Mapping[str, float]:
        super().learn(assignments, rewards)
        elite = np.argsort(rewards)[::-1][: max(1, int(round(len(rewards) * self.elite_fraction)))]
        fitted = np.zeros_like(self.probabilities)
        for index in elite:
            fitted[np.arange(len(fitted)), assignments[index]] += 1.0 / len(elite)
        self.probabilities = self.smoothing * self.probabilities + (1 - self.smoothing) * fitted
        self.probabilities *= self.mask
        self.probabilities /= self.probabilities.sum(axis=1, keepdims=True)
        entropy = -np.sum(self.probabilities * np.log(np.maximum(self.probabilities, 1e-12))) / len(self.probabilities)
        return {"entropy": float(entropy)}

    def best_guess(self) -> np.ndarray:
        return self.probabilities.argmax(axis=1)

    def numpy_state(self) -> Mapping[str, Any]:
        return {**super().numpy_state(), "probabilities": self.probabilities.tolist()}

    def load_numpy_state(self, state: Mapping[str, Any]) -> None:
        super().load_numpy_state(state)
        self.probabilities = np.array(state["probabilities"])
