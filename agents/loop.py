"""THE training loop of every agent: propose -> evaluate -> reward -> learn.

`update(agent, env, count)` is one turn of it: the agent proposes `count` placements, the environment
costs each (`placer.cost` through `env.step`) and rewards it (`envs.reward`, the only place rewards are
computed), and the agent learns from the rewards. `train(agent, env, run_dir)` repeats it with
checkpoints, the best placement kept (confirmed side by side on a noisy target), callbacks after each
update, and stop rules; `placer pretrain` and the benchmarks call `update` directly. `train` can be killed
at any moment and called again with the same `run_dir`: it resumes from the last completed update and
loses at most the update in flight.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from agents.base import PlacementAgent
from agents.run_files import (
    CHECKPOINTS, TrainerState, read_trainer_state, write_best_placement, write_trainer_state,
)


@dataclass(frozen=True)
class TrainingConfig:
    updates: int | None = 100
    """Stop after this many updates (None: only the time budget stops training)."""
    time_budget: float | None = None
    """Stop after this many seconds of training (counted across resumptions)."""
    samples_per_update: int = 4
    """Placements proposed and evaluated per update (a vector environment evaluates them at once)."""
    progress: bool = True
    """Show a progress bar with the current and best step time."""
    greedy_every: int = 0
    """Every this many updates, also evaluate the agent's `best_guess()` (a policy's greedy decoding: the
    placement it has learned, without the sampling noise that keeps its samples a few groups off it) and
    keep it as the best placement when it is; it counts as a sample. 0: never."""
    confirm_repeats: int = 0
    """When a placement would become the best, time it this many more times, and the best as many times,
    in alternation: it becomes the best only if it is faster in every round (and so its median), and the
    best's time is the fresh median either way (the first best: the median of all its timings). Measured step
    times are noisy and drift with the machine over minutes, so the fastest of a thousand single timings is
    mostly a lucky one (on the testbed a placement timed 52.4 ms once and 55.7 ms side by side), and it would
    block real improvements for the rest of the run. Each timing counts as a sample. 0: trust one evaluation
    (a deterministic simulator)."""


MEASURED_ON = "measured_on"
"""The key of a measured evaluation's info that says where it was measured (`agents.worker_envs`): the node
(host name, process id, Ray node id) and the target (its spec, and the fingerprint of its kind,
`placer.cost.kind`). `train` keeps these records in the run (`TrainerState.measurements`)."""


@dataclass(frozen=True)
class Evaluation:
    """One placement costed and rewarded."""

    assignment: tuple[int, ...]
    reward: float
    """From `envs.reward` with the environment's reward settings."""
    step_time: float
    """Seconds per step; inf when it failed."""
    ok: bool
    info: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The environment's step info (failure, peak memory, moved ops, ...); a measured one, where it was
    measured (`MEASURED_ON`)."""

    @property
    def seconds(self) -> float:  # what `placer.cost.compare` ranks
        return self.step_time


@dataclass(frozen=True)
class Update:
    """One turn of the loop: what was evaluated, and what the agent reported learning from it."""

    evaluations: tuple[Evaluation, ...]
    metrics: Mapping[str, float]

    @property
    def best(self) -> Evaluation:
        return self.evaluations[int(np.argmax([e.reward for e in self.evaluations]))]


Callback = Callable[[int, Mapping[str, Any]], None]
"""Called after every update with its number and metrics (logging, dashboards)."""

StopRule = Callable[[TrainerState], bool]
"""True when training should stop after the update just completed (besides `updates` and `time_budget`)."""


def evaluate(env, assignments: Sequence[Sequence[int]]) -> list[Evaluation]:
    """Cost and reward each placement on `env` (a placement environment, a vector of them, which evaluates
    one placement per sub-environment at once, or one whose evaluate step runs on workers,
    `agents.worker_envs.EnvOnWorkers`)."""
    import gymnasium as gym

    assignments = [tuple(int(a) for a in assignment) for assignment in assignments]
    if hasattr(env, "evaluate_batch"):
        return env.evaluate_batch(assignments)
    if isinstance(env, gym.vector.VectorEnv):
        if env.num_envs != len(assignments):
            raise ValueError(f"the vector environment has {env.num_envs} sub-environments but "
                             f"{len(assignments)} placements are proposed per update")
        env.reset()
        _, rewards, _, _, infos = env.step(np.stack(assignments))
        return [Evaluation(assignment, float(rewards[i]), float(infos["step_time"][i]), bool(infos["ok"][i]),
                           {key: infos[key][i] for key in ("step_time", "ok")})
                for i, assignment in enumerate(assignments)]
    evaluations = []
    for assignment in assignments:
        env.reset()
        _, reward, _, _, info = env.step(np.asarray(assignment))
        evaluations.append(Evaluation(assignment, float(reward), float(info["step_time"]), bool(info["ok"]), info))
    return evaluations


def update(agent: PlacementAgent, env, count: int) -> Update:
    """Propose `count` placements, evaluate them on `env`, and let the agent learn from their rewards."""
    assignments = agent.propose(count)
    evaluations = evaluate(env, assignments)
    metrics = agent.learn(assignments, [e.reward for e in evaluations])
    return Update(tuple(evaluations), dict(metrics))


def train(agent: PlacementAgent, env, run_dir: str | Path, config: TrainingConfig | None = None,
          callbacks: Sequence[Callback] = (), stop_rules: Sequence[StopRule] = (),
          start_from: Sequence[int] | None = None) -> TrainerState:
    """Train `agent` on `env` (a placement environment, or a vector of them) and return the final state.

    callbacks: called after each update with its metrics, once its state is saved.
    stop_rules: checked after each update, besides the config's updates and time budget.
    start_from: a placement found elsewhere (the simulator phase's best, in a simulator-first run) that a
    new run starts from as its best: it is evaluated on `env` first (and confirmed like any would-be best),
    and the agent learns its reward on this backend (`rebase_best`). Ignored when resuming."""
    import tensorflow as tf

    config = config or TrainingConfig()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    saver = _Saver(agent, env, run_dir, tf)
    state = read_trainer_state(run_dir)
    if state.checkpoint:
        saver.checkpoint.restore(state.checkpoint).expect_partial()
    if state.agent_state:
        agent.load_numpy_state(state.agent_state)
    if start_from is not None and state.updates == 0 and state.best_assignment is None:
        state = _start_from(env, agent, config, state, start_from)
        saver.save(state, improved=True)
    progress = _progress_bar(config, state)
    started = time.monotonic() - state.elapsed
    try:
        while not _done(config, state, time.monotonic() - started, stop_rules):
            retimings = state.best_retimings
            turn = update(agent, env, config.samples_per_update)
            metrics = dict(turn.metrics)
            made = list(turn.evaluations)  # every evaluation of this update, confirmations included
            state = replace(state, updates=state.updates + 1, samples=state.samples + len(turn.evaluations))
            state, improved = _keep_if_best(env, config, state, turn.best, made)
            if config.greedy_every and state.updates % config.greedy_every == 0:
                greedy, evaluated = _evaluate_one(env, agent.best_guess(), made)
                state = replace(state, samples=state.samples + evaluated)
                metrics["step_time_greedy"] = greedy.step_time
                state, greedy_improved = _keep_if_best(env, config, state, greedy, made)
                improved = improved or greedy_improved
            finite = [e.step_time for e in turn.evaluations if math.isfinite(e.step_time)]
            metrics.update(
                reward_mean=float(np.mean([e.reward for e in turn.evaluations])), reward_best=state.best_reward,
                step_time_sampled=float(np.median(finite)) if finite else math.inf,
                step_time_best=state.best_step_time, best_retimed=state.best_retimings > retimings,
                failure_rate=sum(not e.ok for e in turn.evaluations) / len(turn.evaluations),
                samples=state.samples, wall_time=time.monotonic() - started,
            )
            state = replace(state, history=(*state.history, {"update": state.updates, **metrics}),
                            measurements=(*state.measurements, *_measured_on(state.updates, made)),
                            elapsed=time.monotonic() - started)
            state = saver.save(state, improved)
            for callback in callbacks:
                callback(state.updates, metrics)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(step_ms=f"{metrics['step_time_sampled'] * 1e3:.2f}",
                                     best_ms=f"{state.best_step_time * 1e3:.2f}")
    finally:
        if progress is not None:
            progress.close()
    return state


class _Saver:
    """Checkpoints the agent and writes the trainer state and the best placement after each update."""

    def __init__(self, agent: PlacementAgent, env, run_dir: Path, tf):
        self.agent, self.env, self.run_dir = agent, env, run_dir
        self.checkpoint = tf.train.Checkpoint(**agent.checkpoint_objects())
        self.manager = tf.train.CheckpointManager(self.checkpoint, run_dir / CHECKPOINTS, max_to_keep=2)
        self.graph, self.devices, self.backend = _placement_context(env)

    def save(self, state: TrainerState, improved: bool) -> TrainerState:
        state = replace(state, agent_state=dict(self.agent.numpy_state()),
                        checkpoint=(self.manager.save(checkpoint_number=state.updates)
                                    if self.agent.checkpoint_objects() else None))
        if improved and state.best_assignment is not None:
            import gymnasium as gym

            from placer.placement import Placement

            record = {"method": self.agent.name, "update": state.updates, "samples": state.samples,
                      "step_time": state.best_step_time, "reward": state.best_reward, "backend": self.backend}
            base = self.env if isinstance(self.env, gym.vector.VectorEnv) else self.env.unwrapped
            if hasattr(base, "placement_of"):  # an action that is more than a device per unit (replicas)
                placement = base.placement_of(state.best_assignment, record)
            else:
                placement = Placement.from_assignment(self.graph, self.devices, list(state.best_assignment), record)
            write_best_placement(self.run_dir, placement, self.graph)
        write_trainer_state(self.run_dir, state)  # last: a kill before this resumes from the previous update
        return state


def _placement_context(env):
    """(graph, devices, backend) of the placements `env` costs; a vector environment's first sub-environment's."""
    import gymnasium as gym

    if isinstance(env, gym.vector.VectorEnv):
        return tuple(env.get_attr(name)[0] for name in ("graph", "devices", "backend"))
    base = env.unwrapped
    return base.graph, base.devices, base.backend


def _start_from(env, agent, config: TrainingConfig, state: TrainerState, assignment: Sequence[int]) -> TrainerState:
    made: list[Evaluation] = []
    evaluation, evaluated = _evaluate_one(env, assignment, made)
    state, _ = _keep_if_best(env, config, replace(state, samples=state.samples + evaluated), evaluation, made)
    state = replace(state, measurements=(*state.measurements, *_measured_on(0, made)))
    if hasattr(agent, "rebase_best"):
        agent.rebase_best(state.best_reward)
    return state


def _measured_on(update: int, evaluations: Sequence[Evaluation]) -> list[dict[str, Any]]:
    """Where each measured evaluation of `update` was measured (`MEASURED_ON`), in order."""
    return [{"update": update, "step_time": e.step_time if e.ok else None, **e.info[MEASURED_ON]}
            for e in evaluations if MEASURED_ON in e.info]


def _keep_if_best(env, config: TrainingConfig, state: TrainerState, candidate: Evaluation,
                  made: list[Evaluation]) -> tuple[TrainerState, bool]:
    """`candidate` made the best placement if it beats the best; True if the best (or its time) changed. The
    confirmations' evaluations are added to `made`."""
    if candidate.reward <= state.best_reward:
        return state, False
    if config.confirm_repeats > 0:
        if state.best_assignment is None:
            state, (repeats,) = _timings(env, state, [candidate.assignment], config.confirm_repeats, made)
            candidate = replace(repeats, timings=(candidate, *repeats.timings)).median_timing
        else:
            # Side by side: the machine's speed drifts over minutes, so the best's old timings are no bar.
            # Both are timed again in alternation, and the candidate must win those.
            state = replace(state, best_retimings=state.best_retimings + 1)
            # It must win every round, not only the medians: for two placements as fast as each other the
            # medians pick one by a coin toss, and a run would end with a placement no faster than its start
            # that then loses to the start's own timings as often as not.
            state, compared = _timings(env, state, [candidate.assignment, state.best_assignment],
                                       config.confirm_repeats, made)
            won_every_round = all(mine.reward > theirs.reward
                                  for mine, theirs in zip(compared[0].timings, compared[1].timings))
            candidate, incumbent = (c.median_timing for c in compared)
            if not won_every_round or candidate.reward <= incumbent.reward:
                return replace(state, best_reward=incumbent.reward, best_step_time=incumbent.step_time), True
    return replace(state, best_reward=candidate.reward, best_step_time=candidate.step_time,
                   best_assignment=candidate.assignment), True


def _timings(env, state: TrainerState, assignments: list, count: int, made: list[Evaluation]):
    """(state, at least `count` evaluations of each placement as `placer.cost.Compared`), timed side by
    side in interleaved rounds, counted as samples and added to `made`."""
    from placer.cost import compare

    width = _width(env)
    evaluated = 0

    def evaluate_all(assignment) -> list[Evaluation]:
        nonlocal evaluated
        evaluated += width
        evaluations = evaluate(env, [assignment] * width)
        made.extend(evaluations)
        return evaluations

    compared = compare(evaluate_all, dict(enumerate(assignments)), rounds=-(-count // width))
    return replace(state, samples=state.samples + evaluated), [compared[index] for index in range(len(assignments))]


def _evaluate_one(env, assignment, made: list[Evaluation]) -> tuple[Evaluation, int]:
    """(the evaluation, placements evaluated) of one placement, its evaluations added to `made`. A vector
    environment steps all its sub-environments at once, so it gets the placement in each and the median is
    kept."""
    from placer.cost import Compared

    count = _width(env)
    evaluations = evaluate(env, [assignment] * count)
    made.extend(evaluations)
    return Compared("one", tuple(evaluations)).median_timing, count


def _width(env) -> int:
    """Placements one evaluation call takes: a vector environment steps all its sub-environments."""
    import gymnasium as gym

    return env.num_envs if isinstance(env, gym.vector.VectorEnv) else 1


def _done(config: TrainingConfig, state: TrainerState, elapsed: float, stop_rules: Sequence[StopRule]) -> bool:
    if config.updates is not None and state.updates >= config.updates:
        return True
    if config.time_budget is not None and elapsed >= config.time_budget:
        return True
    return any(rule(state) for rule in stop_rules)


def _progress_bar(config: TrainingConfig, state: TrainerState):
    if not config.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=config.updates, initial=state.updates, unit="update", dynamic_ncols=True)

