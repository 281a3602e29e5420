"""``eqx.nn.Conv`` as Conv and ``eqx.nn.ConvTranspose`` as ConvTranspose (the kernel flipped and
its in/out channels swapped)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.layers.conv import (
    conv,
    conv_pads,
    conv_transpose,
    conv_transpose_kernel,
    conv_transpose_pads,
)
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
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

# -- eqx.nn.Conv: Conv ---------------------------------------------------------------------


def _conv_handler(module: Any, x: Any, *, key: Any = None) -> Any:
    if not plain(module, eqx.nn.Conv) or not float_arrays(x, module.weight, module.bias):
        return NotApplicable
    if module.padding_mode != "ZEROS" or x.ndim != module.num_spatial_dims + 1:
        return NotApplicable
    pads = conv_pads(
        module.padding, x.shape[1:], module.kernel_size, module.stride, module.dilation
    )
    if pads is None:
        return NotApplicable
    return CoarseCall(
        "eqx_conv",
        inputs={"x": x},
        weights={"weight": module.weight, "bias": module.bias},
        params={
            "strides": tuple(module.stride),
            "dilations": tuple(module.dilation),
            "pads": pads,
            "group": int(module.groups),
        },
    )


def _bias_vector(ctx: LoweringContext, ops: Operands) -> ir.Value | None:
    """A conv bias of shape (C, 1, ..., 1) as the (C,) vector ONNX takes."""
    if "bias" not in ops:
        return None
    size = int(operand_shape(ops, "bias")[0])
    return ctx.reshaped_weight(ops["bias"], [size])


@eqx_lowering(
    "eqx_conv",
    onnx_ops=("Conv", "Reshape", "Squeeze", "Unsqueeze"),
    covers=("eqx.nn.Conv", "eqx.nn.Conv1d", "eqx.nn.Conv2d", "eqx.nn.Conv3d"),
)
def _conv(
    ctx: LoweringContext,
    ops: Operands,
    *,
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    pads: Any,
    group: int,
) -> Any:
    if has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    dtype = out_dtype(ctx)
    if (
        not levels.full("x")
        or not levels.unbatched("weight", "bias")
        or not kernels.supports("Conv", dtype)
    ):
        return NotApplicable
    example = operand_shape(ops, "x")[len(levels) :]
    x = flatten_batch(ctx, ops["x"], example, len(levels))
    y = conv(
        ctx,
        x,
        ops["weight"],
        _bias_vector(ctx, ops),
        strides=strides,
        dilations=dilations,
        pads=pads,
        group=group,
    )
    return unflatten_batch(ctx, y, len(levels), ctx.aval_out)


# -- eqx.nn.ConvTranspose: ConvTranspose with the kernel flipped and in/out swapped --------


def _conv_transpose_handler(module: Any, x: Any, *, key: Any = None) -> Any:
    if not plain(module, eqx.nn.ConvTranspose) or not float_arrays(x, module.weight, module.bias):
        return NotApplicable
    if module.padding_mode != "ZEROS" or x.ndim != module.num_spatial_dims + 1:
        return NotApplicable
    # eqx runs a conv with padding_t over the stride-dilated input, as lax.conv_transpose does
    padding_t = [
        (int(lo), int(hi)) for lo, hi in np.asarray(module._padding_transpose()).reshape(-1, 2)
    ]
    pads = conv_transpose_pads(padding_t, module.kernel_size, module.stride, module.dilation)
    if pads is None:
        return NotApplicable
    return CoarseCall(
        "eqx_conv_transpose",
        inputs={"x": x},
        weights={"weight": module.weight, "bias": module.bias},
        params={
            "strides": tuple(module.stride),
            "dilations": tuple(module.dilation),
            "group": int(module.groups),
            "pads": pads[0],
            "output_padding": pads[1],
        },
    )


@eqx_lowering(
    "eqx_conv_transpose",
    onnx_ops=("ConvTranspose", "Reshape", "Squeeze", "Unsqueeze"),
    covers=(
        "eqx.nn.ConvTranspose",
        "eqx.nn.ConvTranspose1d",
        "eqx.nn.ConvTranspose2d",
        "eqx.nn.ConvTranspose3d",
    ),
)
def _conv_transpose(
    ctx: LoweringContext,
    ops: Operands,
    *,
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    group: int,
    pads: tuple[int, ...],
    output_padding: tuple[int, ...],
) -> Any:
    if has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    dtype = out_dtype(ctx)
    if (
        not levels.full("x")
        or not levels.unbatched("weight", "bias")
        or not kernels.supports("ConvTranspose", dtype)
    ):
        return NotApplicable
    w_shape = operand_shape(ops, "weight")
    weight = conv_transpose_kernel(
        ctx, ops["weight"], range(len(w_shape)), w_shape, group, weight=True
    )
    example = operand_shape(ops, "x")[len(levels) :]
    x = flatten_batch(ctx, ops["x"], example, len(levels))
    y = conv_transpose(
        ctx,
        x,
        weight,
        _bias_vector(ctx, ops),
        strides=strides,
        dilations=dilations,
        pads=pads,
        output_padding=output_padding,
        group=group,
    )
    return unflatten_batch(ctx, y, len(levels), ctx.aval_out)


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of eqx.nn.Conv and ConvTranspose."""
    return [
        coarse_patch(eqx.nn.Conv, _conv_handler),
        coarse_patch(eqx.nn.ConvTranspose, _conv_transpose_handler),
    ]
