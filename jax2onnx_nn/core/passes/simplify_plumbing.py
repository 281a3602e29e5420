"""Shape plumbing simplified: copied dims, identity arithmetic, broadcast Unsqueezes."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import is_required
from jax2onnx_nn.core.ir.edit import new_constant
from jax2onnx_nn.core.ir.values import (
    const_array,
    exact_dtype,
    reshape_dims,
    same_dims,
    same_shape,
)
from jax2onnx_nn.core.ir.walk import all_nodes


def _shape_of(v: ir.Value) -> ir.Shape | None:
    """``v``'s shape; for a value a rule made without one (only equation results are
    stamped before :func:`fill_missing_types`), that of a broadcasting op between one value
    of known shape and size-1 constants of no larger rank."""
    if v.shape is not None:
        return v.shape
    node = v.producer()
    if node is None or node.domain != "" or node.op_type not in _BROADCASTING:
        return None
    shaped = [u for u in node.inputs if u is not None and const_array(u) is None]
    if len(shaped) != 1 or shaped[0].shape is None:
        return None
    rank = len(shaped[0].shape)
    constants = [const_array(c) for c in node.inputs if c is not None and c is not shaped[0]]
    if any(c is None or c.size != 1 or c.ndim > rank for c in constants):
        return None
    return shaped[0].shape


def _identity_operand(node: ir.Node) -> ir.Value | None:
    """The operand ``x`` when ``node`` is ``x * 1``, ``x / 1``, ``x - 0`` or ``x + 0`` by a
    constant that broadcasts to nothing new (all ones dims, rank at most ``x``'s). Exact only:
    for floats ``x + 0`` needs the constant ``-0.0`` (``-0.0 + 0.0`` is ``+0.0``) and ``x - 0``
    the constant ``+0.0``; integers any zero."""
    if (
        node.domain != ""
        or node.op_type not in ("Add", "Sub", "Mul", "Div")
        or len(node.inputs) != 2
    ):
        return None
    out = node.outputs[0]
    for i in (0, 1) if node.op_type in ("Add", "Mul") else (0,):
        x, c = node.inputs[i], node.inputs[1 - i]
        array = const_array(c)
        if (
            x is None
            or array is None
            or array.size != 1
            or x.dtype != out.dtype
            or not same_shape(x, out)
        ):
            continue
        if x.shape is None or array.ndim > len(x.shape):
            continue
        value = array.reshape(()).item()
        integer = exact_dtype(out.dtype)
        if node.op_type in ("Mul", "Div") and value == 1:
            return x
        if node.op_type == "Add" and value == 0 and (integer or np.signbit(array).all()):
            return x
        if node.op_type == "Sub" and value == 0 and (integer or not np.signbit(array).any()):
            return x
    return None


_BROADCASTING = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Mod",
        "Where",
        "And",
        "Or",
        "Xor",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "Max",
        "Min",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
    }
)


def _leading_unsqueeze_source(v: ir.Value | None) -> ir.Value | None:
    """The source of ``v = Unsqueeze(source, [0, ..., k-1])`` or of a Reshape that only puts
    size-1 axes in front (new leading axes only)."""
    node = v.producer() if v is not None else None
    if (
        v is None
        or node is None
        or node.domain != ""
        or len(node.inputs) != 2
        or v.shape is None
        or is_required(node)
    ):
        return None
    source = node.inputs[0]
    if node.op_type == "Reshape":
        if source is None or source.shape is None or len(source.shape) > len(v.shape):
            return None
        k = len(v.shape) - len(source.shape)
        fits = all(d == 1 for d in v.shape[:k]) and same_dims(
            ir.Shape(list(v.shape)[k:]), source.shape
        )
        return source if fits else None
    if node.op_type != "Unsqueeze":
        return None
    axes = const_array(node.inputs[1])
    if axes is None:
        return None
    rank = len(v.shape)
    if sorted(int(a) % rank for a in axes.reshape(-1)) != list(range(axes.size)):
        return None
    return source


def _lower_bound(v: ir.Value | None) -> int | None:
    """A provable lower bound of the integer values of ``v``: ``Range(start, n, step)`` with
    constant ``start`` and ``step > 0`` is at least ``start``; a Cast of it to an integer type
    too when ``n`` is a dim (``Squeeze(Shape(..))``: a dim is below 2**31, so an int32 cast of
    a count up to it does not wrap)."""
    node = v.producer() if v is not None else None
    if v is None or node is None or node.domain != "":
        return None
    if node.op_type == "Cast" and exact_dtype(v.dtype) and v.dtype != ir.DataType.BOOL:
        source = node.inputs[0].producer() if node.inputs[0] is not None else None
        limit = (
            source.inputs[1].producer()
            if source is not None and source.op_type == "Range" and source.inputs[1] is not None
            else None
        )
        shape = (
            limit.inputs[0].producer()
            if limit is not None and limit.op_type == "Squeeze" and limit.inputs[0] is not None
            else None
        )
        if (
            shape is None
            or shape.op_type != "Shape"
            or ir.DataType(node.attributes["to"].value).itemsize < 4
        ):
            return None
        return _lower_bound(node.inputs[0])
    if node.op_type == "Range":
        start, step = (const_array(node.inputs[i]) for i in (0, 2))
        if (
            start is not None
            and step is not None
            and start.size == 1
            and step.size == 1
            and step.item() > 0
        ):
            return int(start.item())
    return None


def _always_true(v: ir.Value | None) -> bool:
    """``v = GreaterOrEqual(x, c)`` with ``c`` a constant at most :func:`_lower_bound` of ``x``."""
    node = v.producer() if v is not None else None
    if node is None or node.domain != "" or node.op_type != "GreaterOrEqual":
        return False
    bound, limit = _lower_bound(node.inputs[0]), const_array(node.inputs[1])
    return bound is not None and limit is not None and limit.size == 1 and bound >= limit.item()


def _copied_dims_shape(node: ir.Node) -> np.ndarray | None:
    """A constant shape for ``Reshape(x, computed_shape)``: 0 (copy) where an output dim is
    the input's symbolic dim at that position, the int where it is static; None when a dim
    is neither or is a static 0 (0 means "copy" without allowzero)."""
    if node.domain != "" or node.op_type != "Reshape" or len(node.inputs) != 2 or is_required(node):
        return None
    x, shape = node.inputs
    out = node.outputs[0]
    if x is None or shape is None or shape.const_value is not None:
        return None
    dims = reshape_dims(x, out)
    return None if dims is None else np.asarray(dims, np.int64)


def simplify_plumbing(model: ir.Model) -> int:
    """Remove the arithmetic and shape computations a lowering writes that compute nothing new:

    - ``x * 1``, ``x / 1``, ``x + 0``, ``x - 0`` (exact cases only, :func:`_identity_operand`),
      as ``jnp.arange`` over a symbolic length writes ``0 + 1 * iota``;
    - ``And(x >= c, y)`` when ``x >= c`` holds for every element (positions from a ``Range``
      checked against a table's lower bound, :func:`_always_true`) is ``y``;
    - an ``Unsqueeze`` (or Reshape) adding leading axes before an op that broadcasts (numpy
      rules add them anyway) when another operand has at least that rank;
    - a ``Reshape`` whose shape is computed at run time (``Concat`` of ``Shape`` pieces for a
      symbolic batch) gets a constant shape when each dim is static or copies the input's
      dim at its position (ONNX's 0), so the computation goes.

    One walk over the main graph, its subgraphs and the function bodies. Returns the number
    of rewrites; the nodes left unused are removed by the clean-up."""
    rewritten = 0
    for node, in_function in all_nodes(model):
        if node.graph is None or not node.outputs:
            continue
        out = node.outputs[0]
        x = _identity_operand(node)
        if x is not None and not out.is_graph_output():
            out.replace_all_uses_with(x)
            rewritten += 1
            continue
        if node.domain == "" and node.op_type == "And" and not out.is_graph_output():
            kept = [
                b
                for a, b in (node.inputs, node.inputs[::-1])
                if a is not None
                and b is not None
                and _always_true(a)
                and same_dims(_shape_of(b), _shape_of(a))
            ]
            if kept:
                out.replace_all_uses_with(kept[0])
                rewritten += 1
                continue
        if node.domain == "" and node.op_type in _BROADCASTING and out.shape is not None:
            for i, v in enumerate(node.inputs):
                source = _leading_unsqueeze_source(v)
                others = [u.shape for j, u in enumerate(node.inputs) if j != i and u is not None]
                ranks = [len(shape) for shape in others if shape is not None]
                if source is None or v is None or v.shape is None or len(ranks) != len(others):
                    continue
                if max(ranks, default=0) >= len(v.shape):
                    node.replace_input_with(i, source)
                    rewritten += 1
        dims = _copied_dims_shape(node)
        if dims is not None:
            node.replace_input_with(1, new_constant(model, node, dims, in_function))
            if "allowzero" in node.attributes:
                del node.attributes["allowzero"]
            rewritten += 1
    return rewritten
