"""A placement policy that generalizes across graphs and machines: a graph neural network over the unit
graph and a head that scores each unit against each device from the device's features.

`features.py` turns any graph and device set into fixed-width inputs; `policy.py` is the network, which
takes several graphs of any sizes in one batch; `policy_file.py` saves it with what it was trained on.
"""

from agents.graph_policy.features import DeviceInputs, GraphBatch, GraphInputs, device_inputs, graph_inputs
from agents.graph_policy.policy import GraphPolicyConfig, GraphPlacementPolicy
from agents.graph_policy.policy_file import PolicyFileError, load_policy, save_policy

__all__ = ["DeviceInputs", "GraphBatch", "GraphInputs", "GraphPlacementPolicy", "GraphPolicyConfig",
           "PolicyFileError", "device_inputs", "graph_inputs", "load_policy", "save_policy"]
