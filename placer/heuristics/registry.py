"""Every heuristic placement under one name: `make_heuristic("metis", graph, devices, simulator=...)`.

The registry lists each heuristic explicitly (no entry points), so every command, experiment and report
uses one list; the heuristics' libraries (pymetis, pyscotch, numba, highspy) load only when one is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from placer.devices import DeviceSet
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement


class HeuristicError(PlacerError):
    """A heuristic that does not exist, or cannot be made for this graph or target."""


@dataclass(frozen=True)
class HeuristicInputs:
    """What a heuristic may look at."""

    graph: OpGraph
    devices: DeviceSet
    model: str | None = None
    """The built-in model's name (the expert placement needs one); None for a user's model."""
    simulator: Any = None
    """A `placer.simulate.Simulator` of the graph on the devices (op costs for the heuristics), if any."""
    seed: int = 0


@dataclass(frozen=True)
class Heuristic:
    name: str
    description: str
    make: Callable[[HeuristicInputs], Placement]
    needs_simulator: bool = False
    """Reads the simulator's op costs: available on simulated targets."""
    needs_builtin_model: bool = False
    """Only built-in models have one (the expert placement)."""
    trivial: bool = False
    """A reference a learned placement is not meant to be judged by (random, CPU only)."""
    needs_layer_stack: bool = False
    """Only built-in models that are a stack of layers a pipeline splits have one (`ModelSpec.balanced_stages`)."""

    def applies_to(self, model: str | None) -> bool:
        """Whether it can be made for `model` (a built-in model's name; None: a user's model)."""
        from placer.models import MODELS

        builtin = model in MODELS
        if self.needs_builtin_model and not builtin:
            return False
        return not self.needs_layer_stack or (builtin and MODELS[model].balanced_stages is not None)


ALIASES = {"single": "single-device"}
"""Names earlier versions of placer used."""


def _single_device(inputs: HeuristicInputs) -> Placement:
    from placer.heuristics.trivial import single_device_placement

    return single_device_placement(inputs.graph, inputs.devices)


def _round_robin(inputs: HeuristicInputs) -> Placement:
    return Placement.round_robin(inputs.graph, inputs.devices)


def _expert(inputs: HeuristicInputs) -> Placement:
    from placer.models import model_spec

    return model_spec(inputs.model).expert(inputs.graph, inputs.devices)


def _cpu_only(inputs: HeuristicInputs) -> Placement:
    from placer.heuristics.trivial import cpu_only_placement

    return cpu_only_placement(inputs.graph, inputs.devices)


def _random(inputs: HeuristicInputs) -> Placement:
    from placer.heuristics.trivial import random_placement

    return random_placement(inputs.graph, inputs.devices, seed=inputs.seed)


def _balanced_stages(inputs: HeuristicInputs) -> Placement:
    from placer.models import model_spec
    from placer.models.expert import compute_devices

    # A stage's seconds are its ops' on the first compute device: the stages are cut for a machine of equal GPUs.
    device = compute_devices(inputs.devices)[0]
    simulator = inputs.simulator
    op_seconds = dict(zip((op.name for op in inputs.graph.step_ops), simulator.op_cost[:, device].tolist()))
    return model_spec(inputs.model).balanced_stages(inputs.graph, inputs.devices, op_seconds)


def _metis(inputs: HeuristicInputs) -> Placement:
    from placer.heuristics.partitioners import metis_placement

    return metis_placement(inputs.graph, inputs.devices, inputs.simulator, seed=inputs.seed)


def _scotch(inputs: HeuristicInputs) -> Placement:
    from placer.heuristics.partitioners import scotch_placement

    return scotch_placement(inputs.graph, inputs.devices, inputs.simulator, seed=inputs.seed)


def _m_topo(inputs: HeuristicInputs) -> Placement:
    from placer.heuristics.list_scheduling import m_topo

    return m_topo(inputs.graph, inputs.devices, inputs.simulator)


def _m_etf(inputs: HeuristicInputs) -> Placement:
    from placer.heuristics.list_scheduling import m_etf

    return m_etf(inputs.graph, inputs.devices, inputs.simulator)


def _m_sct(inputs: HeuristicInputs) -> Placement:
    from placer.heuristics.list_scheduling import m_sct

    return m_sct(inputs.graph, inputs.devices, inputs.simulator)


def _exact(inputs: HeuristicInputs) -> Placement:
    from placer.heuristics.exact import exact_placement

    return exact_placement(inputs.graph, inputs.devices, inputs.simulator)


HEURISTICS: dict[str, Heuristic] = {
    heuristic.name: heuristic
    for heuristic in (
        Heuristic("single-device", "every op on the first GPU, else the first device", _single_device),
        Heuristic("round-robin", "colocation groups dealt over the devices in topological order", _round_robin),
        Heuristic("expert", "the papers' human-expert placement (built-in models only)", _expert,
                  needs_builtin_model=True),
        Heuristic("balanced-stages", "a stage of layers per GPU as the expert's, cut where the stages' compute is "
                  "even (language models; simulator op costs)", _balanced_stages, needs_simulator=True,
                  needs_builtin_model=True, needs_layer_stack=True),
        Heuristic("cpu-only", "every op on the first CPU", _cpu_only, trivial=True),
        Heuristic("random", "every colocation group on a device drawn uniformly (seeded)", _random, trivial=True),
        Heuristic("m-etf", "Baechi's memory-constrained earliest-task-first placement (simulator op costs)", _m_etf,
                  needs_simulator=True),
        Heuristic("m-sct", "Baechi's small-communication-time placement, an LP relaxation (simulator op costs)",
                  _m_sct, needs_simulator=True),
        Heuristic("m-topo", "Baechi's memory-constrained topological placement (simulator op costs)", _m_topo,
                  needs_simulator=True),
        Heuristic("metis", "METIS k-way partition of the unit graph, balanced by op cost (pymetis)", _metis,
                  needs_simulator=True),
        Heuristic("scotch", "Scotch k-way partition of the unit graph, balanced by op cost (pyscotch)", _scotch,
                  needs_simulator=True),
        Heuristic("exact", "placement and order of the graph coarsened to a few dozen clusters, one integer "
                  "program solved by HiGHS within 10 s (simulator op costs)", _exact, needs_simulator=True),
    )
}
"""Every heuristic by name, in the order tables list them."""


def heuristics() -> dict[str, Heuristic]:
    """Every heuristic by name (a copy: the registry itself is fixed)."""
    return dict(HEURISTICS)


def canonical_name(name: str) -> str:
    """The registry's name for `name` (aliases resolved); HeuristicError naming the known ones otherwise."""
    name = ALIASES.get(name, name)
    if name not in HEURISTICS:
        raise HeuristicError(f"unknown baseline {name!r}; baselines: {', '.join(HEURISTICS)}")
    return name


def is_heuristic_name(name: str) -> bool:
    """True for a heuristic's name or alias (anything else given as a placement is a placement file)."""
    return name in HEURISTICS or name in ALIASES


def applicable_heuristics(*, builtin_model: bool, simulator: bool, include_trivial: bool = False,
                          model: str | None = None) -> list[str]:
    """Names of the heuristics that can be made for a (built-in or user) model on a (simulated or real) target;
    given the built-in `model`, only those that apply to it (balanced-stages splits only a stack of layers)."""
    return [name for name, heuristic in HEURISTICS.items()
            if (builtin_model or not heuristic.needs_builtin_model) and (simulator or not heuristic.needs_simulator)
            and (include_trivial or not heuristic.trivial)
            and (model is None or not heuristic.needs_layer_stack or heuristic.applies_to(model))]


def check_heuristic(name: str, *, builtin_model: bool, simulator: bool) -> str:
    """Refuse, before any work, a heuristic that cannot be made here; returns its canonical name."""
    name = canonical_name(name)
    heuristic = HEURISTICS[name]
    if heuristic.needs_builtin_model and not builtin_model:
        raise HeuristicError(f"the {name} baseline exists only for built-in models (`placer models`), not for your "
                             "own model: leave it out, or save your own placement to a file and use that")
    if heuristic.needs_simulator and not simulator:
        raise HeuristicError(f"the {name} baseline reads the simulator's op costs, so it needs a simulated target "
                             "(e.g. modeled:2xV100); on real execution use single-device, round-robin or expert")
    return name


def make_heuristic(name: str, graph: OpGraph, devices: DeviceSet, *, model: str | None = None,
                   simulator: Any = None, seed: int = 0) -> Placement:
    """Heuristic `name`'s placement of `graph` over `devices`. HeuristicError if it cannot be made here;
    PlacementError if the devices cannot hold it (cpu-only without a CPU, a list scheduler out of memory)."""
    from placer.models import MODELS

    name = check_heuristic(name, builtin_model=model in MODELS, simulator=simulator is not None)
    if not HEURISTICS[name].applies_to(model):
        splits = ", ".join(m for m in MODELS if HEURISTICS[name].applies_to(m))
        raise HeuristicError(f"the {name} baseline splits a stack of layers into pipeline stages, which {model!r} "
                             f"is not; it splits: {splits}")
    try:
        placement = HEURISTICS[name].make(HeuristicInputs(graph, devices, model, simulator, seed))
    except ImportError as error:  # a heuristic's library (pyscotch, highspy, numba) is missing
        raise HeuristicError(f"the {name} baseline needs a library that is not installed ({error}): "
                             "pip install -e '.[baselines]'") from None
    return placement.with_metadata(method=name)
