"""placer: learn where the operations of a TensorFlow training graph should run.

The core library: training-step graphs (`placer.graph`), devices (`placer.devices`), placements
(`placer.placement`), plans: machine use + placement + schedule (`placer.plan`), measured step time
(`placer.measure`) and a local multi-device testbed (`placer.testbed`). Importing `placer` does not import TensorFlow; the submodules that need it do.
"""

__version__ = "0.1.0"
