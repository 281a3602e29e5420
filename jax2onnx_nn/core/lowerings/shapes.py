"""Shape primitives: reshape, broadcast_in_dim, transpose, squeeze, expand_dims, concatenate,
iota, dim_as_value, ... Symbolic dims come in through ``ctx.shape_tensor``."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.graph import ir_dtype
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.registry import lowering


def _axes(ctx: LoweringContext, axes: list[int] | tuple[int, ...]) -> ir.Value:
    return ctx.const(np.asarray(axes, dtype=np.int64))


@lowering("reshape", onnx_ops=("Reshape",))
def _reshape(ctx: LoweringContext, x: ir.Value, *dyn: ir.Value, new_sizes: tuple, dimensions: object = None, **_: object) -> ir.Value:
    if tuple(ctx.aval_in.shape) == tuple(new_sizes):
        return x
    _, out_shape = onnx_aval(ctx.aval_out)
    return ctx.op.Reshape(x, ctx.shape_tensor(out_shape))


@lowering("broadcast_in_dim", onnx_ops=("Expand", "Reshape", "Unsqueeze"))
def _broadcast_in_dim(ctx: LoweringContext, x: ir.Value, *dyn: ir.Value, shape: tuple, broadcast_dimensions: tuple, **_: object) -> ir.Value:
    in_shape = tuple(ctx.aval_in.shape)
    out_rank = len(shape)
    if in_shape == tuple(shape):
        return x
    missing = [i for i in range(out_rank) if i not in broadcast_dimensions]
    # Unsqueeze the dims that are new, then Expand to the target (ONNX broadcasting does the rest)
    if list(broadcast_dimensions) != sorted(broadcast_dimensions):
        raise NotImplementedError("broadcast_in_dim with unsorted broadcast_dimensions")
    y = ctx.op.Unsqueeze(x, _axes(ctx, missing)) if missing and in_shape else x
    key_tail = onnx_aval(ctx.aval_out)[1][out_rank:]
    return ctx.op.Expand(y, ctx.shape_tensor(tuple(shape) + key_tail))


@lowering("transpose", onnx_ops=("Transpose",))
def _transpose(ctx: LoweringContext, x: ir.Value, *, permutation: tuple[int, ...]) -> ir.Value:
    if list(permutation) == sorted(permutation):
        return x
    extra = list(range(len(permutation), len(onnx_aval(ctx.aval_in)[1])))
    return ctx.op.Transpose(x, perm=[*permutation, *extra])


@lowering("squeeze", onnx_ops=("Squeeze",))
def _squeeze(ctx: LoweringContext, x: ir.Value, *, dimensions: tuple[int, ...]) -> ir.Value:
    if not dimensions:
        return x
    return ctx.op.Squeeze(x, _axes(ctx, [d % len(ctx.aval_in.shape) for d in dimensions]))


@lowering("expand_dims", onnx_ops=("Unsqueeze",))
def _expand_dims(ctx: LoweringContext, x: ir.Value, *, dimensions: tuple[int, ...]) -> ir.Value:
    return ctx.op.Unsqueeze(x, _axes(ctx, list(dimensions)))


@lowering("concatenate", onnx_ops=("Concat",))
def _concatenate(ctx: LoweringContext, *xs: ir.Value, dimension: int) -> ir.Value:
    if len(xs) == 1:
        return xs[0]
    return ctx.op.Concat(*xs, axis=dimension)


@lowering("iota", onnx_ops=("Range", "Reshape", "Expand"))
def _iota(ctx: LoweringContext, *dyn: ir.Value, dtype: object, shape: tuple, dimension: int, **_: object) -> ir.Value:
    out_dtype = onnx_aval(ctx.aval_out)[0]
    n = shape[dimension]
    if not jxi.is_symbolic_dim(n) and all(not jxi.is_symbolic_dim(d) for d in shape):
        values = np.arange(int(n), dtype=np.int64).astype(out_dtype)
        view = [1] * len(shape)
        view[dimension] = int(n)
        if len(shape) == 1:
            return ctx.const(values)
        return ctx.op.Expand(ctx.const(values.reshape(view)), ctx.shape_tensor(shape))
    # symbolic length: Range over int64, cast, place on its axis, expand
    limit = ctx.op.Squeeze(ctx.dim(n), _axes(ctx, [0]))
    r = ctx.op.Range(ctx.const(0, dtype=np.int64), limit, ctx.const(1, dtype=np.int64))
    if out_dtype != np.int64:
        r = ctx.op.Cast(r, to=ir_dtype(out_dtype))
    if len(shape) == 1:
        return r
    others = [i for i in range(len(shape)) if i != dimension]
    r = ctx.op.Unsqueeze(r, _axes(ctx, others))
    return ctx.op.Expand(r, ctx.shape_tensor(shape))


@lowering("dim_as_value", onnx_ops=("Shape", "Squeeze", "Cast"))
def _dim_as_value(ctx: LoweringContext, *, dim: object) -> ir.Value:
    value = ctx.op.Squeeze(ctx.dim(dim), _axes(ctx, [0]))
    dtype = onnx_aval(ctx.aval_out)[0]
    return ctx.op.Cast(value, to=ir_dtype(dtype)) if dtype != np.int64 else value
