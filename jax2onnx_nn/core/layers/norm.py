"""Normalisations as ONNX LayerNormalization / RMSNormalization / GroupNormalization /
BatchNormalization: the glue around the op (an absent scale or bias as a constant fill, the
stash type that makes float64 exact, the feature axis moved to ONNX's channel axis 1)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.lower import LoweringContext


def stash_type(dtype: np.dtype) -> int:
    """The statistics' type: float64 for float64 inputs (float32 statistics lose precision)."""
    return int(ir.DataType.DOUBLE) if dtype == np.float64 else int(ir.DataType.FLOAT)


def weight_or_fill(
    ctx: LoweringContext,
    weight: ir.Value | None,
    shape: Sequence[int],
    dtype: np.dtype,
    fill: float,
) -> ir.Value:
    """An optional scale or bias, or a constant ``fill`` of ``shape`` where it is absent."""
    return weight if weight is not None else ctx.const(np.full(tuple(shape), fill, dtype=dtype))


def channels_first(
    ctx: LoweringContext, x: ir.Value, rank: int, axis: int
) -> tuple[ir.Value, list[int] | None]:
    """``x`` with ``axis`` moved to 1 (ONNX's channel axis), and the perm that moves it back
    (None when it is there already)."""
    if axis == 1:
        return x, None
    perm = [0, axis, *[i for i in range(1, rank) if i != axis]]
    return ctx.transpose(x, perm), [perm.index(i) for i in range(rank)]


def layer_norm(
    ctx: LoweringContext,
    x: ir.Value,
    scale: ir.Value,
    bias: ir.Value | None,
    *,
    axis: int,
    epsilon: float,
    dtype: np.dtype,
) -> ir.Value:
    """LayerNormalization over the axes from ``axis`` on."""
    return ctx.op.LayerNormalization(
        x, scale, bias, axis=axis, epsilon=epsilon, stash_type=stash_type(dtype)
    )


def rms_norm(
    ctx: LoweringContext,
    x: ir.Value,
    scale: ir.Value,
    bias: ir.Value | None,
    *,
    axis: int,
    epsilon: float,
    dtype: np.dtype,
) -> ir.Value:
    """RMSNormalization over the axes from ``axis`` on; ONNX's has no bias input, so a bias is
    one Add after it (the signature is :func:`layer_norm`'s: adapters take either). Below
    opset 23 it is its definition, ``x / sqrt(mean(x * x) + epsilon) * scale``, in ``dtype``."""
    if ctx.opset < 23:
        rank = len(x.shape) if x.shape is not None else axis + 1
        mean = ctx.op.ReduceMean(ctx.op.Mul(x, x), ctx.ints(list(range(axis, rank))), keepdims=1)
        rms = ctx.op.Sqrt(ctx.op.Add(mean, ctx.const(np.asarray(epsilon, dtype=dtype))))
        y = ctx.op.Mul(ctx.op.Div(x, rms), scale)
    else:
        y = ctx.op.RMSNormalization(
            x, scale, axis=axis, epsilon=epsilon, stash_type=stash_type(dtype)
        )
    return y if bias is None else ctx.op.Add(y, bias)


def group_norm(
    ctx: LoweringContext,
    x: ir.Value,
    scale: ir.Value,
    bias: ir.Value,
    *,
    num_groups: int,
    epsilon: float,
    dtype: np.dtype,
) -> ir.Value:
    """GroupNormalization over NC<spatial> with per-channel scale and bias (opset 21's)."""
    return ctx.op.GroupNormalization(
        x, scale, bias, num_groups=num_groups, epsilon=epsilon, stash_type=stash_type(dtype)
    )
