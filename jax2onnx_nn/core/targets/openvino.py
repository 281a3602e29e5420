"""OpenVINO 2026.4 (CPU plugin): its profile and the rewrites that make its ops compute JAX's
numbers (those of Scan bodies in ``openvino_loops.py``, uint32 computed as int32 in
``openvino_uint32.py``).

Each rewrite's docstring says what the runtime does wrong and how the rewrite avoids it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement
from jax2onnx_nn.core.ir.values import constant_array
from jax2onnx_nn.core.targets.common import (
    BOOL,
    I32,
    U32,
    empty_constants_as_constant_of_shape,
    extremes_on_halves,
    i32,
    nan_propagating_max_min,
    rank_of,
    reduce_extremes_of_infinities,
    scan_inputs_read,
)
from jax2onnx_nn.core.targets.openvino_loops import (
    nested_scans_as_loops,
    scan_captures_as_states,
    scan_of_no_steps_runs_one,
)
from jax2onnx_nn.core.targets.openvino_uint32 import uint32_as_int32, uint32_bits
from jax2onnx_nn.core.targets.profile import CUMSUM_UINT32, REDUCE_EXTREMES_UINT32, Target


@rewrite("ReduceMax", "ReduceMin")
def int32_extremes_on_halves(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 computes an int32 ReduceMax/Min through float32 (the max of [2147483647, 5]
    came out -2147483648, of [16777217, 16777216] 16777216), and uint32 too (the profile keeps it
    uint32, not widened to int64, which it holds in 32 bits): :func:`extremes_on_halves`."""
    return extremes_on_halves(node, edit, (I32, U32))


@rewrite("ReduceSum")
def integer_sum_as_cumsum(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 computes an integer ReduceSum through float32 (the sum of [2147483647,
    1, 5] came out -2147483648 where JAX wraps to -2147483643, of [16777217, 1, 1, 1]
    16777216), while its CumSum wraps exactly (int64 too, held in 32 bits). Per axis: a 0
    padded in front, the running sum, its last element (:func:`_wrapping_sum`)."""
    if not node.inputs or node.inputs[0] is None:
        return None
    x = node.inputs[0]
    rank = rank_of(x)
    if x.dtype is None or not x.dtype.is_integer() or rank is None:
        return None
    axes_value = (
        constant_array(node.inputs[1])
        if len(node.inputs) > 1 and node.inputs[1] is not None
        else np.zeros((0,), np.int64)
    )
    if axes_value is None:
        return False  # axes computed at run time
    axes = sorted({int(a) % rank for a in axes_value.reshape(-1)}) if rank else []
    if not axes and node.attributes.get_int("noop_with_empty_axes", False):
        return None
    keepdims = bool(node.attributes.get_int("keepdims", 1))
    return _wrapping_sum(edit, x, axes or list(range(rank)), rank, keepdims)


@rewrite("MatMul")
def integer_matmul_as_cumsum(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 computes an integer MatMul through float32 too (int32 ``[[2147483647,
    1]] @ [[1], [5]]`` came out 2147483520, JAX: -2147483644; int16 and uint16 products past
    2**24 go wrong the same way). Its int32 Mul wraps exactly: the products of every pair are
    formed by broadcasting (``(..., M, K, 1) * (..., 1, K, N)``, a vector operand without its
    extra axis) and summed over K by :func:`_wrapping_sum`. It holds M * K * N products: the
    price of exact integers there."""
    if len(node.inputs) != 2 or None in node.inputs:
        return None
    a, b = node.inputs
    dtype = node.outputs[0].dtype
    rank_a, rank_b = rank_of(a), rank_of(b)
    if dtype is None or not dtype.is_integer() or rank_a is None or rank_b is None:
        return None
    if rank_b == 1:  # (..., M, K) * (K,), summed over K
        products = edit.op("Mul", a, b, dtype=dtype)
        rank = max(rank_a, 1)
    elif rank_a == 1:  # (K, 1) * (..., K, N), summed over K
        products = edit.op(
            "Mul", edit.op("Unsqueeze", a, np.array([1], np.int64), dtype=dtype), b, dtype=dtype
        )
        rank = rank_b
    else:
        rows = edit.op("Unsqueeze", a, np.array([rank_a], np.int64), dtype=dtype)
        columns = edit.op("Unsqueeze", b, np.array([rank_b - 2], np.int64), dtype=dtype)
        products = edit.op("Mul", rows, columns, dtype=dtype)
        rank = max(rank_a, rank_b) + 1
    return _wrapping_sum(
        edit, products, [rank - 1 if rank_b == 1 else rank - 2], rank, keepdims=False
    )


def _wrapping_sum(
    edit: Editor, x: ir.Value, axes: Sequence[int], rank: int, keepdims: bool
) -> ir.Value:
    """The sum of integer ``x`` (of rank ``rank``) over ``axes`` (non-negative) by CumSum, which
    wraps: per axis, from the last, a 0 padded in front (so an empty axis sums to 0), the
    running sum and its last element (kept as a dim of 1 with ``keepdims``)."""
    dtype = x.dtype
    last = np.array([-1] if keepdims else -1, np.int64)
    for axis in sorted(axes, reverse=True):
        pads = np.zeros(2 * rank, np.int64)
        pads[axis] = 1
        running = edit.op(
            "CumSum", edit.op("Pad", x, pads, dtype=dtype), np.array(axis, np.int64), dtype=dtype
        )
        x = edit.op("Gather", running, last, axis=axis, dtype=dtype)
        rank -= 0 if keepdims else 1
    return x


_SWAPPED = {"Greater": "Less", "GreaterOrEqual": "LessOrEqual"}


@rewrite("Greater", "GreaterOrEqual")
def greater_as_less(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4's Greater and GreaterOrEqual are true where an operand is NaN (its
    Less, LessOrEqual and Equal are false there, as in JAX and IEEE): ``a > b`` is ``b < a``."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if a is None or b is None or a.dtype is None or not a.dtype.is_floating_point():
        return None
    return edit.op(_SWAPPED[node.op_type], b, a, dtype=ir.DataType.BOOL)


@rewrite("Cast")
def float_to_uint32_via_int32(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 casts a float to uint32 through int32, saturating at 2**31 - 1 (JAX's
    3e9 becomes 2147483648 or 2147483647). A value at or above 2**31 is cast less 2**31 (exact
    in float) and gets the top bit back by an int32 Add, which wraps there, as the uint32
    rewrites use; the Cast of int32 bits to uint32 keeps them."""
    if node.attributes.get_int("to", 0) != U32:
        return None
    x = node.inputs[0]
    if x is None or x.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE):
        return None
    top = np.asarray(2.0**31, x.dtype.numpy())
    high = edit.op("GreaterOrEqual", x, top, dtype=BOOL)
    low = edit.op("Where", high, edit.op("Sub", x, top, dtype=x.dtype), x, dtype=x.dtype)
    bits = i32(edit, low)
    bits = edit.op(
        "Where", high, edit.op("Add", bits, np.int32(-(2**31)), dtype=I32), bits, dtype=I32
    )
    return edit.op("Cast", bits, to=U32, dtype=U32)


@rewrite("DFT")
def real_dft_reshaped(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 gives a DFT of a real input (last dim 1) one dim too many (``rfft`` of
    ``(8, 6)``: ``(8, 4, 1, 2)``, not ``(8, 4, 2)``): a Reshape to ``[0, ..., 0, 2]`` (0 keeps a
    dim) drops it there and changes nothing where the shape is right.

    Not reproduced on OpenVINO 2026.4 by the direct case tried (tests/core/targets/: the model
    matched JAX without this rewrite too); kept until the case that needs it is known."""
    if node.inputs[0] is None:
        return None
    x = node.inputs[0]
    producer = x.producer()
    real = x.shape is not None and len(x.shape) > 0 and x.shape[-1] == 1
    if (
        not real
        and producer is not None
        and producer.op_type == "Unsqueeze"
        and len(producer.inputs) == 2
    ):
        axes, rank = constant_array(producer.inputs[1]), rank_of(x)
        real = (
            axes is not None
            and rank is not None
            and axes.size == 1
            and int(axes.reshape(-1)[0]) % rank == rank - 1
        )
    rank = rank_of(x)
    if not real or rank is None:
        return None
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    spectrum = edit.op("DFT", *node.inputs, dtype=node.outputs[0].dtype, **attributes)
    shape = np.array([0] * (rank - 1) + [2], np.int64)
    return edit.op("Reshape", spectrum, shape, dtype=node.outputs[0].dtype)


@rewrite("DFT")
def dft_in_float32(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 refuses a float64 DFT ("FFT op input element type must be f32, f16, or
    bf16"); it computes float64 in float32 anyway (its profile says ``float64=False``), so the
    DFT is computed in float32 between two Casts, as every other op there is."""
    if node.inputs[0] is None or node.inputs[0].dtype != ir.DataType.DOUBLE:
        return None
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    narrow = edit.op("Cast", node.inputs[0], to=ir.DataType.FLOAT, dtype=ir.DataType.FLOAT)
    narrow.shape = node.inputs[0].shape
    spectrum = edit.op("DFT", narrow, *node.inputs[1:], dtype=ir.DataType.FLOAT, **attributes)
    spectrum.shape = node.outputs[0].shape
    return edit.op("Cast", spectrum, to=ir.DataType.DOUBLE, dtype=ir.DataType.DOUBLE)


@rewrite("DFT")
def dft_on_axis_one(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 ignores the ``axis`` input of DFT-20 and transforms along axis 1 (the old
    attribute's default; measured: any other axis gives another axis's transform). A DFT along
    another axis is one along axis 1 between two Transposes that swap the axes.

    Not reproduced on OpenVINO 2026.4 by the direct case tried (tests/core/targets/: the model
    matched JAX without this rewrite too); kept until the case that needs it is known."""
    if len(node.inputs) < 3 or node.inputs[2] is None:
        return None
    x, axis_value = node.inputs[0], constant_array(node.inputs[2])
    rank = rank_of(x)
    if x is None or rank is None or axis_value is None:
        return None
    axis = int(axis_value) % rank
    if axis == 1:
        return None
    perm = list(range(rank))
    perm[1], perm[axis] = axis, 1
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    moved = edit.op("Transpose", x, perm=perm, dtype=x.dtype)
    spectrum = edit.op(
        "DFT",
        moved,
        node.inputs[1],
        np.array(1, np.int64),
        dtype=node.outputs[0].dtype,
        **attributes,
    )
    return edit.op("Transpose", spectrum, perm=perm, dtype=node.outputs[0].dtype)


@rewrite("Add", "Sub", "Mul", "Div")
def expand_after_arithmetic(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 gives ``Add(Expand(c, shape), 0.5)`` (``jnp.zeros((B, 4)) + 0.5``, a
    scan's initial carry) the shape ``(1, 4)`` where ``shape`` is ``(0, 4)`` at run time (the
    Expand alone, or an Add of an input of batch 0, is right). The arithmetic on the Expand's
    data, then the Expand: the same values (each element is ``op(data, constant)`` either way)
    and shape (broadcast of data, constant and ``shape``), with less arithmetic."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    for expanded, other in ((a, b), (b, a)):
        producer = expanded.producer() if expanded is not None else None
        if (
            producer is None
            or producer.op_type != "Expand"
            or producer.domain != ""
            or constant_array(other) is None
        ):
            continue
        if expanded is None or len(expanded.uses()) != 1:
            continue
        data, shape = producer.inputs
        operands = (data, other) if expanded is a else (other, data)
        dtype = node.outputs[0].dtype
        edit.replace(
            edit.op("Expand", edit.op(node.op_type, *operands, dtype=dtype), shape, dtype=dtype)
        )
        if not producer.outputs[0].uses() and producer.graph is not None:
            producer.graph.remove(producer, safe=True)
        return True
    return None


# OpenVINO 2026.4's CPU plugin saturates int8 and uint8 Add, Sub, Mul, Neg and Abs where they
# overflow (int8 100 * 100: 127, JAX wraps to 16; -(-128): 127) and rounds their Div through
# float (7 // 2: 4); int16 and uint16 wrap, and its Cast from a wider int wraps (all measured
# on every pair of 8-bit values): those ops compute in int32, and the Cast back wraps
_NO_BYTES = "i16 i32 i64 u16 u32 u64 f16 f32 f64"
_WRAPPING = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Div"), _NO_BYTES),
    "Neg": "i16 i32 i64 f16 f32 f64",
    "Abs": "u8 " + _NO_BYTES,
}

# Quantized weights run in the QDQ form (DequantizeLinear, core/quant/); OpenVINO computes it
# with JAX's numbers under DYNAMIC_QUANTIZATION_GROUP_SIZE=0 (core/runtimes.py OPENVINO_CONFIG).
PROFILE = Target(
    "openvino",
    max_opset=25,  # 2026.4 has no BitCast (opset 26)
    model_functions=False,
    scan_symbolic=True,
    scan_ticks=False,
    # its CPU plugin computes uint32 arithmetic (and int32 comparisons, Mod, shifts) through
    # float32 and keeps int64 in 32 bits; int32 Add/Mul/CumSum/bitwise ops wrap as they should,
    # so uint32 is computed as int32 (CumSum too: not widened to int64)
    kernels={
        "CumSum": CUMSUM_UINT32,
        **_WRAPPING,
        **dict.fromkeys(("ReduceMax", "ReduceMin"), REDUCE_EXTREMES_UINT32),
    },
    rewrites=(
        nested_scans_as_loops,
        scan_of_no_steps_runs_one,
        integer_sum_as_cumsum,
        integer_matmul_as_cumsum,
        uint32_bits,
        uint32_as_int32,
        float_to_uint32_via_int32,
        nan_propagating_max_min,
        reduce_extremes_of_infinities,
        int32_extremes_on_halves,
        greater_as_less,
        dft_in_float32,
        dft_on_axis_one,
        real_dft_reshaped,
    ),
    late_rewrites=(
        scan_captures_as_states,
        scan_inputs_read,
        expand_after_arithmetic,
        empty_constants_as_constant_of_shape,
    ),
    float64=False,  # its CPU plugin has no float64 kernels: measured, x * x is float32's
    lacks={
        "TensorScatter": "OpenVINO 2026.4 has no TensorScatter (opset 24): 'No conversion rule "
        "found for operations: TensorScatter-24'; export at opset 23 or below"
    },
)
