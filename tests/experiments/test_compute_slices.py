import ctypes
import threading

import pytest

from experiments.probes.compute_slices import (COMPUTE_THREAD_NAME, late_share, main, set_compute_slices,
                                               set_thread_slice, slices_hold, thread_slice, threads_named)

_PR_SET_NAME = 15


def _custom_slices() -> bool:
    here = threading.get_native_id()
    return set_thread_slice(here, 0.005) and set_thread_slice(here, 0)


needs_custom_slices = pytest.mark.skipif(not _custom_slices(),
                                         reason="this kernel has no custom scheduler slices (EEVDF, Linux 6.12+)")


def _named_thread(name: str):
    """A thread of this process called `name`, and the event that ends it."""
    started, stop, ids = threading.Event(), threading.Event(), []

    def body():
        ctypes.CDLL(None).prctl(_PR_SET_NAME, name.encode(), 0, 0, 0)
        ids.append(threading.get_native_id())
        started.set()
        stop.wait()

    threading.Thread(target=body, daemon=True).start()
    started.wait(5)
    return ids[0], stop


def test_bad_arguments_are_refused_before_a_testbed_starts(no_testbed, capsys):
    for arguments, said in ((["--rounds", "1"], "at least 2 rounds"), (["--slice-ms", "0.05"], "0.1-100 ms")):
        with pytest.raises(SystemExit) as stopped:
            main(arguments)
        assert stopped.value.code == 2
        assert said in capsys.readouterr().err


@needs_custom_slices
def test_the_compute_threads_get_the_slice_asked_for_and_the_others_keep_the_kernels():
    compute, stop_compute = _named_thread(COMPUTE_THREAD_NAME)
    other, stop_other = _named_thread("grpc_server")
    try:
        kernel_default = thread_slice(other)
        assert compute in threads_named(COMPUTE_THREAD_NAME)  # beside TensorFlow's own, in a test run's process
        assert set_compute_slices(["self"], 0.020) >= 1
        assert thread_slice(compute) == pytest.approx(0.020) and thread_slice(other) == kernel_default
        assert slices_hold(["self"], 0.020) and not slices_hold(["self"], 0.010)
        set_compute_slices(["self"], 0.0)
        assert thread_slice(compute) == kernel_default and slices_hold(["self"], 0.0)
    finally:
        set_compute_slices(["self"], 0.0)  # TensorFlow's threads in this process back to the kernel's slice
        stop_compute.set()
        stop_other.set()


def test_a_thread_that_is_not_there_gets_no_slice():
    assert not set_thread_slice(2**22 + 12345, 0.020)
    assert thread_slice(2**22 + 12345) is None


def test_a_hop_is_late_a_millisecond_past_the_median_idle_hop():
    assert late_share([3e-4, 4e-4, 5e-4], [4e-4, 1.3e-3, 1.5e-3, 4e-3]) == 0.5
