"""Engines that run independent pieces of work in parallel: local worker processes, or Ray actors.

Both take a list of `Task`s and give back their results in the order of the list, whatever order they
finished in, so that a parallel run aggregates exactly as the serial one does. A task may name the worker
that owns its state (the target it evaluates on, kept in that worker's process between tasks); a worker
that dies has the task it was running sent again to a fresh worker in its place, and the log says so.

Ray's servers (GCS, raylets, workers) listen on every network interface of their namespace, whatever node IP
they are given. So placer starts a private Ray (`--ray auto`) only inside a private network namespace that has
nothing but loopback (`unshare -rn`, as the local testbed does; the command line re-runs itself there), and
talks to a cluster of several machines (`--ray ADDRESS`) with Ray's token authentication (docs/scale-out.md).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from placer.errors import PlacerError

log = logging.getLogger("placer.workers")

MAX_TRIES = 3
"""A task that has killed this many workers is not sent again: it would kill every one."""


class WorkerError(PlacerError):
    """A parallel engine could not run its work (a task kept killing its workers, or Ray is missing)."""


@dataclass(frozen=True)
class Task:
    """One piece of work: `function(*args)` on a worker. function must be importable by name (a module's
    top-level function), and args and the result picklable."""

    function: Callable[..., Any]
    args: tuple = ()
    worker: int | None = None
    """The worker that owns this task's state (taken modulo the number of workers); None: spread in turn."""


def owner(task: Task, index: int, workers: int) -> int:
    """The worker slot `task`, the `index`-th of its batch, runs on."""
    return (task.worker if task.worker is not None else index) % workers


_state: dict[str, Any] = {}
"""What this worker's tasks keep between tasks (their targets), by key."""


def worker_state() -> dict[str, Any]:
    """The running worker's own state: a worker process's, or a `SerialWorkers` engine's while it runs."""
    return _state


def run_task(function: Callable[..., Any], args: tuple) -> Any:
    """What a worker does with a task (the same in a process, an actor, or the serial engine)."""
    return function(*args)


def _close_state(state: dict[str, Any]) -> None:
    while state:
        value = state.popitem()[1]
        if hasattr(value, "close"):
            value.close()


# -- local worker processes -------------------------------------------------------------------------------


def _worker_main(connection) -> None:
    """A worker process: run each task received, send back (task id, ok, result or error), until None."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    while True:
        message = connection.recv()
        if message is None:
            return
        task_id, function, args = message
        try:
            connection.send((task_id, True, run_task(function, args)))
        except BaseException as error:  # noqa: BLE001 - every failure goes back to the driver as a value
            try:
                connection.send((task_id, False, error))
            except Exception:  # an error that cannot be pickled goes back as its text
                connection.send((task_id, False, WorkerError(f"{type(error).__name__}: {error}")))


@dataclass
class _Slot:
    process: Any
    connection: Any
    running: int | None = None
    """The id of the task in flight on it."""
    queue: list[int] = field(default_factory=list)
    """Ids of the tasks waiting for it."""


class ProcessWorkers:
    """`count` worker processes on this machine (started with "spawn": TensorFlow does not survive fork)."""

    warnings: Sequence[str] = ()
    """What the run's log should say about the engine (all engines have it)."""

    def __init__(self, count: int):
        if not isinstance(count, int) or count < 1:
            raise WorkerError(f"the number of workers must be a whole number of at least 1, got {count!r}")
        import multiprocessing

        self.count = count
        self._context = multiprocessing.get_context("spawn")
        self._slots = [self._start() for _ in range(count)]

    @property
    def description(self) -> str:
        return f"{self.count} local worker processes"

    def pids(self) -> list[int]:
        """The process id of each worker, by slot."""
        return [slot.process.pid for slot in self._slots]

    def _start(self) -> _Slot:
        driver_end, worker_end = self._context.Pipe()
        process = self._context.Process(target=_worker_main, args=(worker_end,), daemon=True)
        process.start()
        worker_end.close()
        return _Slot(process, driver_end)

    def run(self, tasks: Sequence[Task]) -> list[Any]:
        from multiprocessing.connection import wait

        results: dict[int, Any] = {}
        failure: BaseException | None = None
        tries = [0] * len(tasks)
        for index, task in enumerate(tasks):
            self._slots[owner(task, index, self.count)].queue.append(index)
        for slot in self._slots:
            self._send_next(slot, tasks, tries)
        while any(slot.running is not None for slot in self._slots):
            busy = [slot for slot in self._slots if slot.running is not None]
            ready = wait([s.connection for s in busy] + [s.process.sentinel for s in busy])
            for number, slot in enumerate(self._slots):
                if slot.running is None:
                    continue
                if slot.connection in ready:
                    try:
                        task_id, ok, value = slot.connection.recv()
                    except (EOFError, OSError):  # it died while sending, or before
                        self._replace(number, tasks, tries)
                        continue
                    slot.running = None
                    if not ok:  # nothing more is sent; the tasks in flight finish, so none is left to a next run
                        failure = failure or value
                        for other in self._slots:
                            other.queue.clear()
                    results[task_id] = value
                    self._send_next(slot, tasks, tries)
                elif slot.process.sentinel in ready:
                    self._replace(number, tasks, tries)
        if failure is not None:
            raise failure
        return [results[index] for index in range(len(tasks))]

    def _send_next(self, slot: _Slot, tasks: Sequence[Task], tries: list[int]) -> None:
        if slot.queue:
            index = slot.queue.pop(0)
            tries[index] += 1
            slot.running = index
            try:
                slot.connection.send((index, tasks[index].function, tasks[index].args))
            except (BrokenPipeError, ConnectionResetError, EOFError):  # it died idle, since the last batch
                self._replace(self._slots.index(slot), tasks, tries)

    def _replace(self, number: int, tasks: Sequence[Task], tries: list[int]) -> None:
        """Start a fresh worker in slot `number`, whose process died, and send it the task it was running."""
        slot = self._slots[number]
        slot.process.join(timeout=5)
        index, code = slot.running, slot.process.exitcode
        slot.connection.close()
        if tries[index] >= MAX_TRIES:
            raise WorkerError(f"task {index} ({tasks[index].function.__name__}) killed {tries[index]} workers "
                              f"(the last exited with code {code}); not sending it again")
        fresh = self._start()
        fresh.queue = [index, *slot.queue]
        self._slots[number] = fresh
        log.warning("worker %d (pid %s) died (exit code %s) while running task %d (%s); sending it again to a "
                    "new worker (pid %s)", number, slot.process.pid, code, index, tasks[index].function.__name__,
                    fresh.process.pid)
        self._send_next(fresh, tasks, tries)

    def close(self) -> None:
        for slot in self._slots:
            try:
                slot.connection.send(None)
            except (OSError, BrokenPipeError):
                pass
        deadline = time.monotonic() + 10
        for slot in self._slots:
            slot.process.join(timeout=max(0.0, deadline - time.monotonic()))
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()
            slot.connection.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SerialWorkers:
    """The serial path: every task in this process, in order (what `--workers 1` runs). Its tasks' state is
    its own, and closed with it."""

    count = 1
    description = "this process"
    warnings: Sequence[str] = ()

    def __init__(self):
        self._own_state: dict[str, Any] = {}

    def run(self, tasks: Sequence[Task]) -> list[Any]:
        global _state
        outer, _state = _state, self._own_state
        try:
            return [run_task(task.function, task.args) for task in tasks]
        finally:
            _state = outer

    def close(self) -> None:
        _close_state(self._own_state)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- Ray actors ------------------------------------------------------------------------------------------

ACTOR_START_SECONDS = 60
"""How long a new actor may take to start before its slot's work goes to another actor."""

AUTO = "auto"
"""A private Ray of this machine's CPUs, started for the command in a loopback-only network namespace."""


def check_ray_address(address: str) -> str:
    """`address` if it is "auto" or host:port, else a clear error (before any work)."""
    if address == AUTO:
        return address
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise WorkerError(f"--ray takes 'auto' or a Ray cluster's ADDRESS as host:port (its head's GCS port, "
                          f"6379 by default), got {address!r}")
    return address


def _import_ray():
    try:
        import ray
    except ImportError:
        raise WorkerError("--ray needs Ray: install placer's extra with `pip install -e '.[distributed]'`") from None
    return ray


class PrivateRay:
    """A Ray of `cpus` CPUs started for this command alone, whatever other Ray runs on the machine, that leaves
    nothing behind: its session files and token live in a private (0700) temporary directory removed with it.

    Ray 2.60 attaches `ray.init()` to RAY_ADDRESS or to the latest `ray start` of the machine: `address="local"`
    starts a new one instead. A new local Ray turns on token authentication and, with no token found, writes one
    to ~/.ray/auth_token, readable by all, which then switches every later Ray of the user to tokens: given a
    token file of its own (RAY_AUTH_TOKEN_PATH), it writes none."""

    def __init__(self, ray, cpus: int, runtime_env: dict, ray_log: _RayLogRouted):
        import secrets
        import tempfile

        from placer.testbed import bring_loopback_up, only_loopback

        if not only_loopback():
            raise WorkerError("--ray auto starts a private Ray, whose servers listen on every network interface: "
                              "it runs only in a private network namespace (the "
                              "`placer` command line re-runs itself in one with `unshare -rn`). Or start a "
                              "cluster yourself and give its ADDRESS (docs/scale-out.md).")
        bring_loopback_up()  # a new namespace's loopback starts down
        # Under /tmp, short: Ray's socket paths in it must stay under 107 bytes.
        self.directory = Path(tempfile.mkdtemp(prefix="placer-ray-", dir="/tmp"))
        token = self.directory / "auth_token"
        token.touch(mode=0o600)
        token.write_text(secrets.token_hex(32))
        self._environment = {name: os.environ.get(name) for name in _PRIVATE_RAY_ENVIRONMENT}
        # RAY_AUTH_MODE stays as the user set it: unset, ray.init turns tokens on and reloads its settings
        # (set here, it would not be seen: Ray read its settings when imported).
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
        os.environ.pop("RAY_ADDRESS", None)
        os.environ.pop("RAY_AUTH_TOKEN", None)  # it would win over the file
        try:
            with ray_log.stderr_here():
                ray.init(address="local", _node_ip_address="127.0.0.1", _temp_dir=str(self.directory / "session"),
                         include_dashboard=False, num_cpus=cpus, runtime_env=runtime_env,
                         logging_level=logging.ERROR, log_to_driver=False, configure_logging=False)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Its directory gone and the environment as it was (after `ray.shutdown()`, which stops its processes)."""
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)
        for name, value in self._environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


_PRIVATE_RAY_ENVIRONMENT = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN", "RAY_ADDRESS")
"""What `PrivateRay` changes in this process's environment (its Ray's processes inherit it), and restores."""


def _connect(ray, address: str, runtime_env: dict, ray_log: _RayLogRouted) -> None:
    """Attach to the Ray cluster at `address`."""
    # Ray's token authentication (`RAY_AUTH_MODE=token`; the token in ~/.ray/auth_token or RAY_AUTH_TOKEN)
    # unless the user set a mode: without it anyone who reaches the cluster runs code there.
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    try:
        with ray_log.stderr_here():
            ray.init(address=address, runtime_env=runtime_env, logging_level=logging.ERROR, log_to_driver=False,
                     configure_logging=False)
    except (ConnectionError, ray.exceptions.AuthenticationError) as error:
        raise WorkerError(f"no Ray cluster answers at {address} with this token (RAY_AUTH_MODE="
                          f"{os.environ['RAY_AUTH_MODE']}; docs/scale-out.md): {error}") from None


class _RayLogRouted:
    """Ray's own lines (its log, and the cluster's error messages: a dead node, with its state, a worker's death)
    sent to `path`, or dropped, instead of the console, while a Ray engine is open."""

    def __init__(self, path: str | Path | None):
        self.path = path
        self._logger = logging.getLogger("ray")
        self._propagate = self._logger.propagate
        self._console = list(self._logger.handlers)  # importing ray gives its logger a handler to stderr
        self._handler: logging.Handler = (logging.FileHandler(path) if path is not None else logging.NullHandler())
        self._handler.setFormatter(logging.Formatter("%(asctime)s ray %(levelname)s %(message)s"))
        for handler in self._console:
            self._logger.removeHandler(handler)
        self._logger.addHandler(self._handler)
        self._logger.propagate = False
        # A driver's thread prints every error message of the cluster to stdout through this function (whatever
        # log_to_driver says): it goes to the log instead.
        self._ray_worker = sys.modules.get("ray._private.worker")
        self._print_to_console = getattr(self._ray_worker, "print_to_stdstream", None)
        if self._print_to_console is not None:
            self._ray_worker.print_to_stdstream = self._log_printed

    def _log_printed(self, data: dict, ignore_prefix: bool = False) -> None:
        for line in data.get("lines", ()):
            self._logger.warning("(%s) %s", data.get("pid", "ray"), line)

    @contextmanager
    def stderr_here(self):
        """This process's standard error (file descriptor 2, where Ray's C++ core writes while it starts) sent
        to the log too, or dropped, for the `with` block."""
        sys.stderr.flush()
        saved = os.dup(2)
        target = os.open(self.path if self.path is not None else os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                         0o644)
        try:
            os.dup2(target, 2)
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            os.close(target)

    def close(self) -> None:
        if self._print_to_console is not None:
            self._ray_worker.print_to_stdstream = self._print_to_console
        self._logger.removeHandler(self._handler)
        self._handler.close()
        for handler in self._console:
            self._logger.addHandler(handler)
        self._logger.propagate = self._propagate


class _Actor:
    """One worker: runs tasks in its own process, which keeps their state between tasks."""

    def run(self, function, args):
        return run_task(function, args)

    def pid(self) -> int:
        return os.getpid()


class RayWorkers:
    """Tasks on Ray actors: `count` of them (default: one per CPU of the cluster), placed by Ray; or, with
    `per_node`, one actor on each node that offers a CPU, pinned to it (a measured target: each node measures
    on its own machine)."""

    warnings: Sequence[str] = ()
    """Nodes that share one machine, when actors are pinned to nodes."""

    def __init__(self, address: str, count: int | None = None, actor_start_seconds: float = ACTOR_START_SECONDS,
                 per_node: bool = False, log_path: str | Path | None = None):
        """actor_start_seconds: how long a new actor may take to start before its slot's work goes to another.
        per_node: one actor per node, pinned there (`count` must then be None). log_path: the run's log, where
        Ray's own log lines go (default: none kept); never the console, where they would break the results."""
        if per_node and count is not None:
            raise WorkerError("one actor per node: the number of actors is the number of nodes, not given")
        ray = _import_ray()
        self.actor_start_seconds = actor_start_seconds
        self.address = check_ray_address(address)
        self._ray = ray
        root = str(Path(__file__).resolve().parent.parent)  # placer's checkout, where the nodes import it from
        runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH", "")) if p), "TF_CPP_MIN_LOG_LEVEL": "2"}}
        self._private: PrivateRay | None = None
        self._ray_log = _RayLogRouted(log_path)
        try:
            if address == AUTO:
                self._private = PrivateRay(ray, count or os.cpu_count(), runtime_env, self._ray_log)
            else:
                _connect(ray, address, runtime_env, self._ray_log)
        except BaseException:
            self._ray_log.close()
            raise
        self._actors: list = []
        try:
            self._start_actors(ray, count, per_node)
        except BaseException:  # a private Ray stops, and its directory goes, even when no actor could start
            self.close()
            raise

    def _start_actors(self, ray, count: int | None, per_node: bool) -> None:
        """One actor pinned to each node (`per_node`), or `count` placed by Ray (default: one per CPU)."""
        self._actor_class = ray.remote(num_cpus=1)(_Actor)
        if per_node:
            self.nodes = _measuring_nodes(ray)
            self.warnings = _shared_machines(self.nodes)
            for warning in self.warnings:
                log.warning("%s", warning)
            self._options = [{"scheduling_strategy": _pinned_to(node["NodeID"])} for node in self.nodes]
            self.count = len(self.nodes)
        else:
            self.nodes = []
            self.count = count or max(1, int(ray.cluster_resources().get("CPU", 1)))
            self._options = [{} for _ in range(self.count)]
        self._actors = [self._actor_class.options(**options).remote() for options in self._options]
        nodes = len([node for node in ray.nodes() if node.get("Alive")])
        plural = "s" if nodes != 1 else ""
        pinned = f"each of {self.count} nodes" if self.count > 1 else "the cluster's one node"
        self.description = (f"one Ray actor pinned to {pinned}" if per_node
                            else f"{self.count} Ray actors on {nodes} node{plural}")

    def pids(self) -> list[int]:
        """The process id of each actor, by slot (on its own node)."""
        return self._ray.get([actor.pid.remote() for actor in self._actors])

    def run(self, tasks: Sequence[Task]) -> list[Any]:
        ray = self._ray
        tries = [1] * len(tasks)
        slots = [owner(task, index, self.count) for index, task in enumerate(tasks)]
        refs = [self._actors[slot].run.remote(task.function, task.args) for slot, task in zip(slots, tasks)]
        results = []
        index = 0
        while index < len(tasks):  # in order: an actor runs its tasks in the order they were sent
            try:
                results.append(ray.get(refs[index]))
                index += 1
            except ray.exceptions.RayActorError as error:
                slot = slots[index]
                if tries[index] >= MAX_TRIES:
                    raise WorkerError(f"task {index} ({tasks[index].function.__name__}) killed {tries[index]} "
                                      f"Ray actors; not sending it again: {error}") from None
                where = self._replace_actor(slot)
                again = [i for i in range(index, len(tasks)) if slots[i] == slot]
                log.warning("Ray actor %d died while running task %d (%s); sending it and %d later task(s) of "
                            "that actor again to %s", slot, index, tasks[index].function.__name__,
                            len(again) - 1, where)
                for i in again:
                    tries[i] += 1
                    refs[i] = self._actors[slot].run.remote(tasks[i].function, tasks[i].args)
        return results

    def _replace_actor(self, slot: int) -> str:
        """Put a new actor in `slot`, whose actor died; where its node died with it and the cluster has no CPU
        left for one, the next slot's actor takes its work. Returns which, for the log."""
        ray = self._ray
        fresh = self._actor_class.options(**self._options[slot]).remote()
        try:
            ray.get(fresh.pid.remote(), timeout=self.actor_start_seconds)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError,
                ray.exceptions.ActorUnschedulableError):  # pinned to a node that died: it cannot start there
            ray.kill(fresh)
            if self.count == 1:
                raise WorkerError(f"a Ray actor died and no new one started in {self.actor_start_seconds} s: the "
                                  "cluster has no CPU left for it (did its node die?)") from None
            self._actors[slot] = self._actors[(slot + 1) % self.count]
            return f"actor {(slot + 1) % self.count} (no CPU is left for a new actor: its node died?)"
        self._actors[slot] = fresh
        return "a new actor"

    def close(self) -> None:
        try:
            for actor in {id(actor): actor for actor in self._actors}.values():  # a slot may share another's
                self._ray.kill(actor)
            self._ray.shutdown()
        finally:
            if self._private is not None:
                self._private.remove()
            self._ray_log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pinned_to(node_id: str):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id, soft=False)


def _measuring_nodes(ray) -> list[dict]:
    """The alive nodes that offer a CPU, the driver's own first (so that what goes to the first actor, a
    lone placement's confirmations, is measured on the driver's machine where it is a node), then by node
    id: the same order in every run on the same cluster."""
    here = ray.get_runtime_context().get_node_id()
    nodes = sorted((node for node in ray.nodes() if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0),
                   key=lambda node: (node["NodeID"] != here, node["NodeID"]))
    if not nodes:
        raise WorkerError("the Ray cluster has no node that offers a CPU for a measuring actor")
    return nodes


def _shared_machines(nodes: Sequence[dict]) -> list[str]:
    """A warning for each machine (node address) that has more than one of `nodes`."""
    by_address: dict[str, list[str]] = {}
    for node in nodes:
        by_address.setdefault(node.get("NodeManagerAddress", ""), []).append(node["NodeID"][:12])
    return [f"Ray nodes {', '.join(shared)} share one machine ({address}): their measurements run at once on its "
            "cores and skew each other; give each machine one node"
            for address, shared in by_address.items() if len(shared) > 1]


def open_workers(workers: int = 1, ray: str | None = None, per_node: bool = False,
                 log_path: str | Path | None = None):
    """The engine for `--workers N` (local processes; 1: this process, today's serial path) or
    `--ray auto|ADDRESS` (one Ray actor per worker: N actors, or one per CPU of the cluster when N is 1;
    with `per_node`, one actor pinned to each node of the cluster). log_path: where Ray's own log lines go."""
    if not isinstance(workers, int) or workers < 1:
        raise WorkerError(f"--workers must be a whole number of at least 1, got {workers!r}")
    if ray is not None:
        return RayWorkers(ray, None if per_node or workers == 1 else workers, per_node=per_node, log_path=log_path)
    return SerialWorkers() if workers == 1 else ProcessWorkers(workers)


def add_worker_arguments(parser, work: str) -> None:
    """--workers and --ray for a command whose `work` they spread (a benchmark's, `placer pretrain`'s)."""
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help=f"run {work} on N local worker processes; the results are the same as with 1 (this "
                        "process, no workers) (default 1)")
    parser.add_argument("--ray", metavar="auto|ADDRESS",
                        help=f"run {work} on Ray actors instead: auto (a private Ray of this machine's CPUs, in a "
                        "loopback-only network namespace) or a Ray cluster's ADDRESS (host:port); --workers N then "
                        "counts the actors (default: one per CPU of the cluster). Needs the `distributed` extra")
