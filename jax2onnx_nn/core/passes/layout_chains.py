"""Chains of layout ops (Transpose, Reshape, Cast) cancelled or shortened."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import is_required, numpy_tensor
from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import graph_of, new_constant, renamable, take_place
from jax2onnx_nn.core.ir.values import reshape_dims, same_shape
from jax2onnx_nn.core.ir.walk import graph_nodes

# -- chains of layout ops -------------------------------------------------------------------

_SHAPE_OPS = frozenset(
    {"Reshape", "Squeeze", "Unsqueeze", "Flatten"}
)  # move no element, keep order
_D = ir.DataType
# dtype -> the dtypes that hold each of its values exactly (a cast there and back is the identity)
_WIDER: dict[ir.DataType, frozenset[ir.DataType]] = {
    _D.BOOL: frozenset(
        {
            _D.INT8,
            _D.UINT8,
            _D.INT16,
            _D.UINT16,
            _D.INT32,
            _D.UINT32,
            _D.INT64,
            _D.UINT64,
            _D.FLOAT16,
            _D.BFLOAT16,
            _D.FLOAT,
            _D.DOUBLE,
        }
    ),
    _D.INT8: frozenset(
        {_D.INT16, _D.INT32, _D.INT64, _D.FLOAT16, _D.BFLOAT16, _D.FLOAT, _D.DOUBLE}
    ),
    _D.UINT8: frozenset(
        {
            _D.INT16,
            _D.UINT16,
            _D.INT32,
            _D.UINT32,
            _D.INT64,
            _D.UINT64,
            _D.FLOAT16,
            _D.FLOAT,
            _D.DOUBLE,
        }
    ),
    _D.INT16: frozenset({_D.INT32, _D.INT64, _D.FLOAT, _D.DOUBLE}),
    _D.UINT16: frozenset({_D.INT32, _D.UINT32, _D.INT64, _D.UINT64, _D.FLOAT, _D.DOUBLE}),
    _D.INT32: frozenset({_D.INT64, _D.DOUBLE}),
    _D.UINT32: frozenset({_D.INT64, _D.UINT64, _D.DOUBLE}),
    _D.FLOAT16: frozenset({_D.FLOAT, _D.DOUBLE}),
    _D.BFLOAT16: frozenset({_D.FLOAT, _D.DOUBLE}),
    _D.FLOAT: frozenset({_D.DOUBLE}),
}


def _shortcut(node: ir.Node, model: ir.Model | None) -> ir.Value | None:
    """What ``node`` (a layout op fed by another one) computes, from the chain's source: the
    source itself when the pair is the identity, a new single node's output, or None. A new
    Reshape's shape is an initializer of ``model``, or a Constant node without one (in a
    function body)."""
    (source_value, *_rest) = node.inputs
    producer = source_value.producer() if source_value is not None else None
    if is_required(producer):
        producer = None  # a required node is not looked through either
    out = node.outputs[0]
    if node.op_type == "Cast":
        to = ir.DataType(node.attributes["to"].value)
        if source_value is not None and source_value.dtype == to:
            return source_value  # a cast to the dtype it has
        if producer is None or producer.op_type != "Cast" or producer.domain != "":
            return None
        x = producer.inputs[0]
        if (
            x is None
            or x.dtype is None
            or ir.DataType(producer.attributes["to"].value) not in _WIDER.get(x.dtype, ())
        ):
            return None  # the first cast rounds or wraps: the pair is not one cast
        if x.dtype == to:
            return x
        return _insert_before(node, "Cast", [x], {"to": to}, out)
    if node.op_type == "Transpose":
        perm = list(node.attributes["perm"].value) if "perm" in node.attributes else None
        if perm is not None and perm == sorted(perm):
            return source_value
        if (
            producer is None
            or producer.op_type != "Transpose"
            or producer.domain != ""
            or perm is None
        ):
            return None
        if "perm" not in producer.attributes:
            return None
        first = list(producer.attributes["perm"].value)
        combined = [first[p] for p in perm]
        x = producer.inputs[0]
        if x is None or combined == sorted(combined):
            return x
        return _insert_before(node, "Transpose", [x], {"perm": combined}, out)
    # Reshape / Squeeze / Unsqueeze / Flatten
    if source_value is not None and same_shape(source_value, out):
        return source_value
    if producer is None or producer.op_type not in _SHAPE_OPS or producer.domain != "":
        return None
    x = producer.inputs[0]
    if x is None:
        return None
    if same_shape(x, out):
        return x
    dims = reshape_dims(x, out, infer=True)
    if dims is None:
        return None
    if model is not None:
        return _insert_before(
            node,
            "Reshape",
            [x, new_constant(model, node, np.asarray(dims, np.int64), False)],
            {},
            out,
        )
    shape = ir.Value(
        name=None,
        shape=ir.Shape([len(dims)]),
        type=ir.TensorType(ir.DataType.INT64),
        const_value=numpy_tensor(np.asarray(dims, np.int64)),
    )
    return _insert_before(node, "Reshape", [x, shape], {}, out, constant=shape)


def _insert_before(
    node: ir.Node,
    op_type: str,
    inputs: list[ir.Value],
    attributes: dict[str, Any],
    like: ir.Value,
    constant: ir.Value | None = None,
) -> ir.Value:
    """A new node computing ``like`` from ``inputs``, placed before ``node`` (a small constant
    operand becomes a Constant node: it works in functions and subgraphs alike). Its values
    are named after ``like``: onnx_ir would number unnamed ones per graph (``val_0``), and a
    Loop body's names must differ from the outer graph's."""
    owner = graph_of(node)
    new_inputs = list(inputs)
    if constant is not None:
        tensor = constant.const_value
        assert tensor is not None  # the caller made it a constant
        const_node = ir.Node(
            "",
            "Constant",
            [],
            attributes=[ir.AttrTensor("value", tensor)],
            name=f"{node.name}/shape" if node.name else None,
        )
        const_node.outputs[0].shape, const_node.outputs[0].type = constant.shape, constant.type
        const_node.outputs[0].const_value = constant.const_value
        const_node.outputs[0].name = f"{like.name}/shape" if like.name else None
        owner.insert_before(node, const_node)
        new_inputs[new_inputs.index(constant)] = const_node.outputs[0]
    attrs = [
        ir.AttrInt64s(k, v) if isinstance(v, list) else ir.AttrInt64(k, int(v))
        for k, v in attributes.items()
    ]
    new = ir.Node("", op_type, new_inputs, attributes=attrs, name=node.name or None)
    new.outputs[0].shape, new.outputs[0].type = like.shape, like.type
    new.outputs[0].name = f"{like.name}/merged" if like.name else None
    owner.insert_before(node, new)
    return new.outputs[0]


@rewrite(
    "Transpose",
    "Cast",
    *_SHAPE_OPS,
    creates={"Transpose", "Cast", "Reshape", "Constant", "Identity"},
)
def cancel_layout_chains(model: ir.Model) -> int:
    """Back-to-back Transposes, Casts and shape ops (Reshape, Squeeze, Unsqueeze, Flatten) become
    one node, or none when the pair is the identity (``x.T.T``, ``squeeze(expand_dims(x))``, a cast
    to a wider dtype and back); a Transpose with the identity perm, a Cast to the dtype it has and a
    reshape to the shape it has go too. A node marked with
    :func:`~jax2onnx_nn.core.graph.mark_required` stays and is not looked through. Exact: a Cast
    pair is merged only when the first cast is lossless. One walk over every node of the graph, its
    subgraphs and the function bodies, each node looking at its producer only; the nodes left unused
    are removed by the clean-up. Returns the number of nodes bypassed."""
    bypassed = 0
    graphs = [model.graph, *(f.graph for f in model.functions.values())]
    for graph in graphs:
        for node in graph_nodes(graph):
            if (
                node.domain != ""
                or node.op_type not in {"Transpose", "Cast", *_SHAPE_OPS}
                or len(node.outputs) != 1
            ):
                continue
            out = node.outputs[0]
            if not node.inputs or node.inputs[0] is None or is_required(node):
                continue
            replacement = _shortcut(node, model if graph is model.graph else None)
            if replacement is None or replacement is out:
                continue
            if out.is_graph_output() and not renamable(replacement, node.graph):
                # a graph input, a constant or an outer value keeps its name: the output is
                # an Identity of it (a Reshape of (1, 1) to (1, 1) was left as it was)
                replacement = _identity_of(replacement, node)
            take_place(out, replacement)
            bypassed += 1
    return bypassed


def _identity_of(value: ir.Value, before: ir.Node) -> ir.Value:
    """An Identity of ``value`` inserted before ``before`` (whose output it will replace)."""
    node = ir.Node("", "Identity", [value], name=f"{before.name}/identity")
    out = node.outputs[0]
    out.shape, out.type = value.shape, value.type
    graph_of(before).insert_before(before, node)
    return out
