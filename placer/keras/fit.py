"""Around your own `model.fit`: in-process CPU devices to place on, a trace of where each op ran, and a callback
that times the training steps.
"""

from __future__ import annotations

import re
import statistics
import time


# nodes of a partition graph carry the names of the function calls they were inlined from
_CALL_PREFIX = re.compile(r"^((Stateful)?PartitionedCall(_\d+)?/)+")


class OpTrace:
    """The device every op of the TensorFlow functions run inside the block ran on, from their partition graphs:
    `with trace_devices() as trace: model.fit(...)`, then `placed.check(trace)`. Tracing slows the steps: check
    with a short fit, time without it."""

    def __init__(self):
        self.ran_on: dict[str, str] = {}
        self.op_types: dict[str, str] = {}

    def __enter__(self) -> OpTrace:
        from tensorflow.python.eager import context

        context.context().export_run_metadata()  # drops what was collected before the block
        context.enable_run_metadata()
        return self

    def __exit__(self, *exc) -> None:
        from tensorflow.python.eager import context

        from placer.measure.runner import canonical_device

        metadata = context.export_run_metadata()
        context.disable_run_metadata()
        for function in metadata.function_graphs:
            for partition in function.partition_graphs:
                for node in partition.node:
                    if node.op.startswith("_") or not node.device:  # sends, receives, function arguments
                        continue
                    name = _CALL_PREFIX.sub("", node.name)
                    self.ran_on[name] = canonical_device(node.device)
                    self.op_types[name] = node.op


trace_devices = OpTrace


def make_logical_cpus(count: int) -> None:
    """Split this process's CPU into `count` logical devices ("/device:CPU:0" ...), as `inprocess:N` does; must run
    before TensorFlow starts (before any tensor or model is made)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have == count:
            return
        raise KerasPlacementError(f"TensorFlow has started with {have} CPU device(s), so it cannot make {count}: call "
                                  "make_logical_cpus first thing, before any model or tensor is made") from None


try:
    from keras.callbacks import Callback as _Callback
except ImportError:  # Keras 3 is optional for the rest of placer; StepTimer needs it
    _Callback = object


class StepTimer(_Callback):
    """A Keras callback that times `fit`'s training steps: `median` (seconds per step) over the steps after
    `warmup` calls of the training function (the first traces the step). Compare placements in your own loop:
    `model.fit(..., callbacks=[timer])`. With `steps_per_execution=N` in `compile`, `fit` runs N steps per call
    and calls back once per call: each call's time is shared by its steps."""

    def __init__(self, warmup: int = 2):
        super().__init__()
        self.warmup = warmup
        self.step_times: list[float] = []
        self._seen = 0
        self._started = 0.0
        self._first_step = 0

    def on_train_batch_begin(self, batch, logs=None):
        self._first_step = batch
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        elapsed = time.perf_counter() - self._started
        self._seen += 1
        if self._seen > self.warmup:
            # Keras calls back with the call's first and last step (both Keras 3 and tf-keras)
            steps = max(1, batch - self._first_step + 1)
            self.step_times.extend([elapsed / steps] * steps)

    @property
    def median(self) -> float | None:
        return statistics.median(self.step_times) if self.step_times else None

    def describe(self) -> str:
        if not self.step_times:
            return f"no step timed yet ({self._seen} steps run, {self.warmup} warm-up)"
        return (f"fit step time median {self.median * 1e3:.2f} ms over {len(self.step_times)} steps "
                f"(min {min(self.step_times) * 1e3:.2f}, max {max(self.step_times) * 1e3:.2f}; {self.warmup} warm-up)")
