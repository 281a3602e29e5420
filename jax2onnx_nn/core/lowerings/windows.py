"""reduce_window_sum/max/min and reduce_window.

A window reduction is lowered as a fold (Max, Min, Sum, ...) over one strided Slice per
window position, after filling base-dilation holes and padding with the reduction's identity.
That is exact for every dtype, NaN and -inf: onnxruntime's MaxPool skips NaN and returns
-FLT_MAX for a window of -inf, where JAX returns NaN and -inf. Float sums with a Conv kernel
are one depthwise Conv with a kernel of ones instead.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from functools import partial, reduce
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.layers.conv import can_conv, conv_padding
from jax2onnx_nn.core.layers.spatial import (
    Padding,
    dilate,
    dilated_dims,
    pad,
    permute,
    window_slices,
)
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.registry import register
from jax2onnx_nn.core.symbolic import has_zero

# -- window reductions ------------------------------------------------------------------------


def identity(op: str, dtype: np.dtype) -> Any:
    """The identity element of a reduction: what padding and dilation holes hold."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(op in ("mul", "and", "min"), np.bool_)
    if op in ("add", "or"):
        return np.zeros((), dtype)
    if op == "mul":
        return np.ones((), dtype)
    if op == "and":
        return (
            np.asarray(-1, dtype) if dtype.kind == "i" else np.asarray(np.iinfo(dtype).max, dtype)
        )
    inexact = dtype.kind == "f" or dtype.name == "bfloat16"
    if op == "max":
        return np.asarray(-np.inf if inexact else np.iinfo(dtype).min, dtype)
    return np.asarray(np.inf if inexact else np.iinfo(dtype).max, dtype)


def fold(ctx: LoweringContext, op: str, values: Sequence[ir.Value], dtype: np.dtype) -> ir.Value:
    """Combine same-shaped (or broadcastable) values with the reduction ``op``."""
    if len(values) == 1:
        return values[0]
    dtype = np.dtype(dtype)
    if op in ("max", "min"):
        return getattr(ctx.op, op.capitalize())(*values)
    if op == "add" and dtype in (np.float16, np.float32, np.float64):
        return ctx.op.Sum(*values)  # ONNX Sum takes floats only
    op_type = {"add": "Add", "mul": "Mul"}.get(op)
    if op_type is None:
        op_type = (
            {"and": "And", "or": "Or"}[op]
            if dtype == np.bool_
            else {"and": "BitwiseAnd", "or": "BitwiseOr"}[op]
        )
    return reduce(getattr(ctx.op, op_type), values)


def reduce_by_slices(
    ctx: LoweringContext,
    op: str,
    x: ir.Value,
    *,
    window_dimensions: Sequence[int],
    window_strides: Sequence[int],
    padding: Padding,
    base_dilation: Sequence[int],
    window_dilation: Sequence[int],
) -> ir.Value:
    dtype, dims = onnx_aval(ctx.aval_in)
    out_dims = onnx_aval(ctx.aval_out)[1]
    if has_zero(dims) or has_zero(out_dims) or math.prod(window_dimensions) == 0:
        return ctx.full(ctx.aval_out, identity(op, dtype))  # no element reaches any window
    fill = ctx.const(identity(op, dtype))
    x = pad(ctx, dilate(ctx, x, dims, base_dilation, fill), padding, fill)
    padded_dims = [
        n + lo + hi for n, (lo, hi) in zip(dilated_dims(dims, base_dilation), padding, strict=True)
    ]
    axes = [
        a
        for a, (k, s) in enumerate(zip(window_dimensions, window_strides, strict=True))
        if k != 1 or s != 1
    ]
    if not axes:
        return x

    def pick(values: Sequence[Any]) -> list[Any]:
        return [values[a] for a in axes]

    slices = window_slices(
        ctx,
        x,
        padded_dims,
        axes,
        pick(window_dimensions),
        pick(window_strides),
        pick(window_dilation),
        pick(out_dims),
    )
    return fold(ctx, op, slices, dtype)


def sum_by_conv(
    ctx: LoweringContext,
    x: ir.Value,
    *,
    window_dimensions: Sequence[int],
    window_strides: Sequence[int],
    padding: Padding,
    base_dilation: Sequence[int],
    window_dilation: Sequence[int],
) -> ir.Value:
    """A window sum as one depthwise Conv with a kernel of ones.

    Axes with a trivial window become the Conv's batch and channel axes (NHWC, NCHW), the
    others its spatial axes; other layouts are reshaped to [all trivial axes, 1, spatial].
    """
    dtype, dims = onnx_aval(ctx.aval_in)
    out_dims = onnx_aval(ctx.aval_out)[1]
    params = list(zip(window_dimensions, window_strides, padding, base_dilation, strict=True))
    spatial = [a for a, p in enumerate(params) if p != (1, 1, (0, 0), 1)]
    if not spatial:
        return x  # every window is one element
    lead = [a for a in range(len(dims)) if a not in spatial]
    perm = lead + spatial
    lead_dims = [dims[a] for a in lead]
    merged = len(lead) != 2 or jxi.is_symbolic_dim(lead_dims[1])
    batch, channels = (
        (reduce(operator.mul, lead_dims, 1), 1) if merged else (lead_dims[0], int(lead_dims[1]))
    )
    y = permute(ctx, x, perm)
    if merged:
        y = ctx.reshape(y, [batch, channels, *(dims[a] for a in spatial)])
    zero = ctx.const(np.zeros((), dtype))
    y = dilate(
        ctx,
        y,
        [batch, channels, *(dims[a] for a in spatial)],
        [1, 1, *(base_dilation[a] for a in spatial)],
        zero,
    )
    y, pads = conv_padding(ctx, y, [(0, 0), (0, 0), *(padding[a] for a in spatial)], zero)
    window = [window_dimensions[a] for a in spatial]
    ones = ctx.const(np.ones([channels, 1, *window], dtype))
    y = ctx.op.Conv(
        y,
        ones,
        kernel_shape=window,
        strides=[window_strides[a] for a in spatial],
        dilations=[window_dilation[a] for a in spatial],
        pads=pads,
        group=channels,
    )
    if merged:
        y = ctx.reshape(y, [*lead_dims, *(out_dims[a] for a in spatial)])
    return permute(ctx, y, np.argsort(perm))


def _window_reduction(op: str, ctx: LoweringContext, x: ir.Value, **params: Any) -> ir.Value:
    params = {k: params[k] for k in _WINDOW_PARAMS}
    dtype, dims = onnx_aval(ctx.aval_in)
    empty = (
        has_zero(dims)
        or has_zero(onnx_aval(ctx.aval_out)[1])
        or not math.prod(params["window_dimensions"])
    )
    if op == "add" and can_conv(dtype) and not empty:
        return sum_by_conv(ctx, x, **params)
    return reduce_by_slices(ctx, op, x, **params)


_WINDOW_PARAMS = (
    "window_dimensions",
    "window_strides",
    "padding",
    "base_dilation",
    "window_dilation",
)
for _prim, _op in {
    "reduce_window_sum": "add",
    "reduce_window_max": "max",
    "reduce_window_min": "min",
}.items():
    _ops = (
        ("Conv", "Slice", "Sum", "Add", "Transpose")
        if _op == "add"
        else ("Slice", _op.capitalize())
    )  # Add: ints
    register(
        _prim,
        partial(_window_reduction, _op),
        onnx_ops=(*_ops, "Concat", "ConstantOfShape", "Pad", "Reshape", "Unsqueeze"),
    )

# The bodies of generic reduce_windows we lower: one of these primitives on the two inputs.
_BODY_OPS = frozenset(["add", "mul", "max", "min", "and", "or"])


def _body_op(jaxpr: Any, consts: Sequence[Any]) -> str | None:
    body = jxi.as_closed(jaxpr).jaxpr
    if consts or len(body.eqns) != 1 or len(body.invars) != 2:
        return None
    (eqn,) = body.eqns
    if list(eqn.invars) not in (list(body.invars), list(body.invars)[::-1]) or list(
        body.outvars
    ) != list(eqn.outvars):
        return None
    return eqn.primitive.name if eqn.primitive.name in _BODY_OPS else None


def _reduce_window(
    ctx: LoweringContext, *operands: ir.Value, jaxpr: Any, consts: Sequence[Any] = (), **params: Any
) -> ir.Value:
    """A generic reduce_window whose body is one add/mul/max/min/and/or.

    XLA skips padding and dilation holes and applies the init value once per window, so the
    window is folded with the identity as fill and the init value is combined afterwards.
    """
    if len(operands) != 2:
        raise NotImplementedError("reduce_window over several operands")
    op = _body_op(jaxpr, consts)
    if op is None:
        raise NotImplementedError(
            f"reduce_window with a body other than one of {sorted(_BODY_OPS)}: {jaxpr}"
        )
    x, init = operands
    dtype = onnx_aval(ctx.aval_in)[0]
    folded = _window_reduction(op, ctx, x, **params)
    known = init.const_value
    if known is not None and np.array_equal(known.numpy(), identity(op, dtype), equal_nan=False):
        return folded
    return fold(ctx, op, [folded, init], dtype)


register(
    "reduce_window",
    _reduce_window,
    onnx_ops=(
        "Slice",
        "Max",
        "Min",
        "Sum",
        "Mul",
        "Conv",
        "ConstantOfShape",
        "Pad",
        "Reshape",
        "Unsqueeze",
        "Or",
    ),
)
