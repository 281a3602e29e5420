"""Keras 3 layers as coarse ONNX ops: ``Dense``, ``Conv1D/2D/3D``, ``DepthwiseConv1D/2D``,
``BatchNormalization`` (inference), ``LayerNormalization``, pooling (global too),
``ZeroPadding1D/2D/3D`` and the ``Add`` / ``Multiply`` / ``Concatenate`` merges.

A handler sees one ``call`` of a layer (``layer, *args, **kwargs``, inside Keras's
``Layer.__call__``: inputs already cast to the compute dtype, the layer's name scope open, so
nodes are named by layer path) and returns a :class:`CoarseCall` or ``NotApplicable`` for
anything it does not model (a subclass overriding methods, a quantized or LoRA layer, a
mask, training mode, a padding mode, an activation outside the table): those calls run
Keras's own ``call``, lowered op by op, so they keep JAX's numbers.

Channels-last layers compute channels-first: a rule reads the NC<spatial> value behind its
input's layout Transpose (``ctx.transpose`` undoes the previous coarse op's), and the
elementwise layers (BatchNormalization, the merges, padding, the ``jax.nn`` activations) act
before the Transpose too, so a chain of Keras layers keeps one Transpose at each end.
A BatchNormalization right after a convolution is marked for folding into its weights
(:data:`~jax2onnx_nn.core.passes.fold_weights.FOLD`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import onnx_ir as ir
from keras.src.backend import get_keras_mask
from keras.src.backend.common.variables import AutocastScope

from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.jax_nn.activations import ACTIVATIONS
from jax2onnx_nn.core.layers.conv import conv, conv_pads
from jax2onnx_nn.core.layers.dense import dense
from jax2onnx_nn.core.layers.norm import group_norm, layer_norm, rms_norm, weight_or_fill
from jax2onnx_nn.core.layers.pool import fits_window, pool
from jax2onnx_nn.core.layout import to_channels_first, to_channels_last
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.passes.fold_weights import FOLD
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
    coarse_lowering,
    is_array,
    map_calls,
    overrides_nothing,
)
from jax2onnx_nn.core.symbolic import has_zero

L = keras.layers
FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_LOW = frozenset({"bfloat16", "float16"})
ALLOWED_OVERRIDES = frozenset({"__init__", "get_config", "from_config", "build"})


# -- shared checks ----------------------------------------------------------------------------


def variable_array(variable: Any) -> Any:
    """The array a variable holds, as the traced call closes over it (before autocasting)."""
    if variable is None:
        return None
    with AutocastScope(None):
        return variable.value


def plain(layer: Any, cls: type | tuple[type, ...]) -> bool:
    """A ``cls`` layer (or a subclass overriding nothing a call runs), neither quantized nor
    with LoRA weights."""
    classes = cls if isinstance(cls, tuple) else (cls,)
    return (
        any(overrides_nothing(layer, c, ALLOWED_OVERRIDES) for c in classes)
        and getattr(layer, "quantization_mode", None) is None
        and not getattr(layer, "lora_enabled", False)
    )


def _float(x: Any) -> bool:
    return is_array(x) and (np.dtype(x.dtype) in FLOATS or str(x.dtype) in _LOW)


def one_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The single float input of ``call(inputs, training=None)`` in inference."""
    if len(args) != 1 or set(kwargs) - {"training"} or kwargs.get("training"):
        return NotApplicable
    return args[0] if _float(args[0]) else NotApplicable


def out_dtype(ctx: LoweringContext) -> np.dtype:
    return onnx_aval(ctx.aval_out)[0]


def _channels_last(layer: Any) -> bool | None:
    fmt = getattr(layer, "data_format", "channels_last")
    return {"channels_last": True, "channels_first": False}.get(fmt)


# -- activations fused into the layer before them -----------------------------------------------

_ACTIVATIONS: dict[str, tuple[str, tuple[tuple[str, Any], ...]]] = {
    # Keras activation -> the jax.nn activation it calls with its defaults, and that one's config
    "relu": ("relu", ()),
    "relu6": ("relu6", ()),
    "sigmoid": ("sigmoid", ()),
    "softmax": ("softmax", (("axis", -1),)),
    "gelu": ("gelu", (("approximate", False),)),
    "silu": ("silu", ()),
    "swish": ("silu", ()),
    "hard_silu": ("hard_silu", ()),
    "hard_swish": ("hard_silu", ()),
    "elu": ("elu", (("alpha", 1.0),)),
    "selu": ("selu", ()),
    "softplus": ("softplus", ()),
}
ACTIVATION_OPS = tuple(
    dict.fromkeys(op for name, _ in _ACTIVATIONS.values() for op in ACTIVATIONS[name].onnx_ops)
)


def activation_name(layer: Any) -> str | None | Any:
    """``""`` for no activation, the table's key of a Keras activation, NotApplicable else."""
    fn = getattr(layer, "activation", None)
    if fn is None or fn is keras.activations.linear:
        return ""
    for name in _ACTIVATIONS:
        if fn is getattr(keras.activations, name, None):
            return name
    return NotApplicable


def activate(ctx: LoweringContext, y: ir.Value, name: str) -> Any:
    """``y`` through the activation (NotApplicable where its op does not take the dtype)."""
    if not name:
        return y
    jax_name, config = _ACTIVATIONS[name]
    activation = ACTIVATIONS[jax_name]
    dtype = y.dtype.numpy() if y.dtype is not None else None
    if dtype not in activation.dtypes or ctx.opset < activation.min_opset:
        return NotApplicable
    return activation.rule(ctx, y, **dict(config))


# -- Dense ---------------------------------------------------------------------------------------


@map_calls(L.Dense, "call")
def _dense_call(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    activation = activation_name(layer)
    if x is NotApplicable or activation is NotApplicable or not plain(layer, L.Dense):
        return NotApplicable
    if x.ndim < 1 or getattr(layer, "_kernel", None) is None:
        return NotApplicable
    return CoarseCall(
        "keras_dense",
        inputs={"x": x},
        weights={"kernel": variable_array(layer._kernel), "bias": variable_array(layer.bias)},
        params={"activation": activation},
    )


@coarse_lowering(
    "keras_dense",
    onnx_ops=("Gemm", "MatMul", "Add", *ACTIVATION_OPS),
    covers=("keras.layers.Dense",),
)
def _dense(ctx: LoweringContext, ops: Operands, *, activation: str) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in FLOATS:
        return NotApplicable
    x, kernel = ctx.cast(ops["x"], dtype), ctx.cast(ops["kernel"], dtype)
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    return activate(ctx, dense(ctx, x, kernel, bias, rank=len(ops.aval("x").shape)), activation)


# -- convolutions --------------------------------------------------------------------------------

_CONVS = (L.Conv1D, L.Conv2D, L.Conv3D)
_DEPTHWISE = tuple(c for c in (getattr(L, "DepthwiseConv1D", None), L.DepthwiseConv2D) if c)
_SEPARABLE = (L.SeparableConv1D, L.SeparableConv2D)
_KINDS = {"conv": _CONVS, "depthwise": _DEPTHWISE, "separable": _SEPARABLE}


def _conv_call(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], kind: str) -> Any:
    """A convolution; ``kind``: ``"conv"``, ``"depthwise"`` or ``"separable"`` (a depthwise
    conv, then a pointwise one with the bias)."""
    if len(args) != 1 or kwargs or not _float(args[0]):
        return NotApplicable
    x, last = args[0], _channels_last(layer)
    activation = activation_name(layer)
    if not plain(layer, _KINDS[kind]) or activation is NotApplicable or last is None:
        return NotApplicable
    rank = int(layer.rank)
    padding = str(layer.padding).upper()
    if x.ndim != rank + 2 or padding not in ("SAME", "VALID"):
        return NotApplicable  # (Conv1D's "causal" pads the input itself)
    kernel = variable_array(layer.depthwise_kernel if kind == "separable" else layer.kernel)
    size = tuple(int(k) for k in kernel.shape[:rank])
    strides, dilation = tuple(layer.strides), tuple(layer.dilation_rate)
    spatial = x.shape[1:-1] if last else x.shape[2:]
    pads = conv_pads(padding, spatial, size, strides, dilation)
    if pads is None or any(s != 1 for s in strides) and any(d != 1 for d in dilation):
        return NotApplicable
    channels = int(x.shape[-1] if last else x.shape[1])
    return CoarseCall(
        "keras_conv",
        inputs={"x": x},
        weights={
            "kernel": kernel,
            "pointwise": variable_array(layer.pointwise_kernel) if kind == "separable" else None,
            "bias": variable_array(layer.bias) if layer.use_bias else None,
        },
        params={
            "strides": strides,
            "dilations": dilation,
            "pads": pads,
            "group": channels if kind != "conv" else int(getattr(layer, "groups", 1)),
            "depthwise": kind != "conv",
            "channels_last": last,
            "activation": activation,
        },
    )


@map_calls(L.Conv1D.__mro__[1], "call")  # BaseConv: Conv1D/2D/3D
def _conv_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    return _conv_call(layer, args, kwargs, "conv")


@map_calls(L.DepthwiseConv2D.__mro__[1], "call")  # BaseDepthwiseConv
def _depthwise_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    return _conv_call(layer, args, kwargs, "depthwise")


@map_calls(L.SeparableConv2D.__mro__[1], "call")  # BaseSeparableConv
def _separable_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    return _conv_call(layer, args, kwargs, "separable")


def _onnx_kernel(
    ctx: LoweringContext, kernel: ir.Value, shape: tuple[int, ...], depthwise: bool
) -> ir.Value:
    """Keras's ``(*spatial, in, out)`` kernel (depthwise: ``(*spatial, in, multiplier)``) as
    ONNX's ``(out, in / group, *spatial)``, rearranged at export time."""
    rank = len(shape) - 2
    to_oi = [rank + 1, rank, *range(rank)]
    if not depthwise:
        return ctx.transposed_weight(kernel, to_oi)

    def array(a: np.ndarray) -> np.ndarray:
        flat = a.reshape(*a.shape[:rank], 1, a.shape[rank] * a.shape[rank + 1])
        return np.transpose(flat, to_oi)

    def nodes(v: ir.Value) -> ir.Value:
        flat = ctx.reshape(v, [*shape[:rank], 1, shape[rank] * shape[rank + 1]])
        return ctx.transpose(flat, to_oi)

    return ctx.derived_weight(kernel, ("keras_depthwise", rank), array, nodes)


@coarse_lowering(
    "keras_conv",
    onnx_ops=("Transpose", "Conv", *ACTIVATION_OPS),
    covers=tuple(f"keras.layers.{c.__name__}" for c in (*_CONVS, *_DEPTHWISE, *_SEPARABLE)),
)
def _conv(
    ctx: LoweringContext,
    ops: Operands,
    *,
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    pads: Any,
    group: int,
    depthwise: bool,
    channels_last: bool,
    activation: str,
) -> Any:
    dtype = out_dtype(ctx)
    if (
        dtype not in FLOATS
        or not kernels.supports("Conv", dtype)
        or has_zero(ctx.aval_out.shape)
        or has_zero(ops.aval("x").shape)
    ):
        return NotApplicable  # onnxruntime's Conv rejects empty images
    rank = len(ops.aval("x").shape)
    x = ctx.cast(ops["x"], dtype)
    if channels_last:
        x = ctx.transpose(x, to_channels_first(rank))
    shape = tuple(int(d) for d in ops.aval("kernel").shape)
    kernel = _onnx_kernel(ctx, ctx.cast(ops["kernel"], dtype), shape, depthwise)
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    if "pointwise" in ops:  # separable: the depthwise conv, then the pointwise one
        x = conv(ctx, x, kernel, None, strides=strides, dilations=dilations, pads=pads, group=group)
        shape = tuple(int(d) for d in ops.aval("pointwise").shape)
        kernel = _onnx_kernel(ctx, ctx.cast(ops["pointwise"], dtype), shape, False)
        strides = dilations = (1,) * (rank - 2)
        pads, group = (0,) * (2 * rank - 4), 1
    y = conv(ctx, x, kernel, bias, strides=strides, dilations=dilations, pads=pads, group=group)
    y = activate(ctx, y, activation)
    if y is NotApplicable or not channels_last:
        return y
    return ctx.op.Transpose(y, perm=to_channels_last(rank))


# -- layout: elementwise layers act before the channels-last Transpose ------------------------


def _behind_layout(ctx: LoweringContext, values: Sequence[ir.Value]) -> list[int] | None:
    """The perm of the Transpose every one of ``values`` comes from (the same for all), or
    None: then the values are what the op reads."""
    perms = []
    for v in values:
        node = v.producer()
        if node is None or node.op_type != "Transpose" or node.domain != "":
            return None
        perms.append(list(node.attributes["perm"].value))
    first = perms[0] if perms else None
    return first if first and all(p == first for p in perms) else None


def _transposed_back(ctx: LoweringContext, y: ir.Value, perm: list[int] | None) -> ir.Value:
    return y if perm is None else ctx.op.Transpose(y, perm=perm)


def _source(value: ir.Value, perm: list[int] | None) -> ir.Value:
    if perm is None:
        return value
    node = value.producer()
    source = None if node is None else node.inputs[0]
    return value if source is None else source


# -- BatchNormalization (inference) --------------------------------------------------------------


@map_calls(L.BatchNormalization, "call")
def _batch_norm_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    if set(kwargs) - {"training", "mask"} or kwargs.get("mask") is not None:
        return NotApplicable
    x = one_input(args, {k: v for k, v in kwargs.items() if k == "training"})
    if x is NotApplicable or not plain(layer, L.BatchNormalization) or x.ndim < 2:
        return NotApplicable
    if getattr(layer, "renorm", False) or not -x.ndim <= int(layer.axis) < x.ndim:
        return NotApplicable
    return CoarseCall(
        "keras_batch_norm",
        inputs={"x": x},
        weights={
            "mean": variable_array(layer.moving_mean),
            "var": variable_array(layer.moving_variance),
            "scale": variable_array(layer.gamma) if layer.scale else None,
            "bias": variable_array(layer.beta) if layer.center else None,
        },
        params={"axis": int(layer.axis) % x.ndim, "epsilon": float(layer.epsilon)},
    )


@coarse_lowering(
    "keras_batch_norm",
    onnx_ops=("BatchNormalization", "Transpose"),
    covers=("keras.layers.BatchNormalization",),
)
def _batch_norm(ctx: LoweringContext, ops: Operands, *, axis: int, epsilon: float) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in FLOATS or np.dtype(ops.aval("x").dtype) != dtype:
        return NotApplicable
    rank = len(ops.aval("x").shape)
    size = int(ops.aval("mean").shape[0])
    x = ops["x"]
    perm = None if axis == 1 else [0, axis, *[i for i in range(1, rank) if i != axis]]
    if perm is not None:
        x = ctx.transpose(x, perm)
    scale, bias = (
        weight_or_fill(ctx, ctx.cast(ops[r], dtype) if r in ops else None, (size,), dtype, fill)
        for r, fill in (("scale", 1.0), ("bias", 0.0))
    )
    mean, var = ctx.cast(ops["mean"], dtype), ctx.cast(ops["var"], dtype)
    y = ctx.op.BatchNormalization(x, scale, bias, mean, var, epsilon=epsilon)
    node = y.producer()
    if node is not None:
        node.meta[FOLD] = True  # into the Conv before it, if any (Keras models' common pair)
    return y if perm is None else ctx.op.Transpose(y, perm=np.argsort(perm).tolist())


# -- LayerNormalization --------------------------------------------------------------------------


@map_calls(L.LayerNormalization, "call")
def _layer_norm_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    if x is NotApplicable or not plain(layer, L.LayerNormalization) or x.ndim < 1:
        return NotApplicable
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    axes = sorted(int(a) % x.ndim for a in axes)
    if axes != list(range(axes[0], x.ndim)):
        return NotApplicable  # ONNX normalizes over the trailing axes only
    if getattr(layer, "rms_scaling", False):
        return NotApplicable  # Keras's rms_scaling divides x by its variance: no ONNX op's
    gamma, beta = variable_array(layer.gamma), variable_array(layer.beta)
    if gamma is not None and gamma.ndim != x.ndim - axes[0]:
        return NotApplicable
    return CoarseCall(
        "keras_layer_norm",
        inputs={"x": x},
        weights={"scale": gamma, "bias": beta},
        params={"axis": axes[0], "epsilon": float(layer.epsilon)},
    )


def _trailing_norm(
    emit: Any, ctx: LoweringContext, ops: Operands, *, axis: int, epsilon: float
) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in FLOATS:
        return NotApplicable
    shape = [int(d) for d in ops.aval("x").shape[axis:]]
    x = ctx.cast(ops["x"], dtype)
    scale = weight_or_fill(
        ctx, ctx.cast(ops["scale"], dtype) if "scale" in ops else None, shape, dtype, 1.0
    )
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    return emit(ctx, x, scale, bias, axis=axis, epsilon=epsilon, dtype=dtype)


@coarse_lowering(
    "keras_layer_norm",
    onnx_ops=("LayerNormalization",),
    min_opset=17,
    covers=("keras.layers.LayerNormalization",),
)
def _layer_norm(ctx: LoweringContext, ops: Operands, *, axis: int, epsilon: float) -> Any:
    return _trailing_norm(layer_norm, ctx, ops, axis=axis, epsilon=epsilon)


@coarse_lowering(
    "keras_rms_norm",
    onnx_ops=("RMSNormalization", "Mul", "ReduceMean", "Add", "Sqrt", "Div"),
    covers=("keras.layers.RMSNormalization",),
)
def _rms_norm(ctx: LoweringContext, ops: Operands, *, axis: int, epsilon: float) -> Any:
    return _trailing_norm(rms_norm, ctx, ops, axis=axis, epsilon=epsilon)


# -- GroupNormalization (opset 21: per-channel scale and bias) ---------------------------------


@map_calls(L.GroupNormalization, "call")
def _group_norm_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    if x is NotApplicable or not plain(layer, L.GroupNormalization) or x.ndim < 2:
        return NotApplicable
    axis = int(layer.axis) % x.ndim
    if axis == 0 or np.dtype(x.dtype) not in FLOATS:
        return NotApplicable  # (Keras computes bfloat16 / float16 groups in float32)
    return CoarseCall(
        "keras_group_norm",
        inputs={"x": x},
        weights={
            "scale": variable_array(layer.gamma) if layer.scale else None,
            "bias": variable_array(layer.beta) if layer.center else None,
        },
        params={
            "axis": axis,
            "groups": int(layer.groups),
            "epsilon": float(layer.epsilon),
            "size": int(x.shape[axis]),
        },
    )


@coarse_lowering(
    "keras_group_norm",
    onnx_ops=("GroupNormalization", "Transpose"),
    min_opset=21,
    covers=("keras.layers.GroupNormalization",),
)
def _group_norm(
    ctx: LoweringContext, ops: Operands, *, axis: int, groups: int, epsilon: float, size: int
) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in FLOATS or has_zero(ops.aval("x").shape):
        return NotApplicable  # JAX gives NaN statistics for empty groups
    rank = len(ops.aval("x").shape)
    perm = None if axis == 1 else [0, axis, *[i for i in range(1, rank) if i != axis]]
    x = ops["x"] if perm is None else ctx.transpose(ops["x"], perm)
    scale, bias = (
        weight_or_fill(ctx, ctx.cast(ops[r], dtype) if r in ops else None, (size,), dtype, fill)
        for r, fill in (("scale", 1.0), ("bias", 0.0))
    )
    y = group_norm(ctx, x, scale, bias, num_groups=groups, epsilon=epsilon, dtype=dtype)
    return y if perm is None else ctx.op.Transpose(y, perm=np.argsort(perm).tolist())


# -- pooling -------------------------------------------------------------------------------------

_POOLS = tuple(getattr(L, f"{kind}Pooling{n}D") for kind in ("Max", "Average") for n in (1, 2, 3))
_GLOBAL_POOLS = tuple(
    getattr(L, f"Global{kind}Pooling{n}D") for kind in ("Max", "Average") for n in (1, 2, 3)
)


def _pool_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    last = _channels_last(layer)
    if x is NotApplicable or last is None or not plain(layer, _POOLS):
        return NotApplicable
    window, strides = tuple(layer.pool_size), tuple(layer.strides)
    n = len(window)
    if x.ndim != n + 2 or not all(s >= 1 for s in strides):
        return NotApplicable
    spatial = x.shape[1:-1] if last else x.shape[2:]
    pads = conv_pads(str(layer.padding).upper(), spatial, window, strides, (1,) * n)
    if pads is None or isinstance(pads, str) or not fits_window(pads, window):
        return NotApplicable
    return CoarseCall(
        "keras_pool",
        inputs={"x": x},
        params={
            "kind": layer.pool_mode,
            "window": window,
            "strides": strides,
            "pads": pads,
            "channels_last": last,
        },
    )


@coarse_lowering(
    "keras_pool",
    onnx_ops=("MaxPool", "AveragePool", "Transpose", "Where", "Greater", "IsNaN", "Equal"),
    covers=tuple(f"keras.layers.{c.__name__}" for c in _POOLS),
)
def _pool(
    ctx: LoweringContext,
    ops: Operands,
    *,
    kind: str,
    window: tuple[int, ...],
    strides: tuple[int, ...],
    pads: tuple[int, ...],
    channels_last: bool,
) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in FLOATS or kind not in ("max", "average") or has_zero(ops.aval("x").shape):
        return NotApplicable
    rank = len(ops.aval("x").shape)
    x = ctx.transpose(ops["x"], to_channels_first(rank)) if channels_last else ops["x"]
    # Keras averages over the window's cells inside the image ("same" padding too)
    y = pool(
        ctx, x, kind, dtype, kernel=window, strides=strides, pads=pads, count_include_pad=False
    )
    return ctx.op.Transpose(y, perm=to_channels_last(rank)) if channels_last else y


def _global_pool_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    last = _channels_last(layer)
    if x is NotApplicable or last is None or not plain(layer, _GLOBAL_POOLS) or x.ndim < 3:
        return NotApplicable
    kind = "max" if "Max" in type(layer).__name__ else "mean"
    return CoarseCall(
        "keras_global_pool",
        inputs={"x": x},
        params={"kind": kind, "channels_last": last, "keepdims": bool(layer.keepdims)},
    )


@coarse_lowering(
    "keras_global_pool",
    onnx_ops=("ReduceMean", "ReduceMax", "Reshape", "Transpose"),
    covers=tuple(f"keras.layers.{c.__name__}" for c in _GLOBAL_POOLS),
)
def _global_pool(
    ctx: LoweringContext, ops: Operands, *, kind: str, channels_last: bool, keepdims: bool
) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in FLOATS or has_zero(ops.aval("x").shape):
        return NotApplicable
    rank = len(ops.aval("x").shape)
    x, axes = ops["x"], list(range(2, rank)) if not channels_last else list(range(1, rank - 1))
    if channels_last:
        x, axes = ctx.transpose(x, to_channels_first(rank)), list(range(2, rank))
    reduce = ctx.op.ReduceMax if kind == "max" else ctx.op.ReduceMean
    if keepdims:
        y = reduce(x, ctx.ints(axes), keepdims=1)
        return ctx.op.Transpose(y, perm=to_channels_last(rank)) if channels_last else y
    # the reduced dims kept and dropped by a Reshape: a Reshape back to an image (a
    # squeeze-and-excite block's) then cancels it
    return ctx.reshape(reduce(x, ctx.ints(axes), keepdims=1), ctx.aval_out.shape)


# -- merges and padding: elementwise, in the layout of their inputs ----------------------------


def _same_inputs(inputs: Any) -> bool:
    """Two or more float arrays of one rank and dtype (broadcasting as numpy does)."""
    return (
        isinstance(inputs, (list, tuple))
        and len(inputs) >= 2
        and all(_float(v) for v in inputs)
        and len({(v.ndim, str(v.dtype)) for v in inputs}) == 1
    )


def _merge_handler(cls: type, primitive: str, **params: Any) -> Any:
    def handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
        inputs: Any = args[0] if len(args) == 1 and not kwargs else None
        if not _same_inputs(inputs) or not plain(layer, cls):
            return NotApplicable
        if any(get_keras_mask(v) is not None for v in inputs):
            return NotApplicable  # Multiply fills masked positions
        extra = {k: int(getattr(layer, k)) % inputs[0].ndim for k in params}
        return CoarseCall(primitive, inputs={str(i): v for i, v in enumerate(inputs)}, params=extra)

    return handler


map_calls(L.Add, "_merge_function")(_merge_handler(L.Add, "keras_add"))
map_calls(L.Multiply, "_merge_function")(_merge_handler(L.Multiply, "keras_multiply"))
map_calls(L.Concatenate, "_merge_function")(
    _merge_handler(L.Concatenate, "keras_concatenate", axis=-1)
)


def _operands(ops: Operands) -> list[ir.Value]:
    return [ops[str(i)] for i in range(len(ops))]


def _elementwise_merge(op_type: str, ctx: LoweringContext, ops: Operands) -> Any:
    values = _operands(ops)
    perm = _behind_layout(ctx, values)
    values = [_source(v, perm) for v in values]
    y = values[0]
    for v in values[1:]:  # in Keras's order: a sum of three rounds as Keras's does
        y = getattr(ctx.op, op_type)(y, v)
    return _transposed_back(ctx, y, perm)


@coarse_lowering("keras_add", onnx_ops=("Add", "Transpose"), covers=("keras.layers.Add",))
def _add(ctx: LoweringContext, ops: Operands) -> Any:
    return _elementwise_merge("Add", ctx, ops)


@coarse_lowering("keras_multiply", onnx_ops=("Mul", "Transpose"), covers=("keras.layers.Multiply",))
def _multiply(ctx: LoweringContext, ops: Operands) -> Any:
    return _elementwise_merge("Mul", ctx, ops)


@coarse_lowering(
    "keras_concatenate", onnx_ops=("Concat", "Transpose"), covers=("keras.layers.Concatenate",)
)
def _concatenate(ctx: LoweringContext, ops: Operands, *, axis: int) -> Any:
    values = _operands(ops)
    perm = _behind_layout(ctx, values)
    y = ctx.op.Concat(
        *[_source(v, perm) for v in values], axis=axis if perm is None else perm[axis]
    )
    return _transposed_back(ctx, y, perm)


_PADDINGS = tuple(getattr(L, f"ZeroPadding{n}D") for n in (1, 2, 3))


def _zero_padding_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    last = _channels_last(layer) if not isinstance(layer, L.ZeroPadding1D) else True
    if x is NotApplicable or last is None or not plain(layer, _PADDINGS):
        return NotApplicable
    pairs = [(int(lo), int(hi)) for lo, hi in layer.padding]
    if len(pairs) != x.ndim - 2 or any(v < 0 for p in pairs for v in p):
        return NotApplicable
    full = [(0, 0), *pairs, (0, 0)] if last else [(0, 0), (0, 0), *pairs]
    return CoarseCall("keras_zero_padding", inputs={"x": x}, params={"pads": tuple(full)})


@coarse_lowering(
    "keras_zero_padding",
    onnx_ops=("Pad", "Transpose"),
    covers=tuple(f"keras.layers.{c.__name__}" for c in _PADDINGS),
)
def _zero_padding(ctx: LoweringContext, ops: Operands, *, pads: tuple[tuple[int, int], ...]) -> Any:
    dtype = out_dtype(ctx)
    perm = _behind_layout(ctx, [ops["x"]])
    x = _source(ops["x"], perm)
    if perm is not None:  # pads of the axes before the Transpose
        inverse = np.argsort(perm).tolist()
        pads = tuple(pads[inverse[a]] for a in range(len(pads)))
    amounts = [lo for lo, _ in pads] + [hi for _, hi in pads]
    y = ctx.op.Pad(x, ctx.ints(amounts), ctx.const(np.zeros((), dtype)))
    return _transposed_back(ctx, y, perm)


for _cls in _POOLS:
    map_calls(_cls, "call")(_pool_handler)
for _cls in _GLOBAL_POOLS:
    map_calls(_cls, "call")(_global_pool_handler)
for _cls in _PADDINGS:
    map_calls(_cls, "call")(_zero_padding_handler)

__all__: list[str] = []
