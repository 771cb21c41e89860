"""The --placement option of the commands: a baseline's name or a placement file, checked before any work."""

from __future__ import annotations

from pathlib import Path

from placer.errors import PlacerError


def check_placement_name(name: str, model: str, backend: str) -> None:
    """Refuse a baseline that cannot be made here before building the graph or starting a worker."""
    from placer.baselines import ALIASES, baselines, check_baseline
    from placer.models import is_builtin_model

    if name in baselines() or name in ALIASES:
        check_baseline(name, builtin_model=is_builtin_model(model), simulator=backend == "simulated")
    elif not Path(name).exists():
        raise PlacerError(f"--placement {name!r} is neither a placement file nor a baseline "
                          f"({', '.join(baselines())})")


def placement_named(name: str, model: str, graph, devices, simulator=None):
    """Baseline `name`'s placement of `graph` on `devices`, or the placement file `name` read for them."""
    from placer.baselines import ALIASES, baselines, make_baseline
    from placer.models import is_builtin_model
    from placer.placement import load_placement

    if name in baselines() or name in ALIASES:
        return make_baseline(name, graph, devices, model=model if is_builtin_model(model) else None,
                             simulator=simulator)
    return load_placement(name, graph, devices)
