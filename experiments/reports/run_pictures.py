"""One PNG of a run of `placer train`: step time per update against every baseline, the best placement per
device, and one traced (or simulated) step of it per device (`agents.experiment.pictures`).

    python experiments/reports/run_pictures.py runs/two-tower/<timestamp> --out run.png

README's picture, docs/main-job.png, is this command on a run of the README's main job.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()  # before anything imports TensorFlow: the run's files are read through agents/


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a run directory of `placer train` (runs/<model>/<timestamp>)")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--dpi", type=int, default=80, help="pixels per inch (80: about 900 pixels wide)")
    args = parser.parse_args(argv)

    from agents.experiment.pictures import save_run_picture
    from placer.errors import PlacerError

    try:
        print(f"wrote {save_run_picture(args.run_dir, args.out, args.dpi)}")
    except PlacerError as error:
        print(f"run_pictures.py: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
