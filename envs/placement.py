"""`PlacementEnv`: one episode places every unit (colocation group) of a graph at once and is timed.

As in the hierarchical planner, an episode is one step: the action gives a device per unit, the reward
comes from the step time (measured or simulated), and the episode ends. A failed placement (out of
memory, invalid, timeout) is charged `failing_step_time` and ends the episode normally.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.observation import graph_observation, observation_shape, observation_space
from envs.reward import RewardConfig, reward

REFERENCES = ("single-device", "expert")
"""The placements the "improvement" reward can compare with (the expert's falls back to single-device for a
model that has none)."""


class PlacementProblemEnv(gym.Env):
    """What the one-shot and the sequential environments share: graph, backend, observation, reward."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        model: Any = "nmt-2",
        size: str = "tiny",
        backend: str = "simulated",
        devices: Any = None,
        costs: Any = "roofline",
        reward: str = "neg_sqrt",
        failing_step_time: float = 100.0,
        reference: str = "single-device",
        max_ops: int | None = None,
        max_units: int | None = None,
        max_edges: int | None = None,
        measure_config: Any = None,
        simulator_config: Any = None,
        render_mode: str | None = None,
    ):
        """model: a built-in model name (`placer models`), module:function or file.py:function returning an
        OpGraph or a compiled keras.Model, an OpGraph, or a compiled keras.Model. backend: "simulated" or "measured". devices: the target (see
        `placer.cost.open_target`): for "simulated", a modeled machine ("modeled:2xV100", a machine file or
        a DeviceSet; default 2 V100s); for "measured", "local:2" (default), "inprocess:2" or a cluster spec.
        costs: "roofline" or cost tables (simulated only). reference: the placement the "improvement"
        reward compares with ("single-device" or "expert")."""
        from placer.cost import open_target
        from placer.models import load_model

        if reference not in REFERENCES:
            raise ValueError(f"unknown reference placement {reference!r}: {' or '.join(map(repr, REFERENCES))}")
        self.graph = load_model(model, size)
        self.size = size
        self.model_name = model if isinstance(model, str) else self.graph.name
        self.target = open_target(self.graph, devices, backend=backend, costs=costs, measure_config=measure_config,
                                  simulator_config=simulator_config)
        """Where placements are costed (`placer.cost.CostTarget`): evaluate, trace, and the simulator if any."""
        self.devices = self.target.devices
        self.reward_config = RewardConfig(reward, failing_step_time)
        self.render_mode = render_mode
        self.num_units = len(self.graph.groups)
        self._shape = observation_shape(self.graph, self.devices, max_ops=max_ops, max_units=max_units, max_edges=max_edges)
        self._graph_space = observation_space(self._shape)
        self._graph_obs = graph_observation(self.graph, self.devices, self._shape, self.target.op_cost)
        self._reference_name = reference
        self._reference_time: float | None = None
        self._last: dict[str, Any] | None = None

    # -- shared pieces -----------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        """"simulated" or "measured"."""
        return self.target.backend

    @property
    def device_mask(self) -> np.ndarray:
        """[units, devices] int8: 1 where a unit (colocation group) has kernels for the device's type."""
        return self._graph_obs["device_mask"][: self.num_units].copy()

    def reference_assignment(self) -> np.ndarray:
        """The reference placement's device per unit: the expert's when `reference` is "expert" and the model is
        built in, else the single-device heuristic's."""
        from placer.heuristics import make_heuristic
        from placer.models import MODELS

        builtin = self.model_name in MODELS
        name = "expert" if self._reference_name == "expert" and builtin else "single-device"
        placement = make_heuristic(name, self.graph, self.devices, model=self.model_name if builtin else None)
        return np.asarray(placement.group_devices, dtype=np.int64)

    @property
    def reference_step_time(self) -> float:
        if self._reference_time is None:
            self._reference_time = self.target.evaluate(self.reference_assignment()).seconds
        return self._reference_time

    def _reward(self, step_time: float) -> float:
        reference = self.reference_step_time if self.reward_config.kind == "improvement" else None
        return reward(step_time, self.reward_config, reference)

    def _evaluate(self, assignment: np.ndarray) -> tuple[float, dict[str, Any]]:
        result = self.target.evaluate(assignment)
        info = {
            "step_time": result.seconds,
            "ok": result.ok,
            "failure": result.failure,
            "failure_message": result.message,
            "peak_memory": result.peak_memory,  # simulated: computed when read (`DeferredPeaks`)
            "moved_ops": len(result.moved_ops),
            "tensorflow_moved_ops": bool(result.moved_ops),
            "samples": list(result.samples),
            "backend": result.backend,
        }
        self._last = {"assignment": np.array(assignment), **info}
        return self._reward(result.seconds), info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if self._last is None:
            return "no placement yet\n"
        assignment = self._last["assignment"]
        lines = [f"{self.graph.name} on {len(self.devices)} devices ({self.backend}): step time "
                 f"{self._last['step_time'] * 1e3:.3f} ms" + ("" if self._last["ok"] else f" FAILED ({self._last['failure']})")]
        for index, device in enumerate(self.devices):
            units = np.flatnonzero(assignment == index)
            ops = sum(len(self.graph.groups[u].ops) for u in units)
            names = ", ".join(self.graph.groups[u].name for u in units[:3]) + (", ..." if len(units) > 3 else "")
            lines.append(f"  {device.short_name:>16}: {len(units):5d} units {ops:6d} ops  {names}")
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.target.close()


class PlacementEnv(PlacementProblemEnv):
    """One-shot placement: action = a device per unit; one step per episode."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.observation_space = self._graph_space
        self.action_space = spaces.MultiDiscrete([len(self.devices)] * self.num_units)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.action_space.seed(int(self.np_random.integers(2**31)))
        return self._observation(), {"backend": self.backend, "units": self.num_units}

    def step(self, action):
        assignment = np.asarray(action, dtype=np.int64).reshape(self.num_units)
        reward_value, info = self._evaluate(assignment)
        return self._observation(), reward_value, True, False, info

    def _observation(self) -> dict[str, np.ndarray]:
        return {key: value.copy() for key, value in self._graph_obs.items()}
