import os

import pytest

from experiments.probes.client_core import main, pin_process


def test_too_few_rounds_are_refused_before_a_testbed_starts(no_testbed, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--rounds", "4"])
    assert stopped.value.code == 2
    assert "at least 5 rounds" in capsys.readouterr().err


def test_a_process_is_pinned_thread_by_thread():
    import subprocess
    import sys

    cores = sorted(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                              "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\ntime.sleep(30)"])
    try:
        import time

        time.sleep(0.5)
        pin_process(child.pid, cores[:1])
        for thread in os.listdir(f"/proc/{child.pid}/task"):
            assert sorted(os.sched_getaffinity(int(thread))) == cores[:1]
    finally:
        child.kill()
        child.wait()
