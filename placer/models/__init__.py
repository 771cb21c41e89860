"""Built-in models, by name: `build_model("nmt-2", size="tiny")` returns the training step's `OpGraph`.

The benchmark models of the device-placement literature (Inception-V3, ResNet-50, RNNLM, NMT with 2, 4
and 8 layers, Transformer) come in three sizes: `tiny` (a training step in about a second on 2 CPU
cores, for tests), `small`, and `paper` (the papers' hyper-parameters). Sizes change widths, batch and
sequence lengths, never the kind of structure. Every model has an expert placement (`ModelSpec.expert`; by
name: `placer.heuristics.make_heuristic("expert", graph, devices, model=name)`).
`load_model(spec, size)` loads any model spec: a built-in name, `module:function` or `file.py:function`.
"""

from placer.models.apart import build_model_apart
from placer.models.loader import (
    absolute_model_spec, check_model_spec, is_builtin_model, load_model, rebuildable_batch, require_rebuildable_batch,
)
from placer.models.registry import (
    MODELS, SIZES, ModelSpec, build_model, model_batch, model_names, model_spec, require_size,
)

__all__ = [
    "MODELS", "SIZES", "ModelSpec", "absolute_model_spec", "build_model", "build_model_apart", "check_model_spec",
    "is_builtin_model",
    "load_model", "model_batch", "model_names", "model_spec", "rebuildable_batch", "require_rebuildable_batch",
    "require_size",
]
