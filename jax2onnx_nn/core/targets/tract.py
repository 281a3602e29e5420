"""tract 0.23: its profile and the rewrites that make its ops run and compute JAX's numbers.

Each rewrite's docstring says what the runtime does wrong and how the rewrite avoids it."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement
from jax2onnx_nn.core.ir.values import constant_array
from jax2onnx_nn.core.quant.dequantize import blocked_as_arithmetic, four_bit_as_eight_bit
from jax2onnx_nn.core.targets.common import (
    BOOL,
    I32,
    U32,
    empty_constants_as_constant_of_shape,
    extremes_on_halves,
    nan_propagating_max_min,
    rank_of,
    reduce_extremes_of_infinities,
    scan_inputs_read,
)
from jax2onnx_nn.core.targets.profile import CUMSUM_UINT32, REDUCE_EXTREMES_UINT32, Target
from jax2onnx_nn.core.targets.tract_loops import (
    counted_loop_as_scan,
    counter_scan_as_state,
    inner_scans_restarted,
    ranges_in_scan_bodies,
    scan_int_factors_as_states,
    scan_of_no_steps_keeps_states,
    scan_outputs_unread,
    scatter_loop_as_one_hot,
)

_PADDED = "jax2onnx_nn.padded_sum"


@rewrite("ReduceSum")
def float_sum_over_empty_last_axis(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 aborts the whole process (a Rust panic, "attempt to divide by zero" in its
    reduce.rs, which Python cannot catch) on a float ReduceSum over the last axis of its input
    when that axis is empty at run time: ``jnp.sum`` of a row of symbolic length 0 (a
    ``lax.map`` over rows of 0 columns; a 1-d sum; measured: the other axes, an int32 sum and
    ReduceMax/Min/Prod run). Where the last axis is reduced and its size is not a static
    positive number, the input gets one zero appended along it (a Pad of constant amounts):
    the sum is the same (adding +0.0 is exact)."""
    if node.meta.get(_PADDED) or not node.inputs or node.inputs[0] is None:
        return None
    x = node.inputs[0]
    if node.outputs[0].dtype not in (
        ir.DataType.FLOAT,
        ir.DataType.DOUBLE,
        ir.DataType.FLOAT16,
        ir.DataType.BFLOAT16,
    ):
        return None
    rank = rank_of(x)
    if not rank:
        return None
    last = x.shape[-1] if x.shape is not None else None
    if isinstance(last, int) and last > 0:
        return None
    axes_input = node.inputs[1] if len(node.inputs) > 1 else None
    axes = constant_array(axes_input) if axes_input is not None else np.zeros((0,), np.int64)
    if axes is None:
        return None
    axes = axes.reshape(-1)
    if (
        axes.size == 0
        and node.attributes.get_int("noop_with_empty_axes", 0) != 0
        or axes.size
        and rank - 1 not in {int(a) % rank for a in axes}
    ):
        return None
    pads = np.zeros((2 * rank,), np.int64)
    pads[-1] = 1
    padded = edit.op("Pad", x, pads, dtype=x.dtype)
    padded.shape = ir.Shape([*x.shape[:-1], None]) if x.shape is not None else None
    attributes = {name: attr.value for name, attr in node.attributes.items()}
    total = edit.op(
        "ReduceSum", padded, *node.inputs[1:], dtype=node.outputs[0].dtype, **attributes
    )
    producer = total.producer()
    assert producer is not None
    producer.meta[_PADDED] = True
    return total


@rewrite("ReduceMax", "ReduceMin")
def uint32_extremes_on_halves(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 has no uint32 ReduceMax/Min ("U32 is not a number"), and below opset 15 (no
    CastLike) the Cast that widens uint32 to int64 gives its symbolic-dim type, whose ReduceMax
    along an axis came out 4294967295 for [2147483647, 5, 0, 1] (opsets 13 and 14; the max of
    the whole matrix was right). Its profile keeps them uint32: :func:`extremes_on_halves`."""
    return extremes_on_halves(node, edit, (U32,))


@rewrite("MatMul")
def uint32_matmul_as_int32(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 has no uint32 MatMul kernel: loading a model with one aborts the process (a
    Rust panic in linalg/src/frame/weights.rs; int64 too, int32 runs). Products and sums modulo
    2**32 do not depend on the sign of the operands' bits, so the MatMul runs on int32 Casts of
    its operands (which wrap) and its result is cast back to uint32."""
    if len(node.inputs) != 2 or None in node.inputs:
        return None
    if node.outputs[0].dtype != U32:
        return None
    a, b = (edit.op("Cast", x, to=I32, dtype=I32) for x in node.inputs)
    return edit.op("Cast", edit.op("MatMul", a, b, dtype=I32), to=U32, dtype=U32)


@rewrite("IsNaN")
def isnan_as_not_equal(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 refuses IsNaN of float64 ("Impossible to unify Bool with F64"): NaN is the
    one value not equal to itself, ``isnan(x) = not (x == x)``.

    Not reproduced on tract 0.23 by the direct case tried (tests/core/targets/: the model
    matched JAX without this rewrite too); kept until the case that needs it is known."""
    if node.inputs[0] is None or node.inputs[0].dtype != ir.DataType.DOUBLE:
        return None
    x = node.inputs[0]
    return edit.op("Not", edit.op("Equal", x, x, dtype=BOOL), dtype=BOOL)


@rewrite("Cast")
def int64_cast_as_castlike(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 casts to int64 into its symbolic-dim type: such a model output cannot be read
    ("Unsupported DatumType in the public API TDim"), and a float beyond 2**31 saturates on the
    way. A CastLike of an int64 constant is a plain int64 there. Only casts of floats, unsigned
    ints and bools (values, not the shape arithmetic tract follows symbolically) are rewritten;
    a bool (``count_nonzero``'s, in slogdet's sign: a Pad of it failed, "Impossible to unify
    TDim with I64") is a Where of int64 1 and 0, which every opset has. Below opset 15 (no
    CastLike) a float's Cast stays: the jax.random family ran right so at opset 13."""
    if node.attributes.get_int("to", 0) != ir.DataType.INT64:
        return None
    x = node.inputs[0]
    if (
        x is None
        or x.dtype is None
        or not (x.dtype.is_floating_point() or x.dtype in _UNSIGNED or x.dtype == ir.DataType.BOOL)
    ):
        return None
    if x.dtype == ir.DataType.BOOL:
        return edit.op(
            "Where", x, np.ones((), np.int64), np.zeros((), np.int64), dtype=ir.DataType.INT64
        )
    if edit.opset < 15:
        return None
    return edit.op("CastLike", x, np.zeros((), np.int64), dtype=ir.DataType.INT64)


_UNSIGNED = frozenset(
    {ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64}
)


@rewrite("Equal")
def bool_equal_as_xor(node: ir.Node, edit: Editor) -> Replacement:
    """tract refuses Equal on bools ("Bool is not a number"; ``jnp.remainder`` compares signs
    that way): ``a == b`` is ``not (a xor b)``."""
    if node.inputs[0] is None or node.inputs[0].dtype != ir.DataType.BOOL:
        return None
    return edit.op(
        "Not", edit.op("Xor", *node.inputs, dtype=ir.DataType.BOOL), dtype=ir.DataType.BOOL
    )


@rewrite("Mul")
def integer_square_as_product(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 makes ``Mul(x, x)`` its Square op, which saturates on int8, uint8 and int32
    (int8 100 * 100: 127 where JAX wraps to 16) and has no int16, uint16, uint32 or int64
    kernel ("Square does not support U32"); a Mul of two different values wraps in every
    integer type. So the second operand is ``Max(x, x)``: the same number, another value."""
    if len(node.inputs) != 2 or node.inputs[0] is not node.inputs[1]:
        return None
    x = node.inputs[0]
    if x is None or x.dtype is None or not x.dtype.is_integer():
        return None
    node.replace_input_with(1, edit.op("Max", x, x, dtype=x.dtype))
    return True


@rewrite("Compress")
def compress_as_gather(node: ir.Node, edit: Editor) -> Replacement:
    """tract does not translate Compress (the scatters drop out-of-bounds updates with it):
    the same rows are a Gather of the positions NonZero finds (in order, as Compress keeps them)."""
    if len(node.inputs) != 2:
        return None
    x, condition = node.inputs
    assert x is not None and condition is not None
    axis = node.attributes.get_int("axis", None)
    if axis is None:
        x, axis = edit.op("Reshape", x, np.array([-1], np.int64), dtype=x.dtype), 0
    flat = edit.op("Reshape", condition, np.array([-1], np.int64), dtype=_BOOL_TYPE)
    positions = edit.op(
        "Squeeze",
        edit.op("NonZero", flat, dtype=ir.DataType.INT64),
        np.array([0], np.int64),
        dtype=ir.DataType.INT64,
    )
    return edit.op("Gather", x, positions, axis=axis, dtype=x.dtype)


_BOOL_TYPE = ir.DataType.BOOL


@rewrite("Range")
def range_as_cumsum(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 follows the values of an integer Range symbolically: a causal mask compared
    from ``Range(0, T)`` makes its optimizer split the attention into regions bounded by a
    symbol it never binds at run time ("Undetermined symbol in expression"). The same values
    as ``start + delta * k`` where ``k`` is an exclusive CumSum of ones shaped like the Range
    (the Range itself then gives only its length) are numbers it does not follow. A Range of
    constant operands is left as it is (it is folded), as is one of a run-time step."""
    if len(node.inputs) != 3:
        return None
    dtype = node.outputs[0].dtype
    start, limit, delta = node.inputs
    if (
        dtype not in (ir.DataType.INT64, ir.DataType.INT32)
        or start is None
        or limit is None
        or delta is None
    ):
        return None
    step = constant_array(delta)
    if step is None or constant_array(limit) is not None and constant_array(start) is not None:
        return None
    plain = edit.op("Range", start, limit, delta, dtype=dtype)
    ones = edit.op(
        "Expand",
        np.ones((1,), step.dtype),
        edit.op("Shape", plain, dtype=ir.DataType.INT64),
        dtype=dtype,
    )
    index = edit.op("CumSum", ones, np.array(0, np.int64), exclusive=1, dtype=dtype)
    if int(step) != 1:
        index = edit.op("Mul", index, step, dtype=dtype)
    return edit.op("Add", index, start, dtype=dtype)


@rewrite("MatMul")
def vector_dot_as_matrix_product(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 refuses a MatMul of two vectors (``y @ alpha``: "Condition failed: `a_rank >
    1 || b_rank > 1`"): the left one is made a row (``1 x n``), the product (of shape ``(1,)``)
    squeezed back to a scalar."""
    if rank_of(node.inputs[0]) != 1 or rank_of(node.inputs[1]) != 1:
        return None
    dtype = node.outputs[0].dtype
    axis = np.array([0], np.int64)
    row = edit.op("Unsqueeze", node.inputs[0], axis, dtype=dtype)
    return edit.op(
        "Squeeze", edit.op("MatMul", row, node.inputs[1], dtype=dtype), axis, dtype=dtype
    )


@rewrite("Slice")
def strided_slice_as_gather(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23's declutter fails to move a Slice of step other than 1 (``x[::-1]``, the blocked
    upper triangular solve's reversal; ``x[::2]``) over the Reshape before it ("Pulling ...
    Downsample over ... Reshape: Invalid axis"). A one-axis Slice of such a step over a static
    dim is a Gather of the positions it takes (computed here, as numpy slices them)."""
    if len(node.inputs) != 5 or node.inputs[0] is None:
        return None
    # starts, ends, axes, steps: one constant each
    found = [constant_array(v) for v in node.inputs[1:]]
    scalars = [int(c.reshape(-1)[0]) for c in found if c is not None and c.size == 1]
    shape = node.inputs[0].shape
    if len(scalars) != 4 or shape is None or scalars[3] == 1:
        return None
    start, end, axis, step = scalars
    axis %= len(shape)
    size = shape[axis]
    if not isinstance(size, int):
        return None
    positions = np.arange(size, dtype=np.int64)[start:end:step]
    return edit.op("Gather", node.inputs[0], positions, axis=axis, dtype=node.outputs[0].dtype)


@rewrite("Slice")
def runtime_slice_as_gather(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 gives a Slice at a run-time start a new symbol as its length, though the end
    is the start plus a constant (``dynamic_slice``: a column of a QR step at the step's index),
    and its Where then fails on the mismatch ("Output mismatch after rewiring expansion ...
    expected 20,1,F32 got 20,<Sym0>,F32"). Such a Slice is a Gather of ``start + [0 .. size)``
    per axis (the starts are already clamped into range, as JAX clamps them)."""
    if len(node.inputs) not in (4, 5) or node.inputs[0] is None:
        return None
    x, starts, ends, axes = node.inputs[:4]
    steps = constant_array(node.inputs[4]) if len(node.inputs) == 5 else None
    producer = ends.producer() if ends is not None else None
    if (
        producer is None
        or producer.op_type != "Add"
        or producer.domain != ""
        or starts is None
        or constant_array(starts) is not None
    ):
        return None
    sizes = (
        constant_array(producer.inputs[1])
        if producer.inputs[0] is starts
        else constant_array(producer.inputs[0])
        if producer.inputs[1] is starts
        else None
    )
    axes_value = constant_array(axes)
    if (
        sizes is None
        or axes_value is None
        or steps is not None
        and np.any(steps != 1)
        or sizes.ndim != 1
        or sizes.size != axes_value.size
    ):
        return None
    result = x
    for i, (axis, size) in enumerate(zip(axes_value.tolist(), sizes.tolist(), strict=True)):
        start = edit.op("Gather", starts, np.array([i], np.int64), dtype=ir.DataType.INT64)
        positions = edit.op("Add", start, np.arange(size, dtype=np.int64), dtype=ir.DataType.INT64)
        result = edit.op("Gather", result, positions, axis=axis, dtype=node.outputs[0].dtype)
    return result


@rewrite("Gemm")
def gemm_as_matmul(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 translates Gemm with its ``beta`` as a float32 constant, and fails on a float64
    Gemm ("tensor is F32, accessed as F64"): one of another type than float32 is a MatMul (of
    the transposed operands), times ``alpha``, plus ``beta * C``.

    Not reproduced on tract 0.23 by the direct case tried (tests/core/targets/: the model
    matched JAX without this rewrite too); kept until the case that needs it is known."""
    dtype = node.outputs[0].dtype
    if dtype is None or dtype == ir.DataType.FLOAT:
        return None
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
        bias = (
            c[0] if beta == 1.0 else edit.op("Mul", c[0], np.asarray(beta, numpy_type), dtype=dtype)
        )
        result = edit.op("Add", result, bias, dtype=dtype)
    return result


@rewrite("Expand")
def expand_full_rank(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 splits a MatMul of a Concat into one MatMul per part, and fails when a part is
    an Expand of a tensor of lower rank (a scalar broadcast to ``(B, 1)``: "Condition failed ...
    axes.rank"). The Expand's input gets the output's rank first (leading 1s, the same values).

    Not reproduced on tract 0.23 by the direct case tried (tests/core/targets/: the model
    matched JAX without this rewrite too); kept until the case that needs it is known."""
    if len(node.inputs) != 2:
        return None
    x, shape = node.inputs
    out = node.outputs[0].shape
    rank = (
        len(out)
        if out is not None
        else shape.shape[0]
        if shape is not None and shape.shape is not None
        else None
    )
    if x is None or x.shape is None or not isinstance(rank, int):
        return None
    missing = rank - len(x.shape)
    if missing <= 0:
        return None
    padded = edit.op("Unsqueeze", x, np.arange(missing, dtype=np.int64), dtype=x.dtype)
    padded.shape = ir.Shape([1] * missing + list(x.shape.dims))
    node.replace_input_with(0, padded)
    return True


PROFILE = Target(
    "tract",
    max_opset=25,  # 0.23 has no BitCast (opset 26)
    model_functions=False,
    scan_symbolic=True,
    bounded_if=False,
    # it runs CumSum on uint32 (the bitwise ops below opset 18 sum their bits with it); a Cast
    # to int64 would sign-extend uint32 and make a value it cannot take a CumSum of. Its
    # ReduceMax/Min have no uint32 kernel, and below opset 15 a uint32 widened to int64 by a Cast
    # became its symbolic-dim type, wrong along an axis: uint32 is kept, reduced on halves.
    kernels={
        "CumSum": CUMSUM_UINT32,
        **dict.fromkeys(("ReduceMax", "ReduceMin"), REDUCE_EXTREMES_UINT32),
    },
    rewrites=(
        scatter_loop_as_one_hot,
        reduce_extremes_of_infinities,
        uint32_extremes_on_halves,
        nan_propagating_max_min,
        isnan_as_not_equal,
        int64_cast_as_castlike,
        bool_equal_as_xor,
        integer_square_as_product,
        compress_as_gather,
        range_as_cumsum,
        counted_loop_as_scan,
        counter_scan_as_state,
        scan_int_factors_as_states,
        inner_scans_restarted,
        scan_of_no_steps_keeps_states,
        scan_inputs_read,
        scan_outputs_unread,
        gemm_as_matmul,
        vector_dot_as_matrix_product,
        strided_slice_as_gather,
        runtime_slice_as_gather,
        expand_full_rank,
        float_sum_over_empty_last_axis,
        uint32_matmul_as_int32,
        four_bit_as_eight_bit,  # quantized weights: the QDQ form (core/quant/), int4 as int8
        blocked_as_arithmetic,
    ),
    late_rewrites=(empty_constants_as_constant_of_shape, ranges_in_scan_bodies),
    lacks_dtypes={
        "bfloat16": "tract 0.23 has no bfloat16 tensors: export with precision='float32' (CLI: "
        "--precision float32)"
    },
    lacks={
        "Loop": "tract 0.23 has no Loop, and a while_loop whose condition depends on the data "
        "(not a fixed number of steps) has no exact Scan form: export with loop_bound=N "
        "(CLI: --loop-bound N) to write it as a Scan of at most N steps (float results NaN "
        "where N steps do not finish it), or write it as a fori_loop or scan (of static "
        "or traced length)",
        "TensorScatter": "tract 0.23 cannot translate TensorScatter (opset 24): 'Operator can "
        "not be made a TypedOp'; export at opset 23 or below",
    },
)
