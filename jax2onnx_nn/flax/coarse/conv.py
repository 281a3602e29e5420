"""Channels-last convolutions and pools as coarse ops: ``nnx.Conv`` as Transpose -> Conv ->
Transpose, ``nnx.avg_pool`` as AveragePool and ``nnx.ConvTranspose`` as ONNX ConvTranspose."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import onnx_ir as ir
from flax import linen, nnx

from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.jax_nn.namespaces import shared
from jax2onnx_nn.core.layers.conv import (
    conv,
    conv_pads,
    conv_transpose,
    conv_transpose_kernel,
    conv_transpose_padding,
    conv_transpose_pads,
)
from jax2onnx_nn.core.layers.pool import fits_window, pool
from jax2onnx_nn.core.layout import to_channels_first, to_channels_last
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
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
    default_promote,
    has_empty_dim,
    one_input,
    out_dtype,
    plain,
    variable_value,
)

# -- nnx.Conv: channels-last conv as Transpose -> Conv -> Transpose ------------------------


def _per_axis(v: Any, n: int) -> tuple[int, ...] | None:
    """A stride or dilation option (None, an int, or one int per spatial axis) as ``n`` ints
    >= 1; None for anything else."""
    v = 1 if v is None else v
    v = (v,) * n if isinstance(v, int) else tuple(v)
    return v if len(v) == n and all(isinstance(i, int) and i >= 1 for i in v) else None


def _hwio_to_oihw(rank: int) -> list[int]:
    """The perm taking flax's kernel layout (spatial, in, out) to ONNX's (out, in, spatial)."""
    return [rank - 1, rank - 2, *range(rank - 2)]


def _conv_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs, {"out_sharding": None})
    if x is NotApplicable or not plain(module, nnx.Conv) or not default_promote(module):
        return NotApplicable
    kernel_size = tuple(module.kernel_size)
    n = len(kernel_size)
    if x.ndim != n + 2 or module.mask is not None or module.preferred_element_type is not None:
        return NotApplicable
    if module.conv_general_dilated is not jax.lax.conv_general_dilated:
        return NotApplicable

    strides, input_dilation, dilation = (
        _per_axis(v, n) for v in (module.strides, module.input_dilation, module.kernel_dilation)
    )
    if strides is None or dilation is None or input_dilation != (1,) * n:
        return NotApplicable
    pads = conv_pads(module.padding, x.shape[1:-1], kernel_size, strides, dilation)
    if pads is None:
        return NotApplicable
    return CoarseCall(
        "nnx_conv",
        inputs={"x": x},
        weights={"kernel": variable_value(module.kernel), "bias": variable_value(module.bias)},
        params={
            "strides": strides,
            "dilations": dilation,
            "pads": pads,
            "group": int(module.feature_group_count),
        },
    )


@coarse_lowering("nnx_conv", onnx_ops=("Transpose", "Conv"), covers=("nnx.Conv",))
def _conv(
    ctx: LoweringContext,
    ops: Operands,
    *,
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    pads: Any,
    group: int,
) -> Any:
    dtype = out_dtype(ctx)
    if (
        dtype not in F32_F64
        or not kernels.supports("Conv", dtype)
        or has_empty_dim(ctx.aval_out, ops.aval("x"))
    ):
        return NotApplicable  # onnxruntime's Conv rejects empty images
    rank = len(ops.aval("x").shape)
    x = ctx.transpose(ctx.cast(ops["x"], dtype), to_channels_first(rank))
    kernel = ctx.transposed_weight(ctx.cast(ops["kernel"], dtype), _hwio_to_oihw(rank))
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    y = conv(ctx, x, kernel, bias, strides=strides, dilations=dilations, pads=pads, group=group)
    return ctx.op.Transpose(y, perm=to_channels_last(rank))


# -- pooling: nnx.avg_pool (channels last) as AveragePool -----------------------------------


def _avg_pool_handler(original: Callable[..., Any]) -> Handler:
    signature = inspect.signature(original)

    def handler(*args: Any, **kwargs: Any) -> Any:
        try:
            a = signature.bind(*args, **kwargs).arguments
        except TypeError:
            return NotApplicable
        x: Any = a.get("inputs")
        window = a.get("window_shape")
        if not is_array(x) or not isinstance(window, (tuple, list)) or x.ndim != len(window) + 2:
            return NotApplicable
        n = len(window)
        strides = tuple(a.get("strides") or (1,) * n)
        if len(strides) != n or not all(isinstance(v, int) and v >= 1 for v in (*window, *strides)):
            return NotApplicable
        pads = conv_pads(a.get("padding", "VALID"), x.shape[1:-1], tuple(window), strides, (1,) * n)
        if pads is None or isinstance(pads, str) or not fits_window(pads, window):
            return NotApplicable
        return CoarseCall(
            "nnx_avg_pool",
            inputs={"x": x},
            params={
                "kernel_shape": tuple(window),
                "strides": strides,
                "pads": pads,
                "count_include_pad": bool(a.get("count_include_pad", True)),
            },
        )

    return handler


@coarse_lowering(
    "nnx_avg_pool",
    onnx_ops=("Transpose", "AveragePool"),
    covers=("nnx.avg_pool", "flax.linen.avg_pool"),
)
def _avg_pool(
    ctx: LoweringContext,
    ops: Operands,
    *,
    kernel_shape: tuple[int, ...],
    strides: tuple[int, ...],
    pads: tuple[int, ...],
    count_include_pad: bool,
) -> Any:
    dtype = onnx_aval(ops.aval("x"))[0]
    if (
        dtype not in F32_F64
        or not kernels.supports("AveragePool", dtype)
        or has_empty_dim(ctx.aval_out, ops.aval("x"))
    ):
        return NotApplicable
    rank = len(ops.aval("x").shape)
    x = ctx.transpose(ops["x"], to_channels_first(rank))
    y = pool(
        ctx,
        x,
        "avg",
        dtype,
        kernel=kernel_shape,
        strides=strides,
        pads=pads,
        count_include_pad=count_include_pad,
    )
    return ctx.op.Transpose(y, perm=to_channels_last(rank))


# -- nnx.ConvTranspose: lax.conv_transpose as ONNX ConvTranspose (see core/layers/conv.py) ---


def _conv_transpose_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs, {})
    if x is NotApplicable or not plain(module, nnx.ConvTranspose) or not default_promote(module):
        return NotApplicable
    kernel_size = tuple(module.kernel_size)
    n = len(kernel_size)
    if x.ndim != n + 2 or module.mask is not None or module.preferred_element_type is not None:
        return NotApplicable

    strides, dilation = _per_axis(module.strides, n), _per_axis(module.kernel_dilation, n)
    if strides is None or dilation is None:
        return NotApplicable
    padding = conv_transpose_padding(module.padding, kernel_size, strides, dilation)
    pads = None if padding is None else conv_transpose_pads(padding, kernel_size, strides, dilation)
    if pads is None:
        return NotApplicable
    return CoarseCall(
        "nnx_conv_transpose",
        inputs={"x": x},
        weights={"kernel": variable_value(module.kernel), "bias": variable_value(module.bias)},
        params={
            "strides": strides,
            "dilations": dilation,
            "pads": pads[0],
            "output_padding": pads[1],
            "transpose_kernel": bool(module.transpose_kernel),
        },
    )


def _conv_transpose_weight(
    ctx: LoweringContext, kernel: ir.Value, shape: tuple[int, ...], transpose_kernel: bool
) -> ir.Value:
    """The flax kernel ``(*k, in, out)`` as ONNX's ``(in, out, *k)``. With ``transpose_kernel``
    (``(*k, out, in)``) lax flips and swaps it itself, which undoes ConvTranspose's flip."""
    n = len(shape) - 2
    if transpose_kernel:
        return ctx.transposed_weight(kernel, [n + 1, n, *range(n)])
    to_oi = _hwio_to_oihw(n + 2)
    return conv_transpose_kernel(ctx, kernel, to_oi, [int(shape[a]) for a in to_oi], 1, weight=True)


@coarse_lowering(
    "nnx_conv_transpose",
    onnx_ops=("Transpose", "ConvTranspose", "Slice"),
    covers=("nnx.ConvTranspose",),
)
def _conv_transpose(
    ctx: LoweringContext,
    ops: Operands,
    *,
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    pads: tuple[int, ...],
    output_padding: tuple[int, ...],
    transpose_kernel: bool,
) -> Any:
    dtype = out_dtype(ctx)
    if (
        dtype not in F32_F64
        or not kernels.supports("ConvTranspose", dtype)
        or has_empty_dim(ctx.aval_out, ops.aval("x"))
    ):
        return NotApplicable
    rank = len(ops.aval("x").shape)
    x = ctx.transpose(ctx.cast(ops["x"], dtype), to_channels_first(rank))
    kernel = _conv_transpose_weight(
        ctx, ctx.cast(ops["kernel"], dtype), tuple(ops.aval("kernel").shape), transpose_kernel
    )
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    y = conv_transpose(
        ctx,
        x,
        kernel,
        bias,
        strides=strides,
        dilations=dilations,
        pads=pads,
        output_padding=output_padding,
        group=1,
    )
    return ctx.op.Transpose(y, perm=to_channels_last(rank))


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of the convolutions and pools."""
    table: list[tuple[Any, str, Handler]] = [
        (nnx.Conv, "__call__", _conv_handler),
        (nnx.ConvTranspose, "__call__", _conv_transpose_handler),
    ]
    return [(owner, attr, coarse_wrapper(handler)) for owner, attr, handler in table] + [
        (nnx, "avg_pool", shared(_avg_pool_handler)),
        (linen, "avg_pool", shared(_avg_pool_handler)),
    ]
