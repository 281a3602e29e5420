"""The dequantization of an integer weight as one ``DequantizeLinear``.

JAX dequantizes a weight as ``convert(q) * scale``, with ``- zero_point`` before the
multiply for an asymmetric scheme, and a tiled scale as ``reshape -> multiply -> reshape``
(one scale per tile of ``block`` elements along one axis). Lowered, that is
``Cast [-> Reshape] [-> Sub] -> Mul [-> Reshape] [-> Transpose]`` on constants, which the
clean-up does not fold (a float result is larger than its integer input). This pass matches
that chain on the main graph's integer initializers (int8, uint8, int4, uint4) and writes
``DequantizeLinear(q, scale, zero_point)``: per tensor, per axis (``axis``), or blocked
(``axis`` and ``block_size``, opset 21). Its numbers are JAX's bit for bit: ``(q - zp)`` is
exact in float, and each weight is then one rounded product with its scale, as in JAX.

The scale's granularity is read from its values over the whole weight, not from the shape the
program gave it, so a scale broadcast along other axes, a per-tile scale of equal tiles and a
hand-written ``(q - zp) * s`` all give the smallest form that holds the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import ml_dtypes
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import numpy_tensor
from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement, one_reader, take_place, unused_name
from jax2onnx_nn.core.ir.values import constant_array

QUANTIZED = frozenset({ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT4, ir.DataType.UINT4})
"""The integer types a weight is kept in (DequantizeLinear's inputs; 4-bit from opset 21)."""

_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16})
_SUFFIXES = (".qvalue", ".array", ".value")  # qwix: "kernel.array.qvalue"


@dataclass(frozen=True)
class Dequantization:
    """A weight's dequantization in DequantizeLinear's terms.

    ``scale`` / ``zero_point``: a scalar (per tensor), a vector along ``axis`` (per axis), or
    the weight's shape with ``axis`` divided into blocks of ``block_size`` (blocked).
    """

    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray | None
    axis: int | None
    block_size: int | None
    transposed: bool = False  # ``q`` is the initializer's values transposed


@rewrite("Cast", creates={"DequantizeLinear"})
def write_dequantize_linear(model: ir.Model) -> int:
    """Each ``Cast`` of an integer initializer that starts a dequantization chain (above)
    becomes one ``DequantizeLinear`` of the integer weight; returns how many. The chain's
    nodes are left unread (the clean-up after removes them). The integer initializer keeps
    its values (named after the weight, ``layer.kernel``); its scale and zero point are
    new initializers ``layer.kernel.scale`` and ``layer.kernel.zero_point``."""
    opset = model.opset_imports.get("", 0)
    if opset < 13:
        return 0
    graph = model.graph
    count = 0
    for node in list(graph):
        if node.op_type != "Cast" or node.domain not in ("", "ai.onnx"):
            continue
        if _out_of_reach(node, opset):
            continue
        for reader in [use.node for use in node.outputs[0].uses()]:
            found = _match(node, reader, opset)
            if found is not None:
                _write(graph, node, *found)
                count += 1
    return count


def starts_dequantization(node: ir.Node) -> bool:
    """``node`` is a ``Cast`` of a quantized integer to a float that a ``Mul``, ``Sub`` or
    ``Reshape`` reads: constant folding leaves it for :func:`write_dequantize_linear` (folded,
    the weight would be stored as floats)."""
    if node.op_type != "Cast" or not node.inputs or node.inputs[0] is None:
        return False
    out = node.outputs[0]
    readers = [use.node.op_type for use in out.uses()]
    return (
        node.inputs[0].dtype in QUANTIZED
        and out.dtype in _FLOATS
        and bool(readers)
        and all(op in ("Mul", "Sub", "Reshape") for op in readers)
    )


def _out_of_reach(cast: ir.Node, opset: int) -> bool:
    """``cast`` is no Cast of a quantized initializer to a float that ``opset``'s
    DequantizeLinear can write (4-bit from opset 21, 16-bit float scales from 19)."""
    q_value = cast.inputs[0] if cast.inputs else None
    out = cast.outputs[0]
    if (
        q_value is None
        or not q_value.is_initializer()
        or q_value.const_value is None
        or q_value.dtype not in QUANTIZED
        or out.dtype not in _FLOATS
    ):
        return True
    four_bit = q_value.dtype in (ir.DataType.INT4, ir.DataType.UINT4)
    return (four_bit and opset < 21) or (out.dtype != ir.DataType.FLOAT and opset < 19)


def _match(cast: ir.Node, first: ir.Node, opset: int) -> tuple[ir.Value, Dequantization] | None:
    """The chain from ``cast`` through its reader ``first`` and its dequantization, or None
    when it is not one."""
    q_value = cast.inputs[0]
    assert q_value is not None and q_value.const_value is not None
    q = np.asarray(q_value.const_value.numpy())
    shape = q.shape
    cur, view = cast.outputs[0], shape  # the chain's value and its shape (the weight's, or tiles')
    zero_point = scale = None
    node: ir.Node | None = first
    if node is not None and node.op_type == "Reshape":
        tiled = _static_shape(node.outputs[0])
        if tiled is None or int(np.prod(tiled)) != q.size:
            return None
        view = tiled
        cur, node = node.outputs[0], one_reader(node.outputs[0])
    tiles = view
    if node is not None and node.op_type == "Sub" and node.inputs[0] is cur:
        zero_point = _operand(node, cur, q.size)
        if zero_point is None:
            return None
        cur, node = node.outputs[0], one_reader(node.outputs[0])
    if node is None or node.op_type != "Mul":
        return None
    scale = _operand(node, cur, q.size)
    if scale is None:
        return None
    cur, node = node.outputs[0], one_reader(node.outputs[0])
    view = _static_shape(cur) or ()
    if view != shape:  # back to the weight's shape
        if node is None or node.op_type != "Reshape" or _static_shape(node.outputs[0]) != shape:
            return None
        cur, node = node.outputs[0], one_reader(node.outputs[0])
    # broadcasting that keeps the element count only adds leading 1s: the order is the weight's
    full_scale = np.broadcast_to(scale, view).reshape(shape)
    full_zp = None if zero_point is None else np.broadcast_to(zero_point, view).reshape(shape)
    blocks = _block_candidates(shape, tiles)
    transposed = False
    if node is not None and node.op_type == "Transpose":  # a conv's kernel layout
        perm = node.attributes["perm"].as_ints() if "perm" in node.attributes else None
        order = list(perm) if perm is not None else list(reversed(range(q.ndim)))
        q, full_scale = np.transpose(q, order), np.transpose(full_scale, order)
        full_zp = None if full_zp is None else np.transpose(full_zp, order)
        blocks = [(order.index(axis), block) for axis, block in blocks]
        cur, transposed = node.outputs[0], True
    deq = _granularity(q, full_scale, full_zp, blocks, opset)
    if deq is None:
        return None
    return cur, replace(deq, transposed=transposed)


def _static_shape(value: ir.Value) -> tuple[int, ...] | None:
    shape = value.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(d for d in shape if isinstance(d, int))


def _operand(node: ir.Node, cur: ir.Value, size: int) -> np.ndarray | None:
    """The constant other operand of the binary ``node`` reading ``cur``, if the result has
    ``size`` elements as ``cur`` has (it broadcasts to ``cur`` without growing it)."""
    others = [v for v in node.inputs if v is not cur]
    if len(others) != 1 or len(node.inputs) != 2:
        return None
    array = constant_array(others[0])
    out = _static_shape(node.outputs[0])
    if array is None or out is None or int(np.prod(out)) != size:
        return None
    try:
        np.broadcast_shapes(array.shape, out)
    except ValueError:
        return None
    return np.asarray(array)


def _block_candidates(shape: tuple[int, ...], view: tuple[int, ...]) -> list[tuple[int, int]]:
    """(axis, block) where ``view`` splits one axis of ``shape`` into (blocks, block)."""
    found = []
    for axis in range(len(shape)):
        if len(view) != len(shape) + 1 or view[:axis] != shape[:axis]:
            continue
        if view[axis + 2 :] == shape[axis + 1 :] and view[axis] * view[axis + 1] == shape[axis]:
            found.append((axis, view[axis + 1]))
    return found


def _granularity(
    q: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    blocks: list[tuple[int, int]],
    opset: int,
) -> Dequantization | None:
    """The smallest DequantizeLinear form whose scale and zero point give ``scale`` and
    ``zero_point`` (the weight's shape) at every element; None when none does or the zero
    point is not an integer of ``q``'s type."""
    zp = None
    if zero_point is not None:
        info = ml_dtypes.iinfo(q.dtype)
        whole = np.all(zero_point == np.round(zero_point))
        if not (whole and info.min <= zero_point.min() and zero_point.max() <= info.max):
            return None
        zp = zero_point
    fields = [scale] if zp is None else [scale, zp]
    if all(np.all(f == f.flat[0]) for f in fields):
        return _form(q, [f.flat[0] for f in fields], None, None)
    for axis in range(q.ndim):
        index = tuple(slice(None) if a == axis else 0 for a in range(q.ndim))
        if all(
            np.array_equal(np.broadcast_to(f[index][_keep(axis, q.ndim)], q.shape), f)
            for f in fields
        ):
            return _form(q, [f[index] for f in fields], axis, None)
    if opset < 21:
        return None
    for axis, block in blocks:
        index = tuple(slice(None, None, block) if a == axis else slice(None) for a in range(q.ndim))
        small = [f[index] for f in fields]
        if all(
            np.array_equal(np.repeat(s, block, axis=axis), f)
            for s, f in zip(small, fields, strict=True)
        ):
            return _form(q, small, axis, block)
    return None


def _keep(axis: int, ndim: int) -> tuple[slice | None, ...]:
    return tuple(slice(None) if a == axis else None for a in range(ndim))


def _form(
    q: np.ndarray, fields: list[np.ndarray], axis: int | None, block: int | None
) -> Dequantization:
    scale = np.asarray(fields[0])
    zp = None if len(fields) == 1 else np.asarray(fields[1]).astype(q.dtype)
    return Dequantization(q, scale, zp, axis, block)


def weight_name(q_name: str | None) -> str:
    """The weight's name from its integer initializer's (``l1.kernel.array.qvalue`` ->
    ``l1.kernel``)."""
    name = q_name or "weight"
    stripped = True
    while stripped:
        stripped = False
        for suffix in _SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name, stripped = name[: -len(suffix)], True
    return name


def _write(graph: ir.Graph, cast: ir.Node, last: ir.Value, deq: Dequantization) -> None:
    q_value = cast.inputs[0]
    assert q_value is not None
    base = weight_name(q_value.name)
    if deq.transposed:  # for its reader (a conv's kernel layout)
        q_in = add_initializer(graph, base, deq.q, q_value.dtype)
    else:  # the weight as stored (read elsewhere too: it keeps its name)
        if len(q_value.uses()) == 1 and q_value.name != base:
            q_value.name = unused_name(graph, base)
        q_in = q_value
    inputs = [q_in, add_initializer(graph, f"{base}.scale", deq.scale)]
    if deq.zero_point is not None:
        inputs.append(add_initializer(graph, f"{base}.zero_point", deq.zero_point, q_value.dtype))
    attrs = []
    if deq.axis is not None:
        attrs.append(ir.AttrInt64("axis", deq.axis))
    if deq.block_size is not None:
        attrs.append(ir.AttrInt64("block_size", deq.block_size))
    node = ir.Node(
        "",
        "DequantizeLinear",
        inputs,
        attrs,
        name=f"{inputs[1].name}/DequantizeLinear",  # (unique: the scale is its own)
        doc_string=cast.doc_string,
    )
    out = node.outputs[0]
    out.type, out.shape = last.type, last.shape
    # unique as its scale's name is ("w.scale_1" -> "w.dequantized_1")
    head, _, tail = (inputs[1].name or f"{base}.scale").rpartition(".scale")
    out.name = f"{head}.dequantized{tail}"
    graph.insert_before(cast, node)
    take_place(last, out)


def add_initializer(
    graph: ir.Graph, name: str, array: np.ndarray, dtype: ir.DataType | None = None
) -> ir.Value:
    """``array`` as a new initializer of ``graph`` named ``name`` (or a free variant of it),
    of ``dtype`` (default: the array's; int4 arrays are ml_dtypes')."""
    tensor = numpy_tensor(np.ascontiguousarray(array))
    value = ir.Value(
        name=unused_name(graph, name),
        shape=ir.Shape(array.shape),
        type=ir.TensorType(dtype or tensor.dtype),
        const_value=tensor,
    )
    graph.register_initializer(value)
    return value


__all__ = [
    "QUANTIZED",
    "add_initializer",
    "Dequantization",
    "as_arithmetic",
    "blocked_as_arithmetic",
    "four_bit_as_eight_bit",
    "starts_dequantization",
    "weight_name",
    "write_dequantize_linear",
]


@rewrite("DequantizeLinear", creates=("DequantizeLinear",))
def four_bit_as_eight_bit(node: ir.Node, edit: Editor) -> Replacement:
    """A ``DequantizeLinear`` of an int4 / uint4 weight reads the same values as int8 / uint8
    (tract 0.23 has no 4-bit tensors: "Unknown DatumType Int4"); the file holds a byte each."""
    q, graph = node.inputs[0], node.graph
    wide = {ir.DataType.INT4: np.int8, ir.DataType.UINT4: np.uint8}
    array = constant_array(q)
    if q is None or q.dtype not in wide or array is None or graph is None or q.graph is not graph:
        return None
    dtype = wide[q.dtype]
    inputs: list[ir.Value | None] = [_widened(graph, q, array.astype(dtype))]
    inputs.append(node.inputs[1])
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        zero_point = constant_array(node.inputs[2])
        if zero_point is None:
            return None
        inputs.append(_widened(graph, node.inputs[2], zero_point.astype(dtype)))
    attrs = {name: attr.as_int() for name, attr in node.attributes.items()}
    return edit.op("DequantizeLinear", *inputs, dtype=node.outputs[0].dtype, **attrs)


def _widened(graph: ir.Graph, old: ir.Value, array: np.ndarray) -> ir.Value:
    """``array`` as the initializer that replaces ``old`` under its name."""
    name = old.name or "weight"
    if len(old.uses()) == 1:
        old.name = unused_name(graph, f"{name}/4bit")
    return add_initializer(graph, name, array)


def as_arithmetic(node: ir.Node, edit: Editor) -> ir.Value | None:
    """The ``DequantizeLinear`` ``node`` as JAX wrote it: ``Cast [-> Reshape to tiles] [-> Sub]
    -> Mul [-> Reshape]`` on its constants (reshaped to broadcast); None if they are not
    constants of the main graph."""
    q, graph = node.inputs[0], edit.graph
    fields = [constant_array(v) for v in node.inputs[1:] if v is not None]
    if q is None or q.shape is None or graph is None or any(f is None for f in fields):
        return None
    shape = _static_shape(q)
    scale_value = node.inputs[1]
    if shape is None or scale_value is None or scale_value.dtype is None:
        return None
    dtype = scale_value.dtype
    rank = len(shape)
    axis = node.attributes["axis"].as_int() if "axis" in node.attributes else 1
    axis = axis + rank if axis < 0 else axis
    block = node.attributes["block_size"].as_int() if "block_size" in node.attributes else 0
    if block and shape[axis] % block:
        return None
    view = shape[:axis] + (shape[axis] // block, block) + shape[axis + 1 :] if block else shape

    def broadcast(array: np.ndarray, name: str, wanted: ir.DataType | None) -> ir.Value:
        if array.ndim == 0:
            shaped = array
        elif block:  # one value per tile: (..., blocks, 1, ...)
            shaped = np.expand_dims(array, axis + 1)
        else:  # a vector along ``axis``
            shaped = array.reshape([-1 if a == axis else 1 for a in range(rank)])
        return add_initializer(graph, name, shaped, wanted)

    base = weight_name(q.name)
    for old in node.inputs[1:]:  # the reshaped scale and zero point take their names
        if old is not None and old.is_initializer() and len(old.uses()) == 1:
            old.name = unused_name(graph, f"{old.name}/dequantize")
    value = edit.op("Cast", q, to=int(dtype), dtype=dtype)
    if block:
        value = edit.op("Reshape", value, np.array(view, np.int64), dtype=dtype)
    if len(fields) > 1:
        zp = broadcast(np.asarray(fields[1]), f"{base}.zero_point", None)
        value = edit.op("Sub", value, edit.op("Cast", zp, to=int(dtype), dtype=dtype), dtype=dtype)
    value = edit.op(
        "Mul", value, broadcast(np.asarray(fields[0]), f"{base}.scale", None), dtype=dtype
    )
    if block:
        value = edit.op("Reshape", value, np.array(shape, np.int64), dtype=dtype)
    return value


@rewrite("DequantizeLinear", creates=("Cast", "Reshape", "Sub", "Mul"))
def blocked_as_arithmetic(node: ir.Node, edit: Editor) -> Replacement:
    """A blocked ``DequantizeLinear`` (``block_size``) as JAX's arithmetic on the integer
    weight (tract 0.23: "DequantizeLinear: blocked quantization is not supported")."""
    if "block_size" not in node.attributes:
        return None
    return as_arithmetic(node, edit)
