"""Questions about values: dtypes, dims and shapes compared, constants read, attributes as keys."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir


def attributes_key(node: ir.Node) -> tuple[Any, ...] | None:
    """The node's attributes as a hashable value (sorted by name); None when one cannot be
    compared by value (a graph, a reference to a function's attribute, a large tensor)."""
    attrs = []
    for name, attr in sorted(node.attributes.items()):
        if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) or attr.is_ref():
            return None
        value = attr.value
        if attr.type == ir.AttributeType.TENSOR:
            if value.size > _CSE_TENSOR_ELEMENTS:
                return None
            array = value.numpy()
            value = (array.dtype, array.shape, array.tobytes())
        elif isinstance(value, (list, tuple)):
            value = tuple(value)
        elif attr.type not in (
            ir.AttributeType.INT,
            ir.AttributeType.FLOAT,
            ir.AttributeType.STRING,
        ):
            return None
        attrs.append((name, attr.type, value))
    return tuple(attrs)


def dtype_of(value: ir.Value) -> ir.DataType:
    """The dtype of a typed value (every value a rule or the builder made has one)."""
    if value.dtype is None:
        raise ValueError(f"value {value.name!r} has no dtype: it was made without a type")
    return value.dtype


def shape_of(value: ir.Value) -> ir.Shape:
    """The shape of a value whose rank is known (every value a rule or the builder made)."""
    if value.shape is None:
        raise ValueError(f"value {value.name!r} has no shape: it was made without one")
    return value.shape


def numpy_dtype(value: ir.Value) -> np.dtype:
    """The numpy dtype of a typed value (every value a rule or the builder made has one)."""
    return dtype_of(value).numpy()


def exact_dtype(dtype: ir.DataType | None) -> bool:
    return dtype is not None and (dtype.is_integer() or dtype == ir.DataType.BOOL)


def same_dim(a: Any, b: Any) -> bool:
    """Equal ints, or equal named symbolic dims."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return isinstance(a, ir.SymbolicDim) and a.value is not None and a == b


def same_dims(a: ir.Shape | None, b: ir.Shape | None) -> bool:
    return (
        a is not None
        and b is not None
        and len(a) == len(b)
        and all(same_dim(x, y) for x, y in zip(a, b, strict=True))
    )


def reshape_dims(x: ir.Value, out: ir.Value, *, infer: bool = False) -> list[int] | None:
    """The constant shape operand of ``Reshape(x) -> out``: a static dim as it is, a symbolic
    dim ``x`` has at the same position as 0 ("copy the input dim"); with ``infer``, where no
    dim is copied, one other symbolic dim as -1 (beside a copied dim a -1 is undefined when
    that dim is 0 at run time). None for unknown shapes, a static 0 in ``out`` (a 0 reads as
    "copy") or a dim none of these can say."""
    if x.shape is None or out.shape is None:
        return None
    dims: list[int] = []
    for i, d in enumerate(out.shape):
        if isinstance(d, int):
            if d < 1:
                return None
            dims.append(d)
        elif i < len(x.shape) and same_dim(x.shape[i], d):
            dims.append(0)
        elif infer and -1 not in dims:
            dims.append(-1)
        else:
            return None
    if -1 in dims and 0 in dims:
        return None
    return dims


def const_array(v: ir.Value | None) -> np.ndarray | None:
    return v.const_value.numpy() if v is not None and v.const_value is not None else None


def same_shape(a: ir.Value, b: ir.Value) -> bool:
    """Both shapes known and equal dim by dim (equal ints or equal symbolic names)."""
    return same_dims(a.shape, b.shape)


_CSE_TENSOR_ELEMENTS = 64  # Constant nodes up to this size are merged by value


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """``value``'s data: an initializer's or a Constant node's (its ``value`` attribute); None
    for a value computed at run time."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and "value" in producer.attributes:
        return producer.attributes["value"].as_tensor().numpy()
    return None


def constant_range(value: ir.Value | None) -> np.ndarray | None:
    """The values of a constant, or of a Range of constant operands (not folded when large)."""
    producer = value.producer() if value is not None else None
    if producer is not None and producer.op_type == "Range" and producer.domain == "":
        start, limit, delta = (constant_array(v) for v in producer.inputs)
        if start is not None and limit is not None and delta is not None:
            return np.arange(start, limit, delta, dtype=start.dtype)  # type: ignore[call-overload]
    return constant_array(value)
