"""A data-parallel plan on your own Keras 3 model: `tf.distribute.MirroredStrategy` over the plan's replicas, for
`model.fit`.

A plan with replicas (`placer optimize` recommends data parallelism) runs `replicas.degree` copies of the step, each
on its slice of the batch, their gradients combined. In Keras that is what `MirroredStrategy` does: build and compile
the model under `strategy.scope()` and fit it at the plan's whole batch, which the strategy slices. It runs one
device a replica, so a hybrid plan (a replica over several devices) is refused here: `placer apply` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from placer.keras.layers import KerasPlacementError
from placer.plan import Plan


@dataclass(frozen=True)
class MirroredPlan:
    """What a data-parallel plan needs from `model.fit`: the strategy to build and compile the model under, and the
    batch to fit at."""

    strategy: Any
    """A `tf.distribute.MirroredStrategy` over `devices`."""
    devices: tuple[str, ...]
    """This process's device of each replica."""
    batch_size: int
    """`model.fit`'s batch_size: the plan's whole batch, every replica's slice of it together."""

    def describe(self) -> str:
        return (f"{len(self.devices)} replicas on {', '.join(self.devices)}, {self.batch_size // len(self.devices)} "
                f"samples each: build and compile the model under `strategy.scope()`, then "
                f"model.fit(..., batch_size={self.batch_size})")


def mirrored_strategy(plan: str | Path | Plan, devices: Sequence[str] | None = None) -> MirroredPlan:
    """The `MirroredStrategy` of a data-parallel `plan` (a plan file or a `Plan`), one replica on each of
    `devices` of this process (default: CPU:0, CPU:1, ... or GPU:0, ... as the plan's replica runs on a CPU or a
    GPU). Checked before anything is made: the plan has replicas, each on one device, and `devices` exist here."""
    import tensorflow as tf

    from placer.plan import read_plan_file

    plan = plan if isinstance(plan, Plan) else read_plan_file(plan)
    if plan.replicas is None:
        raise KerasPlacementError(f"{plan.source} runs one copy of the step, no replicas: place it on the model with "
                                  "placer.keras.place")
    used = sorted(set(plan.placement.op_devices.values()))
    if len(used) != 1:
        raise KerasPlacementError(f"{plan.source}'s replica runs on {len(used)} devices; MirroredStrategy runs a replica "
                                  "on one device: run this hybrid plan with `placer apply`")
    degree = plan.replicas.degree
    kind = "GPU" if "GPU" in used[0].upper().rsplit("/", 1)[-1] else "CPU"
    chosen = tuple(devices) if devices is not None else tuple(f"/device:{kind}:{r}" for r in range(degree))
    if len(chosen) != degree:
        raise KerasPlacementError(f"{plan.source} runs {degree} replicas: give {degree} devices, not {len(chosen)}")
    here = {d.name.split("device:")[-1] for d in tf.config.list_logical_devices()}  # "CPU:0", "GPU:1"
    missing = [d for d in chosen if d.split("device:")[-1] not in here]
    if missing:
        raise KerasPlacementError(f"{', '.join(missing)} not in this process (it has "
                                  f"{', '.join(sorted(here))}): split the CPU with "
                                  f"placer.keras.make_logical_cpus({degree}) before TensorFlow starts, or give devices=")
    # CPUs have no NCCL: their gradients are summed on one device and sent back
    cross = tf.distribute.ReductionToOneDevice() if kind == "CPU" else None
    strategy = tf.distribute.MirroredStrategy(devices=list(chosen), cross_device_ops=cross)
    return MirroredPlan(strategy, chosen, plan.replicas.degree * plan.replicas.batch)
