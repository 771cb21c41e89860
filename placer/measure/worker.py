"""The measurement worker process: owns the TensorFlow runtime (and testbed workers) for one caller.

Started by `placer.measure.Measurer` as `python -m placer.measure.worker ...`; speaks framed pickles on the
stdout it inherited (TensorFlow's own prints are redirected to stderr) and dies with its parent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import traceback
from contextlib import contextmanager


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m placer.measure.worker")
    parser.add_argument("--logical-cpus", type=int)
    parser.add_argument("--intra-op-threads", type=int)
    parser.add_argument("--inter-op-threads", type=int)
    parser.add_argument("--testbed-layout", help="JSON: per worker [cores, intra-op threads, inter-op threads]")
    parser.add_argument("--testbed-link", type=int, help="bits per second of a shaped link between the two workers")
    parser.add_argument("--testbed-allocator", help="JSON: glibc's allocator thresholds for the testbed's workers")
    parser.add_argument("--isolated", action="store_true", help="we run in a fresh network namespace")
    parser.add_argument("--target")
    parser.add_argument("--cluster-spec")
    args = parser.parse_args(argv)

    from placer.testbed import die_with_parent

    die_with_parent()
    # The channel owns the original stdout; anything else printing to stdout lands on stderr instead.
    channel_out = os.dup(1)
    os.dup2(2, 1)
    channel_in = 0

    from placer.measure import channel

    servers = None
    try:
        if args.logical_cpus:
            from placer.devices import local_devices

            devices = local_devices(args.logical_cpus, args.intra_op_threads, args.inter_op_threads)
            target, testbed_info = "", {}
        elif args.testbed_layout:
            from placer.devices import cluster_devices
            from placer.testbed import WorkerLayout, bring_loopback_up, only_loopback, start_servers

            if args.isolated:
                bring_loopback_up()
                if not only_loopback():
                    raise RuntimeError("refusing to start the testbed: the namespace has interfaces besides loopback")
            layout = tuple(WorkerLayout(tuple(cores), intra, inter) for cores, intra, inter in json.loads(args.testbed_layout))
            servers = start_servers(layout=layout, isolated=args.isolated, link_bits_per_second=args.testbed_link,
                                    allocator_thresholds=json.loads(args.testbed_allocator) if args.testbed_allocator else None)
            client_cores = pin_to_cores(layout[0].cores)
            devices = cluster_devices(servers.cluster_spec).with_widths(
                [(len(w.cores), w.intra_op_threads, w.inter_op_threads) for w in layout])
            target = servers.master
            testbed_info = {
                "pids": [p.pid for p in servers.processes],
                "ports": servers.ports,
                "cores": servers.cores,
                "warnings": servers.warnings,
                "isolated": args.isolated,
                "client_cores": client_cores,
                "link_bits_per_second": args.testbed_link,
            }
        else:
            devices, target, testbed_info = _remote_devices(args.target, json.loads(args.cluster_spec)), args.target, {}
        # Ready only once what measuring runs is loaded: a testbed's devices come from its spec, without
        # TensorFlow, and importing it after saying so (2.3 s of a core) ran beside the first timings of whatever
        # was measured next, one process's pools at half speed in one `placer optimize` (5.5 ms, then 2.1-2.2).
        import placer.measure.runner  # noqa: F401
    except Exception as error:  # report why we could not start, then exit
        channel.send(channel_out, {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()})
        if servers is not None:
            servers.close()
        return 1

    channel.send(channel_out, {"devices": devices, "target": target, "testbed": testbed_info, "pid": os.getpid()})
    try:
        _serve(channel_in, channel_out, target, servers, args.logical_cpus, (args.intra_op_threads, args.inter_op_threads))
    finally:
        if servers is not None:
            servers.close()
    return 0


def pin_to_cores(cores, pid: int | str = "self") -> list[int]:
    """Pin every thread of process `pid` (this one by default), and so the threads it starts later, to `cores`:
    here, the testbed's first worker's, which runs the session's master. Left to the OS, this process (the session's client) runs on
    either core, and a short step on the first worker moves with it: held-out branchy-0's 2.3 ms step spread
    32 % between the 10th and 90th percentiles of 8 measurements with the client free, 24 % with it on the
    second worker's core and 13 % on the first's; placements spanning both workers, and two-tower's 7 ms step,
    showed no consistent difference (`experiments/probes/client_core.py`)."""
    cores = sorted(set(cores))
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(thread), cores)
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile, or one we may not move
            pass
    return cores


def _serve(channel_in: int, channel_out: int, target: str, servers, local_cpus: int | None,
           threads: tuple[int | None, int | None] = (None, None)) -> None:
    import tensorflow as tf

    from placer.measure import channel
    from placer.measure.runner import LoadedGraph

    graphs: dict[str, LoadedGraph] = {}
    while True:
        try:
            request = channel.receive(channel_in)
        except channel.ChannelClosed:
            return
        kind = request[0]
        if kind == "shutdown":
            return
        if kind == "load":
            _, key, graph_def_bytes, train_op, init_op, step_ops, op_groups = request
            graphs[key] = LoadedGraph(tf.compat.v1.GraphDef.FromString(graph_def_bytes), train_op, init_op,
                                      frozenset(step_ops), op_groups)
            channel.send(channel_out, ("ok",))
        elif kind == "measure":
            _, key, op_devices, config = request
            crashed = _dead_server(servers, target)
            if crashed is not None:
                channel.send(channel_out, crashed)
                return  # the caller restarts us, and with us the testbed
            for other, loaded in graphs.items():
                if other != key:  # sessions are kept for the graph being measured only, or memory grows per graph
                    loaded.close_kept_sessions()
            pids = [process.pid for process in servers.processes] if servers is not None else []
            with _servers_watched(servers, channel_out, target) as answering:
                result = graphs[key].measure(op_devices, target, config, local_cpus, threads, close_later=True,
                                             worker_pids=pids)
                with answering:  # the watcher answers no more
                    crashed = _dead_server(servers, target)  # a dead server, not the placement, failed the step
                    channel.send(channel_out, crashed or result)
            if crashed is not None:
                return  # the caller restarts us, and with us the testbed
            graphs[key].close_session()
        else:
            channel.send(channel_out, ("error", f"unknown request {kind!r}"))


def _dead_server(servers, target: str):
    """A crash answer naming the testbed server that died, or None while all are alive (or there are none)."""
    from placer.measure.result import Failure, Measurement

    if servers is None:
        return None
    try:
        servers.check_alive()
    except Exception as error:  # noqa: BLE001 - says which server and how it ended
        return Measurement(failure=Failure("crash", str(error)), target=target)
    return None


SERVER_CHECK_SECONDS = 0.5
"""How often a measurement checks that its testbed's servers are alive."""


@contextmanager
def _servers_watched(servers, channel_out: int, target: str):
    """While a measurement runs, answer at once that the testbed crashed when one of its servers dies, and exit
    (the caller restarts this worker, and with it the testbed): a server killed mid-step (for memory, say) leaves
    TensorFlow's client waiting on it, up to the caller's backstop of many minutes. Yields the lock that the
    measurement's own answer is sent under, so that exactly one answer goes out."""
    from placer.measure import channel

    answering, done = threading.Lock(), threading.Event()
    if servers is None:
        yield _AnswerLock(answering, done)
        return

    def watch() -> None:
        while not done.wait(SERVER_CHECK_SECONDS):
            crashed = _dead_server(servers, target)
            if crashed is not None:
                with answering:
                    if done.is_set():
                        return
                    channel.send(channel_out, crashed)
                    os._exit(1)

    watcher = threading.Thread(target=watch, name="testbed-watch", daemon=True)
    watcher.start()
    try:
        yield _AnswerLock(answering, done)
    finally:
        done.set()
        watcher.join()


class _AnswerLock:
    """The answering lock; taking it also tells the watcher the measurement has answered."""

    def __init__(self, lock: threading.Lock, done: threading.Event):
        self._lock, self._done = lock, done

    def __enter__(self):
        self._lock.acquire()
        self._done.set()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()


def _remote_devices(target: str, cluster_spec: dict):
    """Ask the cluster which devices it has."""
    import tensorflow as tf

    from placer.devices import Device, DeviceSet

    with tf.compat.v1.Session(target, config=tf.compat.v1.ConfigProto(operation_timeout_in_ms=30_000)) as session:
        found = [d for d in session.list_devices() if d.device_type in ("CPU", "GPU")]
    devices = tuple(Device(d.name, d.device_type, memory_bytes=d.memory_limit_bytes or None) for d in found)
    return DeviceSet(devices, name=f"cluster {target}")


if __name__ == "__main__":
    sys.exit(main())
