"""Learn a placement for Transformer base (6+6 layers, d_model 512).

Defaults are the paper's setting (agents/experiment/config.py PAPER_SETTINGS: paper-size graph, the
hierarchical planner with the tuned preset (`--preset reference`: the reference planner's
hyper-parameters), simulated on the modeled GPU machine of the
papers' experiments); every setting can be overridden here or from a config file:

    python experiments/train_transformer.py                                  # the paper's setting
    python experiments/train_transformer.py --updates 200 --set learning_rate=0.01
    python experiments/train_transformer.py --size tiny --backend measured --cluster local:2 --time-budget 10
    python experiments/train_transformer.py --config my_run.yaml --print-config

The run goes to runs/transformer/<timestamp>/; watch it with `placer dashboard runs/transformer`.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from agents.experiment.config import paper_setting  # noqa: E402
from agents.launch import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(defaults=paper_setting("transformer"), prog="train_transformer.py", description=__doc__))
