"""The baseline placements every comparison uses, under one set of names.

`make_baseline("expert", graph, devices, model="nmt-2")` returns a `Placement`. The core ones live here
(single-device, cpu-only, round-robin, random, expert); heuristics from the layers above (METIS, Scotch,
Baechi's m-TOPO, m-ETF and m-SCT in agents/) join the same registry through the `placer.baselines`
entry points, so that `placer/` never imports them and every command, experiment and report uses one list.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from placer.devices import DeviceSet
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement


class BaselineError(PlacerError):
    """A baseline that does not exist, or cannot be made for this graph or target."""


@dataclass(frozen=True)
class BaselineInputs:
    """What a baseline may look at."""

    graph: OpGraph
    devices: DeviceSet
    model: str | None = None
    """The built-in model's name (the expert placement needs one); None for a user's model."""
    simulator: Any = None
    """A `placer.simulate.Simulator` of the graph on the devices (op costs for the heuristics), if any."""
    seed: int = 0


@dataclass(frozen=True)
class Baseline:
    name: str
    description: str
    make: Callable[[BaselineInputs], Placement]
    needs_simulator: bool = False
    """Reads the simulator's op costs: available on simulated targets."""
    needs_builtin_model: bool = False
    """Only built-in models have one (the expert placement)."""
    trivial: bool = False
    """A reference a learned placement is not meant to be judged by (random, CPU only)."""


ALIASES = {"single": "single-device"}
"""Names earlier versions of placer used."""


def _expert(inputs: BaselineInputs) -> Placement:
    from placer.models import expert_placement

    return expert_placement(inputs.model, inputs.graph, inputs.devices)


def _single_device(inputs: BaselineInputs) -> Placement:
    from placer.models.expert import single_device_placement

    return single_device_placement(inputs.graph, inputs.devices)


def _cpu_only(inputs: BaselineInputs) -> Placement:
    from placer.models.expert import cpu_only_placement

    return cpu_only_placement(inputs.graph, inputs.devices)


def _random(inputs: BaselineInputs) -> Placement:
    import numpy as np

    rng = np.random.default_rng(inputs.seed)
    assignment = rng.integers(0, len(inputs.devices), len(inputs.graph.groups))
    return Placement.from_assignment(inputs.graph, inputs.devices, assignment, {"method": "random"})


CORE_BASELINES = (
    Baseline("single-device", "every op on the first GPU, else the first device", _single_device),
    Baseline("round-robin", "colocation groups dealt over the devices in topological order",
             lambda inputs: Placement.round_robin(inputs.graph, inputs.devices)),
    Baseline("expert", "the papers' human-expert placement (built-in models only)", _expert, needs_builtin_model=True),
    Baseline("cpu-only", "every op on the first CPU", _cpu_only, trivial=True),
    Baseline("random", "every colocation group on a device drawn uniformly (seeded)", _random, trivial=True),
)


@lru_cache(maxsize=None)
def baselines() -> dict[str, Baseline]:
    """Every known baseline by name: the core ones, then those the installed layers register."""
    from importlib.metadata import entry_points

    registry = {baseline.name: baseline for baseline in CORE_BASELINES}
    for entry in sorted(entry_points(group="placer.baselines"), key=lambda e: e.name):
        baseline = entry.load()
        if not isinstance(baseline, Baseline) or baseline.name != entry.name:
            raise BaselineError(f"entry point placer.baselines:{entry.name} ({entry.value}) is not a Baseline named "
                                f"{entry.name!r}: reinstall placer (pip install -e .)")
        registry[baseline.name] = baseline
    return registry


def canonical_name(name: str) -> str:
    """The registry's name for `name` (aliases resolved); BaselineError naming the known ones otherwise."""
    name = ALIASES.get(name, name)
    if name not in baselines():
        raise BaselineError(f"unknown baseline {name!r}; baselines: {', '.join(baselines())}")
    return name


def applicable_baselines(*, builtin_model: bool, simulator: bool, include_trivial: bool = False) -> list[str]:
    """Names of the baselines that can be made for a (built-in or user) model on a (simulated or real) target."""
    return [name for name, baseline in baselines().items()
            if (builtin_model or not baseline.needs_builtin_model) and (simulator or not baseline.needs_simulator)
            and (include_trivial or not baseline.trivial)]


def check_baseline(name: str, *, builtin_model: bool, simulator: bool) -> str:
    """Refuse, before any work, a baseline that cannot be made here; returns its canonical name."""
    name = canonical_name(name)
    baseline = baselines()[name]
    if baseline.needs_builtin_model and not builtin_model:
        raise BaselineError(f"the {name} baseline exists only for built-in models (`placer models`), not for your "
                            "own model: leave it out, or save your own placement to a file and use that")
    if baseline.needs_simulator and not simulator:
        raise BaselineError(f"the {name} baseline reads the simulator's op costs, so it needs a simulated target "
                            "(e.g. modeled:2xV100); on real execution use single-device, round-robin or expert")
    return name


def make_baseline(name: str, graph: OpGraph, devices: DeviceSet, *, model: str | None = None, simulator: Any = None,
                  seed: int = 0) -> Placement:
    """Baseline `name`'s placement of `graph` over `devices`. BaselineError if it cannot be made here;
    PlacementError if the devices cannot hold it (e.g. cpu-only without a CPU)."""
    from placer.models import MODELS

    name = check_baseline(name, builtin_model=model in MODELS, simulator=simulator is not None)
    try:
        placement = baselines()[name].make(BaselineInputs(graph, devices, model, simulator, seed))
    except ImportError as error:  # a heuristic's library (pymetis, pyscotch, highspy) is missing
        raise BaselineError(f"the {name} baseline needs a library that is not installed ({error}): "
                            "pip install -e '.[baselines]'") from None
    return placement.with_metadata(method=name)
