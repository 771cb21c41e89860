"""Functional control flow (`While`, `If`, `Case`) in a placeable graph: which ops hold a body, and which traced
nodes of a step belong to which of them.

A step traced from `tf.function` keeps each loop and conditional as one op whose body lives in the graph's
function library. When a session runs it, TensorFlow lowers the op into frame nodes (Enter, Merge, Switch,
NextIteration, Exit, LoopCond) and inlines its body, all on the op's device, and names every node it makes
after the op: `<op>/body/_7/<body node>`, `<op>/merge/_3`, `Func/<op>/body/...`, and a gradient loop's
`<op>/<forward loop's body path>`. A traced step therefore shows the body's ops, once per iteration, under
names the graph does not have; `owner` finds the op they belong to, so that a loop is charged its body's time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

CONTROL_FLOW_OPS = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"})
LOOP_OPS = frozenset({"While", "StatelessWhile"})
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
"""Function calls. A traced step inlines them, except the calls TensorFlow compiles with XLA
(`placer.graph.tf_function`): those stay one op each, whose body, like a loop's, is in the function library."""

LOOP_CONDITION_OP = "LoopCond"
"""The lowered node that decides, once per iteration and once more to leave, whether a loop goes on."""

_INLINED_FUNCTION_PREFIX = "Func/"  # the Identity nodes carrying an inlined body's inputs and outputs


def control_flow_ops(op_types: Mapping[str, str]) -> frozenset[str]:
    """Names of the ops (of `op name -> op type`) whose bodies TensorFlow lowers and inlines when it runs them."""
    return frozenset(name for name, op_type in op_types.items() if op_type in CONTROL_FLOW_OPS)


def owner(node_name: str, owners: frozenset[str]) -> str | None:
    """The control-flow op of `owners` that a traced node `node_name` was lowered from, or None.

    Only for names the graph itself lacks: an op of the graph may well be named under a loop's name (Keras's
    `lstm/while/loop_counter` is a Const outside the loop). Of nested owners the outermost wins: an inner
    loop runs inside its outer one's body, and only the outer one is a placeable op.
    """
    if not owners:
        return None
    if node_name.startswith(_INLINED_FUNCTION_PREFIX):
        node_name = node_name[len(_INLINED_FUNCTION_PREFIX):]
    cut = node_name.find("/")
    while cut != -1:
        if node_name[:cut] in owners:
            return node_name[:cut]
        cut = node_name.find("/", cut + 1)
    return None


def iterations(condition_runs: Iterable[int]) -> int | None:
    """A loop's iterations per step from how often its lowered `LoopCond` nodes ran: the outer condition runs once
    per iteration and once to leave; a nested loop's condition runs more often, so the fewest runs are the outer's."""
    runs = [count for count in condition_runs if count > 0]
    return min(runs) - 1 if runs else None
