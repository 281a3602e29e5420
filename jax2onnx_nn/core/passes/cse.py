"""Common subexpressions merged, in every graph."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from jax2onnx_nn.core.graph import tensor_bytes
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


_BY_VALUE_BYTES = 1 << 16  # initializers up to this size are told apart by their data


def _input_key(v: ir.Value | None, constants: dict[int, Any]) -> Any:
    """An input by identity, or, for a small initializer, by its data: two constants folded
    apart from one computation (``jnp.arange(T)`` in each layer) read the same."""
    if v is None or v.const_value is None or not v.is_initializer() or v.is_graph_input():
        return id(v)
    key = constants.get(id(v))
    if key is None:
        tensor = v.const_value
        if tensor.nbytes > _BY_VALUE_BYTES:
            key = id(v)
        else:
            key = (tensor.dtype, tuple(tensor.shape.numpy()), bytes(tensor_bytes(tensor)))
        constants[id(v)] = key
    return key


def _node_key(node: ir.Node, constants: dict[int, Any]) -> tuple[Any, ...] | None:
    """What makes two nodes compute the same values: op, inputs (by identity, small
    initializers by value) and attributes; None for a node that is never merged (a body,
    randomness, a large tensor)."""
    if node.op_type in _NON_DETERMINISTIC:
        return None
    attrs = attributes_key(node)
    if attrs is None:
        return None
    inputs = tuple(_input_key(v, constants) for v in node.inputs)
    return (node.op_identifier(), len(node.outputs), inputs, attrs)


def eliminate_common_subexpressions(model: ir.Model) -> int:
    """Nodes of one graph computing the same op on the same inputs with the same attributes
    become one (the first): in the main graph, in function bodies and in Loop/Scan/If bodies,
    where a duplicate runs once per iteration (``u[1:-1]`` read twice by a stencil). A node
    making a graph output stays (the output keeps its own value). One walk per graph, nodes in
    order, so a chain of duplicates merges at once. Returns the number of nodes merged."""
    merged = 0
    constants: dict[int, Any] = {}
    for graph in graphs(model):
        seen: dict[tuple[Any, ...], ir.Node] = {}
        for node in list(graph):
            key = _node_key(node, constants)
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
