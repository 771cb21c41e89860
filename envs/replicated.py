"""`ReplicatedPlacementEnv`: one-shot placement with data parallelism in the action: how many replicas run the step,
each on its share of the GPUs and of the batch, and where one replica's ops run.

The action is one flat vector: the degree (an index into `replica_degrees`), then a device per unit of the whole
step over the machine. Flat, so that the agents of `agents.loop` and other RL libraries (most take no Dict actions)
propose it as they propose placements. With D replicas the placement is folded onto one replica's group of GPUs
(GPU j of the machine is GPU j mod k of a group of k) and priced as the search prices replicas
(`placer.cost.replicated.ReplicaPricer`): the step at batch / D on the group, its gradients all-reduced over the
machine's links. Degree 1 is the plain placement. Simulated on modeled machines, for built-in models that can be
built at another batch.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from gymnasium import spaces

from envs.placement import PlacementProblemEnv


class ReplicatedPlacementEnv(PlacementProblemEnv):
    def __init__(self, *args, replica_degrees: Sequence[int] | None = None, slices_of: str | None = None, **kwargs):
        """replica_degrees: the degrees the action chooses from (default: every one the GPUs and the batch allow).
        slices_of: the model whose step is rebuilt at each replica's slice of the batch, where `model` is its graph
        already built (default: `model`, a model's name or spec)."""
        super().__init__(*args, **kwargs)
        if slices_of is not None:
            self.model_name = slices_of
        from placer.cost.replicated import ReplicaPricer, replica_spec
        from placer.models import rebuildable_batch
        from placer.replicas import Replicas
        from placer.replicas import replica_degrees as every_degree

        spec = str(self.target.spec)
        if self.backend != "simulated" or not spec.startswith("modeled:"):
            raise ValueError(f"replicas are priced on modeled machines (devices='modeled:8xH100'), not on {spec!r}")
        if not isinstance(self.model_name, str) or rebuildable_batch(self.model_name, self.size) is None:
            raise ValueError(f"replicas slice the batch: {self.model_name!r} is not a model that can be built at "
                             "another batch (a built-in model that can, placer models, or a model function with a "
                             "`batch` parameter, or returning a Keras model whose inputs fix no batch)")
        self._pricer = ReplicaPricer(self.model_name, self.size, spec, self.graph)
        gpus = sum(1 for device in self.devices if device.kind == "GPU")
        degrees = tuple(replica_degrees) if replica_degrees is not None else tuple(
            sorted(every_degree(gpus, self._pricer.batch, least=1)))
        for degree in degrees:  # refuses a degree that divides neither the batch nor the GPUs, before any step
            if degree != 1:
                Replicas.of_batch(self._pricer.batch, degree)
                replica_spec(spec, degree)
        self.replica_degrees = degrees
        gradient_bytes = _gradient_bytes(self.graph)
        self.observation_space = spaces.Dict({
            **self._graph_space.spaces,
            "replica_degrees": spaces.Box(1, gpus, (len(degrees),), np.int64),
            "replica_batch": spaces.Box(1, self._pricer.batch, (len(degrees),), np.int64),
            "gradient_bytes": spaces.Box(0, float(np.finfo(np.float32).max), (1,), np.float32),
        })
        self._replica_obs = {
            "replica_degrees": np.array(degrees, np.int64),
            "replica_batch": np.array([self._pricer.batch // d for d in degrees], np.int64),
            "gradient_bytes": np.array([gradient_bytes], np.float32),
        }
        self.action_space = spaces.MultiDiscrete([len(degrees)] + [len(self.devices)] * self.num_units)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.action_space.seed(int(self.np_random.integers(2**31)))
        return self._observation(), {"backend": self.backend, "units": self.num_units,
                                     "replica_degrees": self.replica_degrees}

    def split(self, action) -> tuple[int, np.ndarray]:
        """(the degree, the device of each unit) of a flat action."""
        action = np.asarray(action, dtype=np.int64).reshape(-1)
        if action.shape != (1 + self.num_units,):
            raise ValueError(f"an action is the degree's index then a device per unit: {1 + self.num_units} numbers, "
                             f"got {action.shape[0]}")
        return self.replica_degrees[int(action[0])], action[1:]

    def placement_of(self, action, record: dict[str, Any] | None = None):
        """The placement of one replica's units an action names, its degree in the record (`"replicas"`): what
        `agents.loop.train` writes as the best placement."""
        from placer.placement import Placement

        degree, assignment = self.split(action)
        return Placement.from_assignment(self.graph, self.devices, list(assignment), {**(record or {}),
                                                                                     "replicas": degree})

    def step(self, action):
        from placer.placement import Placement

        degree, assignment = self.split(action)
        if degree == 1:
            reward_value, info = self._evaluate(assignment)
        else:
            placement = Placement.from_assignment(self.graph, self.devices, assignment)
            result = self._pricer.price(degree, placement)
            info = {"step_time": result.seconds, "ok": result.ok, "failure": result.failure,
                    "failure_message": result.message, "peak_memory": result.peak_memory, "moved_ops": 0,
                    "tensorflow_moved_ops": False, "samples": list(result.samples), "backend": result.backend}
            self._last = {"assignment": assignment, **info}
            reward_value = self._reward(result.seconds)
        info["replicas"] = degree
        return self._observation(), reward_value, True, False, info

    def _observation(self) -> dict[str, np.ndarray]:
        return {**{key: value.copy() for key, value in self._graph_obs.items()},
                **{key: value.copy() for key, value in self._replica_obs.items()}}

    def close(self) -> None:
        self._pricer.close()
        super().close()


def _gradient_bytes(graph) -> float:
    from placer.schedule.micro_batch import gradients

    return float(sum(g.bytes for g in gradients(graph)))
