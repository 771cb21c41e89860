"""`SequentialPlacementEnv`: place one unit per step (Placeto-style), with the step time as shaping.

Units are placed in topological order. Units not placed yet sit where the reference placement puts them,
so every intermediate placement is complete and can be timed: with `shaping=True` (default), step k's
reward is R(time after k units) - R(time before), so an episode's return is R(final) - R(reference).
With `shaping=False` only the last step is rewarded, with R(final): one evaluation per episode, which is
what a measured backend can afford.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from envs.placement import PlacementProblemEnv


class SequentialPlacementEnv(PlacementProblemEnv):
    def __init__(self, *args, shaping: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.shaping = shaping
        units, devices = self._shape.units, len(self.devices)
        self.observation_space = spaces.Dict({
            **self._graph_space.spaces,
            "placed": spaces.Box(-1, devices - 1, (units,), np.int64),
            "current_unit": spaces.Box(0, max(units - 1, 0), (1,), np.int64),
        })
        self.action_space = spaces.Discrete(devices)
        self._assignment = np.zeros(self.num_units, np.int64)
        self._placed = np.full(units, -1, np.int64)
        self._cursor = 0
        self._previous_reward = 0.0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.action_space.seed(int(self.np_random.integers(2**31)))
        self._assignment = self.reference_assignment()
        self._placed[:] = -1
        self._cursor = 0
        self._previous_reward = self._reward(self.reference_step_time) if self.shaping else 0.0
        return self._observation(), {"backend": self.backend, "units": self.num_units,
                                     "action_mask": self._graph_obs["device_mask"][0].copy()}

    def step(self, action):
        if self._cursor >= self.num_units:
            raise RuntimeError("the episode is over: call reset()")
        self._assignment[self._cursor] = int(action)
        self._placed[self._cursor] = int(action)
        self._cursor += 1
        done = self._cursor == self.num_units
        if self.shaping or done:
            current, info = self._evaluate(self._assignment)
            reward_value = current - self._previous_reward if self.shaping else current
            self._previous_reward = current
        else:
            reward_value, info = 0.0, {"backend": self.backend}
        if not done:
            info["action_mask"] = self._graph_obs["device_mask"][self._cursor].copy()
        return self._observation(), float(reward_value), done, False, info

    def _observation(self) -> dict[str, np.ndarray]:
        obs = {key: value.copy() for key, value in self._graph_obs.items()}
        obs["placed"] = self._placed.copy()
        obs["current_unit"] = np.array([min(self._cursor, self.num_units - 1)], np.int64)
        return obs
