"""One training loop for every agent: propose, evaluate, learn, checkpoint, keep the best placement.

`train(agent, env, run_dir)` can be killed at any moment and called again with the same `run_dir`: it
resumes from the last completed update (agent weights, optimizer, baseline, random generators, best
placement so far) and loses at most the update in flight. The best placement is written to
`run_dir/best_placement.json` whenever it improves.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from agents.base import PlacementAgent


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
    in alternation: it becomes the best only if its median beats the best's, and the best's time is the
    fresh median either way (the first best: the median of all its timings). Measured step times are noisy
    and drift with the machine over minutes, so the fastest of a thousand single timings is mostly a lucky
    one (on the testbed a placement timed 52.4 ms once and 55.7 ms side by side), and it would block real
    improvements for the rest of the run. Each timing counts as a sample. 0: trust one evaluation (a
    deterministic simulator)."""


@dataclass
class TrainingState:
    updates: int = 0
    samples: int = 0
    elapsed: float = 0.0
    best_reward: float = -math.inf
    best_step_time: float = math.inf
    best_assignment: list[int] | None = None
    best_retimings: int = 0
    """Times the best was timed again side by side with a would-be best (its step time may then rise)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    agent_state: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None


def train(agent: PlacementAgent, env, run_dir: str | Path, config: TrainingConfig | None = None,
          on_update: Callable[[int, Mapping[str, Any]], None] | None = None,
          start_from: Sequence[int] | None = None) -> TrainingState:
    """Train `agent` on `env` (a placement environment, or a vector of them) and return the final state.

    start_from: a placement found elsewhere (e.g. on the target's simulator) that a new run starts from as
    its best: it is evaluated on `env` first (and confirmed like any would-be best), and an agent that keeps
    its best sample (`rebase_best`) learns that sample's reward on this backend. Ignored when resuming."""
    import tensorflow as tf

    config = config or TrainingConfig()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = tf.train.Checkpoint(**agent.checkpoint_objects())
    manager = tf.train.CheckpointManager(checkpoint, run_dir / "checkpoints", max_to_keep=2)
    state = _load_state(run_dir)
    if state.checkpoint:
        checkpoint.restore(state.checkpoint).expect_partial()
    if state.agent_state:
        agent.load_numpy_state(state.agent_state)

    base = _unwrap(env)
    if start_from is not None and state.updates == 0 and state.best_assignment is None:
        _start_from(env, agent, config, state, start_from, run_dir)
    progress = _progress_bar(config, state)
    started = time.monotonic() - state.elapsed
    try:
        while not _done(config, state, time.monotonic() - started):
            retimings = state.best_retimings
            assignments = agent.propose(config.samples_per_update)
            rewards, infos = _evaluate(env, assignments)
            metrics = dict(agent.learn(assignments, rewards))
            state.updates += 1
            state.samples += len(assignments)
            step_times = [info["step_time"] for info in infos]
            best = int(np.argmax(rewards))
            improved = _keep_if_best(env, config, state, assignments[best], rewards[best], step_times[best])
            if config.greedy_every and state.updates % config.greedy_every == 0:
                greedy = agent.best_guess()
                reward, info, evaluated = _evaluate_one(env, greedy)
                state.samples += evaluated
                metrics["step_time_greedy"] = float(info["step_time"])
                improved = _keep_if_best(env, config, state, greedy, reward, info["step_time"]) or improved
            finite = [t for t in step_times if math.isfinite(t)]
            metrics.update(
                reward_mean=float(np.mean(rewards)), reward_best=state.best_reward,
                step_time_sampled=float(np.median(finite)) if finite else math.inf,
                step_time_best=state.best_step_time, best_retimed=state.best_retimings > retimings,
                failure_rate=sum(not info["ok"] for info in infos) / len(infos),
                samples=state.samples, wall_time=time.monotonic() - started,
            )
            state.history.append({"update": state.updates, **metrics})
            state.elapsed = time.monotonic() - started
            state.agent_state = dict(agent.numpy_state())
            state.checkpoint = manager.save(checkpoint_number=state.updates) if agent.checkpoint_objects() else None
            if improved:
                _save_best(base, agent, state, run_dir)
            _save_state(run_dir, state)  # last: a kill before this resumes from the previous update
            if on_update is not None:
                on_update(state.updates, metrics)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(step_ms=f"{metrics['step_time_sampled'] * 1e3:.2f}",
                                     best_ms=f"{state.best_step_time * 1e3:.2f}")
    finally:
        if progress is not None:
            progress.close()
    return state


def _start_from(env, agent, config: TrainingConfig, state: TrainingState, assignment: Sequence[int],
                run_dir: Path) -> None:
    assignment = [int(a) for a in assignment]
    reward, info, evaluated = _evaluate_one(env, assignment)
    state.samples += evaluated
    _keep_if_best(env, config, state, assignment, reward, info["step_time"])
    if hasattr(agent, "rebase_best"):
        agent.rebase_best(state.best_reward)
    state.agent_state = dict(agent.numpy_state())
    _save_best(_unwrap(env), agent, state, run_dir)
    _save_state(run_dir, state)


def _evaluate(env, assignments):
    import gymnasium as gym

    if isinstance(env, gym.vector.VectorEnv):
        if env.num_envs != len(assignments):
            raise ValueError(f"the vector environment has {env.num_envs} sub-environments but "
                             f"{len(assignments)} placements are proposed per update")
        env.reset()
        _, rewards, _, _, infos = env.step(np.stack(assignments))
        return [float(r) for r in rewards], [{key: infos[key][i] for key in ("step_time", "ok")} for i in range(len(assignments))]
    rewards, infos = [], []
    for assignment in assignments:
        env.reset()
        _, reward, _, _, info = env.step(assignment)
        rewards.append(float(reward))
        infos.append(info)
    return rewards, infos


def _keep_if_best(env, config: TrainingConfig, state: TrainingState, assignment, reward: float, step_time: float) -> bool:
    """Make `assignment` the best placement if it beats the best; True if the best (or its time) changed."""
    if reward <= state.best_reward:
        return False
    if config.confirm_repeats > 0:
        if state.best_assignment is None:
            first = _Timing(step_time, math.isfinite(step_time), reward)
            repeats = _timings(env, state, [assignment], config.confirm_repeats)[0]
            median = replace(repeats, timings=(first, *repeats.timings)).median_timing
            reward, step_time = median.reward, median.seconds
        else:
            # Side by side: the machine's speed drifts over minutes, so the best's old timings are no bar.
            # Both are timed again in alternation, and the candidate must win those.
            state.best_retimings += 1
            candidate, incumbent = (c.median_timing for c in
                                    _timings(env, state, [assignment, state.best_assignment], config.confirm_repeats))
            reward, step_time, best_reward, best_step_time = (candidate.reward, candidate.seconds, incumbent.reward,
                                                              incumbent.seconds)
            if reward <= best_reward:
                state.best_reward, state.best_step_time = float(best_reward), float(best_step_time)
                return True
    state.best_reward, state.best_step_time = float(reward), float(step_time)
    state.best_assignment = [int(a) for a in assignment]
    return True


@dataclass(frozen=True)
class _Timing:
    """One evaluation during a confirmation: what `placer.cost.compare` ranks, and the reward it earned."""

    seconds: float
    ok: bool
    reward: float
    info: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


def _timings(env, state: TrainingState, assignments: list, count: int) -> list:
    """At least `count` evaluations of each placement (`placer.cost.Compared` of `_Timing`s), timed side by
    side in interleaved rounds and counted as samples."""
    from placer.cost import compare

    width = _width(env)

    def evaluate(assignment) -> list[_Timing]:
        rewards, infos = _evaluate(env, [assignment] * width)
        state.samples += len(rewards)
        return [_Timing(info["step_time"], bool(info["ok"]), reward) for reward, info in zip(rewards, infos)]

    compared = compare(evaluate, dict(enumerate(assignments)), rounds=-(-count // width))
    return [compared[index] for index in range(len(assignments))]


def _evaluate_one(env, assignment):
    """(reward, info, placements evaluated) of one placement. A vector environment steps all its
    sub-environments at once, so it gets the placement in each and the median step time is kept."""
    from placer.cost import Compared

    count = _width(env)
    rewards, infos = _evaluate(env, [assignment] * count)
    timings = tuple(_Timing(info["step_time"], bool(info["ok"]), reward, info) for reward, info in zip(rewards, infos))
    median = Compared("greedy", timings).median_timing
    return median.reward, median.info, count


def _width(env) -> int:
    """Placements one evaluation call takes: a vector environment steps all its sub-environments."""
    import gymnasium as gym

    return env.num_envs if isinstance(env, gym.vector.VectorEnv) else 1


def _unwrap(env):
    import gymnasium as gym

    if isinstance(env, gym.vector.VectorEnv):
        return None
    return env.unwrapped


def _save_best(env, agent, state: TrainingState, run_dir: Path) -> None:
    record = {"method": agent.name, "update": state.updates, "samples": state.samples,
              "step_time": state.best_step_time, "reward": state.best_reward}
    if env is None:  # a vector environment: the graph lives in the workers
        _atomic_write(run_dir / "best_assignment.json", json.dumps({**record, "assignment": state.best_assignment}))
        return
    from placer.placement import Placement

    placement = Placement.from_assignment(env.graph, env.devices, state.best_assignment, {**record, "backend": env.backend})
    placement.save(run_dir / "best_placement.json", env.graph)  # atomic: an export never reads half a file


def _done(config: TrainingConfig, state: TrainingState, elapsed: float) -> bool:
    if config.updates is not None and state.updates >= config.updates:
        return True
    return config.time_budget is not None and elapsed >= config.time_budget


def _progress_bar(config: TrainingConfig, state: TrainingState):
    if not config.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=config.updates, initial=state.updates, unit="update", dynamic_ncols=True)


def _load_state(run_dir: Path) -> TrainingState:
    path = run_dir / "trainer_state.json"
    if not path.exists():
        return TrainingState()
    return TrainingState(**json.loads(path.read_text()))


def _save_state(run_dir: Path, state: TrainingState) -> None:
    _atomic_write(run_dir / "trainer_state.json", json.dumps(asdict(state), default=float))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
