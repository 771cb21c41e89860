"""What `placer pretrain` trains on unless told otherwise (no TensorFlow here: the command line reads these
while it builds its flags, before it quiets TensorFlow's log)."""

MODELS = ("two-tower", "mlp", "rnnlm", "nmt-2")
SIZES = ("tiny",)
MACHINES = ("modeled:2xV100", "modeled:4xV100")
UPDATES = 200
SAMPLES_PER_UPDATE = 4
