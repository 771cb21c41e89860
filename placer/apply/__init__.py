"""Use an exported placement in your own training: check that it was made for your graph, put its devices on
your graph's ops (`place`), and run real training steps of the placed graph (`run`).

The graph route is exact: a placement names a device per op of a TF1-style graph (a tf-keras model in graph
mode, a graph-building function, or a TF2 step traced by `graph_from_tf_function`), and `place_graph` sets
those devices on the same ops of the graph your code builds. TF2 eager code places per `tf.device` scope,
not per op name, so for a `tf.function` step the placed graph runs through placer's session route
(`place_tf_function` + `run_training`); `placement_mapping` gives the raw op -> device mapping. The file
itself is read by `placer.placement.read_placement_file`. `run_with_schedule` runs a placement over
micro-batches in the order of a schedule plan (`placer.schedule`). `use_plan_pools` gives your own TensorFlow 2
process the thread pools of a plan that runs in one process (what `placer optimize` recommended for 14 of 15
Keras families on a 2-core machine, docs/results/keras-models.md).
"""

from placer.apply.place import (
    UNCOVERED_POLICIES, PlacementReport, UncoveredOp, as_placement_file, place_graph, place_tf_function,
)
from placer.apply.pools import use_plan_pools
from placer.apply.run import APPLY_CONFIG, run_training
from placer.apply.scheduled import run_with_schedule
from placer.placement import (
    PlacementFile, check_same_graph, placement_file_from_json_dict, placement_mapping, read_placement_file,
)

# The names the first placer.apply gave the placement file's record and reader (still in users' code).
ExportedPlacement = PlacementFile
load_exported_placement = read_placement_file
exported_placement_from_json_dict = placement_file_from_json_dict

__all__ = [
    "APPLY_CONFIG", "UNCOVERED_POLICIES", "ExportedPlacement", "PlacementFile", "PlacementReport", "UncoveredOp",
    "as_placement_file", "check_same_graph", "exported_placement_from_json_dict", "load_exported_placement",
    "place_graph", "place_tf_function", "placement_file_from_json_dict", "placement_mapping", "read_placement_file",
    "run_training", "run_with_schedule", "use_plan_pools",
]
