"""Inception-V3 and ResNet-50 training steps, from the tf-keras application definitions.

The architectures are Keras's reference ones, unchanged; sizes change the batch, the image side and the
number of classes only (75 and 32 pixels are the smallest sides the two architectures accept), so every
size has the paper model's op structure. Paper settings: Inception-V3 at batch 32, 299x299, 1000 classes,
RMSProp (Szegedy et al., 2016; as placed by Mirhoseini et al., 2017); ResNet-50 at batch 32 per device,
224x224, SGD with momentum (He et al., 2016).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from placer.devices import DeviceSet
from placer.graph.build import SyntheticTensor, graph_from_keras
from placer.graph.opgraph import OpGraph
from placer.models.expert import whole_model_on_one_device
from placer.placement import Placement


@dataclass(frozen=True)
class ImageSize:
    batch: int
    side: int
    classes: int


INCEPTION_V3_SIZES = {
    "tiny": ImageSize(batch=2, side=75, classes=10),
    "small": ImageSize(batch=8, side=149, classes=100),
    "paper": ImageSize(batch=32, side=299, classes=1000),
}
RESNET50_SIZES = {
    "tiny": ImageSize(batch=2, side=32, classes=10),
    "small": ImageSize(batch=8, side=112, classes=100),
    "paper": ImageSize(batch=32, side=224, classes=1000),
}


def inception_v3_graph(size: str = "tiny", batch: int | None = None) -> OpGraph:
    """The step at `size`; `batch` overrides the size's batch (e.g. one micro-batch of it)."""
    import tf_keras

    s = _at_batch(INCEPTION_V3_SIZES[size], batch)
    return image_classifier_graph(
        lambda: tf_keras.applications.InceptionV3(
            weights=None, input_shape=(s.side, s.side, 3), classes=s.classes, classifier_activation=None
        ),
        s,
        optimizer=lambda: tf_keras.optimizers.legacy.RMSprop(learning_rate=0.045, rho=0.9, epsilon=1.0),
        name=f"inception-v3-{size}" + _batch_suffix(INCEPTION_V3_SIZES[size], s),
    )


def resnet50_graph(size: str = "tiny", batch: int | None = None) -> OpGraph:
    """The step at `size`; `batch` overrides the size's batch (e.g. one micro-batch of it)."""
    import tf_keras

    s = _at_batch(RESNET50_SIZES[size], batch)
    return image_classifier_graph(
        lambda: tf_keras.applications.ResNet50(
            weights=None, input_shape=(s.side, s.side, 3), classes=s.classes, classifier_activation=None
        ),
        s,
        # He et al.'s rate of 0.1 is for batch 256; scaled linearly with the batch (Goyal et al., 2017): the
        # size's batch, so that a step of micro-batches of it updates as the whole batch would.
        optimizer=lambda: tf_keras.optimizers.legacy.SGD(learning_rate=0.1 * RESNET50_SIZES[size].batch / 256,
                                                         momentum=0.9),
        name=f"resnet50-{size}" + _batch_suffix(RESNET50_SIZES[size], s),
    )


def inception_v3_batch(size: str) -> int:
    return INCEPTION_V3_SIZES[size].batch


def resnet50_batch(size: str) -> int:
    return RESNET50_SIZES[size].batch


def _at_batch(size: ImageSize, batch: int | None) -> ImageSize:
    return size if batch is None else dataclasses.replace(size, batch=batch)


def _batch_suffix(size: ImageSize, built: ImageSize) -> str:
    return "" if built.batch == size.batch else f"-batch{built.batch}"


def image_classifier_graph(model_fn, s: ImageSize, *, optimizer, name: str) -> OpGraph:
    """The training step of the classifier `model_fn()` builds, on a synthetic batch of `s` (shared with the
    held-out classifiers in placer.models.heldout, so every classifier trains the same way)."""
    import tf_keras

    return graph_from_keras(
        model_fn,
        inputs=SyntheticTensor((s.batch, s.side, s.side, 3)),
        targets=SyntheticTensor((s.batch,), "int32", maxval=s.classes),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=optimizer,
        name=name,
    )


def expert_placement(graph: OpGraph, devices: DeviceSet) -> Placement:
    """The papers' expert for the CNNs: the whole model on one GPU (the first compute device)."""
    return whole_model_on_one_device(graph, devices)
