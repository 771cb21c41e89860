"""Named sets of agent hyper-parameters: "tuned" (the default of `placer train`) and "reference".

An agent's config dataclass keeps the reference planner's numbers as its defaults (TensorFlow grappler's
`hierarchical_controller.py`), so "reference" adds nothing to them; "tuned" is the best-known setting of
RESULTS.md. Options given with `--set KEY=VALUE` override the preset's.
"""

from __future__ import annotations

from typing import Any, Mapping

from placer.errors import PlacerError

DEFAULT_PRESET = "tuned"

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # The setting that beat METIS/Scotch on the simulator's NMT setups (RESULTS.md, "Learned placements with
    # self-imitation, on the simulator"): the grouper starts from a METIS bisection of the graph and the
    # placer from spreading its pieces over the compute devices, a slow learner with standardized advantages
    # and a small entropy bonus, sharper sampling, and self-imitation of the best placement found. With the
    # reference setting the grouper collapses to one group and loses to the partitioners on every NMT setup.
    "tuned": {
        "hierarchical": {
            "learning_rate": 0.0003,
            "normalize_advantages": True,
            "entropy_weight": 0.001,
            "grouping_prior": "partition",
            "grouper_learning_rate": 0.001,
            "placement_prior_weight": 2.5,
            "tanh_constant": 2.5,
            "temperature": 0.5,
            "imitation_weight": 1.0,
        },
    },
    # The reference planner's hyper-parameters, which are the agents' own defaults: Adam at 0.1 decayed 0.95
    # every 50 updates after update 400, logit noise 0.5 for 750 updates, tanh constant 1, gradient norm
    # bound 1, baseline decay 0.9, no entropy term, min(256, 20 x devices) groups, hidden size 512.
    "reference": {},
}
"""preset -> agent -> options. An agent a preset does not name runs on its config's defaults."""

PRESET_BEFORE_PRESETS = "reference"
"""What a run directory written before presets existed ran with: the agents' defaults."""


class PresetError(PlacerError):
    """A preset name that does not exist."""


def preset_options(preset: str, agent: str) -> dict[str, Any]:
    """The agent options `preset` sets for `agent` (empty when it leaves that agent on its defaults)."""
    if preset not in PRESETS:
        raise PresetError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
    return dict(PRESETS[preset].get(agent, {}))


def with_preset(preset: str, agent: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` on top of the preset's: what the agent is built with."""
    return {**preset_options(preset, agent), **options}
