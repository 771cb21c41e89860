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

import logging
import os
import socket
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from agents.loop import MEASURED_ON
from agents.workers import Task, worker_state
from placer.cost.kind import TargetKind, TargetKindError, target_kind

evaluation_log = logging.getLogger("placer.evaluation")
"""Where the evaluate step runs and why: a run's log.txt (`agents.experiment.run`), not the console."""
evaluation_log.setLevel(logging.INFO)
evaluation_log.propagate = False


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
    crosses a process boundary (a simulated peak memory, computed on demand, is left out); a measured one
    records where it was measured (`MEASURED_ON`)."""
    from agents import loop

    env = owned_env(recipe)
    evaluations = [replace(e, info={k: v for k, v in e.info.items() if k != "peak_memory"})
                   for e in loop.evaluate(env, assignments)]
    if env.backend != "measured":
        return evaluations
    return _with_origin(evaluations, _owned_target(recipe).origin)


def this_node() -> dict[str, Any]:
    """This process's host name, process id, and Ray node id when it runs in a Ray worker (else None)."""
    ray = sys.modules.get("ray")  # imported by Ray's own workers; never imported here just to ask
    node = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else None
    return {"host": socket.gethostname(), "pid": os.getpid(), "ray_node": node}


@dataclass(frozen=True)
class WorkerTarget:
    """Where a worker measures: its node (`this_node`), its target's spec, and the kind of that target."""

    node: Mapping[str, Any]
    spec: str
    kind: TargetKind

    @property
    def origin(self) -> dict[str, Any]:
        """What each of its measurements records under `MEASURED_ON`."""
        return {**self.node, "target": self.spec, "kind": self.kind.fingerprint}

    def describe(self) -> str:
        ray_node = f", Ray node {self.node['ray_node'][:12]}" if self.node.get("ray_node") else ""
        return f"{self.spec} on host {self.node['host']} (pid {self.node['pid']}{ray_node})"


def describe_target(env) -> WorkerTarget:
    """Where `env` (open in this process) measures."""
    return WorkerTarget(this_node(), str(env.target.spec), target_kind(env.target))


def _owned_target(recipe: EnvRecipe) -> WorkerTarget:
    state = worker_state()
    key = "target:" + recipe.key
    if key not in state:
        state[key] = describe_target(owned_env(recipe))
    return state[key]


def target_owned(recipe: EnvRecipe) -> WorkerTarget:
    """A task: open this worker's environment for `recipe` (its target) and say where it measures."""
    return _owned_target(recipe)


def _with_origin(evaluations: list, origin: Mapping[str, Any]) -> list:
    return [replace(e, info={**e.info, MEASURED_ON: dict(origin)}) for e in evaluations]


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
    copy, for the graph, baselines and the final comparison), if there is one.

    Fewer placements than workers go to the first workers: a lone placement (the loop's greedy evaluation,
    a would-be best and the best timed side by side) always goes to the first, so those timings that are
    compared with each other come from one target."""

    def __init__(self, recipe: EnvRecipe, engine, workers: Sequence[int] | None = None, local=None,
                 kind: str | None = None):
        """workers: the worker slots to spread over (default: all of the engine's). kind: the fingerprint of
        the kind of target every measurement must come from (`placer.cost.kind`; checked before training):
        a measurement from another kind (a worker replaced on another machine) is refused, not compared."""
        self.recipe, self.engine, self.local, self.kind = recipe, engine, local, kind
        self.workers = list(range(engine.count) if workers is None else workers)

    def evaluate_batch(self, assignments: Sequence[Sequence[int]]) -> list:
        shares = [list(share) for share in np.array_split(np.arange(len(assignments)), len(self.workers))
                  if len(share)]
        tasks = [Task(evaluate_owned, (self.recipe, [assignments[i] for i in share]), worker=worker)
                 for share, worker in zip(shares, self.workers)]
        evaluations = [evaluation for part in self.engine.run(tasks) for evaluation in part]
        if self.kind is not None:
            for evaluation in evaluations:
                origin = evaluation.info.get(MEASURED_ON, {})
                if origin.get("kind") != self.kind:
                    raise TargetKindError(
                        f"a placement was measured on {origin.get('target')} on host {origin.get('host')} (pid "
                        f"{origin.get('pid')}), a target of kind {origin.get('kind')}, not of the run's kind "
                        f"{self.kind}: its step time cannot be compared with the others'")
        return evaluations

    def __getattr__(self, name: str):
        local = self.__dict__.get("local")
        if local is None:
            raise AttributeError(f"{name}: this environment lives on workers only")
        return getattr(local, name)


class FasterOfHereAndWorkers:
    """A simulated placement environment whose evaluate step runs where it is faster: in this process, or on
    workers (`on_workers`, an `EnvOnWorkers` with a local copy). Every copy of a simulator prices a placement
    alike, so the evaluations are the same either way and only the wall time differs; on the simulator a
    placement takes milliseconds, and shipping an update's placements to workers and back can cost more than
    pricing them here (a simulated training run on 2 local workers ran at 0.63x, docs/results/scale-out.md).
    Each way is timed on `FIRST_TIMINGS` batches after a first (which builds the workers' copies), then the
    faster one goes on, the other timed again every `RETIME_EVERY` batches in case that changes (a larger graph,
    a busier machine)."""

    RETIME_EVERY = 20
    FIRST_TIMINGS = 2
    """Batches each way is timed on before the faster is chosen."""
    SWITCH_BELOW = 0.9
    """Once chosen, the other way takes over only when it is this much faster: ways as fast as each other (a
    small graph) would otherwise swap at every timing's noise."""
    TIMINGS_KEPT = 5
    """Batches per way its seconds per placement are the median of."""

    def __init__(self, on_workers: EnvOnWorkers):
        if on_workers.local is None:
            raise ValueError("FasterOfHereAndWorkers needs the environment's copy in this process")
        self.on_workers, self.local = on_workers, on_workers.local
        self._per_placement: dict[str, list[float]] = {"here": [], "workers": []}
        self._warmed: set[str] = set()
        self._batches = 0
        self._chosen: str | None = None

    def evaluate_batch(self, assignments: Sequence[Sequence[int]]) -> list:
        from agents import loop

        way = self._way()
        started = time.perf_counter()
        evaluations = (self.on_workers.evaluate_batch(assignments) if way == "workers"
                       else loop.evaluate(self.local, assignments))
        if way in self._warmed:
            timings = self._per_placement[way]
            timings.append((time.perf_counter() - started) / max(len(assignments), 1))
            del timings[:-self.TIMINGS_KEPT]
        else:  # its first batch builds each worker's copy of the environment: seconds, paid once
            self._warmed.add(way)
        self._batches += 1
        return evaluations

    def seconds_per_placement(self, way: str) -> float | None:
        """The median of the last timings of `way` ("here" or "workers"); None before it was timed."""
        timings = self._per_placement[way]
        return float(np.median(timings)) if timings else None

    def _way(self) -> str:
        untimed = [way for way, timings in self._per_placement.items() if len(timings) < self.FIRST_TIMINGS]
        if untimed:
            return untimed[0]
        seconds = {way: self.seconds_per_placement(way) for way in self._per_placement}
        faster = min(seconds, key=seconds.get)
        if self._chosen is None or seconds[faster] < self.SWITCH_BELOW * seconds[self._chosen]:
            evaluation_log.info("evaluating placements %s: %.2f ms a placement in this process, %.2f ms on %d workers",
                                "in this process" if faster == "here" else "on the workers", seconds["here"] * 1e3,
                                seconds["workers"] * 1e3, len(self.on_workers.workers))
            self._chosen = faster
        if self._batches % self.RETIME_EVERY == 0:
            return "workers" if self._chosen == "here" else "here"
        return self._chosen

    def __getattr__(self, name: str):
        if "local" not in self.__dict__:  # asked before __init__ set it (copy, pickle): not the local env's
            raise AttributeError(name)
        return getattr(self.__dict__["local"], name)


class RecordedEnv:
    """A placement environment evaluated in this process, each measurement recording where it was measured
    (`MEASURED_ON`), as the workers' do; everything else is read from `env`."""

    def __init__(self, env, target_here: WorkerTarget | None = None):
        """target_here: where `env` measures (`describe_target(env)`, described now when not given)."""
        self.local = env
        self.target_here = target_here or describe_target(env)

    def evaluate_batch(self, assignments: Sequence[Sequence[int]]) -> list:
        from agents import loop

        return _with_origin(loop.evaluate(self.local, assignments), self.target_here.origin)

    def __getattr__(self, name: str):
        return getattr(self.__dict__["local"], name)
