"""The rewrites more than one runtime needs (OpenVINO and tract), and the helpers they share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement
from jax2onnx_nn.core.ir.values import constant_array

# the element types the rewrites write most
U32, I32, F32, BOOL = ir.DataType.UINT32, ir.DataType.INT32, ir.DataType.FLOAT, ir.DataType.BOOL


@rewrite("Max", "Min")
def nan_propagating_max_min(node: ir.Node, edit: Editor) -> Replacement:
    """JAX's max/min give NaN when either operand is NaN; OpenVINO and tract return the other
    operand. Where either is NaN, ``a + b`` is NaN (with the broadcast shape Max has)."""
    if node.op_type not in ("Max", "Min") or len(node.inputs) < 2:
        return None
    dtype = node.outputs[0].dtype
    if dtype is None or not dtype.is_floating_point():
        return None
    result = node.inputs[0]
    assert result is not None
    for other in node.inputs[1:]:
        assert other is not None
        plain = edit.op(node.op_type, result, other, dtype=dtype)
        nan = edit.op(
            "Or", edit.op("IsNaN", result), edit.op("IsNaN", other), dtype=ir.DataType.BOOL
        )
        result = edit.op(
            "Where", nan, edit.op("Add", result, other, dtype=dtype), plain, dtype=dtype
        )
    return result


@rewrite("ReduceMax", "ReduceMin")
def reduce_extremes_of_infinities(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 and tract 0.23 start a float ReduceMax at the lowest finite value (and
    ReduceMin at the largest): the max of only -inf is -3.4028235e38 there, not -inf (measured at
    opsets 13 and 18; ``jnp.max`` of a fully masked row). Where the result is that finite value
    and no element equals it, it is the infinity instead; a count of the elements equal to it
    (a ReduceSum over the same axes) tells."""
    if (
        node.op_type not in ("ReduceMax", "ReduceMin")
        or node.domain != ""
        or not node.inputs
        or node.inputs[0] is None
    ):
        return None
    x, dtype = node.inputs[0], node.outputs[0].dtype
    if dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16):
        return None
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    result = edit.op(node.op_type, *node.inputs, dtype=dtype, **attributes)
    info = np.finfo(dtype.numpy())
    extremes = (info.min, -np.inf) if node.op_type == "ReduceMax" else (info.max, np.inf)
    finite, infinite = (np.asarray(e, dtype.numpy()) for e in extremes)
    axes = node.inputs[1] if len(node.inputs) > 1 else None
    if axes is None and "axes" in attributes:
        axes = edit.const(np.asarray(attributes["axes"], np.int64))
    count_attributes = {
        name: value
        for name, value in attributes.items()
        if name in ("keepdims", "noop_with_empty_axes")
    }
    reached = edit.op("Cast", edit.op("Equal", x, finite, dtype=BOOL), to=I32, dtype=I32)
    count = (
        edit.op("ReduceSum", reached, axes, dtype=I32, **count_attributes)
        if axes is not None
        else edit.op("ReduceSum", reached, dtype=I32, **count_attributes)
    )
    clipped = edit.op(
        "And",
        edit.op("Equal", result, finite, dtype=BOOL),
        edit.op("Equal", count, np.int32(0), dtype=BOOL),
        dtype=BOOL,
    )
    return edit.op("Where", clipped, infinite, result, dtype=dtype)


def extremes_on_halves(node: ir.Node, edit: Editor, types: tuple[ir.DataType, ...]) -> bool:
    """A ReduceMax/Min of int32 or uint32 (of ``types``) on float32: with the sign bit of an
    int32 flipped (an int32 Add of -2**31, which wraps) the order is the unsigned order of the
    bits, whose 16-bit halves float32 holds exactly (``halves``): the extreme of the high halves,
    then of the low halves among the elements that have it; the bits put back together by int32
    arithmetic. An empty reduction gives the type's identity."""
    if (
        node.op_type not in ("ReduceMax", "ReduceMin")
        or node.domain != ""
        or not node.inputs
        or node.inputs[0] is None
    ):
        return False
    x = node.inputs[0]
    if x.dtype not in types:
        return False
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    axes_value = (
        constant_array(node.inputs[1])
        if len(node.inputs) > 1 and node.inputs[1] is not None
        else attributes.get("axes")
    )
    if len(node.inputs) > 1 and node.inputs[1] is not None and axes_value is None:
        return False  # axes computed at run time
    if attributes.get("noop_with_empty_axes") and (
        axes_value is None or not len(np.asarray(axes_value).reshape(-1))
    ):
        return False
    axes = (
        None
        if axes_value is None or not len(np.asarray(axes_value).reshape(-1))
        else np.asarray(axes_value, np.int64).reshape(-1)
    )
    flip = np.int32(-(2**31))

    def flipped(v: ir.Value) -> ir.Value:  # (uint32: its bits' order already)
        return edit.op("Add", v, flip, dtype=I32) if x.dtype == I32 else v

    high, low = halves(edit, flipped(as_int32(edit, x)))

    def reduce(v: ir.Value) -> ir.Value:
        if axes is None:
            extreme = edit.op(node.op_type, v, keepdims=1, dtype=F32)
        elif edit.opset >= 18:
            extreme = edit.op(node.op_type, v, axes, keepdims=1, dtype=F32)
        else:
            extreme = edit.op(node.op_type, v, axes=axes.tolist(), keepdims=1, dtype=F32)
        # (of no elements it is a float's extreme: clipped to a half's, the bits are the type's
        # identity, as in JAX: the lowest value for a max, the largest for a min)
        return edit.op("Clip", extreme, np.float32(0), np.float32(2**16 - 1), dtype=F32)

    top = reduce(high)
    outside = np.float32(-1.0 if node.op_type == "ReduceMax" else 2.0**16)
    bottom = reduce(
        edit.op("Where", edit.op("Equal", high, top, dtype=BOOL), low, outside, dtype=F32)
    )
    bits = edit.op(
        "Add",
        edit.op("Mul", i32(edit, top), np.int32(2**16), dtype=I32),
        i32(edit, bottom),
        dtype=I32,
    )
    result = flipped(bits)
    if not attributes.get("keepdims", 1):
        result = (
            edit.op("Reshape", result, np.zeros((0,), np.int64), dtype=I32)
            if axes is None
            else edit.op("Squeeze", result, axes, dtype=I32)
        )
    edit.replace(result if x.dtype == I32 else edit.op("Cast", result, to=U32, dtype=U32))
    return True


@rewrite()
def empty_constants_as_constant_of_shape(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 gives an empty constant (a ``(0, 3)`` Constant or initializer: the ys of
    a scan of 0 steps) shape ``()`` as a model output, and ``(3,)`` to its sum with a ``(3,)``
    input; tract 0.23 reads an empty uint32 or uint64 initializer as int32 / int64 ("Impossible
    to unify U32 with I32"). A ConstantOfShape of the shape gives both the right shape and type
    (measured for every element type): a Constant node that is empty becomes one, and so does
    an empty initializer where a node reads it. A late rewrite: constant folding would undo it."""
    if node.domain != "":
        return None
    if node.op_type == "Constant":
        array = constant_array(node.outputs[0])
        if array is None or array.size or not _fills(array.dtype, edit.opset):
            return None
        return _constant_of_shape(edit, array)
    changed = False
    for index, value in enumerate(node.inputs):
        if value is None or value.producer() is not None or value.const_value is None:
            continue
        array = value.const_value.numpy()
        if array.size or not _fills(array.dtype, edit.opset):
            continue
        node.replace_input_with(index, _constant_of_shape(edit, array))
        if (
            not value.uses()
            and not value.is_graph_output()
            and value.graph is not None
            and value.name is not None
            and value.name in value.graph.initializers
        ):
            value.graph.initializers.pop(value.name)
        changed = True
    return changed


def _fills(dtype: np.dtype, opset: int) -> bool:
    """ConstantOfShape has a value of this type at ``opset`` (bfloat16 from opset 20)."""
    return dtype.kind in "biuf" or opset >= 20 and dtype.name == "bfloat16"


def _constant_of_shape(edit: Editor, array: np.ndarray) -> ir.Value:
    dtype = ir.DataType.from_numpy(array.dtype)
    filled = edit.op(
        "ConstantOfShape",
        np.array(array.shape, np.int64),
        value=ir.tensor(np.zeros((1,), array.dtype)),
        dtype=dtype,
    )
    filled.shape = ir.Shape(list(array.shape))
    return filled


def scan_with_states(
    node: ir.Node, edit: Editor, body: ir.Graph, n_state: int, states: Sequence[ir.Value]
) -> ir.Node:
    """``node`` (a Scan with ``n_state`` states) replaced by a Scan running ``body``, which has
    ``states`` as more states after those: the old outputs' users read the new Scan's, which
    takes their names; the final values of the added states are its outputs ``n_state...``."""
    attributes = [attr for name, attr in node.attributes.items() if name != "body"]
    scan = ir.Node(
        "",
        "Scan",
        [*node.inputs[:n_state], *states, *node.inputs[n_state:]],
        [*attributes, ir.AttrGraph("body", body)],
        num_outputs=len(node.outputs) + len(states),
        name=node.name,
        doc_string=node.doc_string,
    )
    assert edit.graph is not None
    edit.graph.insert_before(node, scan)
    edit.replace(
        *(scan.outputs[i if i < n_state else i + len(states)] for i in range(len(node.outputs)))
    )
    return scan


def passed_through_as_states(
    node: ir.Node,
    edit: Editor,
    body: ir.Graph,
    prefix: str,
    read: Sequence[tuple[ir.Value, Sequence[tuple[ir.Node, int]]]],
    initial: Sequence[ir.Value],
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
    scan = scan_with_states(node, edit, body, n_state, initial)
    for i, (value, _) in enumerate(read):
        extra = scan.outputs[n_state + i]
        extra.name, extra.type, extra.shape = f"{value.name}/after_{tag}", value.type, value.shape


@rewrite("Scan")
def scan_inputs_read(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 runs a Scan whose body reads none of its scanned inputs once, not once
    per scanned element (its outputs stack one step: the blocked cholesky, which reads only its
    carry, gave ``Shape inference input shapes {[1,1,16],[2]}``); tract 0.23 drops such an input
    and then has none ("No scan input"). The body then reads its first scanned input into a
    zero that its first output takes away: ``y - 0`` (exact, -0.0 and NaN included) or ``y or
    false``; the zero is the sum of ``b and not b`` with ``b = bool(x)`` (0 for any ``x``, of any
    shape, empty too). No node reads one value twice: tract's declutter moves the ops of the
    scanned input alone out of the Scan and panics on one that does (``x xor x``)."""
    if node.op_type != "Scan" or node.domain != "":
        return None
    body = node.attributes["body"].as_graph()
    n_scanned = node.attributes.get_int("num_scan_inputs", 0)
    scanned = body.inputs[len(body.inputs) - n_scanned :]
    if not scanned or not body.outputs or any(x.uses() for x in scanned):
        return None
    x, y = scanned[0], body.outputs[0]
    tag = f"{y.name}/reads_{x.name}"

    def add(
        op_type: str,
        inputs: list[ir.Value],
        dtype: ir.DataType,
        shape: ir.Shape | None,
        **attrs: Any,
    ) -> ir.Value:
        edit.counter[0] += 1
        name = f"{tag}/{op_type}{edit.counter[0]}"
        inner = ir.Node("", op_type, inputs, ir.convenience.convert_attributes(attrs), name=name)
        out = inner.outputs[0]
        out.name, out.type, out.shape = f"{name}_output", ir.TensorType(dtype), shape
        body.append(inner)
        return out

    # (each value declares its own shape: tract checks them, a Cast's rank is its input's)
    as_bool = add("Cast", [x], ir.DataType.BOOL, x.shape, to=ir.DataType.BOOL)
    false = add(
        "And",
        [as_bool, add("Not", [as_bool], ir.DataType.BOOL, x.shape)],
        ir.DataType.BOOL,
        x.shape,
    )
    count = add("Cast", [false], ir.DataType.INT32, x.shape, to=ir.DataType.INT32)
    zero = add("ReduceSum", [count], ir.DataType.INT32, ir.Shape([]), keepdims=0)
    assert y.dtype is not None
    zero = add("Cast", [zero], y.dtype, ir.Shape([]), to=y.dtype)
    body.outputs[0] = add(
        "Or" if y.dtype == ir.DataType.BOOL else "Sub", [y, zero], y.dtype, y.shape
    )
    return True


_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Where"})


_SAME_RANK = frozenset({"Cast", "Neg", "Identity", "DFT", "Transpose", "Concat"})


def rank_of(value: ir.Value | None, depth: int = 16) -> int | None:
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
        axes, inner = constant_array(producer.inputs[1]), rank_of(producer.inputs[0], depth - 1)
        return None if axes is None or inner is None else inner + axes.size
    if producer.op_type in _SAME_RANK:
        return rank_of(producer.inputs[0], depth - 1)
    if producer.op_type in _BROADCAST:
        ranks = [rank_of(v, depth - 1) for v in producer.inputs]
        return None if None in ranks else max(ranks)  # type: ignore[type-var]
    return None


Halves = tuple[ir.Value, ir.Value]


def as_int32(edit: Editor, x: ir.Value) -> ir.Value:
    """uint32 ``x`` on int32 bits: the int32 value a rewritten op cast to uint32, else a Cast."""
    producer = x.producer()
    if (
        producer is not None
        and producer.op_type == "Cast"
        and producer.inputs[0] is not None
        and producer.inputs[0].dtype == I32
    ):
        return producer.inputs[0]
    return i32(edit, x)


def _f32(edit: Editor, x: ir.Value) -> ir.Value:
    return edit.op("Cast", x, to=F32, dtype=F32)


def i32(edit: Editor, x: ir.Value) -> ir.Value:
    return edit.op("Cast", x, to=I32, dtype=I32)


def scaled(edit: Editor, x: ir.Value, factor: float | np.ndarray) -> ir.Value:
    return edit.op("Mul", x, np.asarray(factor, np.float32), dtype=F32)


def halves(edit: Editor, x: ir.Value) -> Halves:
    """(high, low) 16-bit halves of int32 bits ``x`` as exact float32 values in [0, 2**16).

    ``x * 2**16`` wraps to ``low << 16`` and ``x - low`` is ``high << 16``: each has at most 16
    significant bits, so the casts to float32 are exact; a negative half is taken mod 2**16."""

    def unsigned(v: ir.Value) -> ir.Value:
        half = scaled(edit, _f32(edit, v), 2.0**-16)  # in [-2**15, 2**15)
        return edit.op(
            "Sub",
            half,
            scaled(edit, edit.op("Floor", scaled(edit, half, 2.0**-16), dtype=F32), 2.0**16),
            dtype=F32,
        )

    low = unsigned(edit.op("Mul", x, np.array(2**16, np.int32), dtype=I32))
    high = unsigned(edit.op("Sub", x, i32(edit, low), dtype=I32))
    return high, low
