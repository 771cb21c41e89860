"""What `placer pretrain` trains on unless told otherwise (no TensorFlow here: the command line reads these
while it builds its flags, before it quiets TensorFlow's log)."""

MODELS = ("two-tower", "mlp", "rnnlm", "nmt-2")
SIZES = ("tiny",)
MACHINES = ("modeled:2xV100", "modeled:4xV100", "modeled:8xV100")
GENERATED = 2
"""Generated branchy graphs (placer.models.branchy) trained on besides the models: seeds 0, 1, ..."""
HELD_OUT_SEED = 1000
"""Generated graphs from this seed on are never trained on: benchmarks hold them out."""
UPDATES = 200
IMITATION_UPDATES = 0
"""Updates of imitating each pair's best heuristic before the updates on rewards."""
SAMPLES_PER_UPDATE = 4
