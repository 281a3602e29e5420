"""The one walker over a model's nodes: graphs, Loop/Scan/If bodies, function bodies."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir


def graph_nodes(graph: ir.Graph | ir.Function) -> list[ir.Node]:
    """Every node of ``graph`` and of its body graphs, each node before the nodes of its
    bodies: the order of ``ir.traversal.RecursiveGraphIterator``, at half its cost (it makes
    a generator per node; the passes walk the whole model several times per export)."""
    nodes: list[ir.Node] = []

    def walk(g: Any) -> None:
        for node in g:
            nodes.append(node)
            for body in node_bodies(node):
                walk(body)

    walk(graph)
    return nodes


# The ops of the default domain that have graph attributes: any other op of that domain has
# none, which spares the passes a look at every attribute of every node on each walk.
_BODY_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def node_bodies(node: ir.Node) -> list[ir.Graph]:
    """The graphs in ``node``'s attributes: a Loop's or Scan's body, an If's branches (none for
    a reference to a function's attribute)."""
    if node.op_type not in _BODY_OPS and node.domain in ("", "ai.onnx"):
        return []
    bodies: list[ir.Graph] = []
    for attr in node.attributes.values():
        if attr.is_ref():
            continue
        if attr.type == ir.AttributeType.GRAPH:
            bodies.append(attr.value)
        elif attr.type == ir.AttributeType.GRAPHS:
            bodies.extend(attr.value)
    return bodies


def all_nodes(model: ir.Model) -> list[tuple[ir.Node, bool]]:
    """Every node of the main graph (with its subgraphs) and of the function bodies, with
    whether it lives in a function (whose constants must be Constant nodes of its own)."""
    nodes = [(n, False) for n in graph_nodes(model.graph)]
    for function in model.functions.values():
        nodes.extend((n, True) for n in graph_nodes(function))
    return nodes


def graphs(model: ir.Model) -> list[ir.Graph]:
    """The main graph, the function bodies, and every subgraph (Loop/Scan/If bodies) in them."""
    graphs: list[ir.Graph] = []
    pending = [model.graph, *(f.graph for f in model.functions.values())]
    while pending:
        graph = pending.pop()
        graphs.append(graph)
        for node in graph:
            pending.extend(node_bodies(node))
    return graphs


def subgraphs(graph: ir.Graph) -> list[ir.Graph]:
    """The graphs in the attributes of ``graph``'s nodes, at any depth."""
    return [body for inner in graph_nodes(graph) for body in node_bodies(inner)]
