"""The registry of built-in models: their names, sizes, builders and expert placements (`MODELS`), read by
`placer.models` and its spec loader (`placer.models.loader`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

from placer.errors import GraphBuildError

if TYPE_CHECKING:  # importing these needs TensorFlow; listing the models must not
    from placer.devices import DeviceSet
    from placer.graph.opgraph import OpGraph
    from placer.placement import Placement

SIZES = ("tiny", "small", "paper")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    build: Callable[[str], "OpGraph"]
    expert: Callable[["OpGraph", "DeviceSet"], "Placement"]
    """The papers' human-expert placement of this model over a list of devices."""
    benchmark: bool = True
    """False for the small built-in models that exist for quick runs, not from the literature."""
    batch_of: Callable[[str], int] | None = None
    """The batch of the model at a size, for models whose builder also takes `batch` (to build one
    micro-batch of the step); None: the batch is fixed by the size."""
    balanced_stages: Callable[["OpGraph", "DeviceSet", Mapping[str, float]], "Placement"] | None = None
    """A stage per device cut where the stages' compute (op seconds by op name) is even, for a model that is a
    stack of layers a pipeline splits; None: the model is not one."""


def _lazy(module: str, function: str, *bound) -> Callable:
    """Import the model's module (and TensorFlow) only when the model is used."""

    def call(*args):
        import importlib

        return getattr(importlib.import_module(f"placer.models.{module}"), function)(*bound, *args)

    call.__name__ = function
    return call


def _whole_model_expert(graph, devices):
    from placer.models.expert import whole_model_on_one_device

    return whole_model_on_one_device(graph, devices)


def _two_tower_expert(graph, devices):
    from placer.models.expert import compute_devices, placement_by_stage
    from placer.models.two_tower import tower_of

    compute = compute_devices(devices)
    return placement_by_stage(graph, devices, tower_of, {"tower_a": compute[0], "tower_b": compute[-1]})


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec("inception-v3", "Inception-V3 image classifier (tf-keras); paper: batch 32, 299x299",
                  _lazy("image_classifiers", "inception_v3_graph"), _lazy("image_classifiers", "expert_placement"),
                  batch_of=_lazy("image_classifiers", "inception_v3_batch")),
        ModelSpec("resnet-50", "ResNet-50 image classifier (tf-keras); paper: batch 32, 224x224",
                  _lazy("image_classifiers", "resnet50_graph"), _lazy("image_classifiers", "expert_placement"),
                  batch_of=_lazy("image_classifiers", "resnet50_batch")),
        ModelSpec("rnnlm", "2-layer LSTM language model, unrolled; paper: LSTM 2048, batch 64, 20 steps",
                  _lazy("rnnlm", "rnnlm_graph"), _lazy("rnnlm", "expert_placement"), batch_of=_lazy("rnnlm", "batch_of")),
        *(
            ModelSpec(f"nmt-{layers}", f"GNMT-style {layers}-layer encoder-decoder LSTM with attention, unrolled; "
                      "paper: LSTM 1024, batch 128, 40 tokens, 32k vocabulary",
                      _lazy("nmt", "nmt_graph", layers), _lazy("nmt", "expert_placement"),
                      batch_of=_lazy("nmt", "batch_of"))
            for layers in (2, 4, 8)
        ),
        ModelSpec("transformer", "Transformer base, 6+6 layers (Keras 3 via tf.function); paper: d_model 512, "
                  "8 heads, 64x50 tokens", _lazy("transformer", "transformer_graph"), _lazy("transformer", "expert_placement"),
                  batch_of=_lazy("transformer", "batch_of")),
        *(
            ModelSpec(family, f"decoder-only language model, {shape}, Keras 3 via tf.function; paper: {paper}",
                      _lazy("language_model", "language_model_graph", family),
                      _lazy("language_model", "expert_placement"), batch_of=_lazy("language_model", "batch_of", family),
                      balanced_stages=_lazy("language_model", "balanced_stages"))
            for family, shape, paper in (
                ("gpt2", "GPT-2-shaped (LayerNorm, GELU)", "12 layers, d_model 768, 64x1024 tokens (180 GB: over one "
                 "80 GB GPU)"),
                ("llama", "Llama-shaped (RMSNorm, SwiGLU)", "16 layers, d_model 1024, 16x2048 tokens (225 GB)"),
            )
        ),
        ModelSpec("two-tower", "two independent dense towers joined by a loss: the smallest graph where placement pays",
                  _lazy("two_tower", "two_tower_graph"), _two_tower_expert, benchmark=False,
                  batch_of=_lazy("two_tower", "batch_of")),
        ModelSpec("mlp", "a small tf-keras MLP classifier for quick runs", _lazy("mlp", "mlp_graph"),
                  _whole_model_expert, benchmark=False, batch_of=_lazy("mlp", "batch_of")),
    ]
}


def model_names(benchmarks_only: bool = False) -> list[str]:
    return [name for name, spec in MODELS.items() if spec.benchmark or not benchmarks_only]


def model_spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise GraphBuildError(f"unknown model {name!r}; built-in models: {', '.join(model_names())}")
    return MODELS[name]


def require_size(name: str, size: str) -> None:
    """Raise GraphBuildError unless `size` is one of the built-in models' sizes."""
    if size not in SIZES:
        raise GraphBuildError(f"unknown size {size!r} for model {name!r}; sizes: {', '.join(SIZES)}")


def build_model(name: str, size: str = "tiny", batch: int | None = None):
    """The step of model `name` at `size`; `batch` overrides the size's batch (models with `batch_of` only)."""
    from placer.graph.keras_model import keras_names_from_zero

    spec = model_spec(name)
    require_size(name, size)
    check_batch(name, size, batch)
    # Keras 3 names layers from process-wide counters: counted from zero, the model built again (at a
    # micro-batch size) has the same op names, so a placement carries over to it by name.
    with keras_names_from_zero():
        return spec.build(size) if batch is None else spec.build(size, batch)


def check_batch(name: str, size: str, batch: int | None) -> None:
    """Refuses a batch the model cannot be built at: a model with a fixed batch, or no positive whole number."""
    if batch is not None:
        model_batch(name, size)  # refuses models with a fixed batch
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise GraphBuildError(f"batch must be a positive whole number, got {batch!r}")


def model_batch(name: str, size: str = "tiny") -> int:
    """The batch of built-in model `name` at `size`, for the models that can be built at another batch."""
    spec = model_spec(name)
    require_size(name, size)
    if spec.batch_of is None:
        takes = ", ".join(n for n, s in MODELS.items() if s.batch_of is not None)
        raise GraphBuildError(f"model {name!r} cannot be built at another batch size; these can: {takes}")
    return spec.batch_of(size)
