"""Gymnasium environments over placer's measured and simulated step time, registered on import.

    import gymnasium as gym, envs
    env = gym.make("placer/Placement-v0", model="nmt-2", size="tiny")        # simulated, 2 modeled V100s
    env = gym.make("placer/MeasuredPlacement-v0", model="nmt-2", devices="local:2")  # real execution

`placer/<model>-v0` (e.g. `placer/nmt-2-v0`) is the simulated one-shot environment of a benchmark model;
`placer/SequentialPlacement-v0` places one unit per step; `placer/ReplicatedPlacement-v0` adds data
parallelism to the action (how many replicas, each on its share of the GPUs and of the batch). Measured environments are registered
nondeterministic: their reward is a wall-clock measurement.
"""

from gymnasium.envs.registration import register, registry

from envs.observation import FIELDS

__all__ = ["FIELDS"]


def _register(env_id: str, entry_point: str, nondeterministic: bool = False, **kwargs) -> None:
    if env_id not in registry:  # importing twice (e.g. in spawned workers) must not warn
        register(id=env_id, entry_point=entry_point, nondeterministic=nondeterministic, kwargs=kwargs)


_register("placer/Placement-v0", "envs.placement:PlacementEnv", backend="simulated")
_register("placer/MeasuredPlacement-v0", "envs.placement:PlacementEnv", nondeterministic=True, backend="measured")
_register("placer/ReplicatedPlacement-v0", "envs.replicated:ReplicatedPlacementEnv", backend="simulated",
          devices="modeled:4xH100", model="gpt2")
_register("placer/SequentialPlacement-v0", "envs.sequential:SequentialPlacementEnv", backend="simulated")
_register("placer/MeasuredSequentialPlacement-v0", "envs.sequential:SequentialPlacementEnv", nondeterministic=True,
          backend="measured", shaping=False)
for _model in ("inception-v3", "resnet-50", "rnnlm", "nmt-2", "nmt-4", "nmt-8", "transformer", "two-tower", "mlp"):
    _register(f"placer/{_model}-v0", "envs.placement:PlacementEnv", model=_model, backend="simulated")
