"""Reductions: reduce_sum/max/min/prod/and/or/xor, argmax/argmin."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import ir_dtype
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.registry import lowering, register

REDUCE = {"reduce_sum": "ReduceSum", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin", "reduce_prod": "ReduceProd"}


def _reduce(op_type: str, ctx: LoweringContext, x: ir.Value, *, axes: tuple[int, ...], **_: object) -> ir.Value:
    if not axes:
        return x
    return getattr(ctx.op, op_type)(x, ctx.const(np.asarray(axes, dtype=np.int64)), keepdims=0)


for _prim, _op in REDUCE.items():
    register(_prim, partial(_reduce, _op), onnx_ops=(_op,))


def _bool_reduce(op_type: str, ctx: LoweringContext, x: ir.Value, *, axes: tuple[int, ...], **_: object) -> ir.Value:
    """and/or on bools are min/max; on ints they are bitwise folds (rare: unrolled)."""
    if not axes:
        return x
    dtype = onnx_aval(ctx.aval_in)[0]
    if dtype == np.bool_:
        as_u8 = ctx.op.Cast(x, to=ir.DataType.UINT8)
        r = getattr(ctx.op, op_type)(as_u8, ctx.const(np.asarray(axes, dtype=np.int64)), keepdims=0)
        return ctx.op.Cast(r, to=ir.DataType.BOOL)
    raise NotImplementedError(f"bitwise reduction of {dtype}")


register("reduce_and", partial(_bool_reduce, "ReduceMin"), onnx_ops=("ReduceMin",))
register("reduce_or", partial(_bool_reduce, "ReduceMax"), onnx_ops=("ReduceMax",))


@lowering("reduce_xor", onnx_ops=("ReduceSum", "Mod"))
def _reduce_xor(ctx: LoweringContext, x: ir.Value, *, axes: tuple[int, ...], **_: object) -> ir.Value:
    if not axes:
        return x
    dtype = onnx_aval(ctx.aval_in)[0]
    if dtype != np.bool_:
        raise NotImplementedError(f"reduce_xor of {dtype}")
    count = ctx.op.ReduceSum(ctx.op.Cast(x, to=ir.DataType.INT64), ctx.const(np.asarray(axes, dtype=np.int64)), keepdims=0)
    return ctx.op.Cast(ctx.op.Mod(count, ctx.const(2, dtype=np.int64)), to=ir.DataType.BOOL)


def _arg(op_type: str, ctx: LoweringContext, x: ir.Value, *, axes: tuple[int, ...], index_dtype: object) -> ir.Value:
    (axis,) = axes
    dtype = onnx_aval(ctx.aval_in)[0]
    if dtype == np.bool_:
        x = ctx.op.Cast(x, to=ir.DataType.INT32)
    r = getattr(ctx.op, op_type)(x, axis=axis, keepdims=0, select_last_index=0)
    out = onnx_aval(ctx.aval_out)[0]
    return ctx.op.Cast(r, to=ir_dtype(out)) if out != np.int64 else r


register("argmax", partial(_arg, "ArgMax"), onnx_ops=("ArgMax",))
register("argmin", partial(_arg, "ArgMin"), onnx_ops=("ArgMin",))
