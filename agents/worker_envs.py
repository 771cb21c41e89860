"""The loop's evaluate step on workers (`agents.workers`): each worker builds its own placement environment
from an `EnvRecipe` and keeps it for the next tasks, so a target is opened once per worker, not per update.

Why the evaluate step, and whole problems, are the units of parallel work: an update's policy step (sampling
and learning, TensorFlow) depends on the update before it, so it stays in the driver, serial; the placements
of one update are independent, and so are the set-up costs of pre-training's (graph, machine) problems (the
graph built, its target opened, the heuristics' votes placed). Spreading those, in a fixed order, leaves
every result as the serial run's. How much that gains depends on the share of the evaluate step: on
`placer pretrain`'s tiny graphs the simulator takes ~2 % of an update and set-up about half of a short run;
a measured target's placement takes seconds, all of it in the evaluate step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from agents.workers import Task, worker_state


@dataclass(frozen=True)
class EnvRecipe:
    """How a worker builds its own copy of a `PlacementEnv`: its model (a name, "branchy:SEED" for a generated
    graph, or a built OpGraph), size and target; `options` are PlacementEnv's other arguments."""

    model: Any
    size: str | None
    devices: str
    backend: str = "simulated"
    options: tuple[tuple[str, Any], ...] = ()
    seed: int | None = None
    """The environment's reset seed."""

    @property
    def key(self) -> str:
        """What a worker keeps the environment under."""
        model = self.model if isinstance(self.model, str) else self.model.name
        return f"{model}:{self.size}@{self.devices}/{self.backend}/{self.options!r}/{self.seed}"

    def build(self):
        from envs.placement import PlacementEnv

        model, size = self.model, self.size
        if isinstance(model, str) and model.startswith("branchy:"):
            from placer.models.branchy import random_branchy_graph

            model, size = random_branchy_graph(seed=int(model.split(":")[1]), size=size), None
        env = PlacementEnv(model=model, size=size or "tiny", backend=self.backend, devices=self.devices,
                           **dict(self.options))
        env.reset(seed=self.seed)
        return env


def owned_env(recipe: EnvRecipe):
    """This worker's environment for `recipe`, built on first use and kept in its `worker_state`."""
    state = worker_state()
    key = "env:" + recipe.key
    if key not in state:
        state[key] = recipe.build()
    return state[key]


def evaluate_owned(recipe: EnvRecipe, assignments: Sequence[Sequence[int]]) -> list:
    """A task: `agents.loop.evaluate` on this worker's environment. The evaluations' info keeps only what
    crosses a process boundary (a simulated peak memory, computed on demand, is left out)."""
    from dataclasses import replace

    from agents import loop

    evaluations = loop.evaluate(owned_env(recipe), assignments)
    return [replace(e, info={k: v for k, v in e.info.items() if k != "peak_memory"}) for e in evaluations]


@dataclass(frozen=True)
class Problem:
    """What the driver needs of a problem a worker owns, to build its agent: the graph, devices, device mask,
    and the heuristics' votes (`agents.graph_policy.priors.heuristic_votes`; None when none were asked for)."""

    graph: Any
    devices: Any
    device_mask: np.ndarray
    votes: np.ndarray | None = field(default=None, repr=False)


def describe_owned(recipe: EnvRecipe, heuristics: tuple[str, ...] | None) -> Problem:
    """A task: build this worker's environment for `recipe` and describe its problem."""
    from agents.graph_policy.priors import heuristic_votes

    env = owned_env(recipe)
    votes = heuristic_votes(env.graph, env.devices, heuristics) if heuristics else None
    return Problem(env.graph, env.devices, env.device_mask, votes)


def call_owned(recipe: EnvRecipe, function, *args):
    """A task: `function(env, *args)` on this worker's environment for `recipe`."""
    return function(owned_env(recipe), *args)


class EnvOnWorkers:
    """A placement environment whose evaluate step (`agents.loop.evaluate`) runs on workers, each on its own
    copy built from `recipe`: an update's placements are split in order into one contiguous share per worker,
    and their evaluations joined back in that order. Everything else is read from `local` (the driver's own
    copy, for the graph, baselines and the final comparison), if there is one."""

    def __init__(self, recipe: EnvRecipe, engine, workers: Sequence[int] | None = None, local=None):
        """workers: the worker slots to spread over (default: all of the engine's)."""
        self.recipe, self.engine, self.local = recipe, engine, local
        self.workers = list(range(engine.count) if workers is None else workers)

    def evaluate_batch(self, assignments: Sequence[Sequence[int]]) -> list:
        shares = [list(share) for share in np.array_split(np.arange(len(assignments)), len(self.workers))
                  if len(share)]
        tasks = [Task(evaluate_owned, (self.recipe, [assignments[i] for i in share]), worker=worker)
                 for share, worker in zip(shares, self.workers)]
        return [evaluation for part in self.engine.run(tasks) for evaluation in part]

    def __getattr__(self, name: str):
        local = self.__dict__.get("local")
        if local is None:
            raise AttributeError(f"{name}: this environment lives on workers only")
        return getattr(local, name)
