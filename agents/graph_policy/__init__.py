"""A placement policy that generalizes across graphs and machines: a graph neural network over the unit
graph and a head that scores each unit against each device from the device's features.

`features.py` turns any graph and device set into fixed-width inputs; `policy.py` is the network, which
takes several graphs of any sizes in one batch; `policy_file.py` saves it with what it was trained on.
Names are imported on first use: `placer`'s command line loads `commands.py` from here before it has
quieted TensorFlow's log, so importing this package must not import TensorFlow.
"""

from importlib import import_module

_HOMES = {
    "DeviceInputs": "features", "GraphBatch": "features", "GraphInputs": "features", "device_inputs": "features",
    "graph_inputs": "features", "GraphPolicyConfig": "policy", "GraphPlacementPolicy": "policy",
    "PolicyFileError": "policy_file", "load_policy": "policy_file", "save_policy": "policy_file",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
