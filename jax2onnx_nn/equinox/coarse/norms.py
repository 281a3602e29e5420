"""Equinox normalisations: ``LayerNorm`` / ``RMSNorm`` / ``GroupNorm`` as their ONNX ops, and
``BatchNorm`` in inference (statistics from the State) as BatchNormalization."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.layers.norm import group_norm, layer_norm, rms_norm, weight_or_fill
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.patching import (
    CoarseCall,
    Handler,
    NotApplicable,
    Operands,
    active_options,
    bind_coarse,
)
from jax2onnx_nn.equinox.coarse.common import (
    Levels,
    MakeWrapper,
    coarse_patch,
    eqx_lowering,
    flatten_batch,
    float_arrays,
    has_empty,
    operand_shape,
    out_dtype,
    plain,
    unflatten_batch,
)
from jax2onnx_nn.equinox.functions import without_named_scope

# -- normalisations ------------------------------------------------------------------------

_NO_STATE = object()  # a norm called without the (unused) state argument


def _norm_handler(cls: type, primitive: str) -> Handler:
    """LayerNorm / RMSNorm: normalise over the whole example (``x.shape == module.shape``)."""

    def handler(module: Any, x: Any, state: Any = _NO_STATE, *, key: Any = None) -> Any:
        if (
            state is not _NO_STATE
            or not plain(module, cls)
            or not float_arrays(x, module.weight, module.bias)
        ):
            return NotApplicable
        if tuple(x.shape) != tuple(module.shape) or x.ndim == 0:
            return NotApplicable
        return CoarseCall(
            primitive,
            inputs={"x": x},
            weights={"weight": module.weight, "bias": module.bias},
            params={"epsilon": float(module.eps), "shape": tuple(int(d) for d in module.shape)},
        )

    return handler


_layer_norm_handler = _norm_handler(eqx.nn.LayerNorm, "eqx_layer_norm")
_rms_norm_handler = _norm_handler(eqx.nn.RMSNorm, "eqx_rms_norm")


def _norm(
    emit: Callable[..., ir.Value],
    ctx: LoweringContext,
    ops: Operands,
    *,
    epsilon: float,
    shape: tuple[int, ...],
) -> Any:
    """LayerNorm and RMSNorm: one rule, the layer emitter differs (an absent weight is ones)."""
    levels = Levels(ctx)
    if not levels.full("x") or not levels.unbatched("weight", "bias"):
        return NotApplicable
    dtype = out_dtype(ctx)
    scale = weight_or_fill(ctx, ops.get("weight"), shape, dtype, 1.0)
    return emit(
        ctx, ops["x"], scale, ops.get("bias"), axis=-len(shape), epsilon=epsilon, dtype=dtype
    )


for _name, _emit, _onnx_ops, _opset, _module in (
    ("eqx_layer_norm", layer_norm, ("LayerNormalization",), 17, "LayerNorm"),
    ("eqx_rms_norm", rms_norm, ("RMSNormalization", "Add"), 23, "RMSNorm"),
):
    eqx_lowering(_name, onnx_ops=_onnx_ops, min_opset=_opset, covers=(f"eqx.nn.{_module}",))(
        functools.partial(_norm, _emit)
    )


def _group_norm_handler(module: Any, x: Any, state: Any = _NO_STATE, *, key: Any = None) -> Any:
    if (
        state is not _NO_STATE
        or not plain(module, eqx.nn.GroupNorm)
        or not float_arrays(x, module.weight, module.bias)
    ):
        return NotApplicable
    # x is (channels, *spatial), spatial possibly empty: ONNX takes (N, C) as well as (N, C, ...)
    if x.ndim < 1 or jxi.is_symbolic_dim(x.shape[0]) or int(x.shape[0]) % module.groups:
        return NotApplicable
    return CoarseCall(
        "eqx_group_norm",
        inputs={"x": x},
        weights={"weight": module.weight, "bias": module.bias},
        params={
            "epsilon": float(module.eps),
            "groups": int(module.groups),
            "channels": int(x.shape[0]),
        },
    )


@eqx_lowering(
    "eqx_group_norm",
    onnx_ops=("GroupNormalization", "Reshape", "Squeeze", "Unsqueeze"),
    min_opset=21,
    covers=("eqx.nn.GroupNorm",),
)
def _group_norm(
    ctx: LoweringContext, ops: Operands, *, epsilon: float, groups: int, channels: int
) -> Any:
    if has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    if not levels.full("x") or not levels.unbatched("weight", "bias"):
        return NotApplicable
    dtype = out_dtype(ctx)
    example = operand_shape(ops, "x")[len(levels) :]
    x = flatten_batch(ctx, ops["x"], example, len(levels))
    scale = weight_or_fill(ctx, ops.get("weight"), (channels,), dtype, 1.0)
    bias = weight_or_fill(ctx, ops.get("bias"), (channels,), dtype, 0.0)
    y = group_norm(ctx, x, scale, bias, num_groups=groups, epsilon=epsilon, dtype=dtype)
    return unflatten_batch(ctx, y, len(levels), ctx.aval_out)


# -- eqx.nn.BatchNorm (inference, statistics from the State): BatchNormalization ----------


def _batch_norm_spec(module: Any, x: Any, state: Any, inference: Any) -> Any:
    effective = module.inference if inference is None else inference
    if (
        effective is not True
        or not plain(module, eqx.nn.BatchNorm)
        or not isinstance(state, eqx.nn.State)
    ):
        return NotApplicable
    if x.ndim < 1 or x.shape[0] != module.input_size:
        return NotApplicable
    weights = {"weight": module.weight, "bias": module.bias}
    params: dict[str, Any] = {"epsilon": float(module.eps), "channels": int(module.input_size)}
    if module.mode == "ema":
        weights["mean"], weights["var"] = state.get(module.ema_state_index)
    elif module.mode == "batch":
        weights["mean"], weights["var"] = state.get(module.batch_state_index)
        weights["counter"] = state.get(module.batch_counter)
        params["momentum"] = float(module.momentum)
    else:
        return NotApplicable
    if not float_arrays(x, *(w for role, w in weights.items() if role != "counter")):
        return NotApplicable
    return CoarseCall("eqx_batch_norm", inputs={"x": x}, weights=weights, params=params)


def _batch_norm_wrapper(original: Any) -> Any:
    """BatchNorm returns ``(y, state)``: the coarse op computes ``y``; in inference mode the
    state comes back unchanged, so it is returned as it is."""
    inner = without_named_scope(original, eqx.nn.BatchNorm)

    @functools.wraps(original)
    def call(self: Any, x: Any, state: Any, *, key: Any = None, inference: Any = None) -> Any:
        if active_options() is None:
            return original(self, x, state, key=key, inference=inference)
        try:
            spec = _batch_norm_spec(self, x, state, inference)
        except Exception:  # a call the handler cannot read runs the original
            spec = NotApplicable
        if spec is not NotApplicable:

            def normalise(module: Any, x: Any) -> Any:
                return inner(module, x, state, inference=True)[0]

            y = bind_coarse(spec, normalise, (self, x), {})
            if y is not NotApplicable:
                return y, state
        return inner(self, x, state, key=key, inference=inference)

    return call


def _batch_statistics(
    ctx: LoweringContext, ops: Operands, momentum: float, dtype: np.dtype
) -> tuple[ir.Value, ir.Value]:
    """eqx's "batch" mode debiasing: stats / (1 - momentum**counter), or as they are at 0."""
    counter = ctx.cast(ops["counter"], dtype)
    power = ctx.op.Pow(ctx.const(np.asarray(momentum, dtype=dtype)), counter)
    one = ctx.const(np.asarray(1, dtype=dtype))
    scale = ctx.op.Where(
        ctx.op.Equal(counter, ctx.const(np.asarray(0, dtype=dtype))), one, ctx.op.Sub(one, power)
    )
    return ctx.op.Div(ops["mean"], scale), ctx.op.Div(ops["var"], scale)


@eqx_lowering(
    "eqx_batch_norm",
    onnx_ops=(
        "BatchNormalization",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Cast",
        "Pow",
        "Sub",
        "Div",
        "Equal",
        "Where",
    ),
    covers=("eqx.nn.BatchNorm",),
)
def _batch_norm(
    ctx: LoweringContext,
    ops: Operands,
    *,
    epsilon: float,
    channels: int,
    momentum: float | None = None,
) -> Any:
    if has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    if not levels.full("x") or not levels.unbatched(*(r for r in ops if r != "x")):
        return NotApplicable
    dtype = out_dtype(ctx)
    mean, var = ops["mean"], ops["var"]
    if momentum is not None:
        mean, var = _batch_statistics(ctx, ops, momentum, dtype)
    scale = weight_or_fill(ctx, ops.get("weight"), (channels,), dtype, 1.0)
    bias = weight_or_fill(ctx, ops.get("bias"), (channels,), dtype, 0.0)
    example = operand_shape(ops, "x")[len(levels) :]
    x = flatten_batch(ctx, ops["x"], example, len(levels))
    y = ctx.op.BatchNormalization(x, scale, bias, mean, var, epsilon=epsilon)
    return unflatten_batch(ctx, y, len(levels), ctx.aval_out)


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of the normalisations."""
    return [
        coarse_patch(eqx.nn.LayerNorm, _layer_norm_handler),
        coarse_patch(eqx.nn.RMSNorm, _rms_norm_handler),
        coarse_patch(eqx.nn.GroupNorm, _group_norm_handler),
        (eqx.nn.BatchNorm, "__call__", _batch_norm_wrapper),
    ]
