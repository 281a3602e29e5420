"""Graph rewrites that make a runtime's ops compute JAX's numbers, named by target profiles.

Each rewrite replaces nodes whose result on that runtime differs from ONNX's (and JAX's)
semantics by nodes it computes exactly; profiles in core/targets.py list the rewrites they
need. All of them run after lowering, on every graph of the model (Loop/Scan/If bodies too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.passes import graph_nodes, node_bodies


class _Editor:
    """Adds nodes before ``anchor`` in its graph and replaces its outputs by new values
    (``opset``: the model's, for a rewrite whose op is newer than some opsets)."""

    def __init__(self, anchor: ir.Node, counter: list[int], opset: int) -> None:
        self.anchor = anchor
        self.graph = anchor.graph
        self.counter = counter
        self.opset = opset

    def op(self, op_type: str, *inputs: ir.Value | np.ndarray | None, dtype: ir.DataType | None = None, **attrs: Any) -> ir.Value:
        values = [x if x is None or isinstance(x, ir.Value) else self.const(x) for x in inputs]  # None: an omitted input
        self.counter[0] += 1
        base = f"{self.anchor.name}/target{self.counter[0]}"
        node = ir.Node("", op_type, values, ir.convenience.convert_attributes(attrs), name=f"{base}/{op_type}", doc_string=self.anchor.doc_string)
        out = node.outputs[0]
        out.name = f"{base}_output"
        if dtype is not None:
            out.type = ir.TensorType(dtype)
        assert self.graph is not None
        self.graph.insert_before(self.anchor, node)
        return out

    def const(self, array: np.ndarray) -> ir.Value:
        return self.op("Constant", value=ir.tensor(np.asarray(array)), dtype=ir.DataType.from_numpy(np.asarray(array).dtype))

    def replace(self, *news: ir.Value) -> None:
        """The anchor's outputs become ``news``, one each (keeping its name, type and shape),
        and the anchor goes."""
        for old, new in zip(self.anchor.outputs, news, strict=True):
            new.type, new.shape = old.type, old.shape
            old.replace_all_uses_with(new, replace_graph_outputs=True)
            old.name, new.name = f"{old.name}/replaced", old.name
        assert self.graph is not None
        self.graph.remove(self.anchor, safe=True)


def _constant(value: ir.Value | None) -> np.ndarray | None:
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and "value" in producer.attributes:
        return producer.attributes["value"].as_tensor().numpy()
    return None


# -- NaN in Max / Min -------------------------------------------------------------------------
def _nan_propagating_max_min(node: ir.Node, edit: _Editor) -> bool:
    """JAX's max/min give NaN when either operand is NaN; OpenVINO and tract return the other
    operand. Where either is NaN, ``a + b`` is NaN (with the broadcast shape Max has)."""
    if node.op_type not in ("Max", "Min") or len(node.inputs) < 2:
        return False
    dtype = node.outputs[0].dtype
    if dtype is None or not dtype.is_floating_point():
        return False
    result = node.inputs[0]
    assert result is not None
    for other in node.inputs[1:]:
        assert other is not None
        plain = edit.op(node.op_type, result, other, dtype=dtype)
        nan = edit.op("Or", edit.op("IsNaN", result), edit.op("IsNaN", other), dtype=ir.DataType.BOOL)
        result = edit.op("Where", nan, edit.op("Add", result, other, dtype=dtype), plain, dtype=dtype)
    edit.replace(result)
    return True


# -- ReduceMax / ReduceMin of infinities -----------------------------------------------------
def _reduce_extremes_of_infinities(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 and tract 0.23 start a float ReduceMax at the lowest finite value (and
    ReduceMin at the largest): the max of only -inf is -3.4028235e38 there, not -inf (measured at
    opsets 13 and 18; ``jnp.max`` of a fully masked row). Where the result is that finite value
    and no element equals it, it is the infinity instead; a count of the elements equal to it
    (a ReduceSum over the same axes) tells."""
    if node.op_type not in ("ReduceMax", "ReduceMin") or node.domain != "" or not node.inputs or node.inputs[0] is None:
        return False
    x, dtype = node.inputs[0], node.outputs[0].dtype
    if dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16):
        return False
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    result = edit.op(node.op_type, *node.inputs, dtype=dtype, **attributes)
    info = np.finfo(dtype.numpy())
    finite, infinite = (info.min, -np.inf) if node.op_type == "ReduceMax" else (info.max, np.inf)
    finite, infinite = np.asarray(finite, dtype.numpy()), np.asarray(infinite, dtype.numpy())
    axes = node.inputs[1] if len(node.inputs) > 1 else None
    if axes is None and "axes" in attributes:
        axes = edit.const(np.asarray(attributes["axes"], np.int64))
    count_attributes = {name: value for name, value in attributes.items() if name in ("keepdims", "noop_with_empty_axes")}
    reached = edit.op("Cast", edit.op("Equal", x, finite, dtype=_BOOL), to=_I32, dtype=_I32)
    count = edit.op("ReduceSum", reached, axes, dtype=_I32, **count_attributes) if axes is not None else edit.op("ReduceSum", reached, dtype=_I32, **count_attributes)
    clipped = edit.op("And", edit.op("Equal", result, finite, dtype=_BOOL),
                      edit.op("Equal", count, np.int32(0), dtype=_BOOL), dtype=_BOOL)
    edit.replace(edit.op("Where", clipped, infinite, result, dtype=dtype))
    return True


# -- float ReduceSum over an empty last axis ---------------------------------------------------
_PADDED = "jax2onnx_nn.padded_sum"


def _float_sum_over_empty_last_axis(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 aborts the whole process (a Rust panic, "attempt to divide by zero" in its
    reduce.rs, which Python cannot catch) on a float ReduceSum over the last axis of its input
    when that axis is empty at run time: ``jnp.sum`` of a row of symbolic length 0 (a
    ``lax.map`` over rows of 0 columns; a 1-d sum; measured: the other axes, an int32 sum and
    ReduceMax/Min/Prod run). Where the last axis is reduced and its size is not a static
    positive number, the input gets one zero appended along it (a Pad of constant amounts):
    the sum is the same (adding +0.0 is exact)."""
    if node.op_type != "ReduceSum" or node.domain != "" or node.meta.get(_PADDED) or not node.inputs or node.inputs[0] is None:
        return False
    x = node.inputs[0]
    if node.outputs[0].dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        return False
    rank = _rank(x)
    if not rank:
        return False
    last = x.shape[-1] if x.shape is not None else None
    if isinstance(last, int) and last > 0:
        return False
    axes_input = node.inputs[1] if len(node.inputs) > 1 else None
    axes = _constant(axes_input) if axes_input is not None else np.zeros((0,), np.int64)
    if axes is None:
        return False
    axes = axes.reshape(-1)
    if axes.size == 0 and node.attributes.get_int("noop_with_empty_axes", 0) or axes.size and rank - 1 not in {int(a) % rank for a in axes}:
        return False
    pads = np.zeros((2 * rank,), np.int64)
    pads[-1] = 1
    padded = edit.op("Pad", x, pads, dtype=x.dtype)
    padded.shape = ir.Shape([*x.shape[:-1], None]) if x.shape is not None else None
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    total = edit.op("ReduceSum", padded, *node.inputs[1:], dtype=node.outputs[0].dtype, **attributes)
    producer = total.producer()
    assert producer is not None
    producer.meta[_PADDED] = True
    edit.replace(total)
    return True


# -- ReduceMax / ReduceMin of int32 ------------------------------------------------------------
def _int32_extremes_on_halves(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 computes an int32 ReduceMax/Min through float32 (the max of [2147483647, 5]
    came out -2147483648, of [16777217, 16777216] 16777216), and uint32 too (the profile keeps it
    uint32, not widened to int64, which it holds in 32 bits): :func:`_extremes_on_halves`."""
    return _extremes_on_halves(node, edit, (_I32, _U32))


def _uint32_extremes_on_halves(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 has no uint32 ReduceMax/Min ("U32 is not a number"), and below opset 15 (no
    CastLike) the Cast that widens uint32 to int64 gives its symbolic-dim type, whose ReduceMax
    along an axis came out 4294967295 for [2147483647, 5, 0, 1] (opsets 13 and 14; the max of
    the whole matrix was right). Its profile keeps them uint32: :func:`_extremes_on_halves`."""
    return _extremes_on_halves(node, edit, (_U32,))


def _extremes_on_halves(node: ir.Node, edit: _Editor, types: tuple[ir.DataType, ...]) -> bool:
    """A ReduceMax/Min of int32 or uint32 (of ``types``) on float32: with the sign bit of an
    int32 flipped (an int32 Add of -2**31, which wraps) the order is the unsigned order of the
    bits, whose 16-bit halves float32 holds exactly (``_halves``): the extreme of the high halves,
    then of the low halves among the elements that have it; the bits put back together by int32
    arithmetic. An empty reduction gives the type's identity."""
    if node.op_type not in ("ReduceMax", "ReduceMin") or node.domain != "" or not node.inputs or node.inputs[0] is None:
        return False
    x = node.inputs[0]
    if x.dtype not in types:
        return False
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    axes_value = _constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else attributes.get("axes")
    if len(node.inputs) > 1 and node.inputs[1] is not None and axes_value is None:
        return False  # axes computed at run time
    if attributes.get("noop_with_empty_axes") and (axes_value is None or not len(np.asarray(axes_value).reshape(-1))):
        return False
    axes = None if axes_value is None or not len(np.asarray(axes_value).reshape(-1)) else np.asarray(axes_value, np.int64).reshape(-1)
    flip = np.int32(-(2**31))

    def flipped(v: ir.Value) -> ir.Value:  # (uint32: its bits' order already)
        return edit.op("Add", v, flip, dtype=_I32) if x.dtype == _I32 else v

    high, low = _halves(edit, flipped(_as_int32(edit, x)))

    def reduce(v: ir.Value) -> ir.Value:
        if axes is None:
            extreme = edit.op(node.op_type, v, keepdims=1, dtype=_F32)
        elif edit.opset >= 18:
            extreme = edit.op(node.op_type, v, axes, keepdims=1, dtype=_F32)
        else:
            extreme = edit.op(node.op_type, v, axes=axes.tolist(), keepdims=1, dtype=_F32)
        # (of no elements it is a float's extreme: clipped to a half's, the bits are the type's
        # identity, as in JAX: the lowest value for a max, the largest for a min)
        return edit.op("Clip", extreme, np.float32(0), np.float32(2**16 - 1), dtype=_F32)

    top = reduce(high)
    outside = np.float32(-1.0 if node.op_type == "ReduceMax" else 2.0**16)
    bottom = reduce(edit.op("Where", edit.op("Equal", high, top, dtype=_BOOL), low, outside, dtype=_F32))
    bits = edit.op("Add", edit.op("Mul", _i32(edit, top), np.int32(2**16), dtype=_I32), _i32(edit, bottom), dtype=_I32)
    result = flipped(bits)
    if not attributes.get("keepdims", 1):
        result = (edit.op("Reshape", result, np.zeros((0,), np.int64), dtype=_I32) if axes is None
                  else edit.op("Squeeze", result, axes, dtype=_I32))
    edit.replace(result if x.dtype == _I32 else edit.op("Cast", result, to=_U32, dtype=_U32))
    return True


# -- integer sums ------------------------------------------------------------------------------
def _integer_sum_as_cumsum(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 computes an integer ReduceSum through float32 (the sum of [2147483647,
    1, 5] came out -2147483648 where JAX wraps to -2147483643, of [16777217, 1, 1, 1]
    16777216), while its CumSum wraps exactly (int64 too, held in 32 bits). Per axis: a 0
    padded in front, the running sum, its last element (:func:`_wrapping_sum`)."""
    if node.op_type != "ReduceSum" or node.domain != "" or not node.inputs or node.inputs[0] is None:
        return False
    x = node.inputs[0]
    rank = _rank(x)
    if x.dtype is None or not x.dtype.is_integer() or rank is None:
        return False
    axes_value = _constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else np.zeros((0,), np.int64)
    if axes_value is None:
        return False  # axes computed at run time
    axes = sorted({int(a) % rank for a in axes_value.reshape(-1)}) if rank else []
    if not axes and node.attributes.get_int("noop_with_empty_axes", 0):
        return False
    keepdims = bool(node.attributes.get_int("keepdims", 1))
    edit.replace(_wrapping_sum(edit, x, axes or list(range(rank)), rank, keepdims))
    return True


def _uint32_matmul_as_int32(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 has no uint32 MatMul kernel: loading a model with one aborts the process (a
    Rust panic in linalg/src/frame/weights.rs; int64 too, int32 runs). Products and sums modulo
    2**32 do not depend on the sign of the operands' bits, so the MatMul runs on int32 Casts of
    its operands (which wrap) and its result is cast back to uint32."""
    if node.op_type != "MatMul" or node.domain != "" or len(node.inputs) != 2 or None in node.inputs:
        return False
    if node.outputs[0].dtype != _U32:
        return False
    a, b = (edit.op("Cast", x, to=_I32, dtype=_I32) for x in node.inputs)
    edit.replace(edit.op("Cast", edit.op("MatMul", a, b, dtype=_I32), to=_U32, dtype=_U32))
    return True


def _integer_matmul_as_cumsum(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 computes an integer MatMul through float32 too (int32 ``[[2147483647,
    1]] @ [[1], [5]]`` came out 2147483520, JAX: -2147483644; int16 and uint16 products past
    2**24 go wrong the same way). Its int32 Mul wraps exactly: the products of every pair are
    formed by broadcasting (``(..., M, K, 1) * (..., 1, K, N)``, a vector operand without its
    extra axis) and summed over K by :func:`_wrapping_sum`. It holds M * K * N products: the
    price of exact integers there."""
    if node.op_type != "MatMul" or node.domain != "" or len(node.inputs) != 2 or None in node.inputs:
        return False
    a, b = node.inputs
    dtype = node.outputs[0].dtype
    rank_a, rank_b = _rank(a), _rank(b)
    if dtype is None or not dtype.is_integer() or rank_a is None or rank_b is None:
        return False
    if rank_b == 1:  # (..., M, K) * (K,), summed over K
        products = edit.op("Mul", a, b, dtype=dtype)
        rank = max(rank_a, 1)
    elif rank_a == 1:  # (K, 1) * (..., K, N), summed over K
        products = edit.op("Mul", edit.op("Unsqueeze", a, np.array([1], np.int64), dtype=dtype), b, dtype=dtype)
        rank = rank_b
    else:
        rows = edit.op("Unsqueeze", a, np.array([rank_a], np.int64), dtype=dtype)
        columns = edit.op("Unsqueeze", b, np.array([rank_b - 2], np.int64), dtype=dtype)
        products = edit.op("Mul", rows, columns, dtype=dtype)
        rank = max(rank_a, rank_b) + 1
    edit.replace(_wrapping_sum(edit, products, [rank - 1 if rank_b == 1 else rank - 2], rank, keepdims=False))
    return True


def _wrapping_sum(edit: _Editor, x: ir.Value, axes: Sequence[int], rank: int, keepdims: bool) -> ir.Value:
    """The sum of integer ``x`` (of rank ``rank``) over ``axes`` (non-negative) by CumSum, which
    wraps: per axis, from the last, a 0 padded in front (so an empty axis sums to 0), the
    running sum and its last element (kept as a dim of 1 with ``keepdims``)."""
    dtype = x.dtype
    last = np.array([-1] if keepdims else -1, np.int64)
    for axis in sorted(axes, reverse=True):
        pads = np.zeros(2 * rank, np.int64)
        pads[axis] = 1
        running = edit.op("CumSum", edit.op("Pad", x, pads, dtype=dtype), np.array(axis, np.int64), dtype=dtype)
        x = edit.op("Gather", running, last, axis=axis, dtype=dtype)
        rank -= 0 if keepdims else 1
    return x


# -- Greater with NaN --------------------------------------------------------------------------
_SWAPPED = {"Greater": "Less", "GreaterOrEqual": "LessOrEqual"}


def _greater_as_less(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4's Greater and GreaterOrEqual are true where an operand is NaN (its
    Less, LessOrEqual and Equal are false there, as in JAX and IEEE): ``a > b`` is ``b < a``."""
    if node.op_type not in _SWAPPED or node.domain != "" or len(node.inputs) != 2:
        return False
    a, b = node.inputs
    if a is None or b is None or a.dtype is None or not a.dtype.is_floating_point():
        return False
    edit.replace(edit.op(_SWAPPED[node.op_type], b, a, dtype=ir.DataType.BOOL))
    return True


# -- Cast of a float to uint32 -------------------------------------------------------------------
def _float_to_uint32_via_int32(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 casts a float to uint32 through int32, saturating at 2**31 - 1 (JAX's
    3e9 becomes 2147483648 or 2147483647). A value at or above 2**31 is cast less 2**31 (exact
    in float) and gets the top bit back by an int32 Add, which wraps there, as the uint32
    rewrites use; the Cast of int32 bits to uint32 keeps them."""
    if node.op_type != "Cast" or node.domain != "" or node.attributes.get_int("to", 0) != _U32:
        return False
    x = node.inputs[0]
    if x is None or x.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE):
        return False
    top = np.asarray(2.0**31, x.dtype.numpy())
    high = edit.op("GreaterOrEqual", x, top, dtype=_BOOL)
    low = edit.op("Where", high, edit.op("Sub", x, top, dtype=x.dtype), x, dtype=x.dtype)
    bits = _i32(edit, low)
    bits = edit.op("Where", high, edit.op("Add", bits, np.int32(-(2**31)), dtype=_I32), bits, dtype=_I32)
    edit.replace(edit.op("Cast", bits, to=_U32, dtype=_U32))
    return True


# -- IsNaN of float64 -------------------------------------------------------------------------
def _isnan_as_not_equal(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 refuses IsNaN of float64 ("Impossible to unify Bool with F64"): NaN is the
    one value not equal to itself, ``isnan(x) = not (x == x)``."""
    if node.op_type != "IsNaN" or node.domain != "" or node.inputs[0] is None or node.inputs[0].dtype != ir.DataType.DOUBLE:
        return False
    x = node.inputs[0]
    edit.replace(edit.op("Not", edit.op("Equal", x, x, dtype=_BOOL), dtype=_BOOL))
    return True


# -- Cast to int64 -----------------------------------------------------------------------------
def _int64_cast_as_castlike(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 casts to int64 into its symbolic-dim type: such a model output cannot be read
    ("Unsupported DatumType in the public API TDim"), and a float beyond 2**31 saturates on the
    way. A CastLike of an int64 constant is a plain int64 there. Only casts of floats, unsigned
    ints and bools (values, not the shape arithmetic tract follows symbolically) are rewritten;
    a bool (``count_nonzero``'s, in slogdet's sign: a Pad of it failed, "Impossible to unify
    TDim with I64") is a Where of int64 1 and 0, which every opset has. Below opset 15 (no
    CastLike) a float's Cast stays: the jax.random family ran right so at opset 13."""
    if node.op_type != "Cast" or node.domain != "" or node.attributes.get_int("to", 0) != ir.DataType.INT64:
        return False
    x = node.inputs[0]
    if x is None or x.dtype is None or not (x.dtype.is_floating_point() or x.dtype in _UNSIGNED or x.dtype == ir.DataType.BOOL):
        return False
    if x.dtype == ir.DataType.BOOL:
        edit.replace(edit.op("Where", x, np.ones((), np.int64), np.zeros((), np.int64), dtype=ir.DataType.INT64))
        return True
    if edit.opset < 15:
        return False
    edit.replace(edit.op("CastLike", x, np.zeros((), np.int64), dtype=ir.DataType.INT64))
    return True


_UNSIGNED = frozenset({ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64})


# -- Equal on bool ----------------------------------------------------------------------------
def _bool_equal_as_xor(node: ir.Node, edit: _Editor) -> bool:
    """tract refuses Equal on bools ("Bool is not a number"; ``jnp.remainder`` compares signs
    that way): ``a == b`` is ``not (a xor b)``."""
    if node.op_type != "Equal" or node.domain != "" or node.inputs[0] is None or node.inputs[0].dtype != ir.DataType.BOOL:
        return False
    edit.replace(edit.op("Not", edit.op("Xor", *node.inputs, dtype=ir.DataType.BOOL), dtype=ir.DataType.BOOL))
    return True


# -- empty constants -------------------------------------------------------------------------
def _empty_constants_as_constant_of_shape(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 gives an empty constant (a ``(0, 3)`` Constant or initializer: the ys of
    a scan of 0 steps) shape ``()`` as a model output, and ``(3,)`` to its sum with a ``(3,)``
    input; tract 0.23 reads an empty uint32 or uint64 initializer as int32 / int64 ("Impossible
    to unify U32 with I32"). A ConstantOfShape of the shape gives both the right shape and type
    (measured for every element type): a Constant node that is empty becomes one, and so does
    an empty initializer where a node reads it. A late rewrite: constant folding would undo it."""
    if node.domain != "":
        return False
    if node.op_type == "Constant":
        array = _constant(node.outputs[0])
        if array is None or array.size or not _fills(array.dtype, edit.opset):
            return False
        edit.replace(_constant_of_shape(edit, array))
        return True
    changed = False
    for index, value in enumerate(node.inputs):
        if value is None or value.producer() is not None or value.const_value is None:
            continue
        array = value.const_value.numpy()
        if array.size or not _fills(array.dtype, edit.opset):
            continue
        node.replace_input_with(index, _constant_of_shape(edit, array))
        if not value.uses() and not value.is_graph_output() and value.graph is not None and value.name in value.graph.initializers:
            value.graph.initializers.pop(value.name)
        changed = True
    return changed


def _fills(dtype: np.dtype, opset: int) -> bool:
    """ConstantOfShape has a value of this type at ``opset`` (bfloat16 from opset 20)."""
    return dtype.kind in "biuf" or opset >= 20 and dtype.name == "bfloat16"


def _constant_of_shape(edit: _Editor, array: np.ndarray) -> ir.Value:
    dtype = ir.DataType.from_numpy(array.dtype)
    filled = edit.op("ConstantOfShape", np.array(array.shape, np.int64), value=ir.tensor(np.zeros((1,), array.dtype)), dtype=dtype)
    filled.shape = ir.Shape(list(array.shape))
    return filled


# -- Mul of an integer by itself --------------------------------------------------------------
def _integer_square_as_product(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 makes ``Mul(x, x)`` its Square op, which saturates on int8, uint8 and int32
    (int8 100 * 100: 127 where JAX wraps to 16) and has no int16, uint16, uint32 or int64
    kernel ("Square does not support U32"); a Mul of two different values wraps in every
    integer type. So the second operand is ``Max(x, x)``: the same number, another value."""
    if node.op_type != "Mul" or node.domain != "" or len(node.inputs) != 2 or node.inputs[0] is not node.inputs[1]:
        return False
    x = node.inputs[0]
    if x is None or x.dtype is None or not x.dtype.is_integer():
        return False
    node.replace_input_with(1, edit.op("Max", x, x, dtype=x.dtype))
    return True


# -- Compress ---------------------------------------------------------------------------------
def _compress_as_gather(node: ir.Node, edit: _Editor) -> bool:
    """tract does not translate Compress (the scatters drop out-of-bounds updates with it):
    the same rows are a Gather of the positions NonZero finds (in order, as Compress keeps them)."""
    if node.op_type != "Compress" or node.domain != "" or len(node.inputs) != 2:
        return False
    x, condition = node.inputs
    assert x is not None and condition is not None
    axis = node.attributes.get_int("axis", None)
    if axis is None:
        x, axis = edit.op("Reshape", x, np.array([-1], np.int64), dtype=x.dtype), 0
    flat = edit.op("Reshape", condition, np.array([-1], np.int64), dtype=_BOOL_TYPE)
    positions = edit.op("Squeeze", edit.op("NonZero", flat, dtype=ir.DataType.INT64), np.array([0], np.int64), dtype=ir.DataType.INT64)
    edit.replace(edit.op("Gather", x, positions, axis=axis, dtype=x.dtype))
    return True


_BOOL_TYPE = ir.DataType.BOOL


# -- Range of a run-time length ----------------------------------------------------------------
def _range_as_cumsum(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 follows the values of an integer Range symbolically: a causal mask compared
    from ``Range(0, T)`` makes its optimizer split the attention into regions bounded by a
    symbol it never binds at run time ("Undetermined symbol in expression"). The same values
    as ``start + delta * k`` where ``k`` is an exclusive CumSum of ones shaped like the Range
    (the Range itself then gives only its length) are numbers it does not follow. A Range of
    constant operands is left as it is (it is folded), as is one of a run-time step."""
    if node.op_type != "Range" or node.domain != "" or len(node.inputs) != 3:
        return False
    dtype = node.outputs[0].dtype
    start, limit, delta = node.inputs
    if dtype not in (ir.DataType.INT64, ir.DataType.INT32) or start is None or limit is None or delta is None:
        return False
    step = _constant(delta)
    if step is None or _constant(limit) is not None and _constant(start) is not None:
        return False
    plain = edit.op("Range", start, limit, delta, dtype=dtype)
    ones = edit.op("Expand", np.ones((1,), step.dtype), edit.op("Shape", plain, dtype=ir.DataType.INT64), dtype=dtype)
    index = edit.op("CumSum", ones, np.array(0, np.int64), exclusive=1, dtype=dtype)
    if int(step) != 1:
        index = edit.op("Mul", index, step, dtype=dtype)
    edit.replace(edit.op("Add", index, start, dtype=dtype))
    return True


def _constant_range(value: ir.Value | None) -> np.ndarray | None:
    """The values of a constant, or of a Range of constant operands (not folded when large)."""
    producer = value.producer() if value is not None else None
    if producer is not None and producer.op_type == "Range" and producer.domain == "":
        operands = [_constant(v) for v in producer.inputs]
        if all(x is not None for x in operands):
            start, limit, delta = operands
            return np.arange(start, limit, delta, dtype=start.dtype)  # type: ignore[arg-type]
    return _constant(value)


# -- Scan over a fori_loop's counter ---------------------------------------------------------
def _counter_scan_as_state(node: ir.Node, edit: _Editor) -> bool:
    """A fori_loop of static length is a Scan over its counter's values, a constant
    ``[start, start + 1, ...]``. tract 0.23's declutter breaks on it: it drops the scan input of
    a body that does not read the counter ("No scan input"), and it folds what the body computes
    from the counter alone as if the tick were the whole constant ("Trying to substitute a 1,F32
    by 5,F32"). So the counter is also a state, the previous tick (``start - 1`` at first), and
    the body reads ``Max(state + 1, tick)`` (the same number), which is also the state's output:
    neither can be dropped or folded. The value read is the one passed on because tract infers
    facts of a value from what reads it and refuses a state whose output fact differs from its
    input's ("inconsistent fact: body input 1 is ,I32 ... and body output 1 is ,I32", when the
    output was ``Max(state, tick) + 1``, read by nothing: the blocked lu and slogdet)."""
    if node.op_type != "Scan" or node.domain != "" or node.attributes.get_int("num_scan_inputs", 0) != 1:
        return False
    ticks = _constant_range(node.inputs[-1])
    directions = node.attributes.get_ints("scan_input_directions", None)
    if ticks is None or ticks.ndim != 1 or not ticks.size or ticks.dtype.kind != "i" or directions and any(directions):
        return False
    if not np.array_equal(ticks, ticks[0] + np.arange(ticks.size, dtype=ticks.dtype)) or ticks[0] == np.iinfo(ticks.dtype).min:
        return False
    body = node.attributes["body"].as_graph()
    n_state = len(node.inputs) - 1
    tick = body.inputs[n_state]
    dtype = ir.DataType.from_numpy(ticks.dtype)
    state = ir.Value(name=f"{tick.name}/state", type=ir.TensorType(dtype), shape=ir.Shape([]))
    body.inputs.insert(n_state, state)
    one = ir.Node("", "Constant", [], ir.convenience.convert_attributes({"value": ir.tensor(np.ones((), ticks.dtype))}), name=f"{tick.name}/one")
    following = ir.Node("", "Add", [state, one.outputs[0]], name=f"{tick.name}/next")
    counter = ir.Node("", "Max", [following.outputs[0], tick], name=f"{tick.name}/counter")
    tick.replace_all_uses_with(counter.outputs[0])
    counter.replace_input_with(1, tick)
    for new_node in (one, following, counter):
        new_node.outputs[0].name = f"{new_node.name}_output"
        new_node.outputs[0].type, new_node.outputs[0].shape = ir.TensorType(dtype), ir.Shape([])
    if len(body):
        body.insert_before(next(iter(body)), (one, following, counter))
    else:
        body.extend((one, following, counter))
    body.outputs.insert(n_state, counter.outputs[0])
    start = edit.const(np.asarray(ticks[0] - 1))
    scan = _scan_with_states(node, edit, body, n_state, [start])
    scan.outputs[n_state].name = f"{tick.name}/last"
    scan.outputs[n_state].type = ir.TensorType(dtype)
    return True


# -- Scans in Scan bodies ----------------------------------------------------------------------
_RESTARTED = "jax2onnx_nn.restarted"
_FIRST_TICK = "jax2onnx_nn.first_tick"  # (which scanned input counts the steps, its first value)


def _inner_scans_restarted(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 keeps the states of a Scan inside a Scan body from one step of the outer Scan
    to the next: every outer step but the first starts the inner Scan from the states the last
    one ended with, not from its initial values (a ``lax.map`` over a ``fori_loop`` or a bounded
    ``while_loop``, ``jax.random.gamma``'s rejection loops: wrong numbers, no error). In each
    Scan in this Scan's body (in If branches too) that scans a counter forward (a ``fori_loop``,
    a scan without xs, a bounded ``while_loop``: constant, or a Range of run-time length; one over
    data is given a counter, computed at run time where the length is symbolic), the body reads
    each state as ``Where(tick == first tick, initial value, state)``."""
    if node.op_type != "Scan" or node.domain != "":
        return False
    return any([_restarted(_with_counter(inner, edit)) for inner in _scans_in(node.attributes["body"].as_graph())])


def _with_counter(scan: ir.Node, edit: _Editor) -> ir.Node:
    """``scan`` with states and no counter among its scanned inputs, as a Scan that also scans
    ``0 .. L-1`` for the length ``L`` of its first scanned input (a constant, or an exclusive
    CumSum of ones where ``L`` is symbolic): its body can then tell its first step. Else (no
    states, a known length of 0) ``scan`` itself."""
    n_scanned = scan.attributes.get_int("num_scan_inputs", 0)
    n_state = len(scan.inputs) - n_scanned
    if not n_state or not n_scanned or any(_range_start(x) is not None for x in scan.inputs[n_state:]) or scan.meta.get(_RESTARTED):
        return scan
    first = scan.inputs[n_state]
    axes = scan.attributes.get_ints("scan_input_axes", None) or [0] * n_scanned
    rank = _rank(first)
    if first is None or rank is None:
        return scan
    axis = axes[0] % rank if rank else 0
    length = first.shape[axis] if first.shape is not None else None
    if length == 0:
        return scan
    editor = _Editor(scan, edit.counter, edit.opset)
    if isinstance(length, int):
        ticks = editor.const(np.arange(length, dtype=np.int64))
    else:  # (an exclusive CumSum of ones: tract follows a Range's length symbolically)
        size = editor.op("Gather", editor.op("Shape", first, dtype=ir.DataType.INT64), np.array([axis], np.int64), axis=0, dtype=ir.DataType.INT64)
        ones = editor.op("Expand", np.ones((1,), np.int64), size, dtype=ir.DataType.INT64)
        ticks = editor.op("CumSum", ones, np.array(0, np.int64), exclusive=1, dtype=ir.DataType.INT64)
        ticks.shape = ir.Shape([length])
    body = scan.attributes["body"].as_graph()
    body.inputs.append(ir.Value(name=f"{scan.name}/tick", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([])))
    attributes = {name: attr for name, attr in scan.attributes.items() if name != "body"}
    attributes["num_scan_inputs"] = ir.AttrInt64("num_scan_inputs", n_scanned + 1)
    for name in ("scan_input_directions", "scan_input_axes"):
        if name in attributes:
            attributes[name] = ir.AttrInt64s(name, [*scan.attributes.get_ints(name), 0])
    counted = ir.Node("", "Scan", [*scan.inputs, ticks], [*attributes.values(), ir.AttrGraph("body", body)],
                      num_outputs=len(scan.outputs), name=scan.name, doc_string=scan.doc_string)
    assert editor.graph is not None
    editor.graph.insert_before(scan, counted)
    editor.replace(*counted.outputs)
    counted.meta[_FIRST_TICK] = (n_scanned, 0)
    return counted


def _range_start(value: ir.Value | None) -> Any:
    """The first value of a counter a Scan scans: a constant ``[s, s + 1, ...]`` or a Range of
    a constant start and step 1 (a fori_loop of run-time length); else None."""
    ticks = _constant_range(value)
    if ticks is not None:
        return ticks[0] if ticks.ndim == 1 and ticks.size and np.array_equal(ticks, ticks[0] + np.arange(ticks.size, dtype=ticks.dtype)) else None
    producer = value.producer() if value is not None else None
    if producer is None or producer.op_type != "Range" or producer.domain != "":
        return None
    start, delta = _constant(producer.inputs[0]), _constant(producer.inputs[2])
    return start.reshape(()) if start is not None and delta is not None and delta.size == 1 and int(delta.reshape(-1)[0]) == 1 else None


def _scans_in(graph: ir.Graph) -> list[ir.Node]:
    """The Scan nodes of ``graph`` and of the If branches in it (not those in Scan bodies)."""
    found = []
    for node in graph:
        if node.op_type == "Scan" and node.domain == "":
            found.append(node)
        elif node.op_type == "If" and node.domain == "":
            found.extend(inner for branch in node_bodies(node) for inner in _scans_in(branch))
    return found


def _restarted(scan: ir.Node) -> bool:
    if scan.meta.get(_RESTARTED):
        return False
    n_scanned = scan.attributes.get_int("num_scan_inputs", 0)
    n_state = len(scan.inputs) - n_scanned
    directions = scan.attributes.get_ints("scan_input_directions", None) or [0] * n_scanned
    counters = [(k, start) for k, start in ((k, _range_start(x)) for k, x in enumerate(scan.inputs[n_state:]))
                if start is not None and not directions[k]]
    if _FIRST_TICK in scan.meta:
        counters.append(scan.meta[_FIRST_TICK])
    if not n_state or not counters:
        return False
    k, first_tick = counters[0]
    body = scan.attributes["body"].as_graph()
    tick = body.inputs[n_state + k]
    name = f"{tick.name}/restart"
    start = ir.Node("", "Constant", [], ir.convenience.convert_attributes({"value": ir.tensor(np.asarray(first_tick, tick.dtype.numpy()))}), name=f"{name}/start")
    first = ir.Node("", "Equal", [tick, start.outputs[0]], name=f"{name}/first")
    new_nodes = [start, first]
    for node_, dtype in ((start, tick.dtype), (first, ir.DataType.BOOL)):
        node_.outputs[0].name, node_.outputs[0].type, node_.outputs[0].shape = f"{node_.name}_output", ir.TensorType(dtype), ir.Shape([])
    for i, state in enumerate(body.inputs[:n_state]):
        initial = scan.inputs[i]
        assert initial is not None
        read = ir.Node("", "Where", [first.outputs[0], initial, state], name=f"{name}/state{i}")
        read.outputs[0].name, read.outputs[0].type, read.outputs[0].shape = f"{read.name}_output", state.type, state.shape
        state.replace_all_uses_with(read.outputs[0], replace_graph_outputs=True)
        read.replace_input_with(2, state)
        new_nodes.append(read)
    if len(body):
        body.insert_before(next(iter(body)), new_nodes)
    else:
        body.extend(new_nodes)
    scan.meta[_RESTARTED] = True
    return True


# -- Scan of no steps -----------------------------------------------------------------------------
_KEEPS_STATES = "jax2onnx_nn.keeps_states"  # (a Scan whose results are already selected so)


def _scan_of_no_steps_keeps_states(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 gives the final states of a Scan of 0 steps as zeros, not the initial values
    (a ``lax.scan`` over data of symbolic length 0: 0.0 where JAX returns the initial 1.0; at
    the top level and in a Scan body alike). Where the scanned length is not a static positive
    number, each final state is ``Where(length > 0, state, initial value)``."""
    if node.op_type != "Scan" or node.domain != "":
        return False
    n_scanned = node.attributes.get_int("num_scan_inputs", 0)
    n_state = len(node.inputs) - n_scanned
    first = node.inputs[n_state] if n_scanned else None
    rank = _rank(first)
    if not n_state or first is None or not rank or node.meta.get(_KEEPS_STATES):
        return False
    axis = (node.attributes.get_ints("scan_input_axes", None) or [0])[0] % rank
    length = first.shape[axis] if first.shape is not None else None
    if isinstance(length, int) and length > 0 or not any(out.uses() or out.is_graph_output() for out in node.outputs[:n_state]):
        return False
    size = edit.op("Gather", edit.op("Shape", first, dtype=ir.DataType.INT64), np.array(axis, np.int64), axis=0, dtype=ir.DataType.INT64)
    ran = edit.op("Greater", size, np.array(0, np.int64), dtype=_BOOL)
    for out, initial in zip(node.outputs[:n_state], node.inputs[:n_state], strict=True):
        if initial is None or not (out.uses() or out.is_graph_output()):
            continue
        uses = list(out.uses())
        kept = ir.Node("", "Where", [ran, out, initial], name=f"{node.name}/target{edit.counter[0]}/kept{len(uses)}")
        edit.counter[0] += 1
        result = kept.outputs[0]
        result.type, result.shape = out.type, out.shape
        assert edit.graph is not None
        edit.graph.insert_after(node, kept)
        for user, index in uses:
            user.replace_input_with(index, result)
        if out.is_graph_output():
            graph = edit.graph
            for i, output in enumerate(graph.outputs):
                if output is out:
                    graph.outputs[i] = result
            out.name, result.name = f"{out.name}/scanned", out.name
        else:
            result.name = f"{out.name}/kept"
    return True


def _scan_of_no_steps_runs_one(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 refuses to run a Scan (its TensorIterator) of 0 steps ('Invalid "start",
    "stride", "end" values'; a ``lax.scan`` over data of symbolic length 0). Where the scanned
    length is not a static positive number, each scanned input is padded with one element of
    zeros along its axis when it is empty, so that at least one step runs; the stacked outputs
    are sliced back to the length and the final states selected as the initial ones where it
    is 0 (the extra step's results are never read)."""
    if node.op_type != "Scan" or node.domain != "" or node.meta.get(_RUNS_ONE):
        return False
    n_scanned = node.attributes.get_int("num_scan_inputs", 0)
    n_state = len(node.inputs) - n_scanned
    xs = node.inputs[n_state:]
    ranks = [_rank(x) for x in xs]
    out_ranks = [_rank(y) for y in node.outputs[n_state:]]
    if not xs or None in xs or None in ranks or None in out_ranks or 0 in ranks:
        return False
    in_axes = [a % r for a, r in zip(_axes(node, "scan_input_axes", n_scanned), ranks, strict=True)]  # type: ignore[operator]
    out_axes = [a % r for a, r in zip(_axes(node, "scan_output_axes", len(out_ranks)), out_ranks, strict=True)]  # type: ignore[operator]
    length = xs[0].shape[in_axes[0]] if xs[0].shape is not None else None  # type: ignore[union-attr]
    if isinstance(length, int) and length > 0:
        return False
    i64 = ir.DataType.INT64
    size = edit.op("Gather", edit.op("Shape", xs[0], dtype=i64), np.array([in_axes[0]], np.int64), axis=0, dtype=i64)  # (1,)
    ran = edit.op("Greater", size, np.array([0], np.int64), dtype=_BOOL)  # (1,)
    padded = _padded_when_empty(edit, xs, in_axes, ranks, ran)
    attributes = [attr for name, attr in node.attributes.items()]
    scan = ir.Node("", "Scan", [*node.inputs[:n_state], *padded], attributes, num_outputs=len(node.outputs), name=node.name, doc_string=node.doc_string)
    scan.meta[_RUNS_ONE] = True
    assert edit.graph is not None
    edit.graph.insert_before(node, scan)
    results = []
    for old, new, initial in zip(node.outputs[:n_state], scan.outputs[:n_state], node.inputs[:n_state], strict=True):
        new.type, new.shape, new.name = old.type, old.shape, f"{old.name}/ran"
        results.append(edit.op("Where", edit.op("Reshape", ran, np.zeros((0,), np.int64), dtype=_BOOL), new, initial, dtype=old.dtype))
    for old, new, axis in zip(node.outputs[n_state:], scan.outputs[n_state:], out_axes, strict=True):
        new.type, new.name = old.type, f"{old.name}/ran"
        results.append(edit.op("Slice", new, np.array([0], np.int64), size, np.array([axis], np.int64), dtype=old.dtype))
    edit.replace(*results)
    return True


def _padded_when_empty(edit: _Editor, xs: Sequence[ir.Value | None], axes: Sequence[int], ranks: Sequence[int | None], ran: ir.Value) -> list[ir.Value]:
    """The scanned inputs ``xs``, each with one row of zeros appended on its scan axis where
    ``ran`` (bool of shape (1,)) is false: a scan of no steps then runs one, whose results
    the caller drops."""
    i64 = ir.DataType.INT64
    extra = edit.op("Cast", edit.op("Not", ran, dtype=_BOOL), to=i64, dtype=i64)  # (1,): 1 where empty
    padded = []
    for x, axis, rank in zip(xs, axes, ranks, strict=True):
        assert x is not None and rank is not None
        after = np.zeros((2 * rank,), np.int64)
        after[rank + axis] = 1
        padded.append(edit.op("Pad", x, edit.op("Mul", extra, after, dtype=i64), dtype=x.dtype))
    return padded


_RUNS_ONE = "jax2onnx_nn.runs_one"


# -- Range read by a Scan body ------------------------------------------------------------------
def _ranges_in_scan_bodies(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 finds no type for a value a Scan body reads from the enclosing graph when it is
    a Range of run-time length ("Source node without a determined fact": the counter of a
    ``fori_loop`` of symbolic length in a ``lax.map``, hoisted out of the map's body as loop
    invariant). It runs the Range computed in the body: each body reading one gets its own copy
    (reading the Range's scalar operands from outside). A late rewrite: clean-up would hoist it."""
    if node.op_type != "Scan" or node.domain != "":
        return False
    body = node.attributes["body"].as_graph()
    copies = []
    for value in _read_from_outside(body):
        producer = value.producer()
        if producer is None or producer.op_type != "Range" or producer.domain != "" or _constant_range(value) is not None:
            continue
        edit.counter[0] += 1
        copy = ir.Node("", "Range", list(producer.inputs), name=f"{producer.name}/in_body{edit.counter[0]}")
        copy.outputs[0].name = f"{value.name}/in_body{edit.counter[0]}"
        copy.outputs[0].type, copy.outputs[0].shape = value.type, value.shape
        inside = {id(n) for n in ir.traversal.RecursiveGraphIterator(body)}
        for user, index in list(value.uses()):
            if id(user) in inside:
                user.replace_input_with(index, copy.outputs[0])
        copies.append(copy)
    if not copies:
        return False
    if len(body):
        body.insert_before(next(iter(body)), copies)
    else:
        body.extend(copies)
    return True


# -- Loop of a trip count and no condition ------------------------------------------------------
def _counted_loop_as_scan(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 has no Loop. A Loop with a trip count ``M`` whose condition never changes (a
    ``fori_loop`` of traced bounds, a linalg routine's steps on a matrix of symbolic size,
    ScatterND's reductions below their opset) is a Scan over ``Range(0, M)``: the body reads
    the tick where it read the iteration number, its states and stacked outputs are the Loop's
    (a Loop with stacked outputs is left as it is). tract gives the states of a Scan of 0 steps
    shape ``()``: where ``M`` is 0 each result is the initial state, through a Where. A
    while_loop whose condition depends on the data stays a Loop."""
    if node.op_type != "Loop" or node.domain != "" or len(node.inputs) < 2 or node.inputs[0] is None:
        return False
    if len(node.outputs) != len(node.inputs) - 2:
        return False
    if any(_reshaped_at_run_time(v) for v in _read_from_outside(node.attributes["body"].as_graph())):
        return False  # (tract finds no facts for them in a Scan body: ScatterND's rows below opset 18)
    condition = _constant(node.inputs[1])
    if node.inputs[1] is not None and (condition is None or not bool(condition)):
        return False
    body = node.attributes["body"].as_graph()
    iteration, cond_in = body.inputs[0], body.inputs[1]
    passed = body.outputs[0].producer()
    if body.outputs[0] is not cond_in and (passed is None or passed.op_type != "Identity" or passed.inputs[0] is not cond_in):
        return False
    if any(user is not passed for user, _ in cond_in.uses()) or passed is not None and len(passed.outputs[0].uses()) > 0:
        return False
    body.outputs.pop(0)
    if passed is not None:
        body.remove(passed, safe=True)
    body.inputs.remove(cond_in)
    body.inputs.remove(iteration)
    body.inputs.append(iteration)  # now the tick, the Scan's scanned input
    for state, init in zip(body.inputs, node.inputs[2:], strict=False):
        if state.shape is None and init is not None:  # (a Scan's states keep their shape: tract wants it)
            state.shape = init.shape
    count = node.inputs[0]
    ticks = edit.op("Range", np.array(0, np.int64), count, np.array(1, np.int64), dtype=ir.DataType.INT64)
    ticks.shape = ir.Shape([None])
    scan = ir.Node("", "Scan", [*node.inputs[2:], ticks], [ir.AttrGraph("body", body), ir.AttrInt64("num_scan_inputs", 1)],
                   num_outputs=len(node.outputs), name=node.name, doc_string=node.doc_string)
    scan.meta[_KEEPS_STATES] = True
    assert edit.graph is not None
    edit.graph.insert_before(node, scan)
    ran = edit.op("Greater", count, np.array(0, np.int64), dtype=ir.DataType.BOOL)  # (after the Scan, before the Loop)
    results = []
    for old, new, init in zip(node.outputs, scan.outputs, node.inputs[2:], strict=True):
        new.type, new.shape = old.type, old.shape
        new.name = f"{old.name}/scanned"
        results.append(edit.op("Where", ran, new, init, dtype=old.dtype))
    edit.replace(*results)
    return True


# -- ScatterND's reductions below their opset ----------------------------------------------------
_REDUCE_ROWS = {"Add": "ReduceSum", "Mul": "ReduceProd", "Max": "ReduceMax", "Min": "ReduceMin"}
_ONE_HOT_LIMIT = 1 << 12  # elements of the data: the one-hot form holds (updates + 1) times as many


def _scatter_loop_as_one_hot(node: ir.Node, edit: _Editor) -> bool:
    """Below their opset ScatterND's reductions are a Loop over the update rows (core/opset_forms.py);
    tract 0.23 has no Loop, and a Scan body reading the rows finds no facts for them (their count
    is data-dependent: out-of-bounds rows are dropped). For data of a static size up to
    ``_ONE_HOT_LIMIT`` (or of a size known at run time only) the same result without a loop: each row's cell id (a GatherND of the ids
    laid out like the data) compared with every id gives a one-hot ``(rows, cells)``; the updates
    where it is set (the reduction's neutral element elsewhere) reduced over the rows, combined
    with the data where a row hit the cell. Repeated indices combine in another order than the
    Loop's (the same numbers for ints, float rounding otherwise)."""
    if node.op_type != "Loop" or node.domain != "" or len(node.inputs) != 3 or len(node.outputs) != 1:
        return False
    count, keep_going, data = node.inputs
    if count is None or data is None or keep_going is not None and _constant(keep_going) is None:
        return False
    body = node.attributes["body"].as_graph()
    if len(body.inputs) != 3 or len(body.outputs) != 2:
        return False
    iteration, cond, acc = body.inputs
    passed = body.outputs[0]
    producer = passed.producer()
    if passed is not cond and (producer is None or producer.op_type != "Identity" or producer.inputs[0] is not cond):
        return False
    write = body.outputs[1].producer()
    if write is None or write.op_type != "ScatterND" or write.attributes.get_string("reduction", "none") != "none" or write.inputs[0] is not acc:
        return False
    where, combined = write.inputs[1], write.inputs[2]
    combine = combined.producer() if combined is not None else None
    if combine is None or combine.op_type not in _REDUCE_ROWS or combine.domain != "" or len(combine.inputs) != 2:
        return False
    old, value = combine.inputs
    read = old.producer() if old is not None else None
    if read is None or read.op_type != "GatherND" or read.inputs[0] is not acc or read.inputs[1] is not where:
        return False
    rows, values = _row_of(where, iteration), _row_of(value, iteration)
    dtype, shape = data.dtype, data.shape
    if rows is None or values is None or dtype is None or dtype == ir.DataType.BOOL:
        return False
    if shape is not None and shape.is_static() and int(np.prod(shape.numpy())) > _ONE_HOT_LIMIT:
        return False
    i64, numpy_type = ir.DataType.INT64, dtype.numpy()
    neutral = np.asarray(_neutral(combine.op_type, numpy_type), numpy_type)
    zero, one = np.array([0], np.int64), np.array([1], np.int64)

    def dims(v: ir.Value, start: int, end: int) -> ir.Value:
        return edit.op("Slice", edit.op("Shape", v, dtype=i64), np.array([start], np.int64), np.array([end], np.int64), dtype=i64)

    data_shape = edit.op("Shape", data, dtype=i64)
    size = edit.op("ReduceProd", data_shape, keepdims=1, dtype=i64)
    depth, n = dims(rows, 1, 2), dims(rows, 0, 1)
    lead = edit.op("Slice", data_shape, zero, depth, dtype=i64)
    cells = edit.op("ReduceProd", lead, keepdims=1, dtype=i64)  # (1,): M
    row_size = edit.op("Div", size, cells, dtype=i64)  # (1,): elements per cell
    positions = edit.op("Range", np.array(0, np.int64), edit.op("Squeeze", cells, zero, dtype=i64), np.array(1, np.int64), dtype=i64)
    cell = edit.op("GatherND", edit.op("Reshape", positions, lead, dtype=i64), rows, dtype=i64)  # (N,)
    order = edit.op("Range", np.array(0, np.int64), edit.op("Squeeze", n, zero, dtype=i64), np.array(1, np.int64), dtype=i64)
    applied = edit.op("Less", order, count, dtype=_BOOL)  # (the Loop's first `count` rows)
    hits = edit.op("And", edit.op("Equal", edit.op("Unsqueeze", cell, one, dtype=i64), edit.op("Unsqueeze", positions, zero, dtype=i64), dtype=_BOOL),
                   edit.op("Unsqueeze", applied, one, dtype=_BOOL), dtype=_BOOL)  # (N, M)
    # a row that hits nothing, so that no reduction is over 0 rows
    no_row = edit.op("ConstantOfShape", edit.op("Concat", one, cells, axis=0, dtype=i64), value=ir.tensor(np.zeros((1,), np.bool_)), dtype=_BOOL)
    hits = edit.op("Concat", hits, no_row, axis=0, dtype=_BOOL)
    updates = edit.op("Reshape", values, edit.op("Concat", n, one, row_size, axis=0, dtype=i64), dtype=dtype)  # (N, 1, R)
    padding = edit.op("Expand", neutral.reshape(1, 1, 1), edit.op("Concat", np.array([1, 1], np.int64), row_size, axis=0, dtype=i64), dtype=dtype)
    spread = edit.op("Where", edit.op("Unsqueeze", hits, np.array([2], np.int64), dtype=_BOOL),
                     edit.op("Concat", updates, padding, axis=0, dtype=dtype), neutral, dtype=dtype)  # (N + 1, M, R)
    reduced = _reduce_first_axis(edit, _REDUCE_ROWS[combine.op_type], spread, dtype)
    # (tract's float ReduceMax/Min of only infinities is corrected by reduce_extremes_of_infinities)
    hit = edit.op("Greater", _reduce_first_axis(edit, "ReduceSum", edit.op("Cast", hits, to=_I32, dtype=_I32), _I32), np.int32(0), dtype=_BOOL)
    flat = edit.op("Reshape", data, edit.op("Concat", cells, row_size, axis=0, dtype=i64), dtype=dtype)  # (M, R)
    result = edit.op("Where", edit.op("Unsqueeze", hit, one, dtype=_BOOL), edit.op(combine.op_type, flat, reduced, dtype=dtype), flat, dtype=dtype)
    edit.replace(edit.op("Reshape", result, data_shape, dtype=dtype))
    return True


def _row_of(value: ir.Value | None, iteration: ir.Value) -> ir.Value | None:
    """``x`` where ``value`` is ``Unsqueeze(Gather(x, iteration, axis=0), [0])``, x read from outside."""
    unsqueeze = value.producer() if value is not None else None
    if unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or len(unsqueeze.inputs) != 2:
        return None
    axes = _constant(unsqueeze.inputs[1])
    gather = unsqueeze.inputs[0].producer() if unsqueeze.inputs[0] is not None else None
    if axes is None or axes.reshape(-1).tolist() != [0] or gather is None or gather.op_type != "Gather":
        return None
    if gather.attributes.get_int("axis", 0) != 0 or gather.inputs[1] is not iteration or gather.inputs[0] is None:
        return None
    x = gather.inputs[0]
    return x if x.producer() is None or x.producer().graph is not gather.graph else None


def _neutral(op_type: str, numpy_type: np.dtype) -> Any:
    """The element that ``op_type`` combines without change (-0.0 for a float sum: x + -0.0 is x)."""
    if op_type == "Add":
        return -0.0 if numpy_type.kind == "f" else 0
    if op_type == "Mul":
        return 1
    floating = numpy_type.kind == "f"
    if op_type == "Max":
        return -np.inf if floating else np.iinfo(numpy_type).min
    return np.inf if floating else np.iinfo(numpy_type).max


def _reduce_first_axis(edit: _Editor, op_type: str, x: ir.Value, dtype: ir.DataType) -> ir.Value:
    """``op_type`` over axis 0 (no kept dim), in the form of opsets 13-17 (ReduceSum's axes an
    input, the others' an attribute): the opsets below ScatterND's reductions."""
    if op_type == "ReduceSum":
        return edit.op(op_type, x, np.array([0], np.int64), keepdims=0, dtype=dtype)
    return edit.op(op_type, x, axes=[0], keepdims=0, dtype=dtype)


# -- integer factors in a Scan body ------------------------------------------------------------
_MASKING = frozenset({"Mul", "Div", "Pow", "And"})


def _scan_int_factors_as_states(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 takes a one-element integer or bool constant that a Mul, Div, Pow or And reads
    for a mask and marks the other operand with a "region of interest", up through the body:
    a Scan state read so (``n * 3``) then has a fact its output lacks, and the Scan is refused
    ("inconsistent fact: body input 0 is 2,I32 🬳 3 and body output 0 is 2,I32"). Each such
    constant becomes a state of the Scan that the body passes on unchanged (not a constant
    there, so no mask): the same numbers."""
    if node.op_type != "Scan" or node.domain != "":
        return False
    body = node.attributes["body"].as_graph()
    found: dict[int, tuple[ir.Value, list[tuple[ir.Node, int]]]] = {}
    for inner in body:
        if inner.op_type not in _MASKING or inner.domain != "" or len(inner.inputs) != 2:
            continue
        for index, value in enumerate(inner.inputs):
            array = _constant(value)
            if value is None or array is None or array.size != 1 or array.dtype.kind not in "iub":
                continue
            other = inner.inputs[1 - index]
            if other is None or _constant(other) is not None:
                continue
            found.setdefault(id(value), (value, []))[1].append((inner, index))
    if not found:
        return False
    read = list(found.values())
    constants = [edit.const(_constant(value)) for value, _ in read]
    _passed_through_as_states(node, edit, body, "factor", read, constants)
    return True


def _reshaped_at_run_time(value: ir.Value) -> bool:
    """``value`` has no shape and is a Reshape to a shape computed at run time."""
    producer = value.producer()
    return value.shape is None and producer is not None and producer.op_type == "Reshape" and _constant(producer.inputs[1]) is None


def _read_from_outside(body: ir.Graph) -> list[ir.Value]:
    """The values of enclosing graphs that ``body`` (or a graph inside it) reads."""
    nodes = list(ir.traversal.RecursiveGraphIterator(body))
    own = {id(v) for n in nodes for v in n.outputs} | {id(v) for v in body.inputs} | {id(v) for g in _subgraphs(body) for v in g.inputs}
    return list({id(v): v for n in nodes for v in n.inputs if v is not None and id(v) not in own}.values())


def _scan_with_states(node: ir.Node, edit: _Editor, body: ir.Graph, n_state: int, states: Sequence[ir.Value]) -> ir.Node:
    """``node`` (a Scan with ``n_state`` states) replaced by a Scan running ``body``, which has
    ``states`` as more states after those: the old outputs' users read the new Scan's, which
    takes their names; the final values of the added states are its outputs ``n_state...``."""
    attributes = [attr for name, attr in node.attributes.items() if name != "body"]
    scan = ir.Node("", "Scan", [*node.inputs[:n_state], *states, *node.inputs[n_state:]],
                   [*attributes, ir.AttrGraph("body", body)], num_outputs=len(node.outputs) + len(states),
                   name=node.name, doc_string=node.doc_string)
    assert edit.graph is not None
    edit.graph.insert_before(node, scan)
    edit.replace(*(scan.outputs[i if i < n_state else i + len(states)] for i in range(len(node.outputs))))
    return scan



def _passed_through_as_states(
    node: ir.Node, edit: _Editor, body: ir.Graph, prefix: str,
    read: Sequence[tuple[ir.Value, Sequence[tuple[ir.Node, int]]]], initial: Sequence[ir.Value],
) -> None:
    """Makes each value of ``read`` a new state of the Scan ``node``: its readers in ``body``
    (node, input index) read a new body input instead, which the body passes on unchanged (an
    Identity) as the state's next value; ``initial`` holds the states' first values. The new
    states come after the existing ones; names carry ``prefix`` and a counter, so they stay
    unique when several Scans read one value."""
    n_state = len(node.inputs) - node.attributes.get_int("num_scan_inputs", 0)
    edit.counter[0] += 1
    tag = f"{prefix}{edit.counter[0]}"
    passed = []
    for i, (value, readers) in enumerate(read):
        local = ir.Value(name=f"{value.name}/in_{tag}", type=value.type, shape=value.shape)
        for reader, index in readers:
            reader.replace_input_with(index, local)
        body.inputs.insert(n_state + i, local)
        identity = ir.Node("", "Identity", [local], name=f"{value.name}/through_{tag}")
        identity.outputs[0].name = f"{value.name}/through_{tag}_output"
        identity.outputs[0].type, identity.outputs[0].shape = value.type, value.shape
        body.append(identity)
        passed.append(identity.outputs[0])
    body.outputs[n_state:n_state] = passed
    scan = _scan_with_states(node, edit, body, n_state, initial)
    for i, (value, _) in enumerate(read):
        extra = scan.outputs[n_state + i]
        extra.name, extra.type, extra.shape = f"{value.name}/after_{tag}", value.type, value.shape


def _scan_outputs_unread(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 fails to analyse a Scan whose body also reads a value it emits as a scan
    output (the blocked cholesky's column panel, stacked out and used for the trailing update:
    "Failed analyse for node ... StridedSlice ... Impossible to unify 2 with 3"; it takes the
    stacked rank for the value inside the body). Such an output is emitted through an Identity,
    so the value the body reads is not the one it stacks."""
    if node.op_type != "Scan" or node.domain != "":
        return False
    body = node.attributes["body"].as_graph()
    n_state = len(node.inputs) - node.attributes.get_int("num_scan_inputs", 0)
    changed = False
    for i in range(n_state, len(body.outputs)):
        value = body.outputs[i]
        if not value.uses():
            continue
        identity = ir.Node("", "Identity", [value], name=f"{value.name}/stacked")
        identity.outputs[0].name = f"{value.name}/stacked_output"
        identity.outputs[0].type, identity.outputs[0].shape = value.type, value.shape
        body.append(identity)
        body.outputs[i] = identity.outputs[0]
        changed = True
    return changed

# -- a Scan inside a Scan body ----------------------------------------------------------------
def _nested_scans_as_loops(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 translates a Scan as a TensorIterator and refuses one inside another's
    body, at any depth ("No nested TensorIterator": a ``lax.map`` of ``jax.random.gamma`` draws,
    whose sampler is a ``lax.map`` too, or a scan in a scan). Each Scan inside a Scan's body
    becomes a Loop (:func:`_scan_as_loop`), which it runs there. A Loop of 0 trips in a Scan body
    returns, as its stacked outputs, what the previous inference stacked (a ``lax.map`` of a scan
    over rows of 0 columns run after rows of 4 gave ys of shape (B, 4)): where the length is not
    a static positive number, the Loop runs at least one trip and its results are dropped."""
    if node.op_type != "Scan" or node.domain != "":
        return False
    inner = [n for n in ir.traversal.RecursiveGraphIterator(node.attributes["body"].as_graph()) if n.op_type == "Scan" and n.domain == ""]
    return sum(_scan_as_loop(n, edit) for n in inner) > 0


def _axes(node: ir.Node, name: str, count: int) -> list[int]:
    return list(node.attributes.get_ints(name, None) or [0] * count)


def _scan_as_loop(scan: ir.Node, outer: _Editor) -> bool:
    """``scan`` as a Loop of as many trips as its scanned length: the body reads element ``i``
    (``length - 1 - i`` for a reversed input) of each scanned input with a Gather, and each
    stacked output (Loop stacks along axis 0, in trip order) is reversed and moved to its axis
    where the Scan said so. False (nothing changed) where an axis or the length is not known."""
    edit = _Editor(scan, outer.counter, outer.opset)
    counter = edit.counter
    body = scan.attributes["body"].as_graph()
    n_scanned = scan.attributes.get_int("num_scan_inputs", 0)
    n_state = len(scan.inputs) - n_scanned
    xs, slices, ys = scan.inputs[n_state:], list(body.inputs[n_state:]), scan.outputs[n_state:]
    in_axes, out_axes = _axes(scan, "scan_input_axes", n_scanned), _axes(scan, "scan_output_axes", len(ys))
    in_reversed = _axes(scan, "scan_input_directions", n_scanned)
    out_reversed = _axes(scan, "scan_output_directions", len(ys))
    ranks = [_rank(x) for x in xs]
    out_ranks = [_rank(y) for y in ys]
    if not xs or None in xs or any(a < 0 and r is None for a, r in zip(in_axes, ranks, strict=True)):
        return False
    if any(a < 0 and r is None for a, r in zip(out_axes, out_ranks, strict=True)):
        return False
    in_axes = [a % r if a < 0 else a for a, r in zip(in_axes, ranks, strict=True)]  # type: ignore[operator]
    out_axes = [a % r if a < 0 else a for a, r in zip(out_axes, out_ranks, strict=True)]  # type: ignore[operator]
    x0 = xs[0]
    assert x0 is not None
    length = x0.shape[in_axes[0]] if x0.shape is not None else None
    if isinstance(length, int):
        trips = edit.const(np.array(length, np.int64))
    else:
        trips = edit.op("Gather", edit.op("Shape", x0, dtype=ir.DataType.INT64), np.array(in_axes[0], np.int64), axis=0, dtype=ir.DataType.INT64)
    last = edit.op("Sub", trips, np.array(1, np.int64), dtype=ir.DataType.INT64) if any(in_reversed) else None
    ran = size = None
    if not (isinstance(length, int) and length > 0) and None not in ranks:  # (one trip at least; see above)
        i64 = ir.DataType.INT64
        ran = edit.op("Greater", trips, np.array(0, np.int64), dtype=_BOOL)
        size = edit.op("Reshape", trips, np.array([1], np.int64), dtype=i64)
        xs = _padded_when_empty(edit, xs, in_axes, ranks, edit.op("Reshape", ran, np.array([1], np.int64), dtype=_BOOL))
        trips = edit.op("Max", trips, np.array(1, np.int64), dtype=i64)

    tag = f"{scan.name}/as_loop"
    iteration = ir.Value(name=f"{tag}/iteration", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    cond = ir.Value(name=f"{tag}/cond", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    reads: list[ir.Node] = []

    def add(op_type: str, inputs: list[ir.Value], like: ir.Value, **attrs: Any) -> ir.Value:
        counter[0] += 1
        inner = ir.Node("", op_type, inputs, ir.convenience.convert_attributes(attrs), name=f"{tag}/{op_type}{counter[0]}")
        inner.outputs[0].name = f"{inner.name}_output"
        inner.outputs[0].type, inner.outputs[0].shape = like.type, like.shape
        reads.append(inner)
        return inner.outputs[0]

    for x, element, axis, backwards in zip(xs, slices, in_axes, in_reversed, strict=True):
        position = add("Sub", [last, iteration], iteration) if backwards and last is not None else iteration
        element.replace_all_uses_with(add("Gather", [x, position], element, axis=axis), replace_graph_outputs=True)  # type: ignore[list-item]
    for element in slices:
        body.inputs.remove(element)
    body.inputs.insert(0, iteration)
    body.inputs.insert(1, cond)
    body.outputs.insert(0, add("Identity", [cond], cond))
    if len(body):
        body.insert_before(next(iter(body)), reads)
    else:
        body.extend(reads)
    attributes = [ir.AttrGraph("body", body)]
    loop = ir.Node("", "Loop", [trips, edit.const(np.array(True)), *scan.inputs[:n_state]], attributes,
                   num_outputs=len(scan.outputs), name=scan.name, doc_string=scan.doc_string)
    assert edit.graph is not None
    edit.graph.insert_before(scan, loop)
    results = list(loop.outputs[:n_state])
    if ran is not None:
        for k, (out, initial) in enumerate(zip(loop.outputs[:n_state], scan.inputs[:n_state], strict=True)):
            out.type, out.shape = scan.outputs[k].type, scan.outputs[k].shape
            results[k] = edit.op("Where", ran, out, initial, dtype=scan.outputs[k].dtype)
    for k, (stacked, y) in enumerate(zip(loop.outputs[n_state:], ys, strict=True)):
        stacked.type = y.type
        if size is not None:
            stacked = edit.op("Slice", stacked, np.array([0], np.int64), size, np.array([0], np.int64), dtype=y.dtype)
        if out_reversed[k]:
            stacked = edit.op("Slice", stacked, np.array([-1], np.int64), np.array([np.iinfo(np.int64).min], np.int64),
                              np.array([0], np.int64), np.array([-1], np.int64), dtype=y.dtype)
        if out_axes[k]:
            rank = out_ranks[k]
            assert rank is not None
            perm = [*range(1, out_axes[k] + 1), 0, *range(out_axes[k] + 1, rank)]
            stacked = edit.op("Transpose", stacked, perm=perm, dtype=y.dtype)
        results.append(stacked)
    edit.replace(*results)
    return True


def _scan_inputs_read(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 runs a Scan whose body reads none of its scanned inputs once, not once
    per scanned element (its outputs stack one step: the blocked cholesky, which reads only its
    carry, gave ``Shape inference input shapes {[1,1,16],[2]}``); tract 0.23 drops such an input
    and then has none ("No scan input"). The body then reads its first scanned input into a
    zero that its first output takes away: ``y - 0`` (exact, -0.0 and NaN included) or ``y or
    false``; the zero is the sum of ``b and not b`` with ``b = bool(x)`` (0 for any ``x``, of any
    shape, empty too). No node reads one value twice: tract's declutter moves the ops of the
    scanned input alone out of the Scan and panics on one that does (``x xor x``)."""
    if node.op_type != "Scan" or node.domain != "":
        return False
    body = node.attributes["body"].as_graph()
    n_scanned = node.attributes.get_int("num_scan_inputs", 0)
    scanned = body.inputs[len(body.inputs) - n_scanned:]
    if not scanned or not body.outputs or any(x.uses() for x in scanned):
        return False
    x, y = scanned[0], body.outputs[0]
    tag = f"{y.name}/reads_{x.name}"

    def add(op_type: str, inputs: list[ir.Value], dtype: ir.DataType, shape: ir.Shape | None, **attrs: Any) -> ir.Value:
        edit.counter[0] += 1
        name = f"{tag}/{op_type}{edit.counter[0]}"
        inner = ir.Node("", op_type, inputs, ir.convenience.convert_attributes(attrs), name=name)
        out = inner.outputs[0]
        out.name, out.type, out.shape = f"{name}_output", ir.TensorType(dtype), shape
        body.append(inner)
        return out

    # (each value declares its own shape: tract checks them, a Cast's rank is its input's)
    as_bool = add("Cast", [x], ir.DataType.BOOL, x.shape, to=ir.DataType.BOOL)
    false = add("And", [as_bool, add("Not", [as_bool], ir.DataType.BOOL, x.shape)], ir.DataType.BOOL, x.shape)
    count = add("Cast", [false], ir.DataType.INT32, x.shape, to=ir.DataType.INT32)
    zero = add("ReduceSum", [count], ir.DataType.INT32, ir.Shape([]), keepdims=0)
    assert y.dtype is not None
    zero = add("Cast", [zero], y.dtype, ir.Shape([]), to=y.dtype)
    body.outputs[0] = add("Or" if y.dtype == ir.DataType.BOOL else "Sub", [y, zero], y.dtype, y.shape)
    return True


def _real_dft_reshaped(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 gives a DFT of a real input (last dim 1) one dim too many (``rfft`` of
    ``(8, 6)``: ``(8, 4, 1, 2)``, not ``(8, 4, 2)``): a Reshape to ``[0, ..., 0, 2]`` (0 keeps a
    dim) drops it there and changes nothing where the shape is right."""
    if node.op_type != "DFT" or node.domain != "" or node.inputs[0] is None:
        return False
    x = node.inputs[0]
    producer = x.producer()
    real = x.shape is not None and len(x.shape) > 0 and x.shape[-1] == 1
    if not real and producer is not None and producer.op_type == "Unsqueeze" and len(producer.inputs) == 2:
        axes, rank = _constant(producer.inputs[1]), _rank(x)
        real = axes is not None and rank is not None and axes.size == 1 and int(axes.reshape(-1)[0]) % rank == rank - 1
    rank = _rank(x)
    if not real or rank is None:
        return False
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    spectrum = edit.op("DFT", *node.inputs, dtype=node.outputs[0].dtype, **attributes)
    shape = np.array([0] * (rank - 1) + [2], np.int64)
    edit.replace(edit.op("Reshape", spectrum, shape, dtype=node.outputs[0].dtype))
    return True


def _vector_dot_as_matrix_product(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 refuses a MatMul of two vectors (``y @ alpha``: "Condition failed: `a_rank >
    1 || b_rank > 1`"): the left one is made a row (``1 x n``), the product (of shape ``(1,)``)
    squeezed back to a scalar."""
    if node.op_type != "MatMul" or node.domain != "" or _rank(node.inputs[0]) != 1 or _rank(node.inputs[1]) != 1:
        return False
    dtype = node.outputs[0].dtype
    axis = np.array([0], np.int64)
    row = edit.op("Unsqueeze", node.inputs[0], axis, dtype=dtype)
    edit.replace(edit.op("Squeeze", edit.op("MatMul", row, node.inputs[1], dtype=dtype), axis, dtype=dtype))
    return True


def _strided_slice_as_gather(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23's declutter fails to move a Slice of step other than 1 (``x[::-1]``, the blocked
    upper triangular solve's reversal; ``x[::2]``) over the Reshape before it ("Pulling ...
    Downsample over ... Reshape: Invalid axis"). A one-axis Slice of such a step over a static
    dim is a Gather of the positions it takes (computed here, as numpy slices them)."""
    if node.op_type != "Slice" or node.domain != "" or len(node.inputs) != 5 or node.inputs[0] is None:
        return False
    starts, ends, axes, steps = (_constant(v) for v in node.inputs[1:])
    shape = node.inputs[0].shape
    if any(c is None or c.size != 1 for c in (starts, ends, axes, steps)) or shape is None or int(steps.reshape(-1)[0]) == 1:
        return False
    axis = int(axes.reshape(-1)[0]) % len(shape)
    if not isinstance(shape[axis], int):
        return False
    start, end, step = (int(c.reshape(-1)[0]) for c in (starts, ends, steps))
    positions = np.arange(shape[axis], dtype=np.int64)[start:end:step]
    edit.replace(edit.op("Gather", node.inputs[0], positions, axis=axis, dtype=node.outputs[0].dtype))
    return True

# -- Slice at a run-time start ---------------------------------------------------------------
def _runtime_slice_as_gather(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 gives a Slice at a run-time start a new symbol as its length, though the end
    is the start plus a constant (``dynamic_slice``: a column of a QR step at the step's index),
    and its Where then fails on the mismatch ("Output mismatch after rewiring expansion ...
    expected 20,1,F32 got 20,<Sym0>,F32"). Such a Slice is a Gather of ``start + [0 .. size)``
    per axis (the starts are already clamped into range, as JAX clamps them)."""
    if node.op_type != "Slice" or node.domain != "" or len(node.inputs) not in (4, 5) or node.inputs[0] is None:
        return False
    x, starts, ends, axes = node.inputs[:4]
    steps = _constant(node.inputs[4]) if len(node.inputs) == 5 else None
    producer = ends.producer() if ends is not None else None
    if producer is None or producer.op_type != "Add" or producer.domain != "" or starts is None or _constant(starts) is not None:
        return False
    sizes = _constant(producer.inputs[1]) if producer.inputs[0] is starts else _constant(producer.inputs[0]) if producer.inputs[1] is starts else None
    axes_value = _constant(axes)
    if sizes is None or axes_value is None or steps is not None and np.any(steps != 1) or sizes.ndim != 1 or sizes.size != axes_value.size:
        return False
    result = x
    for i, (axis, size) in enumerate(zip(axes_value.tolist(), sizes.tolist(), strict=True)):
        start = edit.op("Gather", starts, np.array([i], np.int64), dtype=ir.DataType.INT64)
        positions = edit.op("Add", start, np.arange(size, dtype=np.int64), dtype=ir.DataType.INT64)
        result = edit.op("Gather", result, positions, axis=axis, dtype=node.outputs[0].dtype)
    edit.replace(result)
    return True


# -- Gemm of float64 -------------------------------------------------------------------------
def _gemm_as_matmul(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 translates Gemm with its ``beta`` as a float32 constant, and fails on a float64
    Gemm ("tensor is F32, accessed as F64"): one of another type than float32 is a MatMul (of
    the transposed operands), times ``alpha``, plus ``beta * C``."""
    if node.op_type != "Gemm" or node.domain != "":
        return False
    dtype = node.outputs[0].dtype
    if dtype is None or dtype == ir.DataType.FLOAT:
        return False
    numpy_type = dtype.numpy()
    a, b, *c = node.inputs
    assert a is not None and b is not None
    if node.attributes.get_int("transA", 0):
        a = edit.op("Transpose", a, perm=[1, 0], dtype=dtype)
    if node.attributes.get_int("transB", 0):
        b = edit.op("Transpose", b, perm=[1, 0], dtype=dtype)
    result = edit.op("MatMul", a, b, dtype=dtype)
    alpha, beta = node.attributes.get_float("alpha", 1.0), node.attributes.get_float("beta", 1.0)
    if alpha != 1.0:
        result = edit.op("Mul", result, np.asarray(alpha, numpy_type), dtype=dtype)
    if c and c[0] is not None and beta != 0.0:
        bias = c[0] if beta == 1.0 else edit.op("Mul", c[0], np.asarray(beta, numpy_type), dtype=dtype)
        result = edit.op("Add", result, bias, dtype=dtype)
    edit.replace(result)
    return True


# -- Expand of a lower rank ------------------------------------------------------------------
def _expand_full_rank(node: ir.Node, edit: _Editor) -> bool:
    """tract 0.23 splits a MatMul of a Concat into one MatMul per part, and fails when a part is
    an Expand of a tensor of lower rank (a scalar broadcast to ``(B, 1)``: "Condition failed ...
    axes.rank"). The Expand's input gets the output's rank first (leading 1s, the same values)."""
    if node.op_type != "Expand" or node.domain != "" or len(node.inputs) != 2:
        return False
    x, shape = node.inputs
    out = node.outputs[0].shape
    rank = len(out) if out is not None else shape.shape[0] if shape is not None and shape.shape is not None else None
    if x is None or x.shape is None or not isinstance(rank, int):
        return False
    missing = rank - len(x.shape)
    if missing <= 0:
        return False
    padded = edit.op("Unsqueeze", x, np.arange(missing, dtype=np.int64), dtype=x.dtype)
    padded.shape = ir.Shape([1] * missing + list(x.shape.dims))
    node.replace_input_with(0, padded)
    return True


# -- values a Scan body reads from outside -------------------------------------------------------
def _scan_captures_as_states(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4's ONNX frontend does not let a Scan body read a value of the enclosing
    graph that is not a constant ("Number of Scan node inputs (1) is less than required (2)";
    a ``lax.map`` reading a model input, ``jax.random.gamma``'s). Each such value becomes a
    state of the Scan that the body passes on unchanged (an Identity)."""
    if node.op_type != "Scan" or node.domain != "":
        return False
    body = node.attributes["body"].as_graph()
    inside = {id(n) for n in ir.traversal.RecursiveGraphIterator(body)}
    own = {id(v) for n in ir.traversal.RecursiveGraphIterator(body) for v in n.outputs}
    own |= {id(v) for v in body.inputs} | {id(v) for g in _subgraphs(body) for v in g.inputs}
    captured: list[ir.Value] = []
    for inner in ir.traversal.RecursiveGraphIterator(body):
        for value in inner.inputs:
            if value is None or id(value) in own or _constant(value) is not None or any(value is c for c in captured):
                continue
            captured.append(value)
    if not captured:
        return False
    read = [(value, [(user, index) for user, index in list(value.uses()) if id(user) in inside]) for value in captured]
    _passed_through_as_states(node, edit, body, "scan", read, captured)
    return True


def _subgraphs(graph: ir.Graph) -> list[ir.Graph]:
    """The graphs in the attributes of ``graph``'s nodes, at any depth."""
    return [body for inner in graph_nodes(graph) for body in node_bodies(inner)]


# -- DFT of float64 ---------------------------------------------------------------------------
def _dft_in_float32(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 refuses a float64 DFT ("FFT op input element type must be f32, f16, or
    bf16"); it computes float64 in float32 anyway (its profile says ``float64=False``), so the
    DFT is computed in float32 between two Casts, as every other op there is."""
    if node.op_type != "DFT" or node.domain != "" or node.inputs[0] is None or node.inputs[0].dtype != ir.DataType.DOUBLE:
        return False
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    narrow = edit.op("Cast", node.inputs[0], to=ir.DataType.FLOAT, dtype=ir.DataType.FLOAT)
    narrow.shape = node.inputs[0].shape
    spectrum = edit.op("DFT", narrow, *node.inputs[1:], dtype=ir.DataType.FLOAT, **attributes)
    spectrum.shape = node.outputs[0].shape
    edit.replace(edit.op("Cast", spectrum, to=ir.DataType.DOUBLE, dtype=ir.DataType.DOUBLE))
    return True


_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Where"})
_SAME_RANK = frozenset({"Cast", "Neg", "Identity", "DFT", "Transpose", "Concat"})


def _rank(value: ir.Value | None, depth: int = 16) -> int | None:
    """The rank of ``value``: its shape's, else read back through the ops that keep their
    inputs' rank (values a rule made inside itself have no shape yet); None if unknown."""
    if value is None or depth == 0:
        return None
    if value.shape is not None:
        return len(value.shape)
    producer = value.producer()
    if producer is None or producer.domain != "" or not producer.inputs:
        return None
    if producer.op_type == "Unsqueeze" and len(producer.inputs) == 2:
        axes, inner = _constant(producer.inputs[1]), _rank(producer.inputs[0], depth - 1)
        return None if axes is None or inner is None else inner + axes.size
    if producer.op_type in _SAME_RANK:
        return _rank(producer.inputs[0], depth - 1)
    if producer.op_type in _BROADCAST:
        ranks = [_rank(v, depth - 1) for v in producer.inputs]
        return None if None in ranks else max(ranks)  # type: ignore[type-var]
    return None


def _dft_on_axis_one(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 ignores the ``axis`` input of DFT-20 and transforms along axis 1 (the old
    attribute's default; measured: any other axis gives another axis's transform). A DFT along
    another axis is one along axis 1 between two Transposes that swap the axes."""
    if node.op_type != "DFT" or node.domain != "" or len(node.inputs) < 3 or node.inputs[2] is None:
        return False
    x, axis_value = node.inputs[0], _constant(node.inputs[2])
    rank = _rank(x)
    if x is None or rank is None or axis_value is None:
        return False
    axis = int(axis_value) % rank
    if axis == 1:
        return False
    perm = list(range(rank))
    perm[1], perm[axis] = axis, 1
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    moved = edit.op("Transpose", x, perm=perm, dtype=x.dtype)
    spectrum = edit.op("DFT", moved, node.inputs[1], np.array(1, np.int64), dtype=node.outputs[0].dtype, **attributes)
    edit.replace(edit.op("Transpose", spectrum, perm=perm, dtype=node.outputs[0].dtype))
    return True


# -- uint32 arithmetic as int32 ----------------------------------------------------------------
_U32, _I32, _F32, _BOOL = ir.DataType.UINT32, ir.DataType.INT32, ir.DataType.FLOAT, ir.DataType.BOOL
_SAME_BITS = frozenset({"Add", "Sub", "Mul", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "CumSum"})
_COMPARE = {"Less": (False, False), "Greater": (True, False), "LessOrEqual": (True, True), "GreaterOrEqual": (False, True)}
_SMALL_DIVISOR = 2**15  # below: remainder by bytes in float32 (every partial value < 2**23)

Halves = tuple[ir.Value, ir.Value]


def _uint32_as_int32(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO's CPU plugin computes uint32 arithmetic through float32 and int32 comparisons,
    Mod and shifts too (values above 2**24 lose bits: every ``jax.random`` kernel goes wrong),
    while its int32 Add, Sub, Mul, CumSum and bitwise ops wrap exactly. So uint32 values are
    computed on the same bits as int32: the wrapping ops as they are; shifts left by constant
    amounts as a multiply; comparisons, Max/Min, right shifts by constant amounts and Mod on the
    value's two 16-bit halves, which float32 holds exactly (``_halves``). No op used here needs
    opset 18, so this also covers the bitwise ops' decomposition below it."""
    if node.op_type == "Where" and node.domain == "" and node.outputs[0].dtype == _U32 and None not in node.inputs:
        # (its Where of uint32 goes through int32 too: 4294967295 came out as 2147483647)
        condition, a, b = node.inputs
        result = edit.op("Where", condition, _as_int32(edit, a), _as_int32(edit, b), dtype=_I32)  # type: ignore[arg-type]
        edit.replace(edit.op("Cast", result, to=_U32, dtype=_U32))
        return True
    if node.domain != "" or not node.inputs or node.inputs[0] is None or node.inputs[0].dtype != _U32:
        return False
    op = node.op_type
    args = [_as_int32(edit, v) if v is not None and v.dtype == _U32 else v for v in node.inputs]
    if op in _SAME_BITS:
        result = edit.op(op, *args, dtype=_I32)
    elif op in _COMPARE or op == "Equal":
        x, y = (_halves(edit, a) for a in args)
        if op == "Equal":
            edit.replace(_equal(edit, x, y))
            return True
        swap, negate = _COMPARE[op]
        less = _less(edit, y, x) if swap else _less(edit, x, y)
        edit.replace(edit.op("Not", less, dtype=_BOOL) if negate else less)
        return True
    elif op in ("Max", "Min") and len(args) == 2:
        x_less = _less(edit, _halves(edit, args[0]), _halves(edit, args[1]))
        first, second = (args[1], args[0]) if op == "Max" else (args[0], args[1])
        result = edit.op("Where", x_less, first, second, dtype=_I32)
    elif op == "BitShift":
        constant = _constant(node.inputs[1])
        # (a run-time amount: its clipped value indexes tables; OpenVINO's own BitShift of them
        # goes through float32 and makes a scalar rank 1, which a loop state cannot take)
        amount = np.clip(constant.astype(np.int64), 0, _MAX_SHIFT) if constant is not None else _shift_index(edit, args[1])  # type: ignore[arg-type]
        if node.attributes["direction"].as_string() == "LEFT":
            result = edit.op("Mul", args[0], _per_amount(edit, _LEFT_FACTORS, amount), dtype=_I32)
        else:
            result = _shift_right(edit, _halves(edit, args[0]), amount)
    elif op == "Mod":  # (fmod or not: the same for unsigned values)
        result = _remainder(edit, args[0], args[1], _constant(node.inputs[1]))
    else:
        return False
    edit.replace(edit.op("Cast", result, to=_U32, dtype=_U32))
    return True


def _as_int32(edit: _Editor, x: ir.Value) -> ir.Value:
    """uint32 ``x`` on int32 bits: the int32 value a rewritten op cast to uint32, else a Cast."""
    producer = x.producer()
    if producer is not None and producer.op_type == "Cast" and producer.inputs[0] is not None and producer.inputs[0].dtype == _I32:
        return producer.inputs[0]
    return _i32(edit, x)


def _f32(edit: _Editor, x: ir.Value) -> ir.Value:
    return edit.op("Cast", x, to=_F32, dtype=_F32)


def _i32(edit: _Editor, x: ir.Value) -> ir.Value:
    return edit.op("Cast", x, to=_I32, dtype=_I32)


def _scaled(edit: _Editor, x: ir.Value, factor: float | np.ndarray) -> ir.Value:
    return edit.op("Mul", x, np.asarray(factor, np.float32), dtype=_F32)


def _halves(edit: _Editor, x: ir.Value) -> Halves:
    """(high, low) 16-bit halves of int32 bits ``x`` as exact float32 values in [0, 2**16).

    ``x * 2**16`` wraps to ``low << 16`` and ``x - low`` is ``high << 16``: each has at most 16
    significant bits, so the casts to float32 are exact; a negative half is taken mod 2**16."""
    def unsigned(v: ir.Value) -> ir.Value:
        half = _scaled(edit, _f32(edit, v), 2.0**-16)  # in [-2**15, 2**15)
        return edit.op("Sub", half, _scaled(edit, edit.op("Floor", _scaled(edit, half, 2.0**-16), dtype=_F32), 2.0**16), dtype=_F32)

    low = unsigned(edit.op("Mul", x, np.array(2**16, np.int32), dtype=_I32))
    high = unsigned(edit.op("Sub", x, _i32(edit, low), dtype=_I32))
    return high, low


def _less(edit: _Editor, x: Halves, y: Halves) -> ir.Value:
    """Unsigned ``x < y``: the high halves decide, else the low ones."""
    high_less = edit.op("Less", x[0], y[0], dtype=_BOOL)
    high_equal = edit.op("Equal", x[0], y[0], dtype=_BOOL)
    low_less = edit.op("Less", x[1], y[1], dtype=_BOOL)
    return edit.op("Or", high_less, edit.op("And", high_equal, low_less, dtype=_BOOL), dtype=_BOOL)


def _equal(edit: _Editor, x: Halves, y: Halves) -> ir.Value:
    both = [edit.op("Equal", a, b, dtype=_BOOL) for a, b in zip(x, y, strict=True)]
    return edit.op("And", *both, dtype=_BOOL)


_MAX_SHIFT = 48  # (any amount from 32 on gives 0; 48 also empties the high half's scale)
_AMOUNTS = np.arange(_MAX_SHIFT + 1)
# per shift amount: the left shift's int32 factor, and the right shift's high-half float scale and
# int32 factor (``_shift_right``) and low-half float scale
_LEFT_FACTORS = np.where(_AMOUNTS < 32, np.left_shift(1, np.clip(_AMOUNTS, 0, 31)), 0).astype(np.uint32).view(np.int32)
_HIGH_SCALES = np.where(_AMOUNTS >= 16, np.ldexp(1.0, 16 - _AMOUNTS), 1.0).astype(np.float32)
_HIGH_FACTORS = np.where(_AMOUNTS < 16, np.left_shift(1, np.clip(16 - _AMOUNTS, 0, 16)), 1).astype(np.int32)
_LOW_SCALES = np.ldexp(1.0, -_AMOUNTS).astype(np.float32)


def _shift_index(edit: _Editor, amount: ir.Value) -> ir.Value:
    """Run-time shift amounts (int32 bits of uint32) as indices into the tables: clipped to
    ``_MAX_SHIFT``, those at or above 2**31 (negative as int32) too."""
    clipped = edit.op("Min", amount, np.int32(_MAX_SHIFT), dtype=_I32)
    return edit.op("Where", edit.op("Less", amount, np.int32(0), dtype=_BOOL), np.int32(_MAX_SHIFT), clipped, dtype=_I32)


def _per_amount(edit: _Editor, table: np.ndarray, amount: np.ndarray | ir.Value) -> np.ndarray | ir.Value:
    """``table`` at each shift amount: constant amounts index it here, run-time ones by a Gather."""
    if isinstance(amount, np.ndarray):
        return table[amount]
    return edit.op("Gather", table, amount, axis=0, dtype=ir.DataType.from_numpy(table.dtype))


def _shift_right(edit: _Editor, x: Halves, amount: np.ndarray | ir.Value) -> ir.Value:
    """Logical right shift by amounts in ``[0, _MAX_SHIFT]`` (constants, or run-time indices;
    any shape, broadcast): the high half scaled by 2**(16 - s) (a float scale and Floor for
    s >= 16, an int32 multiply below, which wraps into the top bits) plus the low half's
    ``floor(low / 2**s)``; the two never overlap. Amounts of 32 and more give 0."""
    high_scale = _per_amount(edit, _HIGH_SCALES, amount)
    high = edit.op("Mul", _i32(edit, edit.op("Floor", edit.op("Mul", x[0], high_scale, dtype=_F32), dtype=_F32)),
                   _per_amount(edit, _HIGH_FACTORS, amount), dtype=_I32)
    low = _i32(edit, edit.op("Floor", edit.op("Mul", x[1], _per_amount(edit, _LOW_SCALES, amount), dtype=_F32), dtype=_F32))
    return edit.op("Add", high, low, dtype=_I32)


def _fmod_small(edit: _Editor, t: ir.Value, c: ir.Value) -> ir.Value:
    """``t mod c`` for float32 integers ``0 <= t < 2**23``, ``c <= 2**15`` (every step exact; the
    corrections guard a Div that is not correctly rounded)."""
    r = edit.op("Sub", t, edit.op("Mul", c, edit.op("Floor", edit.op("Div", t, c, dtype=_F32), dtype=_F32), dtype=_F32), dtype=_F32)
    r = edit.op("Where", edit.op("Less", r, np.float32(0), dtype=_BOOL), edit.op("Add", r, c, dtype=_F32), r, dtype=_F32)
    return edit.op("Where", edit.op("Less", r, c, dtype=_BOOL), r, edit.op("Sub", r, c, dtype=_F32), dtype=_F32)


def _remainder(edit: _Editor, x: ir.Value, y: ir.Value, constant: np.ndarray | None) -> ir.Value:
    """Unsigned ``x mod y`` on int32 bits (``x`` where ``y`` is 0, as in JAX).

    A divisor up to 2**15: long division by bytes in float32. A larger one: the quotient is
    below 2**17, so float32's estimate is within one; one less than it (at least 0) leaves a
    remainder in [0, 3y) with no wrap, which two conditional subtractions bring below y.
    A constant divisor takes one of the two ways; a runtime one computes both and selects."""
    xh, xl = _halves(edit, x)
    if constant is None:
        yh, yl = _halves(edit, y)
    else:
        bits = constant.astype(np.uint32)
        yh, yl = (edit.const((bits >> s & 0xFFFF).astype(np.float32)) for s in (16, 0))
    yf = edit.op("Add", _scaled(edit, yh, 2.0**16), yl, dtype=_F32)
    small = large = None
    if constant is None or np.any(constant <= _SMALL_DIVISOR):
        r = None
        for half in (xh, xl):
            top = edit.op("Floor", _scaled(edit, half, 1 / 256), dtype=_F32)
            for digit in (top, edit.op("Sub", half, _scaled(edit, top, 256.0), dtype=_F32)):
                r = _fmod_small(edit, digit if r is None else edit.op("Add", _scaled(edit, r, 256.0), digit, dtype=_F32), yl)
        small = _i32(edit, r)
    if constant is None or np.any(constant > _SMALL_DIVISOR):
        xf = edit.op("Add", _scaled(edit, xh, 2.0**16), xl, dtype=_F32)
        estimate = edit.op("Floor", edit.op("Div", xf, yf, dtype=_F32), dtype=_F32)
        quotient = _i32(edit, edit.op("Max", edit.op("Sub", estimate, np.float32(1), dtype=_F32), np.float32(0), dtype=_F32))
        large = edit.op("Sub", x, edit.op("Mul", quotient, y, dtype=_I32), dtype=_I32)
        for _ in range(2):
            below = _less(edit, _halves(edit, large), (yh, yl))
            large = edit.op("Where", below, large, edit.op("Sub", large, y, dtype=_I32), dtype=_I32)
    if small is None or large is None:
        result = small if large is None else large
    else:
        is_small = edit.op("LessOrEqual", yf, np.float32(_SMALL_DIVISOR), dtype=_BOOL)
        result = edit.op("Where", is_small, small, large, dtype=_I32)
    assert result is not None
    if constant is not None and np.all(constant != 0):
        return result
    zero = edit.op("And", *(edit.op("Equal", h, np.float32(0), dtype=_BOOL) for h in (yh, yl)), dtype=_BOOL)
    return edit.op("Where", zero, x, result, dtype=_I32)


def _uint32_bits(node: ir.Node, edit: _Editor) -> bool:
    """``(x >> s) mod 2``, how the bitwise ops below opset 18 read bit ``s`` of uint32 ``x``, is
    the sign of ``x << (31 - s)``: an int32 multiply and a comparison with 0, both exact on
    OpenVINO (and ~20 ops fewer per bit than the shift and the remainder on 16-bit halves)."""
    if node.op_type != "Mod" or node.domain != "" or node.inputs[0] is None or node.inputs[0].dtype != _U32:
        return False
    divisor = _constant(node.inputs[1])
    shift = node.inputs[0].producer()
    if divisor is None or not np.all(divisor == 2) or shift is None or shift.op_type != "BitShift":
        return False
    amount = _constant(shift.inputs[1])
    if amount is None or shift.attributes["direction"].as_string() != "RIGHT" or np.any((amount < 0) | (amount > 31)):
        return False
    factor = np.left_shift(1, 31 - amount.astype(np.int64)).astype(np.uint32).view(np.int32)
    top = edit.op("Mul", _as_int32(edit, shift.inputs[0]), factor, dtype=_I32)
    edit.replace(edit.op("Cast", edit.op("Less", top, np.int32(0), dtype=_BOOL), to=_U32, dtype=_U32))
    if not shift.outputs[0].uses() and shift.graph is not None:
        shift.graph.remove(shift, safe=True)
    return True


# -- Expand, then arithmetic with a constant -------------------------------------------------
def _expand_after_arithmetic(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO 2026.4 gives ``Add(Expand(c, shape), 0.5)`` (``jnp.zeros((B, 4)) + 0.5``, a
    scan's initial carry) the shape ``(1, 4)`` where ``shape`` is ``(0, 4)`` at run time (the
    Expand alone, or an Add of an input of batch 0, is right). The arithmetic on the Expand's
    data, then the Expand: the same values (each element is ``op(data, constant)`` either way)
    and shape (broadcast of data, constant and ``shape``), with less arithmetic."""
    if node.op_type not in ("Add", "Sub", "Mul", "Div") or len(node.inputs) != 2:
        return False
    a, b = node.inputs
    for expanded, other in ((a, b), (b, a)):
        producer = expanded.producer() if expanded is not None else None
        if producer is None or producer.op_type != "Expand" or producer.domain != "" or _constant(other) is None:
            continue
        if len(expanded.uses()) != 1:
            continue
        data, shape = producer.inputs
        operands = (data, other) if expanded is a else (other, data)
        dtype = node.outputs[0].dtype
        edit.replace(edit.op("Expand", edit.op(node.op_type, *operands, dtype=dtype), shape, dtype=dtype))
        if not producer.outputs[0].uses() and producer.graph is not None:
            producer.graph.remove(producer, safe=True)
        return True
    return False


REWRITES: dict[str, Callable[[ir.Node, _Editor], bool]] = {
    "expand_after_arithmetic": _expand_after_arithmetic,
    "bool_equal_as_xor": _bool_equal_as_xor,
    "empty_constants_as_constant_of_shape": _empty_constants_as_constant_of_shape,
    "integer_square_as_product": _integer_square_as_product,
    "greater_as_less": _greater_as_less,
    "reduce_extremes_of_infinities": _reduce_extremes_of_infinities,
    "int32_extremes_on_halves": _int32_extremes_on_halves,
    "uint32_extremes_on_halves": _uint32_extremes_on_halves,
    "integer_sum_as_cumsum": _integer_sum_as_cumsum,
    "integer_matmul_as_cumsum": _integer_matmul_as_cumsum,
    "int64_cast_as_castlike": _int64_cast_as_castlike,
    "isnan_as_not_equal": _isnan_as_not_equal,
    "float_to_uint32_via_int32": _float_to_uint32_via_int32,
    "counter_scan_as_state": _counter_scan_as_state,
    "counted_loop_as_scan": _counted_loop_as_scan,
    "inner_scans_restarted": _inner_scans_restarted,
    "ranges_in_scan_bodies": _ranges_in_scan_bodies,
    "scan_of_no_steps_keeps_states": _scan_of_no_steps_keeps_states,
    "scan_of_no_steps_runs_one": _scan_of_no_steps_runs_one,
    "float_sum_over_empty_last_axis": _float_sum_over_empty_last_axis,
    "uint32_matmul_as_int32": _uint32_matmul_as_int32,
    "scatter_loop_as_one_hot": _scatter_loop_as_one_hot,
    "scan_int_factors_as_states": _scan_int_factors_as_states,
    "scan_outputs_unread": _scan_outputs_unread,
    "dft_in_float32": _dft_in_float32,
    "real_dft_reshaped": _real_dft_reshaped,
    "scan_captures_as_states": _scan_captures_as_states,
    "dft_on_axis_one": _dft_on_axis_one,
    "gemm_as_matmul": _gemm_as_matmul,
    "vector_dot_as_matrix_product": _vector_dot_as_matrix_product,
    "strided_slice_as_gather": _strided_slice_as_gather,
    "runtime_slice_as_gather": _runtime_slice_as_gather,
    "expand_full_rank": _expand_full_rank,
    "range_as_cumsum": _range_as_cumsum,
    "compress_as_gather": _compress_as_gather,
    "uint32_bits": _uint32_bits,
    "nan_propagating_max_min": _nan_propagating_max_min,
    "scan_inputs_read": _scan_inputs_read,
    "nested_scans_as_loops": _nested_scans_as_loops,
    "uint32_as_int32": _uint32_as_int32,
}


def apply_rewrites(model: ir.Model, names: Sequence[str]) -> int:
    """Run the named rewrites, one walk each in the profile's order, over every node of every
    graph (a later rewrite sees what an earlier one wrote); returns how many nodes changed."""
    counter = [0]
    changed = 0
    opset = model.opset_imports.get("", 0)
    for name in names:
        rule = REWRITES[name]
        for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
            if node.graph is not None and rule(node, _Editor(node, counter, opset)):
                changed += 1
    return changed
