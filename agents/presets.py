"""Named settings of the hierarchical planner: "tuned", its `Args` defaults (what `placer train` runs), and
"reference", grappler's numbers (`agents.hierarchical.REFERENCE`). No other agent has presets: naming one
for another agent is refused, so a preset never silently does nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from placer.errors import PlacerError

DEFAULT_PRESET = "tuned"
PRESETS = ("tuned", "reference")
AGENTS_WITH_PRESETS = ("hierarchical",)


class PresetError(PlacerError):
    """A preset that does not exist, or one named for an agent that has none."""


def preset_config(preset: str, agent: str = "hierarchical"):
    """The agent's settings (its `Args`) under `preset`."""
    if preset not in PRESETS:
        raise PresetError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
    if agent not in AGENTS_WITH_PRESETS:
        raise PresetError(f"presets ({', '.join(PRESETS)}) are settings of the hierarchical planner; agent {agent} "
                          "has none: leave --preset out and set its options with --set KEY=VALUE")
    from agents.hierarchical import REFERENCE, Args

    return Args() if preset == "tuned" else REFERENCE


def preset_options(preset: str | None, agent: str) -> dict[str, Any]:
    """The options `preset` sets for `agent` over its defaults (none for None: the agent's own defaults)."""
    if preset is None:
        return {}
    config = preset_config(preset, agent)
    defaults = type(config)()
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(defaults, f.name)}


def with_preset(preset: str | None, agent: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` on top of the preset's: what the agent is built with."""
    return {**preset_options(preset, agent), **options}
