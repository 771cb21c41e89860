"""`build_model_apart`: a built-in model's step built in a process of its own, for searches that build the same
model at several batches.

A step's weights and optimizer state stay in the process that built it for as long as it lives: TensorFlow keeps
them past the graph's last reference (3.4 GB for Llama at paper size, built again: 3.4 GB more). A search that
builds a paper-size model at several batches (a replica's slice, a micro-batch) would hold one copy per build, and
two of Llama's searches ran out of 24 GiB. The graph itself is small (3.3 MB pickled for Llama), so it is built in a
child process and comes back pickled. Run as `python -m placer.models.apart NAME SIZE BATCH OUT PARENT_PID`.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from placer.errors import GraphBuildError

APART_SIZES = ("paper",)
"""Sizes built apart; the others are cheap enough to build in the caller's process."""


def build_model_apart(name: str, size: str = "tiny", batch: int | None = None):
    """`placer.models.build_model(name, size, batch)`, in a process of its own at the sizes of `APART_SIZES`. Bad
    input is refused here, before any process starts; a build that fails in the child raises its error here. A
    model function (`placer.models.load_model`) is built in this process: the user's model, at the size it has."""
    from placer.models.loader import is_builtin_model, load_model
    from placer.models.registry import build_model, check_batch, require_size

    if not is_builtin_model(name):
        return load_model(name, size, batch)
    require_size(name, size)
    check_batch(name, size, batch)
    if size not in APART_SIZES:
        return build_model(name, size, batch)
    with tempfile.TemporaryDirectory(prefix="placer-build-") as folder:
        out = Path(folder) / "graph.pickle"
        done = subprocess.run([sys.executable, "-m", "placer.models.apart", name, size, str(batch or 0), str(out),
                               str(os.getpid())], capture_output=True, text=True)
        if done.returncode != 0 or not out.exists():
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise GraphBuildError(f"building {name} ({size}, batch {batch}) in a process of its own failed "
                                  f"(exit {done.returncode}): {last}")
        return pickle.loads(out.read_bytes())


def main(argv: list[str]) -> int:
    name, size, batch, out, parent = argv
    from placer import tf_logs
    from placer.testbed import die_with_parent

    die_with_parent(int(parent))  # a build must not outlive the search that asked for it
    tf_logs.configure()
    from placer.models.registry import build_model

    graph = build_model(name, size, int(batch) or None)
    Path(out).write_bytes(pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
