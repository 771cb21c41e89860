"""Measured step time: run a placed training step for real and time it, behind a crash-proof worker.

`Measurer(target)` keeps a worker open for many placements; `placer.cost.open_target` is the way to cost one.
"""

from placer.measure.result import Failure, Measurement, MovedOp, OpTime
from placer.measure.config import MeasureConfig
from placer.measure.service import Measurer
from placer.measure.targets import InProcess, LocalTestbed, RemoteCluster, parse_target

__all__ = [
    "Failure", "InProcess", "LocalTestbed", "MeasureConfig", "Measurement", "Measurer", "MovedOp", "OpTime",
    "RemoteCluster", "parse_target",
]
