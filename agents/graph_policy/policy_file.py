"""A pre-trained policy on disk: its weights, its configuration, and what it was trained on.

One `.npz` file: the weights in `GraphPlacementPolicy.weights()` order and a JSON record. Loading checks the
format and the feature version; `check_devices` refuses a device set the policy cannot address.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from agents.graph_policy.features import FEATURES_VERSION
from agents.graph_policy.policy import (GRAPH_PRIOR_VARIABLES_PREFIX, MOVE_VARIABLES_PREFIX, GraphPlacementPolicy,
                                        GraphPolicyConfig)
from placer.devices import DeviceSet
from placer.errors import PlacerError
from placer.files import write_atomically

FILE_FORMAT = "placer.graph-policy"
FILE_VERSION = 4
"""2: the policy has a partition prior (GraphPolicyConfig.partition_prior) and its two weights.
3: the policy has a move scorer (its three weights) and the record says which head it was trained with.
4: several heuristics vote (GraphPolicyConfig.prior_heuristics), weighed per unit and per graph."""
READABLE_VERSIONS = (2, 3, 4)
ONE_SHOT_HEAD = {"head": "one-shot"}
"""The head of a policy whose file does not say (version 2: the only head there was)."""


class PolicyFileError(PlacerError):
    """A policy file that cannot be read, or a device set the policy was not trained to address."""


def save_policy(policy: GraphPlacementPolicy, path: str | Path, *, trained_on: Mapping[str, Any],
                device_kinds: set[str] | tuple[str, ...], max_devices: int,
                head: Mapping[str, Any] = ONE_SHOT_HEAD) -> Path:
    """Write `policy` to `path` (.npz). trained_on: what a reader needs to trust it (models, machines,
    samples, ...); device_kinds and max_devices: the device sets it learned to place on; head: the graph
    agent's options that make the head it was trained with (`GraphAgentConfig.head_options`), which
    fine-tuning it uses unless told otherwise."""
    path = Path(path)
    record = {"format": FILE_FORMAT, "version": FILE_VERSION, "features_version": FEATURES_VERSION,
              "config": dataclasses.asdict(policy.config), "trained_on": dict(trained_on),
              "device_kinds": sorted(device_kinds), "max_devices": int(max_devices), "head": dict(head)}
    arrays = {f"weight_{i}": w for i, w in enumerate(policy.weights())}
    buffer = io.BytesIO()
    np.savez(buffer, record=np.array(json.dumps(record)), **arrays)
    return write_atomically(path, buffer.getvalue())


def load_policy(path: str | Path) -> tuple[GraphPlacementPolicy, dict[str, Any]]:
    """The policy saved in `path` and its record; PolicyFileError saying what is wrong with a bad file."""
    import zipfile

    path = Path(path)
    how_to_make = f"write one with `placer pretrain ... --out {path}`"
    if not path.exists():
        raise PolicyFileError(f"no policy file {path}: {how_to_make}")
    if path.is_dir():
        raise PolicyFileError(f"{path} is a directory, not a policy file: {how_to_make}")
    try:
        # A policy file is a NumPy .npz archive (a zip): anything else is refused here, before NumPy would
        # suggest loading it as a pickle.
        if not zipfile.is_zipfile(path):
            raise PolicyFileError(f"{path} is not a placer policy file (not the .npz archive `placer pretrain` "
                                  f"writes): check the path, or {how_to_make}")
        with np.load(path, allow_pickle=False) as data:
            record = json.loads(str(data["record"]))
            weights = [data[f"weight_{i}"] for i in range(sum(1 for key in data.files if key.startswith("weight_")))]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as error:
        reason = getattr(error, "strerror", None) or f"{type(error).__name__}: {error}"
        raise PolicyFileError(f"{path} is not a readable placer policy file ({reason}): {how_to_make}") from None
    if not isinstance(record, dict) or record.get("format") != FILE_FORMAT:
        raise PolicyFileError(f"{path} is not a placer policy file (no \"format\": \"{FILE_FORMAT}\")")
    if record.get("version") not in READABLE_VERSIONS or record.get("features_version") != FEATURES_VERSION:
        raise PolicyFileError(f"{path} was written by another placer version (file version {record.get('version')}, "
                              f"features version {record.get('features_version')}; this one reads "
                              f"{' or '.join(map(str, READABLE_VERSIONS))} and {FEATURES_VERSION}): pre-train it again")
    record.setdefault("head", dict(ONE_SHOT_HEAD))
    missing: tuple[str, ...] = ()
    try:
        if record["version"] < 4:  # METIS alone voted, with no graph-level weight: the new one starts at zero
            record["config"] = {**record["config"], "prior_heuristics": ["metis"], "prior_weight_bound": None}
            missing += (GRAPH_PRIOR_VARIABLES_PREFIX,)
        if record["version"] == 2:  # an untrained move scorer: the "moves" head can fine-tune it from there
            missing += (MOVE_VARIABLES_PREFIX,)
        policy = GraphPlacementPolicy(GraphPolicyConfig(**record["config"]))
        policy.set_weights(weights, missing_prefixes=missing)
    except (TypeError, ValueError) as error:
        raise PolicyFileError(f"{path} is damaged: {error}") from None
    return policy, record


def check_devices(record: Mapping[str, Any], devices: DeviceSet, source: str = "the policy") -> None:
    """Refuse a device set the policy never learned to place on: a device kind it has not seen, or more
    devices than any machine it was trained on (its scores there are guesses: fine-tune it instead)."""
    unseen = sorted({d.kind for d in devices} - set(record["device_kinds"]))
    if unseen:
        raise PolicyFileError(f"{source} was trained on {', '.join(record['device_kinds'])} devices and cannot "
                              f"place on {', '.join(unseen)} ({devices.name}): pre-train it on such machines")
    if len(devices) > record["max_devices"]:
        raise PolicyFileError(f"{source} was trained on machines of at most {record['max_devices']} devices, not "
                              f"{len(devices)} ({devices.name}): pre-train or fine-tune it on such machines")
