"""Value names unique in each scope: the main graph with every Loop/Scan/If body under it, and
each function with the bodies under it.

ONNX requires single static assignment across a graph and its subgraphs (onnxruntime refuses
a model whose If branch defines a name its enclosing graph defines: "Graph must be in single
static assignment (SSA) form"). onnx-ir names a value added without a name per graph
(``val_0`` in each body), so a pass that adds nodes to a body and to its enclosing graph can
write the same name twice; here the later definitions take a fresh name. The main graph's
inputs and outputs, and any name already unique, are kept."""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from jax2onnx_nn.core.ir.walk import subgraphs


def _defined(graph: ir.Graph) -> Iterator[ir.Value]:
    yield from graph.inputs
    yield from graph.initializers.values()
    for node in graph:
        yield from node.outputs


def _unique_in_scope(top: ir.Graph) -> int:
    taken: set[str] = set()
    renamed = 0
    for graph in (top, *subgraphs(top)):
        for value in _defined(graph):
            name = value.name
            if not name:
                continue
            if name in taken:
                i = 1
                while f"{name}_{i}" in taken:
                    i += 1
                name = f"{name}_{i}"
                value.name = name
                renamed += 1
            taken.add(name)
    return renamed


def unique_value_names(model: ir.Model) -> int:
    """Rename the values defined twice in one scope (see the module docstring); returns how
    many were renamed."""
    renamed = _unique_in_scope(model.graph)
    for function in model.functions.values():
        renamed += _unique_in_scope(function.graph)
    return renamed
