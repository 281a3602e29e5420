"""Common subexpressions merged, in every graph."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from jax2onnx_nn.core.ir.values import attributes_key
from jax2onnx_nn.core.ir.walk import graphs

_NON_DETERMINISTIC = frozenset(
    {
        "RandomUniform",
        "RandomNormal",
        "RandomUniformLike",
        "RandomNormalLike",
        "Multinomial",
        "Bernoulli",
    }
)


def _node_key(node: ir.Node) -> tuple[Any, ...] | None:
    """What makes two nodes compute the same values: op, inputs (by identity) and
    attributes; None for a node that is never merged (a body, randomness, a large tensor)."""
    if node.op_type in _NON_DETERMINISTIC:
        return None
    attrs = attributes_key(node)
    if attrs is None:
        return None
    return (node.op_identifier(), len(node.outputs), tuple(id(v) for v in node.inputs), attrs)


def eliminate_common_subexpressions(model: ir.Model) -> int:
    """Nodes of one graph computing the same op on the same inputs with the same attributes
    become one (the first): in the main graph, in function bodies and in Loop/Scan/If bodies,
    where a duplicate runs once per iteration (``u[1:-1]`` read twice by a stencil). A node
    making a graph output stays (the output keeps its own value). One walk per graph, nodes in
    order, so a chain of duplicates merges at once. Returns the number of nodes merged."""
    merged = 0
    for graph in graphs(model):
        seen: dict[tuple[Any, ...], ir.Node] = {}
        for node in list(graph):
            key = _node_key(node)
            if key is None:
                continue
            first = seen.setdefault(key, node)
            if first is node or any(o.is_graph_output() for o in node.outputs):
                continue
            for old, new in zip(node.outputs, first.outputs, strict=True):
                old.replace_all_uses_with(new)
            graph.remove(node, safe=True)
            merged += 1
    return merged
