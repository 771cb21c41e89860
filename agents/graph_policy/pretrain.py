"""Pre-training one `GraphPlacementPolicy` on many graphs and machines, on the simulator.

It can start by imitation, as DOPPLER does: for `imitation_updates` updates, one (graph, machine) pair
each, in turn, the policy learns to place the pair's graph as the best of its voting heuristics does there
(`agents.graph_policy.priors`; the heuristics' placements are simulated once per pair to find it). Then
each update draws placements for one pair, in turn, and learns from their simulated step times. Every pair
has its own agent (reward baseline, best placement), and all of them share the policy and one Adam. Advantages
are standardized within each update, so graphs whose steps take milliseconds and graphs whose steps take
seconds weigh the same.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from agents import loop
from agents.graph_policy import training_set
from agents.graph_policy.agent import GraphAgentConfig, GraphPolicyAgent
from agents.graph_policy.policy import GraphPlacementPolicy
from agents.graph_policy.policy_file import save_policy
from placer.errors import PlacerError


@dataclass(frozen=True)
class PretrainConfig:
    models: tuple = training_set.MODELS
    """Models to train on: built-in names, module:function or file.py:function (as `placer train` takes),
    or built `OpGraph`s (their size is their own)."""
    sizes: tuple[str, ...] = training_set.SIZES
    """Every model at each of these sizes."""
    machines: tuple[str, ...] = training_set.MACHINES
    """Simulated targets to train on."""
    generated: int = training_set.GENERATED
    """Generated branchy graphs to train on besides `models`: seeds 0 .. generated - 1, at each of `sizes`
    (seeds from `training_set.HELD_OUT_SEED` on are left for evaluation)."""
    updates: int = training_set.UPDATES
    """Updates in all (each on one graph-machine pair, in turn)."""
    samples_per_update: int = training_set.SAMPLES_PER_UPDATE
    imitation_updates: int = training_set.IMITATION_UPDATES
    """Updates of imitating each pair's best heuristic before the `updates` on rewards (0: none)."""
    agent: GraphAgentConfig = field(default_factory=GraphAgentConfig)
    progress: bool = True

    def __post_init__(self):
        if not isinstance(self.generated, int) or not 0 <= self.generated <= training_set.HELD_OUT_SEED:
            raise PlacerError(f"generated must be a whole number from 0 to {training_set.HELD_OUT_SEED}, "
                              f"got {self.generated!r}")
        if not isinstance(self.imitation_updates, int) or self.imitation_updates < 0:
            raise PlacerError(f"imitation_updates must be a whole number of at least 0, got {self.imitation_updates!r}")
        if self.imitation_updates and not self.agent.partition_prior:
            raise PlacerError("imitation learns whose votes to follow: it needs the heuristics' votes "
                              "(partition_prior=True)")

    def pairs(self) -> list[tuple[str, str, str]]:
        """(model, size, machine) of every pair trained on; a generated graph's model is "branchy:SEED"."""
        models = list(self.models) + [f"branchy:{seed}" for seed in range(self.generated)]
        return [(model, size, machine) for model in models
                for size in (self.sizes if isinstance(model, str) else (None,)) for machine in self.machines]


@dataclass(frozen=True)
class PretrainResult:
    path: Path
    samples: int
    seconds: float
    best_step_times: dict[str, float]
    """Per pair ("model:size@machine"), the best simulated step time sampled."""
    imitated: dict[str, str] = field(default_factory=dict)
    """Per pair, the heuristic imitated (the best of the voting ones there), if there was imitation."""
    updates: dict[str, int] = field(default_factory=dict)
    """Per pair, the updates it got (pairs take turns: fewer updates than pairs leave some with none)."""


def pretrain(config: PretrainConfig, out: str | Path, workers=None) -> PretrainResult:
    """workers: the engine (`agents.workers.open_workers`) whose workers own the (graph, machine) problems,
    problem i on worker i modulo their number: each builds its problems' graphs and targets and places their
    heuristics' votes, in parallel, and evaluates their updates' placements. The policy's updates stay here,
    in the same order, so the policy is the same with any engine. None: all in this process."""
    from agents.worker_envs import EnvOnWorkers, Problem, call_owned, describe_owned
    from agents.workers import SerialWorkers, Task

    if config.updates < 1 or config.samples_per_update < 1:
        raise PlacerError("pre-training needs at least one update of at least one sample")
    started = time.monotonic()
    engine = workers if workers is not None else SerialWorkers()
    try:
        policy = GraphPlacementPolicy(config.agent.policy_config())
        heuristics = policy.config.prior_heuristics if policy.config.partition_prior else None
        recipes = {key: recipe for key, recipe in _recipes(config)}
        keys = list(recipes)
        described: list[Problem] = engine.run([Task(describe_owned, (recipes[key], heuristics), worker=index)
                                               for index, key in enumerate(keys)])
        envs, agents = {}, {}
        optimizer = None
        for index, (key, problem) in enumerate(zip(keys, described)):
            agent = GraphPolicyAgent(problem.graph, problem.device_mask, problem.devices, config.agent,
                                     policy=policy, optimizer=optimizer, votes=problem.votes)
            optimizer = agent.optimizer  # the first agent's Adam serves them all
            envs[key], agents[key] = EnvOnWorkers(recipes[key], engine, workers=[index]), agent
        best = {key: math.inf for key in keys}
        updates = {key: 0 for key in keys}
        samples = 0
        imitated: dict[str, str] = {}
        if config.imitation_updates:
            chosen = engine.run([Task(call_owned, (recipes[key], best_voted_heuristic, heuristics,
                                                   agents[key].prior.numpy()), worker=index)
                                 for index, key in enumerate(keys)])
            targets = {}
            for key, (name, target) in zip(keys, chosen):
                imitated[key], targets[key] = name, target
            steps = range(config.imitation_updates)
            if config.progress:
                from tqdm.auto import tqdm

                steps = tqdm(steps, unit="update", desc="imitating", dynamic_ncols=True)
            for update in steps:
                key = keys[update % len(keys)]
                agents[key].imitate(targets[key])
        steps = range(config.updates)
        if config.progress:
            from tqdm.auto import tqdm

            steps = tqdm(steps, unit="update", desc="pre-training", dynamic_ncols=True)
        for update in steps:  # round-robin over the (graph, machine) pairs
            key = keys[update % len(keys)]
            turn = loop.update(agents[key], envs[key], config.samples_per_update)
            updates[key] += 1
            samples += len(turn.evaluations)
            best[key] = min(best[key], *(evaluation.step_time for evaluation in turn.evaluations))
        kinds = {d.kind for problem in described for d in problem.devices}
        max_devices = max(len(problem.devices) for problem in described)
        trained_on = {"pairs": keys, "updates": config.updates, "samples": samples,
                      "imitation_updates": config.imitation_updates, "imitated": imitated,
                      "agent": {k: v for k, v in vars(config.agent).items()}}
        path = save_policy(policy, out, trained_on=trained_on, device_kinds=kinds, max_devices=max_devices,
                           head=config.agent.head_options())
    finally:
        if workers is None:
            engine.close()
    return PretrainResult(Path(path), samples, time.monotonic() - started, best, imitated, updates)


def _recipes(config: PretrainConfig):
    """(key "model:size@machine", EnvRecipe) of every pair, in training order."""
    from agents.worker_envs import EnvRecipe

    for model, size, machine in config.pairs():
        if isinstance(model, str) and model.startswith("branchy:"):
            key = f"branchy-{model.split(':')[1]}-{size}@{machine}"  # the generated graph's own name
        else:
            key = f"{model}:{size}@{machine}" if isinstance(model, str) else f"{model.name}@{machine}"
        yield key, EnvRecipe(model, size, machine, seed=config.agent.seed)


def best_heuristic(env, agent: GraphPolicyAgent) -> tuple[str, np.ndarray]:
    """(name, [U] placement) of the best of the agent's voting heuristics on `env`'s target: what imitation
    teaches the policy to place like there. A heuristic whose placement fails (memory) is never the best."""
    return best_voted_heuristic(env, agent.policy.config.prior_heuristics, agent.prior.numpy())


def best_voted_heuristic(env, heuristics: Sequence[str], votes: np.ndarray) -> tuple[str, np.ndarray]:
    """`best_heuristic` from the heuristics' names and their votes [K, U, D] on `env`'s graph and devices."""
    from placer.heuristics import time_heuristics

    placements = np.argmax(votes, axis=2)  # [K, U], labels aligned to the first heuristic's
    # a heuristic that could not place the graph did not vote
    voted = {name: placement for name, vote, placement in zip(heuristics, votes, placements) if vote.any()}
    seconds = {name: timing.seconds for name, timing in time_heuristics(env.target, voted, made=voted).items()}
    if not seconds or not math.isfinite(min(seconds.values())):
        raise PlacerError(f"no heuristic's placement of {env.graph.name} fits on {env.devices.name}: nothing to imitate")
    name = min(seconds, key=seconds.get)
    return name, voted[name]


def step_seconds(target, assignment) -> float:
    """A target's step time of a placement, inf if it fails: how candidate placements are compared."""
    result = target.evaluate(list(assignment))
    return result.seconds if result.ok else math.inf


@dataclass(frozen=True)
class ZeroShotPlacement:
    assignment: np.ndarray
    """[U] device per unit."""
    source: str
    """"policy" (the policy's own placement), or the voting heuristic whose own placement was faster."""
    step_times: dict[str, float] = field(default_factory=dict)
    """Seconds per candidate timed (`GraphPolicyAgent.start_candidates`; inf: it failed), empty when none was."""


def place_with_policy(policy: GraphPlacementPolicy, graph, devices, device_mask: np.ndarray,
                      head: str = "one-shot", judge: Callable[[np.ndarray], float] | None = None) -> ZeroShotPlacement:
    """The policy's placement of `graph` on `devices`, zero-shot, with the head it was trained with (a policy
    file's record says which). Its own is its greedy one-shot placement, or the moves head's start (the
    weighted vote): that head never trains the one-shot distribution, whose greedy placement then means
    nothing. judge: seconds per placement (inf if it fails), e.g. a simulator's; with one, the policy's own
    placement and each voting heuristic's are timed and the fastest is kept (ties to the policy's)."""
    # Zero-shot places the start, so how many units a sample would move does not matter (1 fits any graph).
    config = GraphAgentConfig(head=head, moves_per_sample=1)
    agent = GraphPolicyAgent(graph, device_mask, devices, config, policy=policy)
    candidates = agent.start_candidates()
    if judge is None:
        return ZeroShotPlacement(candidates["policy"], "policy")
    step_times = {name: float(judge(placement)) for name, placement in candidates.items()}
    source = min(step_times, key=lambda name: (step_times[name], name != "policy"))
    return ZeroShotPlacement(candidates[source], source, step_times)
