"""Loop/Scan body nodes that read nothing of the loop moved out of the body."""

from __future__ import annotations

import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import graph_of
from jax2onnx_nn.core.ir.walk import graph_nodes

_HOISTABLE = frozenset(
    {
        "Constant",
        "Identity",
        "Split",
        "Unsqueeze",
        "Squeeze",
        "Reshape",
        "Transpose",
        "Concat",
        "Cast",
        "Shape",
        "Add",
        "Sub",
        "Mul",
        "Neg",
        "Abs",
        "Min",
        "Max",
        "Exp",
        "Sqrt",
        "Reciprocal",
        "Not",
        "And",
        "Or",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "Where",
        "Expand",
        "Range",
        "Slice",
    }
)


@rewrite("Loop", "Scan")
def hoist_loop_invariants(model: ir.Model) -> int:
    """Move nodes of a ``Loop`` or ``Scan`` body whose inputs all come from outside the body
    (constants, values of the enclosing graph, or such nodes) in front of the loop, so that
    they run once instead of once per iteration. Only ops without side effects or failure
    modes (:data:`_HOISTABLE`) move, and never a node making a body output. One walk over
    each body, inner loops first, so that work invariant in every loop around it moves out of
    all of them (into the main graph, where constant folding sees it: the shift amounts of a
    ``jax.random`` kernel in a ``while_loop`` in a ``lax.map``). The main graph and function
    bodies. Returns the number of nodes moved."""
    moved = 0
    graphs = [model.graph, *(f.graph for f in model.functions.values())]
    for graph in graphs:
        # the traversal meets a loop before the loops in its body: reversed, inner ones first
        for loop in reversed(graph_nodes(graph)):
            if (
                loop.domain != ""
                or loop.op_type not in ("Loop", "Scan")
                or "body" not in loop.attributes
            ):
                continue
            body = loop.attributes["body"].value
            outer = graph_of(loop)
            inside: set[int] = {id(v) for v in body.inputs}
            for node in list(body):
                if (
                    node.domain != ""
                    or node.op_type not in _HOISTABLE
                    or any(a.type == ir.AttributeType.GRAPH for a in node.attributes.values())
                    or any(v is not None and id(v) in inside for v in node.inputs)
                    or any(o.is_graph_output() for o in node.outputs)
                ):
                    inside.update(id(o) for o in node.outputs)
                    continue
                body.remove(node)
                outer.insert_before(loop, node)
                moved += 1
    return moved


# -- dead loop state: carries and stacked outputs nobody reads ---------------------------
