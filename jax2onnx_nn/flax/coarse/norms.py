"""Flax NNX normalizations as coarse ops: ``BatchNorm`` (BatchNormalization), ``LayerNorm`` /
``RMSNorm`` over the last axis and ``GroupNorm`` (GroupNormalization, opset 21)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import onnx_ir as ir
from flax import nnx

from jax2onnx_nn.core.layers.norm import (
    channels_first,
    group_norm,
    layer_norm,
    rms_norm,
)
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.patching import (
    CoarseCall,
    Handler,
    NotApplicable,
    Operands,
    coarse_lowering,
    coarse_wrapper,
    is_array,
)
from jax2onnx_nn.flax.coarse.common import (
    F32_F64,
    MakeWrapper,
    canonical_axes,
    cast_or_fill,
    default_promote,
    has_empty_dim,
    one_input,
    out_dtype,
    plain,
    variable_value,
)

# -- normalizations ------------------------------------------------------------------------


def _norm_ok(module: Any, cls: type, x: Any) -> bool:
    return (
        plain(module, cls)
        and default_promote(module)
        and getattr(module, "axis_name", None) is None
        and x.ndim >= 1
    )


def _batch_norm_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    if (
        not args
        or len(args) > 2
        or not is_array(args[0])
        or set(kwargs) - {"use_running_average", "mask"}
    ):
        return NotApplicable
    x = args[0]
    use_running_average = args[1] if len(args) == 2 else kwargs.get("use_running_average")
    if use_running_average is None:
        use_running_average = module.use_running_average
    if use_running_average is not True or not _norm_ok(module, nnx.BatchNorm, x) or x.ndim < 2:
        return NotApplicable  # training mode computes batch statistics: lax path
    axes = canonical_axes(module.axis, x.ndim)
    if axes is None or len(axes) != 1:
        return NotApplicable
    return CoarseCall(
        "nnx_batch_norm",
        inputs={"x": x},
        weights={
            "mean": variable_value(module.mean),
            "var": variable_value(module.var),
            "scale": variable_value(module.scale),
            "bias": variable_value(module.bias),
        },
        params={"axis": axes[0], "epsilon": float(module.epsilon)},
    )


@coarse_lowering(
    "nnx_batch_norm",
    onnx_ops=("BatchNormalization", "Transpose", "Cast"),
    covers=("nnx.BatchNorm",),
)
def _batch_norm(ctx: LoweringContext, ops: Operands, *, axis: int, epsilon: float) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in F32_F64:
        return NotApplicable
    rank = len(ops.aval("x").shape)
    size = int(ops.aval("mean").shape[0])
    x, inverse = channels_first(ctx, ctx.cast(ops["x"], dtype), rank, axis)
    scale = cast_or_fill(ctx, ops, "scale", dtype, size, 1.0)
    bias = cast_or_fill(ctx, ops, "bias", dtype, size, 0.0)
    mean, var = ctx.cast(ops["mean"], dtype), ctx.cast(ops["var"], dtype)
    y = ctx.op.BatchNormalization(x, scale, bias, mean, var, epsilon=epsilon)
    return y if inverse is None else ctx.op.Transpose(y, perm=inverse)


def _last_axis_norm_handler(cls: type, primitive: str, weights: tuple[str, ...]) -> Handler:
    """LayerNorm / RMSNorm over the last axis (the common configuration)."""

    def handler(module: Any, *args: Any, **kwargs: Any) -> Any:
        x = one_input(args, kwargs, {"mask": None})
        if x is NotApplicable or not _norm_ok(module, cls, x):
            return NotApplicable
        last = (x.ndim - 1,)
        if (
            canonical_axes(module.reduction_axes, x.ndim) != last
            or canonical_axes(module.feature_axes, x.ndim) != last
        ):
            return NotApplicable
        return CoarseCall(
            primitive,
            inputs={"x": x},
            weights={w: variable_value(getattr(module, w)) for w in weights},
            params={"epsilon": float(module.epsilon), "size": int(module.num_features)},
        )

    return handler


def _last_axis_norm(
    emit: Callable[..., ir.Value], ctx: LoweringContext, ops: Operands, *, epsilon: float, size: int
) -> Any:
    """LayerNorm and RMSNorm: one rule, the layer emitter differs (an absent scale is ones)."""
    dtype = out_dtype(ctx)
    if dtype not in F32_F64:
        return NotApplicable
    x = ctx.cast(ops["x"], dtype)
    scale = cast_or_fill(ctx, ops, "scale", dtype, size, 1.0)
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    return emit(ctx, x, scale, bias, axis=-1, epsilon=epsilon, dtype=dtype)


for _name, _emit, _onnx_op, _opset, _module in (
    ("nnx_layer_norm", layer_norm, "LayerNormalization", 17, "LayerNorm"),
    ("nnx_rms_norm", rms_norm, "RMSNormalization", 23, "RMSNorm"),
):
    coarse_lowering(_name, onnx_ops=(_onnx_op,), min_opset=_opset, covers=(f"nnx.{_module}",))(
        functools.partial(_last_axis_norm, _emit)
    )


# -- nnx.GroupNorm: GroupNormalization (opset 21: per-channel scale and bias) ---------------


def _group_norm_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs, {"mask": None})
    if (
        x is NotApplicable
        or not _norm_ok(module, nnx.GroupNorm, x)
        or x.ndim < 2
        or module.axis_index_groups is not None
    ):
        return NotApplicable
    size = int(module.num_groups) * int(module.group_size)
    if getattr(module, "feature_axis", -1) not in (-1, x.ndim - 1) or x.shape[-1] != size:
        return NotApplicable
    default_axes = tuple(range(1, x.ndim))
    if (
        module.reduction_axes is not None
        and canonical_axes(module.reduction_axes, x.ndim) != default_axes
    ):
        return NotApplicable
    return CoarseCall(
        "nnx_group_norm",
        inputs={"x": x},
        weights={"scale": variable_value(module.scale), "bias": variable_value(module.bias)},
        params={
            "epsilon": float(module.epsilon),
            "num_groups": int(module.num_groups),
            "size": size,
        },
    )


# Opset 18's GroupNormalization takes per-group scale and bias (not what flax has): from 21 only.
@coarse_lowering(
    "nnx_group_norm",
    onnx_ops=("GroupNormalization", "Transpose"),
    min_opset=21,
    covers=("nnx.GroupNorm",),
)
def _group_norm(
    ctx: LoweringContext, ops: Operands, *, epsilon: float, num_groups: int, size: int
) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in F32_F64 or has_empty_dim(ops.aval("x")):
        return NotApplicable  # JAX gives NaN statistics for empty groups
    rank = len(ops.aval("x").shape)
    x, inverse = channels_first(ctx, ctx.cast(ops["x"], dtype), rank, rank - 1)
    scale = cast_or_fill(ctx, ops, "scale", dtype, size, 1.0)
    bias = cast_or_fill(ctx, ops, "bias", dtype, size, 0.0)
    y = group_norm(ctx, x, scale, bias, num_groups=num_groups, epsilon=epsilon, dtype=dtype)
    return y if inverse is None else ctx.op.Transpose(y, perm=inverse)


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of the normalizations."""
    table: list[tuple[Any, str, Handler]] = [
        (nnx.BatchNorm, "__call__", _batch_norm_handler),
        (
            nnx.LayerNorm,
            "__call__",
            _last_axis_norm_handler(nnx.LayerNorm, "nnx_layer_norm", ("scale", "bias")),
        ),
        (nnx.RMSNorm, "__call__", _last_axis_norm_handler(nnx.RMSNorm, "nnx_rms_norm", ("scale",))),
        (nnx.GroupNorm, "__call__", _group_norm_handler),
    ]
    return [(owner, attr, coarse_wrapper(handler)) for owner, attr, handler in table]
