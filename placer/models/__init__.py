"""Built-in models, by name: `build_model("two-tower", size="tiny")` returns an `OpGraph`.

The benchmark models of the device-placement literature are added here as they land (see the issues).
"""

from __future__ import annotations

from typing import Callable

from placer.errors import GraphBuildError

SIZES = ("tiny", "small", "paper")


def _two_tower(size: str):
    from placer.models.two_tower import two_tower_graph

    return two_tower_graph(size)


def _mlp(size: str):
    from placer.models.mlp import mlp_graph

    return mlp_graph(size)


MODELS: dict[str, Callable] = {"two-tower": _two_tower, "mlp": _mlp}


def model_names() -> list[str]:
    return sorted(MODELS)


def build_model(name: str, size: str = "tiny"):
    if name not in MODELS:
        raise GraphBuildError(f"unknown model {name!r}; built-in models: {', '.join(model_names())}")
    if size not in SIZES:
        raise GraphBuildError(f"unknown size {size!r} for model {name!r}; sizes: {', '.join(SIZES)}")
    return MODELS[name](size)
