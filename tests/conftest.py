"""Shared fixtures: tiny graphs, built once per test session (building imports TensorFlow)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("WANDB_MODE", "disabled")

import pytest


@pytest.fixture(scope="session")
def mlp():
    from placer.models import build_model

    return build_model("mlp", "tiny")


@pytest.fixture(scope="session")
def two_tower():
    from placer.models import build_model

    return build_model("two-tower", "tiny")


@pytest.fixture(scope="session")
def cpus2():
    from placer.devices import local_devices

    return local_devices(logical_cpus=2)
