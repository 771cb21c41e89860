"""Keep TensorFlow's C++ log lines ("oneDNN custom operations are on", "failed call to cuInit", ...) out of
placer's output unless the user asks for them with --verbose; real errors and tracebacks still show.

Why TF_CPP_MIN_LOG_LEVEL=2 alone let them through (TensorFlow 2.21, checked on a 2-core CPU machine):
- Level 2 hides INFO and WARNING only; "E0000 ... failed call to cuInit: UNKNOWN ERROR (303)" and
  "oneDNN supports DT_INT64 only on platforms with AVX-512" are ERROR lines, harmless on a CPU machine.
  Quiet mode sets level 3, which still lets FATAL lines (a crash's reason) through.
- `import tensorflow` loads shared libraries that log ("oneDNN custom operations are on", "Could not find cuda
  drivers", absl's "WARNING: All log messages before absl::InitializeLog() ...") before TensorFlow reads
  the variable, at any level. So the first `import tensorflow` runs with file descriptor 2 captured and
  everything but those lines is written back afterwards (a hook, so that commands that never need TensorFlow
  do not pay for importing it).
- Child processes (the measurement worker, the testbed's gRPC workers) inherit the level through the
  environment; their stderr goes to log files, and `log_tail` drops TensorFlow's lines from the tails
  pasted into error messages.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
from typing import Iterable, Iterator

VERBOSE_ENV = "PLACER_VERBOSE"
"""Set to 1 by `configure(verbose=True)`; child processes inherit it and keep TensorFlow's lines in log tails."""

# absl's format, e.g. "I0000 00:00:1795436441.180013    3275 port.cc:153] oneDNN custom operations are on";
# and the older format of TensorFlow's own logger, "2024-01-01 12:00:00.000000: W tensorflow/core/...cc:42] ...".
# FATAL ("F...") is left out on purpose: it says why a process died.
_TF_LOG_LINE = re.compile(
    r"^(?:[IWE]\d{4} [\d:.]+\s+\d+ [^\s\]]+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] [^\s\]]+:\d+\])"
)
# Lines TensorFlow prints without the format: absl's notice, and the second line of cpu_feature_guard's INFO.
_TF_NOTICES = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "To enable the following instructions:",
)


def configure(verbose: bool = False) -> None:
    """Entry points call this before anything imports TensorFlow: quiet unless `verbose` (as before: the
    user's TF_CPP_MIN_LOG_LEVEL, else 2, and every line TensorFlow prints at import)."""
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        return
    os.environ.pop(VERBOSE_ENV, None)
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    if "tensorflow" not in sys.modules and not any(isinstance(f, _QuietTensorFlowImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietTensorFlowImport())


def verbose() -> bool:
    """True under --verbose, in the process that parsed it and in the processes it starts."""
    return os.environ.get(VERBOSE_ENV) == "1"


def is_tf_log_line(line: str) -> bool:
    """True for a TensorFlow/absl log line below FATAL, or one of TensorFlow's unformatted notices."""
    return bool(_TF_LOG_LINE.match(line)) or line.startswith(_TF_NOTICES)


def without_tf_log_lines(lines: Iterable[str]) -> list[str]:
    """`lines` without TensorFlow's log lines; Python tracebacks, FATAL lines and anything else stay."""
    return [line for line in lines if not is_tf_log_line(line)]


def log_tail(text: str, lines: int) -> list[str]:
    """The last `lines` non-blank lines of a worker's log that are worth pasting into an error message:
    TensorFlow's log lines are dropped unless --verbose."""
    kept = [line for line in text.splitlines() if line.strip()]
    if not verbose():
        kept = without_tf_log_lines(kept)
    return kept[-lines:]


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` the first time it is imported and has its loader run with stderr captured."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)  # once: the import below, and later ones, go the usual way
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # nothing keeps a reference to this wrapper
        with _tf_log_lines_dropped_from_stderr():
            self.loader.exec_module(module)


@contextlib.contextmanager
def _tf_log_lines_dropped_from_stderr() -> Iterator[None]:
    """Capture file descriptor 2 (C++ writes there, not to sys.stderr); write back all but TF's log lines.

    If the process dies inside the block (say TensorFlow aborts on a CPU without AVX), what it printed is
    lost: run with --verbose to see it.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no stderr to capture
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="surrogateescape")
            kept = without_tf_log_lines(text.splitlines())
            data = "".join(line + "\n" for line in kept).encode(errors="surrogateescape")
            while data:
                data = data[os.write(2, data):]
