"""Exceptions raised by placer's core library.

Every error says what was wrong and what to do about it, in one paragraph, so that a user never has to
read a traceback from inside TensorFlow to understand a bad input.
"""


class PlacerError(Exception):
    """Base class of every error placer raises on purpose."""


class GraphBuildError(PlacerError):
    """A model or user function could not be turned into a placeable training-step graph."""


class DeviceSpecError(PlacerError):
    """A device list, cluster spec or machine description is malformed."""


class PlacementError(PlacerError):
    """A placement does not fit its graph or devices (unknown device, missing unit, no kernel, ...)."""


class KerasPlacementError(PlacementError):
    """A layer placement does not fit a Keras model (other layers) or this machine (a device it lacks)."""


class PlacementFileError(PlacementError):
    """A placement file is malformed or was made for another graph or other devices."""


class TestbedError(PlacerError):
    """The local gRPC testbed could not be started safely or died."""

    __test__ = False  # not a pytest test class despite the name


class NetworkIsolationUnavailable(TestbedError):
    """A private network namespace could not be created, and the user did not opt in to exposed ports."""


class ProfileError(PlacerError):
    """Profiling a graph failed, or a cost table does not belong to the graph it is used with."""


class ScheduleError(PlacerError):
    """A schedule of micro-batches (placer.schedule) could not be built, checked or read."""


class BlockTemplateError(ScheduleError):
    """A micro-batch's blocks are malformed: unknown device, cyclic dependencies, memory that never frees, ..."""


class InvalidScheduleError(ScheduleError):
    """A schedule plan breaks a rule: a dependency, two blocks at once on a device, the memory limit, ..."""


class ScheduleFileError(ScheduleError):
    """A schedule file is malformed, or describes a schedule that breaks its own rules."""


class MicroBatchError(ScheduleError):
    """The number of micro-batches does not fit the batch (it must be at least 1 and divide the batch)."""


class ScheduleInfeasibleError(ScheduleError):
    """No schedule exists under the given constraints (usually: the memory limit is below one micro-batch's need)."""


class TimelineError(PlacerError):
    """A step's timeline (a Chrome trace) cannot be read: not a trace, or no event in it."""


class OrderError(PlacerError):
    """An order of ops per device (placer.graph.order) names unknown ops, puts an op in two places, or
    contradicts the graph's data flow."""


class ScheduleMismatchError(ScheduleError):
    """A schedule plan was made for other blocks than the step it should order (another model, placement or
    number of micro-batches)."""


class OpWidthError(PlacementError):
    """An op asks for more threads than the device it is placed on runs it with."""


class PlanFileError(PlacerError):
    """A plan file (`placer.plan`) is malformed, or was made for another graph, target, calibration or machine
    than the one it is used with."""


class OutputPathError(PlacerError):
    """A file or directory a command would write cannot be written where it was asked to be (a directory above it
    is a file or cannot be written, or the file is a directory): refused before any work."""


class ReplicaError(PlacerError):
    """A data-parallel plan that cannot be made: a degree that does not divide the batch or the devices, or
    replicas that do not fit a device's memory."""
