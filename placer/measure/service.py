"""`Measurer`: measured step time of placements, behind a process boundary that survives crashes and hangs.

The TensorFlow runtime (and, for `local:N`, the testbed workers in their private network namespace) lives
in a worker process. A crash there becomes a 'crash' failure, a hang past the timeout a 'timeout' failure;
either way the worker is killed and a fresh one serves the next request. A worker (or a testbed worker) that
died while measuring is the machinery's failure: it is started again and the placement measured again, with a
warning on the `placer.measure` logger; only a second death on the same placement is reported as its failure.
A worker whose past sessions hold the memory the next one needs is started afresh before it (`MEMORY_RESERVE_SHARE`).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from placer import tf_logs
from placer.devices import DeviceSet
from placer.errors import PlacementError, TestbedError
from placer.host import memory_available, memory_total, tree_resident_bytes
from placer.graph.opgraph import OpGraph
from placer.measure import channel
from placer.measure.result import Failure, Measurement
from placer.measure.config import MeasureConfig
from placer.measure.targets import LocalTestbed, Target, parse_target
from placer.placement import Placement
from placer.testbed import isolated_command

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])

MACHINERY_RETRIES = 1
"""Times a placement is measured again after the worker died while measuring it."""

log = logging.getLogger("placer.measure")

MEMORY_RESERVE_SHARE = 0.1
"""Share of the machine's memory a measurement leaves free. A TensorFlow process does not give back what a closed
session of a big graph held: on `local:2`, one session of Keras InceptionResNetV2 (42,059 ops) grew the worker and
its servers by 10 GiB, the next placement by 8 more, and the kernel killed a server for memory (2026-11-30, 24 GiB
machine; 3.2 GiB and 2.1 more once the variables' initial values left its GraphDef). So where the memory
available, less what a session of the graph grew the worker's processes by, would fall below this share, a worker
holding past sessions is started afresh first: its memory goes back to the machine."""


KILLED_GONE_WITHIN = 5.0
"""The most seconds `close` waits for the killed session's processes to be gone."""
SHUTDOWN_GRACE = 1.0
"""Seconds a worker asked to shut down is given before its session is killed: nothing it holds outlives the
measurements already returned, and tearing TensorFlow down took seconds a process (several machine uses of a
10k-op graph kept `placer optimize` 4 s past its budget, closing together, 2026-11-29)."""


class Measurer:
    """Measures placements of graphs on one target. Use as a context manager, or call `close()`.

    >>> with Measurer("local:2") as measurer:
    ...     result = measurer.measure(graph, Placement.round_robin(graph, measurer.devices))
    """

    def __init__(self, target: Target | str = "inprocess:1", config: MeasureConfig | None = None):
        self.target: Target = parse_target(target) if isinstance(target, str) else target
        self.config = config or MeasureConfig()
        self.restarts = 0
        """How many workers were lost to a crash or a hang (each is replaced on the next request)."""
        self.memory_restarts = 0
        """How many workers were started afresh to give back the memory their past sessions held."""
        self._session_bytes: dict[str, int] = {}
        self._process_bytes: dict[str, int] = {}
        self._fresh_bytes: dict[int, int] = {}
        self._process: subprocess.Popen | None = None
        self._hello: dict[str, Any] = {}
        self._loaded: set[str] = set()
        self._log_dir = Path(tempfile.mkdtemp(prefix="placer-measure-"))
        self._log_index = 0

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker (done on first use); raises TestbedError if it cannot start."""
        if self._process is not None and self._process.poll() is None:
            return
        command = [sys.executable, "-m", "placer.measure.worker", *self.target.worker_args()]
        if isinstance(self.target, LocalTestbed):
            command, isolated = isolated_command(command, allow_exposed_ports=self.target.allow_exposed_ports)
            if isolated:
                command.append("--isolated")
        self._log_index += 1
        log_path = self._log_dir / f"worker{self._log_index}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        with open(log_path, "wb") as log:
            # A session of its own, so that killing the group also kills testbed workers it started.
            self._process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True
            )
        self._log_path = log_path
        self._loaded = set()
        try:
            hello = channel.receive(self._process.stdout.fileno(), timeout=self.config.setup_timeout)
        except (channel.ChannelClosed, channel.ChannelTimeout):
            self._kill()
            raise TestbedError(f"the measurement worker for {self.target} did not start: {self._log_tail()}") from None
        if "error" in hello:
            self._kill()
            raise TestbedError(f"the measurement worker for {self.target} could not start: {hello['error']}")
        self._hello = hello
        self._fresh_bytes = tree_resident_bytes(self._process.pid)

    def close(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            try:
                channel.send(self._process.stdin.fileno(), ("shutdown",))
                self._process.wait(timeout=SHUTDOWN_GRACE)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        shutil.rmtree(self._log_dir, ignore_errors=True)

    def __enter__(self) -> Measurer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self._kill()
            shutil.rmtree(self._log_dir, ignore_errors=True)
        except Exception:
            pass

    # -- queries ---------------------------------------------------------------------------------------

    @property
    def devices(self) -> DeviceSet:
        self.start()
        return self._hello["devices"]

    @property
    def testbed_info(self) -> dict[str, Any]:
        """For `local:N`: worker pids, ports, cores, whether isolated, and warnings (e.g. shared cores)."""
        self.start()
        return dict(self._hello.get("testbed") or {})

    @property
    def worker_pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def held_bytes(self) -> int:
        """Memory the worker's processes (the worker and, on a testbed, its servers) hold beyond what they held
        when started: the graphs and sessions of past measurements."""
        if self._process is None or self._process.poll() is not None:
            return 0
        return max(sum(tree_resident_bytes(self._process.pid).values()) - sum(self._fresh_bytes.values()), 0)

    def session_bytes(self, graph: OpGraph) -> int:
        """The most one measurement of `graph` grew the worker's processes by (0: none measured yet): a first
        session, with its graph loaded, is the largest."""
        return self._session_bytes.get(graph.fingerprint, 0)

    def process_bytes(self, graph: OpGraph) -> int:
        """The most one of the worker's processes would hold after a measurement of `graph` had it held no past
        session (0: none measured yet): about what a fresh process that runs the whole graph holds (on a testbed
        the graph's master and its ops share one server; the worker holds the client's copy apart). What its past
        sessions held is left out: InceptionResNetV2's server held 6.6 GiB after the sessions of a search, 2.9
        after its first (2026-11-30)."""
        return self._process_bytes.get(graph.fingerprint, 0)

    def release_memory(self) -> int:
        """Start the worker afresh if it holds memory past sessions left (`held_bytes`); the bytes it gave back."""
        held = self.held_bytes
        if held > 0:
            self._kill()
            self.memory_restarts += 1
            self.start()
        return held

    def _make_room(self, graph: OpGraph) -> None:
        """Start the worker afresh where a session of `graph` would leave less than `MEMORY_RESERVE_SHARE` of the
        machine's memory free, and doing so gives back what it lacks, or a session's worth."""
        needed = self.session_bytes(graph)
        available, total = memory_available(), memory_total()
        if not needed or available is None or not total:
            return
        lacking = MEMORY_RESERVE_SHARE * total - (available - needed)
        held = self.held_bytes
        if lacking > 0 and held >= min(lacking, needed):
            log.info("starting the measurement worker of %s afresh: its past sessions hold %.1f GiB, a session of %r "
                     "grew it by %.1f GiB, and %.1f GiB of the machine is available", self.target, held / 2**30,
                     graph.name, needed / 2**30, available / 2**30)
            self.release_memory()

    def measure(self, graph: OpGraph, placement: Placement, config: MeasureConfig | None = None) -> Measurement:
        """Time one training step of `graph` placed by `placement`; failures come back as results."""
        config = config or self.config
        self.start()
        if placement.graph_fingerprint != graph.fingerprint:
            raise PlacementError(
                f"placement was made for graph fingerprint {placement.graph_fingerprint[:12]}, not for "
                f"{graph.name!r} ({graph.fingerprint[:12]})"
            )
        available = set(self.devices.names)
        foreign = sorted({placement.devices[i] for i in placement.group_devices} - available)
        if foreign:
            raise PlacementError(
                f"the placement uses devices that {self.target} does not have: {foreign}; "
                f"available: {', '.join(d.short_name for d in self.devices)}"
            )
        op_devices = placement.op_devices(graph)
        self._make_room(graph)
        result = self._measure_once(graph, op_devices, config)
        for _ in range(MACHINERY_RETRIES):
            if result.failure is None or result.failure.kind != "crash":
                break
            # A worker that died is the machinery's failure, not the placement's: started again, and the
            # placement measured again. One that dies twice on it is reported (an OOM kill, say).
            log.warning("the measurement worker of %s died while measuring a placement of %r (%s); it was started "
                        "again and the placement is measured again", self.target, graph.name, result.failure.message)
            if self._process is not None:  # it answered "crash" (a testbed server died) and may not have exited
                self._kill()
                self.restarts += 1
            self.start()
            again = self._measure_once(graph, op_devices, config)
            result = again if again.failure is None else replace(again, failure=Failure(
                again.failure.kind, f"{again.failure.message} (the worker died on this placement twice)"))
        return result

    def _measure_once(self, graph: OpGraph, op_devices: Mapping[str, str], config: MeasureConfig) -> Measurement:
        self.start()
        pid = self._process.pid
        before = tree_resident_bytes(pid)
        try:
            return self._request_measurement(graph, op_devices, config)
        finally:
            if self._process is not None and self._process.pid == pid:  # not killed meanwhile
                after = tree_resident_bytes(pid)
                key = graph.fingerprint
                self._session_bytes[key] = max(self.session_bytes(graph), sum(after.values()) - sum(before.values()))
                # each process less what it held before beyond its fresh start (a process started since: nothing)
                held_before = {p: max(before.get(p, 0) - self._fresh_bytes.get(p, before.get(p, 0)), 0) for p in after}
                self._process_bytes[key] = max(self.process_bytes(graph),
                                               max((after[p] - held_before[p] for p in after), default=0))

    def _request_measurement(self, graph: OpGraph, op_devices: Mapping[str, str],
                             config: MeasureConfig) -> Measurement:
        try:
            if graph.fingerprint not in self._loaded:
                step_ops = [op.name for op in graph.ops if op.in_step]
                op_groups = {op.name: op.group for op in graph.ops}
                self._request(("load", graph.fingerprint, graph.graph_def, list(graph.step_fetches), graph.init_op,
                               step_ops, op_groups), config.setup_timeout)
                self._loaded.add(graph.fingerprint)
            result = self._request(("measure", graph.fingerprint, op_devices, config), config.total_timeout)
        except channel.ChannelTimeout:
            self._kill()
            self.restarts += 1
            return Measurement(
                failure=Failure("timeout", f"no answer within {config.total_timeout:g} s; the worker was killed and will be restarted"),
                target=str(self.target),
            )
        except (channel.ChannelClosed, BrokenPipeError):
            tail = self._log_tail()
            code = self._kill()
            self.restarts += 1
            return Measurement(
                failure=Failure("crash", f"the measurement worker died (exit code {code}): {tail}"),
                target=str(self.target),
            )
        return replace(result, target=str(self.target))

    # -- internals -------------------------------------------------------------------------------------

    def _request(self, message: tuple, timeout: float) -> Any:
        assert self._process is not None
        channel.send(self._process.stdin.fileno(), message)
        return channel.receive(self._process.stdout.fileno(), timeout=timeout)

    def _kill(self) -> int | None:
        """Kill the worker and everything in its session; the next request starts a new one."""
        process, self._process = self._process, None
        if process is None:
            return None
        try:  # also when the worker already exited: testbed workers it started may still be going
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        # A killed process lingers a moment; gone, its cores and ports are free for whatever starts next.
        deadline = time.monotonic() + KILLED_GONE_WITHIN
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        return process.returncode

    def _log_tail(self, lines: int = 6) -> str:
        try:
            text = self._log_path.read_text(errors="replace")
        except (OSError, AttributeError):
            return "(no log)"
        return " | ".join(tf_logs.log_tail(text, lines)) or "(no error in its log)"
