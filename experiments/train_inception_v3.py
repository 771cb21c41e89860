"""Learn a placement for Inception-V3 (tf-keras reference, batch 32 at 299x299).

Defaults are the paper's setting (agents/experiment/config.py PAPER_SETTINGS: paper-size graph, the
hierarchical planner with the tuned preset (`--preset reference`: the reference planner's
hyper-parameters), simulated on the modeled GPU machine of the
papers' experiments); every setting can be overridden here or from a config file:

    python experiments/train_inception_v3.py                                  # the paper's setting
    python experiments/train_inception_v3.py --updates 200 --set learning_rate=0.01
    python experiments/train_inception_v3.py --size tiny --backend measured --cluster local:2 --time-budget 10
    python experiments/train_inception_v3.py --config my_run.yaml --print-config

The run goes to runs/inception-v3/<timestamp>/; watch it with `placer dashboard runs/inception-v3`.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from agents.experiment.config import paper_setting  # noqa: E402
from agents.launch import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(defaults=paper_setting("inception-v3"), prog="train_inception_v3.py", description=__doc__))
