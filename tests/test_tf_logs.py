"""TensorFlow's own log lines stay out of placer's output and error messages, unless --verbose."""

import subprocess
import sys

from placer import tf_logs

WORKER_LOG = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795436441.180013    3275 port.cc:153] oneDNN custom operations are on. You may see slightly different numerical results.
I0000 00:00:1795436441.180387    3275 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
E0000 00:00:1795436455.291463    3275 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
2024-05-01 10:00:00.123456: W tensorflow/core/framework/op_kernel.cc:1827] OP_REQUIRES failed at save_restore.cc:42
Traceback (most recent call last):
  File "placer/measure/worker.py", line 50, in main
    servers = start_servers(args.testbed_workers)
E1123 12:20:45.383000 140123 util.cc:131] oneDNN supports DT_INT64 only on platforms with AVX-512.
ValueError: no free port
"""


def test_log_tail_keeps_a_python_traceback_and_drops_tensorflow_log_lines(monkeypatch):
    monkeypatch.delenv(tf_logs.VERBOSE_ENV, raising=False)
    assert tf_logs.log_tail(WORKER_LOG, 10) == [
        "Traceback (most recent call last):",
        '  File "placer/measure/worker.py", line 50, in main',
        "    servers = start_servers(args.testbed_workers)",
        "ValueError: no free port",
    ]
    assert tf_logs.log_tail(WORKER_LOG, 1) == ["ValueError: no free port"]


def test_a_fatal_tensorflow_line_is_kept_because_it_says_why_the_process_died():
    fatal = "F0000 00:00:1795436455.291463    3275 tensor.cc:711] Check failed: IsAligned()"
    assert tf_logs.without_tf_log_lines([fatal, "I0000 00:00:1.0    1 port.cc:1] noise"]) == [fatal]


def test_verbose_log_tail_keeps_tensorflow_log_lines(monkeypatch):
    monkeypatch.setenv(tf_logs.VERBOSE_ENV, "1")
    assert any("cuInit" in line for line in tf_logs.log_tail(WORKER_LOG, 20))


def test_importing_tensorflow_after_configure_prints_only_what_is_not_tensorflow_s_log():
    script = ("import sys, warnings\n"
              "from placer import tf_logs\n"
              "tf_logs.configure()\n"
              "print('before', file=sys.stderr)\n"
              "import tensorflow as tf\n"
              "tf.reduce_sum(tf.constant([1, 2], dtype=tf.int64)).numpy()\n"  # logged an ERROR at level 2
              "print('after', file=sys.stderr)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.splitlines() == ["before", "after"]
