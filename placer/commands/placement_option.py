"""The --placement option of the commands: a heuristic's name or a placement file, checked before any work."""

from __future__ import annotations

from pathlib import Path

from placer.errors import PlacerError


def check_placement_name(name: str, model: str, backend: str) -> None:
    """Refuse a heuristic that cannot be made here, or a placement file that cannot be read, before building the
    graph or starting a worker."""
    from placer.heuristics import check_heuristic, heuristics, is_heuristic_name
    from placer.models import is_builtin_model
    from placer.placement import read_placement_file

    if is_heuristic_name(name):
        check_heuristic(name, builtin_model=is_builtin_model(model), simulator=backend == "simulated")
    elif not Path(name).exists():
        raise PlacerError(f"--placement {name!r} is neither a placement file nor a baseline "
                          f"({', '.join(heuristics())})")
    else:
        read_placement_file(name)


def placement_named(name: str, model: str, graph, devices, simulator=None):
    """Heuristic `name`'s placement of `graph` on `devices`, or the placement file `name` read for them."""
    from placer.heuristics import is_heuristic_name, make_heuristic
    from placer.models import is_builtin_model
    from placer.placement import load_placement

    if is_heuristic_name(name):
        return make_heuristic(name, graph, devices, model=model if is_builtin_model(model) else None,
                              simulator=simulator)
    return load_placement(name, graph, devices)
