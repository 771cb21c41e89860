"""Seeded random branchy training graphs: stages that fan a trunk out into branches of random layers and
merge them back (Add or Concatenate), so the simulator meets graph shapes nobody chose by hand.

A seed draws a `BranchyGraphConfig` (the mix of layers, the fan-out, the optimizer), then a `BranchyPlan`
(every stage, branch and layer); the plan becomes a tf-keras model and its training step. Same seed and
size, same graph (and fingerprint) in any process. TensorFlow is imported only when a graph is built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from placer.errors import GraphBuildError

if TYPE_CHECKING:
    from placer.graph.opgraph import OpGraph

LAYER_KINDS = ("dense", "elementwise", "conv2d", "layer_norm", "batch_norm")
"""dense: Dense + ReLU, to a new width. elementwise: a gated chain, x * sigmoid(x) then tanh, plus x (no
weights). conv2d: the features seen as a 4x4 image of width/16 channels, a 3x3 Conv2D + ReLU, flattened
back. layer_norm / batch_norm: normalization of the features (batch_norm adds moving-average updates)."""
MERGE_KINDS = ("add", "concat")
"""add: the branches summed (a branch that changed its width is projected back first). concat: the branches
side by side, then a dense layer to the next stage's width."""
OPTIMIZERS = ("sgd", "momentum", "adam", "rmsprop")

# Layers of branch b of stage s are named s{s}_b{b}_...; so are the scopes of their ops.
_BRANCH_SCOPE = re.compile(r"(?:^|[/_])(s\d+_b\d+)_")
# The conv2d layer folds the features into a _CONV_SIDE x _CONV_SIDE image, so every width is a multiple
# of _CONV_SIDE ** 2.
_CONV_SIDE = 4


@dataclass(frozen=True)
class BranchyGraphConfig:
    """What a random branchy graph is drawn from; `branchy_config(seed, size)` draws one."""

    batch: int
    """Examples per training step."""
    input_features: int
    """Width of the synthetic input vector."""
    classes: int
    """Logits of the classifier head (sparse softmax cross-entropy loss)."""
    stages: int
    """Depth: how many times the trunk fans out into branches and merges back."""
    branches: tuple[int, int]
    """Fan-out: the fewest and most branches of a stage (inclusive; at least 2)."""
    layers_per_branch: tuple[int, int]
    """The fewest and most layers in one branch (inclusive)."""
    widths: tuple[int, ...]
    """Feature widths a stage or a dense layer may take, each a multiple of 16 (the conv2d layer needs it)."""
    layer_mix: tuple[float, ...]
    """Relative weight of each of LAYER_KINDS when a branch draws its next layer."""
    merge_mix: tuple[float, ...]
    """Relative weight of each of MERGE_KINDS (fan-in) when a stage draws how its branches merge."""
    residual_probability: float
    """Chance that an add-merged stage also adds its input (a skip connection around the stage)."""
    optimizer: str
    """One of OPTIMIZERS: which update ops (and optimizer slots) the step has."""

    def __post_init__(self):
        if self.branches[0] < 2 or self.branches[0] > self.branches[1]:
            raise GraphBuildError(f"branches {self.branches} must be (fewest, most) with fewest >= 2")
        if self.layers_per_branch[0] < 1 or self.layers_per_branch[0] > self.layers_per_branch[1]:
            raise GraphBuildError(f"layers_per_branch {self.layers_per_branch} must be (fewest, most) with fewest >= 1")
        if not self.widths or any(w <= 0 or w % _CONV_SIDE**2 for w in self.widths):
            raise GraphBuildError(f"widths {self.widths} must be positive multiples of {_CONV_SIDE**2}")
        if len(self.layer_mix) != len(LAYER_KINDS) or len(self.merge_mix) != len(MERGE_KINDS):
            raise GraphBuildError(f"layer_mix weighs {LAYER_KINDS} and merge_mix weighs {MERGE_KINDS}, one weight each")
        if self.optimizer not in OPTIMIZERS:
            raise GraphBuildError(f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")


@dataclass(frozen=True)
class _SizeBounds:
    """The ranges a size's configs are drawn from; sizes differ in widths, depth and fan-out."""

    batch: int
    input_features: int
    classes: int
    stages: tuple[int, int]
    most_branches: tuple[int, int]
    most_layers_per_branch: tuple[int, int]
    widths: tuple[int, ...]


# tiny: about 400-3,000 ops and a step of milliseconds on one core; small: wider, deeper, ~1 GFLOP a step.
_SIZE_BOUNDS = {
    "tiny": _SizeBounds(batch=16, input_features=64, classes=10, stages=(3, 5), most_branches=(2, 4),
                        most_layers_per_branch=(2, 4), widths=(32, 48, 64, 96, 128)),
    "small": _SizeBounds(batch=64, input_features=512, classes=100, stages=(4, 6), most_branches=(3, 5),
                         most_layers_per_branch=(2, 4), widths=(256, 384, 512, 768, 1024)),
}
BRANCHY_SIZES = tuple(_SIZE_BOUNDS)


@dataclass(frozen=True)
class LayerPlan:
    kind: str
    """One of LAYER_KINDS."""
    width: int
    """Features out of the layer (only dense changes the width)."""


@dataclass(frozen=True)
class StagePlan:
    branches: tuple[tuple[LayerPlan, ...], ...]
    merge: str
    """One of MERGE_KINDS."""
    width: int
    """Features of the trunk the branches fan out from, and of an add merge."""
    residual: bool
    """The stage's input is added to the merge (add merges only)."""


BranchyPlan = tuple[StagePlan, ...]


def branchy_config(seed: int = 0, size: str = "tiny") -> BranchyGraphConfig:
    """One config drawn from `seed` within the bounds of `size`: its depth, fan-out, layer and merge mix and
    optimizer vary with the seed, so different seeds stress the simulator differently."""
    bounds = _bounds(size)
    rng = np.random.default_rng([seed, 0])  # its own stream: plans draw from [seed, 1]
    most_branches = int(rng.integers(bounds.most_branches[0], bounds.most_branches[1] + 1))
    most_layers = int(rng.integers(bounds.most_layers_per_branch[0], bounds.most_layers_per_branch[1] + 1))
    return BranchyGraphConfig(
        batch=bounds.batch,
        input_features=bounds.input_features,
        classes=bounds.classes,
        stages=int(rng.integers(bounds.stages[0], bounds.stages[1] + 1)),
        branches=(2, most_branches),
        layers_per_branch=(1, most_layers),
        widths=bounds.widths,
        layer_mix=_rounded(rng.dirichlet(np.ones(len(LAYER_KINDS)))),
        merge_mix=_rounded(rng.dirichlet(np.ones(len(MERGE_KINDS)))),
        residual_probability=round(float(rng.uniform(0.0, 0.5)), 3),
        optimizer=OPTIMIZERS[int(rng.integers(len(OPTIMIZERS)))],
    )


def branchy_plan(config: BranchyGraphConfig, seed: int = 0) -> BranchyPlan:
    """Every stage, branch and layer of the graph, drawn from `config` with `seed` (pure; no TensorFlow)."""
    rng = np.random.default_rng([seed, 1])
    layer_p = _probabilities(config.layer_mix)
    merge_p = _probabilities(config.merge_mix)
    stages = []
    for _ in range(config.stages):
        width = int(rng.choice(config.widths))
        branches = []
        for _ in range(int(rng.integers(config.branches[0], config.branches[1] + 1))):
            layers, branch_width = [], width
            for _ in range(int(rng.integers(config.layers_per_branch[0], config.layers_per_branch[1] + 1))):
                kind = LAYER_KINDS[int(rng.choice(len(LAYER_KINDS), p=layer_p))]
                if kind == "dense":
                    branch_width = int(rng.choice(config.widths))
                layers.append(LayerPlan(kind, branch_width))
            branches.append(tuple(layers))
        merge = MERGE_KINDS[int(rng.choice(len(MERGE_KINDS), p=merge_p))]
        residual = merge == "add" and bool(rng.random() < config.residual_probability)
        stages.append(StagePlan(tuple(branches), merge, width, residual))
    return tuple(stages)


def random_branchy_graph(seed: int = 0, size: str = "tiny") -> OpGraph:
    """The training step (forward, loss, gradients, update on a synthetic batch) of the branchy classifier
    drawn from `seed` at `size` ("tiny" or "small"), named `branchy-{seed}-{size}`."""
    config = branchy_config(seed, size)
    return branchy_graph(config, branchy_plan(config, seed), name=f"branchy-{seed}-{size}")


def branchy_graph(config: BranchyGraphConfig, plan: BranchyPlan, *, name: str) -> OpGraph:
    """The training step of the classifier `plan` describes, at `config`'s batch, input and classes."""
    import tf_keras

    from placer.graph.build import SyntheticTensor, graph_from_keras

    return graph_from_keras(
        lambda: _keras_model(config, plan),
        inputs=SyntheticTensor((config.batch, config.input_features)),
        targets=SyntheticTensor((config.batch,), "int32", maxval=config.classes),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=lambda: _optimizer(config.optimizer),
        name=name,
    )


def branch_of(op_name: str) -> str | None:
    """'s{stage}_b{branch}' for the ops of a branch (forward, gradient or update), None for the stem, merges
    and head."""
    match = _BRANCH_SCOPE.search(op_name)
    return match.group(1) if match else None


# -- the tf-keras model ----------------------------------------------------------------------------------


def _keras_model(config: BranchyGraphConfig, plan: BranchyPlan):
    import tf_keras
    from tf_keras import layers

    inputs = tf_keras.Input((config.input_features,), name="features")
    trunk = layers.Dense(plan[0].width, activation="relu", name="stem")(inputs)
    for s, stage in enumerate(plan):
        outputs = []
        for b, branch in enumerate(stage.branches):
            x = trunk
            for i, layer in enumerate(branch):
                x = _layer(x, layer, f"s{s}_b{b}_{i}_{layer.kind}")
            if stage.merge == "add" and branch[-1].width != stage.width:
                x = layers.Dense(stage.width, name=f"s{s}_b{b}_project")(x)
            outputs.append(x)
        if stage.merge == "add":
            merged = layers.Add(name=f"s{s}_merge")(outputs + ([trunk] if stage.residual else []))
        else:
            merged = layers.Concatenate(name=f"s{s}_merge")(outputs)
        # The next stage's branches fan out from a trunk of its own width.
        next_width = plan[s + 1].width if s + 1 < len(plan) else stage.width
        if stage.merge == "concat" or next_width != stage.width:
            merged = layers.Dense(next_width, activation="relu", name=f"s{s}_out")(merged)
        trunk = merged
    logits = layers.Dense(config.classes, name="logits")(trunk)
    return tf_keras.Model(inputs, logits, name="branchy")


def _layer(x, layer: LayerPlan, name: str):
    from tf_keras import layers

    if layer.kind == "dense":
        return layers.Dense(layer.width, activation="relu", name=name)(x)
    if layer.kind == "elementwise":
        gate = layers.Activation("sigmoid", name=f"{name}_gate")(x)
        gated = layers.Multiply(name=f"{name}_mul")([x, gate])
        return layers.Add(name=f"{name}_add")([layers.Activation("tanh", name=f"{name}_tanh")(gated), x])
    if layer.kind == "conv2d":
        channels = layer.width // _CONV_SIDE**2
        image = layers.Reshape((_CONV_SIDE, _CONV_SIDE, channels), name=f"{name}_image")(x)
        image = layers.Conv2D(channels, 3, padding="same", activation="relu", name=name)(image)
        return layers.Flatten(name=f"{name}_flatten")(image)
    if layer.kind == "layer_norm":
        return layers.LayerNormalization(name=name)(x)
    if layer.kind == "batch_norm":
        return layers.BatchNormalization(name=name)(x)
    raise GraphBuildError(f"unknown layer kind {layer.kind!r}; kinds: {', '.join(LAYER_KINDS)}")


def _optimizer(name: str):
    from tf_keras.optimizers import legacy

    return {
        "sgd": lambda: legacy.SGD(learning_rate=0.01),
        "momentum": lambda: legacy.SGD(learning_rate=0.01, momentum=0.9),
        "adam": lambda: legacy.Adam(learning_rate=1e-3),
        "rmsprop": lambda: legacy.RMSprop(learning_rate=1e-3),
    }[name]()


# -- helpers ---------------------------------------------------------------------------------------------


def _bounds(size: str) -> _SizeBounds:
    if size not in _SIZE_BOUNDS:
        raise GraphBuildError(f"unknown size {size!r} for a branchy graph; sizes: {', '.join(BRANCHY_SIZES)}")
    return _SIZE_BOUNDS[size]


def _rounded(weights: np.ndarray) -> tuple[float, ...]:
    # Rounded so that the config prints readably; the plan normalizes the weights again.
    return tuple(round(float(w), 3) for w in weights)


def _probabilities(weights: tuple[float, ...]) -> np.ndarray:
    p = np.asarray(weights, dtype=float)
    if np.any(p < 0) or p.sum() <= 0:
        raise GraphBuildError(f"mix weights {weights} must be non-negative and not all zero")
    return p / p.sum()
