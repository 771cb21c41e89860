"""The one agent factory: an agent by name, with its config dataclass's options checked before any work."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from agents.base import AgentOptionError

AGENTS = ("hierarchical", "colocation", "graph", "random", "cem")
"""hierarchical (grouper + placer), colocation (placer over colocation groups), graph (the generalizing
graph-neural-network policy, agents/graph_policy/), random search, cross-entropy method."""


def agent_config_class(agent: str) -> type:
    """The dataclass holding `agent`'s hyper-parameters (the fields `--set KEY=VALUE` may name)."""
    if agent == "hierarchical":
        from agents.hierarchical import Args

        return Args
    if agent == "colocation":
        from agents.colocation import ColocationConfig

        return ColocationConfig
    if agent == "graph":
        from agents.graph_policy.agent import GraphAgentConfig

        return GraphAgentConfig
    if agent in ("random", "cem"):
        from agents.search import CrossEntropyConfig, RandomSearchConfig

        return RandomSearchConfig if agent == "random" else CrossEntropyConfig
    raise AgentOptionError(f"unknown agent {agent!r}: one of {', '.join(AGENTS)}")


def check_agent_options(agent: str, options: Mapping[str, Any], *, seed: int = 0) -> Any:
    """`agent`'s config with `options` applied; AgentOptionError naming a bad option and the known ones."""
    from agents.flags import check_value

    cls = agent_config_class(agent)
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise AgentOptionError(f"agent {agent} has no option(s) {', '.join(unknown)}; its options: "
                               f"{', '.join(sorted(known - {'seed'}))}")
    checked = {}
    for name, value in options.items():
        try:
            checked[name] = check_value(cls, name, value)
        except ValueError as error:
            raise AgentOptionError(f"agent {agent}: {error}") from None
    try:
        return cls(**{"seed": seed, **checked})
    except (TypeError, ValueError) as error:
        raise AgentOptionError(f"agent {agent}: {error}") from None


def make_agent(agent: str, graph, device_mask: np.ndarray, devices=None, *, options: Mapping[str, Any] | None = None,
               seed: int = 0, init: str | None = None):
    """Agent `agent` for `graph`: device_mask is [units, devices] (`PlacementEnv.device_mask`). init: a
    pre-trained policy file (`placer pretrain`) the graph agent starts from, with the head it was trained
    with unless `options` name one."""
    if init is not None and agent != "graph":
        raise AgentOptionError(f"a pre-trained policy ({init}) starts the graph agent, not {agent}: use --agent graph")
    if agent == "graph" and devices is None:
        raise AgentOptionError("the graph policy scores units against the devices' features: give devices=")
    policy = None
    if init is not None:
        from agents.graph_policy.policy_file import check_devices, load_policy

        policy, record = load_policy(init)
        check_devices(record, devices, source=str(init))
        options = {**record["head"], **(options or {})}
    config = check_agent_options(agent, options or {}, seed=seed)
    if agent == "hierarchical":
        from agents.hierarchical import HierarchicalPlanner

        return HierarchicalPlanner(graph, device_mask, config, devices=devices)
    if agent == "colocation":
        from agents.colocation import ColocationPlacer

        return ColocationPlacer(graph, device_mask, config)
    if agent == "graph":
        from agents.graph_policy.agent import GraphPolicyAgent

        return GraphPolicyAgent(graph, device_mask, devices, config, policy=policy)
    from agents.search import CrossEntropyMethod, RandomSearch

    return (RandomSearch if agent == "random" else CrossEntropyMethod)(device_mask, config=config)
