"""`placer dashboard FOLDER`: one run, or every run under a folder side by side, in TensorBoard with our
"Step time" tab first (`placer.dashboard.step_time`).

TensorBoard is bound to 127.0.0.1 only: like the testbed's gRPC servers, nothing this project starts
is reachable from outside the machine (reach it from elsewhere through an SSH tunnel).
"""

from __future__ import annotations

import time
from pathlib import Path

from placer.errors import PlacerError


def start(folder: str | Path, port: int = 6006) -> str:
    """Start TensorBoard in this process, in the background; returns its URL."""
    path = Path(folder)
    if not path.is_dir():
        raise PlacerError(f"{path} is not a directory: give a run directory (runs/<model>/<timestamp>), "
                          "runs/<model> or runs/")
    if not any(path.rglob("events.out.tfevents.*")):
        raise PlacerError(f"{path} holds no run of `placer train` (no TensorBoard event files under it): give a run "
                          "directory (runs/<model>/<timestamp>), runs/<model> or runs/")
    try:
        from tensorboard import default, program
    except ImportError:
        raise PlacerError("the dashboard needs TensorBoard: pip install tensorboard") from None
    from placer.dashboard.step_time import make_plugin

    # The step-time tab first: TensorBoard opens on the first of its plugins.
    board = program.TensorBoard(plugins=[make_plugin(path.resolve().name), *default.get_plugins()])
    board.configure(argv=[None, "--logdir", str(path), "--host", "127.0.0.1", "--port", str(port),
                          "--reload_interval", "5"])
    try:
        return board.launch()
    except program.TensorBoardServerException as error:
        raise PlacerError(f"cannot start TensorBoard: {error.msg} (try another --port)") from None


def serve(folder: str | Path, port: int = 6006) -> None:
    """Start TensorBoard and keep it up until interrupted."""
    from placer.dashboard.step_time import PLUGIN_NAME

    url = start(folder, port)
    print(f"TensorBoard for {folder} at {url} (Ctrl-C to stop)\n"
          f"  step time of every run, against every baseline, in ms: {url}#{PLUGIN_NAME}\n"
          f"  TensorBoard's own charts: {url}#timeseries", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
