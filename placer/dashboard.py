"""`placer dashboard RUN_DIR`: TensorBoard for one run, or for a folder of runs side by side.

TensorBoard is bound to 127.0.0.1 only: like the testbed's gRPC servers, nothing this project starts
is reachable from outside the machine (reach it from elsewhere through an SSH tunnel).
"""

from __future__ import annotations

import time
from pathlib import Path

from placer.errors import PlacerError


def start(run_dir: str | Path, port: int = 6006) -> str:
    """Start TensorBoard in this process, in the background; returns its URL."""
    path = Path(run_dir)
    if not path.is_dir():
        raise PlacerError(f"{path} is not a directory: give a run directory (runs/<model>/<timestamp>) or runs/")
    if not any(path.rglob("events.out.tfevents.*")):
        raise PlacerError(f"{path} has no TensorBoard event files yet: is it a run directory of `placer train`?")
    try:
        from tensorboard import program
    except ImportError:
        raise PlacerError("the dashboard needs TensorBoard: pip install tensorboard") from None

    board = program.TensorBoard()
    board.configure(argv=[None, "--logdir", str(path), "--host", "127.0.0.1", "--port", str(port),
                          "--reload_interval", "5"])
    try:
        return board.launch()
    except program.TensorBoardServerException as error:
        raise PlacerError(f"cannot start TensorBoard: {error.msg} (try another --port)") from None


def serve(run_dir: str | Path, port: int = 6006) -> None:
    """Start TensorBoard and keep it up until interrupted."""
    url = start(run_dir, port)
    print(f"TensorBoard for {run_dir} at {url} (Ctrl-C to stop)\n"
          f"  step time against every baseline: {url}#custom_scalars", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
