"""Flax NNX layers and activations as coarse ONNX ops.

Each layer has a handler and a rule. The handler sees one call (``module, *args, **kwargs``)
while an export runs and returns a :class:`CoarseCall` (which arrays play which role, the
static config) or ``NotApplicable`` for anything it does not model: an unknown keyword, a
subclass that overrides methods, a custom ``dot_general``, a padding mode, a mask... Those
calls run the original ``__call__`` and are lowered op by op, so they are never wrong. The
rule emits the coarse op, or returns ``NotApplicable`` (a dtype or opset it does not cover),
and then the traced original call is lowered in its place.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from flax import linen, nnx
from flax.nnx.nn import dtypes as nnx_dtypes

from jax2onnx_nn.core import jax_nn, kernels
from jax2onnx_nn.core.layers import rnn
from jax2onnx_nn.core.layers.conv import (
    conv,
    conv_pads,
    conv_transpose,
    conv_transpose_kernel,
    conv_transpose_padding,
    conv_transpose_pads,
)
from jax2onnx_nn.core.layers.dense import dense
from jax2onnx_nn.core.layers.embed import TAKE_ROWS_OPS, take_rows
from jax2onnx_nn.core.layers.norm import (
    channels_first,
    group_norm,
    layer_norm,
    rms_norm,
    weight_or_fill,
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
    describe_module,
    is_array,
    overrides_nothing,
)
from jax2onnx_nn.core.symbolic import has_zero

_F32_F64 = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_ALLOWED_OVERRIDES = frozenset({"__init__", "__init_subclass__", "__call__"})


# -- shared checks and helpers -------------------------------------------------------------


def _plain(module: Any, cls: type) -> bool:
    """True when ``module`` is a ``cls`` whose subclasses (if any) override no method."""
    return overrides_nothing(module, cls, _ALLOWED_OVERRIDES)


def _one_input(args: tuple[Any, ...], kwargs: dict[str, Any], allowed: dict[str, Any]) -> Any:
    """The single positional array argument, if the other keywords have their allowed values."""
    if len(args) != 1 or not is_array(args[0]):
        return NotApplicable
    for key, value in kwargs.items():
        if key not in allowed or value is not allowed[key]:
            return NotApplicable
    return args[0]


def _value(variable: Any) -> Any:
    return None if variable is None else variable.get_value()


def _default_promote(module: Any) -> bool:
    return getattr(module, "promote_dtype", nnx_dtypes.promote_dtype) is nnx_dtypes.promote_dtype


def _out_dtype(ctx: LoweringContext) -> np.dtype:
    return onnx_aval(ctx.aval_out)[0]


def _cast_or_fill(
    ctx: LoweringContext, ops: Operands, role: str, dtype: np.dtype, size: int, fill: float
) -> ir.Value:
    """An optional per-feature weight (in ``dtype``), or a constant ``fill`` vector where it is absent."""
    return weight_or_fill(
        ctx, ctx.cast(ops[role], dtype) if role in ops else None, (size,), dtype, fill
    )


def _has_empty_dim(*avals: Any) -> bool:
    return any(has_zero(a.shape) for a in avals)


def _canonical_axes(axes: Any, rank: int) -> tuple[int, ...] | None:
    axes = (
        (axes,)
        if isinstance(axes, int)
        else tuple(axes)
        if isinstance(axes, (tuple, list))
        else None
    )
    if axes is None or not all(isinstance(a, int) and -rank <= a < rank for a in axes):
        return None
    return tuple(sorted(a % rank for a in axes))


# -- nnx.Linear ----------------------------------------------------------------------------


def _linear_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = _one_input(args, kwargs, {"out_sharding": None})
    if (
        x is NotApplicable
        or x.ndim < 1
        or not _plain(module, nnx.Linear)
        or not _default_promote(module)
    ):
        return NotApplicable
    if module.dot_general is not jax.lax.dot_general or module.preferred_element_type is not None:
        return NotApplicable
    return CoarseCall(
        "nnx_linear",
        inputs={"x": x},
        weights={"kernel": _value(module.kernel), "bias": _value(module.bias)},
    )


@coarse_lowering("nnx_linear", onnx_ops=("Gemm", "MatMul", "Add", "Cast"), covers=("nnx.Linear",))
def _linear(ctx: LoweringContext, ops: Operands) -> Any:
    dtype = _out_dtype(ctx)
    if dtype.kind != "f":
        return NotApplicable
    x, kernel = ctx.cast(ops["x"], dtype), ctx.cast(ops["kernel"], dtype)
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    return dense(ctx, x, kernel, bias, rank=len(ops.aval("x").shape))


# -- nnx.LinearGeneral: contraction over trailing axes, as MatMul on flattened features ----


def _linear_general_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = _one_input(args, kwargs, {"out_sharding": None})
    if x is NotApplicable or not _plain(module, nnx.LinearGeneral) or not _default_promote(module):
        return NotApplicable
    if (
        module.batch_axis
        or module.dot_general_cls is not None
        or module.preferred_element_type is not None
    ):
        return NotApplicable
    if module.dot_general not in (None, jax.lax.dot_general):
        return NotApplicable
    axes = _canonical_axes(module.axis, x.ndim)
    n = 0 if axes is None else len(axes)
    if axes is None or axes != tuple(range(x.ndim - n, x.ndim)) or n == x.ndim:
        return NotApplicable
    return CoarseCall(
        "nnx_linear_general",
        inputs={"x": x},
        weights={"kernel": _value(module.kernel), "bias": _value(module.bias)},
        params={"n_contract": n},
    )


@coarse_lowering(
    "nnx_linear_general", onnx_ops=("Reshape", "MatMul", "Add"), covers=("nnx.LinearGeneral",)
)
def _linear_general(ctx: LoweringContext, ops: Operands, *, n_contract: int) -> Any:
    dtype = _out_dtype(ctx)
    if dtype.kind != "f":
        return NotApplicable
    kernel_shape = tuple(ops.aval("kernel").shape)
    k_in, k_out = kernel_shape[:n_contract], kernel_shape[n_contract:]
    size_in, size_out = int(np.prod(k_in)), int(np.prod(k_out))
    keep = len(ops.aval("x").shape) - n_contract
    x = ctx.cast(ops["x"], dtype)
    if n_contract != 1:
        x = ctx.op.Reshape(x, ctx.ints([0] * keep + [size_in]))
    kernel = ctx.cast(ops["kernel"], dtype)
    if len(kernel_shape) != 2:
        kernel = ctx.reshaped_weight(kernel, [size_in, size_out])
    y = ctx.op.MatMul(x, kernel)
    if "bias" in ops:
        bias = ctx.cast(ops["bias"], dtype)
        if len(ops.aval("bias").shape) != 1:
            bias = ctx.reshaped_weight(bias, [size_out])
        y = ctx.op.Add(y, bias)
    if len(k_out) != 1:
        y = ctx.op.Reshape(y, ctx.ints([0] * keep + list(k_out)))
    return y


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
    x = _one_input(args, kwargs, {"out_sharding": None})
    if x is NotApplicable or not _plain(module, nnx.Conv) or not _default_promote(module):
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
        weights={"kernel": _value(module.kernel), "bias": _value(module.bias)},
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
    dtype = _out_dtype(ctx)
    if (
        dtype not in _F32_F64
        or not kernels.supports("Conv", dtype)
        or _has_empty_dim(ctx.aval_out, ops.aval("x"))
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
        x, window = a.get("inputs"), a.get("window_shape")
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
        dtype not in _F32_F64
        or not kernels.supports("AveragePool", dtype)
        or _has_empty_dim(ctx.aval_out, ops.aval("x"))
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


# -- nnx.Embed: Gather, with JAX's out-of-range semantics (NaN rows) -----------------------


def _embed_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = _one_input(args, kwargs, {"out_sharding": None})
    if x is NotApplicable or not _plain(module, nnx.Embed) or not _default_promote(module):
        return NotApplicable
    if not jnp.issubdtype(x.dtype, jnp.integer) or module.num_embeddings == 1:
        return NotApplicable
    return CoarseCall("nnx_embed", inputs={"x": x}, weights={"embedding": _value(module.embedding)})


@coarse_lowering(
    "nnx_embed",
    onnx_ops=TAKE_ROWS_OPS,
    covers=("nnx.Embed",),
)
def _embed(ctx: LoweringContext, ops: Operands) -> Any:
    dtype = _out_dtype(ctx)
    if dtype.kind != "f":
        return NotApplicable
    n = int(ops.aval("embedding").shape[0])
    # JAX wraps indices in [-n, 0) once and gives NaN rows for indices out of range.
    return take_rows(ctx, ctx.cast(ops["embedding"], dtype), ops["x"], n)


def _attend_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    query = _one_input(args, kwargs, {"out_sharding": None})
    if (
        query is NotApplicable
        or query.ndim < 1
        or not _plain(module, nnx.Embed)
        or not _default_promote(module)
    ):
        return NotApplicable
    return CoarseCall(
        "nnx_embed_attend", inputs={"x": query}, weights={"embedding": _value(module.embedding)}
    )


@coarse_lowering(
    "nnx_embed_attend", onnx_ops=("Gemm", "MatMul", "Transpose"), covers=("nnx.Embed.attend",)
)
def _attend(ctx: LoweringContext, ops: Operands) -> Any:
    dtype = _out_dtype(ctx)
    if dtype.kind != "f":
        return NotApplicable
    x, embedding = ctx.cast(ops["x"], dtype), ctx.cast(ops["embedding"], dtype)
    return dense(ctx, x, embedding, None, rank=len(ops.aval("x").shape), out_in=True, shared=True)


# -- normalizations ------------------------------------------------------------------------


def _norm_ok(module: Any, cls: type, x: Any) -> bool:
    return (
        _plain(module, cls)
        and _default_promote(module)
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
    axes = _canonical_axes(module.axis, x.ndim)
    if axes is None or len(axes) != 1:
        return NotApplicable
    return CoarseCall(
        "nnx_batch_norm",
        inputs={"x": x},
        weights={
            "mean": _value(module.mean),
            "var": _value(module.var),
            "scale": _value(module.scale),
            "bias": _value(module.bias),
        },
        params={"axis": axes[0], "epsilon": float(module.epsilon)},
    )


@coarse_lowering(
    "nnx_batch_norm",
    onnx_ops=("BatchNormalization", "Transpose", "Cast"),
    covers=("nnx.BatchNorm",),
)
def _batch_norm(ctx: LoweringContext, ops: Operands, *, axis: int, epsilon: float) -> Any:
    dtype = _out_dtype(ctx)
    if dtype not in _F32_F64:
        return NotApplicable
    rank = len(ops.aval("x").shape)
    size = int(ops.aval("mean").shape[0])
    x, inverse = channels_first(ctx, ctx.cast(ops["x"], dtype), rank, axis)
    scale = _cast_or_fill(ctx, ops, "scale", dtype, size, 1.0)
    bias = _cast_or_fill(ctx, ops, "bias", dtype, size, 0.0)
    mean, var = ctx.cast(ops["mean"], dtype), ctx.cast(ops["var"], dtype)
    y = ctx.op.BatchNormalization(x, scale, bias, mean, var, epsilon=epsilon)
    return y if inverse is None else ctx.op.Transpose(y, perm=inverse)


def _last_axis_norm_handler(cls: type, primitive: str, weights: tuple[str, ...]) -> Handler:
    """LayerNorm / RMSNorm over the last axis (the common configuration)."""

    def handler(module: Any, *args: Any, **kwargs: Any) -> Any:
        x = _one_input(args, kwargs, {"mask": None})
        if x is NotApplicable or not _norm_ok(module, cls, x):
            return NotApplicable
        last = (x.ndim - 1,)
        if (
            _canonical_axes(module.reduction_axes, x.ndim) != last
            or _canonical_axes(module.feature_axes, x.ndim) != last
        ):
            return NotApplicable
        return CoarseCall(
            primitive,
            inputs={"x": x},
            weights={w: _value(getattr(module, w)) for w in weights},
            params={"epsilon": float(module.epsilon), "size": int(module.num_features)},
        )

    return handler


def _last_axis_norm(
    emit: Callable[..., ir.Value], ctx: LoweringContext, ops: Operands, *, epsilon: float, size: int
) -> Any:
    """LayerNorm and RMSNorm: one rule, the layer emitter differs (an absent scale is ones)."""
    dtype = _out_dtype(ctx)
    if dtype not in _F32_F64:
        return NotApplicable
    x = ctx.cast(ops["x"], dtype)
    scale = _cast_or_fill(ctx, ops, "scale", dtype, size, 1.0)
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    return emit(ctx, x, scale, bias, axis=-1, epsilon=epsilon, dtype=dtype)


for _name, _emit, _onnx_op, _opset, _module in (
    ("nnx_layer_norm", layer_norm, "LayerNormalization", 17, "LayerNorm"),
    ("nnx_rms_norm", rms_norm, "RMSNormalization", 23, "RMSNorm"),
):
    coarse_lowering(_name, onnx_ops=(_onnx_op,), min_opset=_opset, covers=(f"nnx.{_module}",))(
        functools.partial(_last_axis_norm, _emit)
    )


# -- the table -----------------------------------------------------------------------------

MakeWrapper = Callable[[Any], Any]


def _sequential_wrapper(original: Any) -> Any:
    """nnx.Sequential holding activations captured before the export (``nnx.relu``): its call
    runs on a view whose layers are the patched functions, so they map to their coarse op."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        layers = list(getattr(self, "layers", None) or ())
        swapped = [jax_nn.substitute(f) for f in layers]
        if all(a is b for a, b in zip(swapped, layers, strict=True)):
            return original(self, *args, **kwargs)
        return original(types.SimpleNamespace(layers=swapped), *args, **kwargs)

    return call


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of every patch applied while an export runs.

    ``jax.nn`` itself is patched by ``core/jax_nn.py`` in every export; here its re-exports in
    ``flax.nnx`` (``nnx.relu``, ``nnx.gelu``...) get the same patched functions.
    """
    table: list[tuple[Any, str, Handler]] = [
        (nnx.Linear, "__call__", _linear_handler),
        (nnx.LinearGeneral, "__call__", _linear_general_handler),
        (nnx.Conv, "__call__", _conv_handler),
        (nnx.Embed, "__call__", _embed_handler),
        (nnx.Embed, "attend", _attend_handler),
        (nnx.BatchNorm, "__call__", _batch_norm_handler),
        (
            nnx.LayerNorm,
            "__call__",
            _last_axis_norm_handler(nnx.LayerNorm, "nnx_layer_norm", ("scale", "bias")),
        ),
        (nnx.RMSNorm, "__call__", _last_axis_norm_handler(nnx.RMSNorm, "nnx_rms_norm", ("scale",))),
        (nnx.GroupNorm, "__call__", _group_norm_handler),
        (nnx.ConvTranspose, "__call__", _conv_transpose_handler),
        (nnx.GRUCell, "__call__", _gru_cell_handler),
        (nnx.LSTMCell, "__call__", _lstm_cell_handler),
        (nnx.OptimizedLSTMCell, "__call__", _optimized_lstm_cell_handler),
        (linen.GRUCell, "__call__", _linen_gru_cell_handler),
        (linen.LSTMCell, "__call__", _linen_lstm_cell_handler(linen.LSTMCell)),
        (linen.OptimizedLSTMCell, "__call__", _linen_lstm_cell_handler(linen.OptimizedLSTMCell)),
    ]
    return [
        *[(owner, attr, coarse_wrapper(handler)) for owner, attr, handler in table],
        (nnx, "avg_pool", jax_nn.shared(_avg_pool_handler)),
        (linen, "avg_pool", jax_nn.shared(_avg_pool_handler)),
        *jax_nn.namespace_patches(nnx),
        (nnx.Sequential, "__call__", _sequential_wrapper),
    ]


# -- nnx.GroupNorm: GroupNormalization (opset 21: per-channel scale and bias) ---------------


def _group_norm_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = _one_input(args, kwargs, {"mask": None})
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
        and _canonical_axes(module.reduction_axes, x.ndim) != default_axes
    ):
        return NotApplicable
    return CoarseCall(
        "nnx_group_norm",
        inputs={"x": x},
        weights={"scale": _value(module.scale), "bias": _value(module.bias)},
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
    dtype = _out_dtype(ctx)
    if dtype not in _F32_F64 or _has_empty_dim(ops.aval("x")):
        return NotApplicable  # JAX gives NaN statistics for empty groups
    rank = len(ops.aval("x").shape)
    x, inverse = channels_first(ctx, ctx.cast(ops["x"], dtype), rank, rank - 1)
    scale = _cast_or_fill(ctx, ops, "scale", dtype, size, 1.0)
    bias = _cast_or_fill(ctx, ops, "bias", dtype, size, 0.0)
    y = group_norm(ctx, x, scale, bias, num_groups=num_groups, epsilon=epsilon, dtype=dtype)
    return y if inverse is None else ctx.op.Transpose(y, perm=inverse)


# -- nnx.ConvTranspose: lax.conv_transpose as ONNX ConvTranspose (see core/layers/conv.py) ---


def _conv_transpose_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = _one_input(args, kwargs, {})
    if x is NotApplicable or not _plain(module, nnx.ConvTranspose) or not _default_promote(module):
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
        weights={"kernel": _value(module.kernel), "bias": _value(module.bias)},
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
    dtype = _out_dtype(ctx)
    if (
        dtype not in _F32_F64
        or not kernels.supports("ConvTranspose", dtype)
        or _has_empty_dim(ctx.aval_out, ops.aval("x"))
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


# -- nnx.GRUCell / nnx.LSTMCell: one step of ONNX GRU / LSTM --------------------------------
#
# flax's GRU computes n = tanh(x W_n + b_n + r * (h R_n)): ONNX GRU with linear_before_reset=1
# and no recurrent bias; its LSTM is ONNX LSTM without peepholes (see core/layers/rnn.py for
# the gate order). One call is one time step: sequence length 1.


def _wrapping_chain(fn: Any) -> list[Any]:
    """``fn`` and what it wraps (``__wrapped__``: a patched activation, a jitted function)."""
    chain = []
    while fn is not None and len(chain) < 4:
        chain.append(fn)
        fn = getattr(fn, "__wrapped__", None)
    return chain


def _ids(*fns: Any) -> frozenset[int]:
    return frozenset(id(f) for fn in fns for f in _wrapping_chain(fn))


# whole chains: this module may be imported while an export has jax.nn patched already, and
# a Linen cell's default gate_fn is the function as it was when flax was imported
_SIGMOIDS = _ids(jax.nn.sigmoid, nnx.sigmoid, linen.sigmoid)
_TANHS = _ids(jnp.tanh, nnx.tanh, linen.tanh)


def _is_one_of(fn: Any, ids: frozenset[int]) -> bool:
    """``fn`` is one of the functions, or a patched version of one (``__wrapped__`` chain:
    the export substitutes captured activations)."""
    return any(id(f) in ids for f in _wrapping_chain(fn))


def _plain_dense(layer: Any, use_bias: bool) -> bool:
    """An inner nnx.Linear that computes exactly ``x @ kernel (+ bias)`` in float32."""
    return (
        type(layer) is nnx.Linear
        and _default_promote(layer)
        and layer.dot_general is jax.lax.dot_general
        and layer.preferred_element_type is None
        and (layer.bias is not None) == use_bias
        and layer.dtype in (None, jnp.float32)
        and _value(layer.kernel).dtype == np.float32
    )


def _cell_ok(module: Any, cls: type, h: Any, x: Any) -> bool:
    return (
        _plain(module, cls)
        and _default_promote(module)
        and module.dtype in (None, jnp.float32)
        and _is_one_of(module.gate_fn, _SIGMOIDS)
        and _is_one_of(module.activation_fn, _TANHS)
        and all(is_array(t) and t.ndim == 2 and t.dtype == np.float32 for t in (h, x))
    )


def _gru_cell_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    if len(args) != 2 or kwargs:
        return NotApplicable
    h, x = args
    if (
        not _cell_ok(module, nnx.GRUCell, h, x)
        or not _plain_dense(module.dense_i, True)
        or not _plain_dense(module.dense_h, False)
    ):
        return NotApplicable
    return CoarseCall(
        "nnx_gru_cell",
        inputs={"h": h, "x": x},
        weights={
            "w": _value(module.dense_i.kernel),
            "b": _value(module.dense_i.bias),
            "r": _value(module.dense_h.kernel),
        },
        params={"hidden": int(module.hidden_features)},
    )


def _one_step(ctx: LoweringContext, value: ir.Value) -> ir.Value:
    return ctx.op.Unsqueeze(value, ctx.ints([0]))


def _last_state(ctx: LoweringContext, value: ir.Value) -> ir.Value:
    return ctx.op.Squeeze(value, ctx.ints([0]))


@coarse_lowering(
    "nnx_gru_cell",
    onnx_ops=("GRU", "Unsqueeze", "Squeeze", "Split", "Concat", "Transpose", *rnn.GUARD_OPS),
    covers=("nnx.GRUCell",),
)
def _gru_cell(ctx: LoweringContext, ops: Operands, *, hidden: int) -> Any:
    if _has_empty_dim(ops.aval("x"), ops.aval("h")):
        return NotApplicable
    (h,) = rnn.library_step(
        ctx,
        rnn.GRU,
        _one_step(ctx, ops["x"]),
        [_one_step(ctx, ops["h"])],
        ops["w"],
        ops["r"],
        ops["b"],
        hidden=hidden,
        dtype=onnx_aval(ops.aval("b"))[0],
        gate_axis=1,
    )
    h = _last_state(ctx, h)
    return [h, h]


def _lstm_cell_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    if len(args) != 2 or kwargs or not isinstance(args[0], tuple) or len(args[0]) != 2:
        return NotApplicable
    (c, h), x = args
    if not _cell_ok(module, nnx.LSTMCell, h, x) or not (
        is_array(c) and c.ndim == 2 and c.dtype == np.float32
    ):
        return NotApplicable
    inputs, hidden = (
        (module.ii, module.io, module.if_, module.ig),
        (module.hi, module.ho, module.hf, module.hg),
    )  # ONNX order
    if not all(_plain_dense(d, False) for d in inputs) or not all(
        _plain_dense(d, True) for d in hidden
    ):
        return NotApplicable
    weights = {f"w{i}": _value(d.kernel) for i, d in enumerate(inputs)}
    weights |= {f"r{i}": _value(d.kernel) for i, d in enumerate(hidden)}
    weights |= {f"b{i}": _value(d.bias) for i, d in enumerate(hidden)}
    return CoarseCall(
        "nnx_lstm_cell",
        inputs={"c": c, "h": h, "x": x},
        weights=weights,
        params={"hidden": int(module.hidden_features)},
    )


def _stacked_gates(
    ctx: LoweringContext, parts: list[ir.Value | None], name: str, *, kernels: bool, hidden: int
) -> ir.Value:
    """Per-gate kernels ``(in, hidden)`` as ONNX's ``(1, gates * hidden, in)``, or per-gate
    biases ``(hidden,)`` as ONNX's ``B`` ``(1, 2 * gates * hidden)`` (input side, then recurrent
    side; a None part is zeros): one initializer when all parts are weights."""
    given = [p for p in parts if p is not None]
    dtype = given[0].dtype.numpy()

    def stack(arrays: list[np.ndarray]) -> np.ndarray:
        rest = iter(arrays)
        blocks = [
            np.zeros(hidden, dtype) if p is None else next(rest).T if kernels else next(rest)
            for p in parts
        ]
        return np.concatenate(blocks, axis=0)[None]

    if (
        all(p.const_value is not None and p.producer() is None and p.name for p in given)
        and not ctx.builder.isolated
    ):
        first = given[0]
        folded = first.meta.setdefault("jax2onnx_nn.folded", {})
        key = ("stacked", kernels, *(p.name if p is not None else None for p in parts))
        if key not in folded:
            # the cell's path: nnx's "cell.ii.kernel" -> "cell.W", Linen's variable path
            # "params/LSTMCell_0/ii/kernel" -> "params/LSTMCell_0/W"
            sep = "/" if "/" in first.name else "."
            path = first.name.split(sep)
            stem = sep.join(path[:-2]) if len(path) >= 3 else first.name
            folded[key] = ctx.builder.initializer(
                np.ascontiguousarray(stack([p.const_value.numpy() for p in given])),
                f"{stem}{sep}{name}",
            )
        return folded[key]
    if kernels:
        laid = [ctx.op.Transpose(p, perm=[1, 0]) for p in given]
    else:
        laid = [ctx.const(np.zeros(hidden, dtype)) if p is None else p for p in parts]
    return ctx.op.Unsqueeze(ctx.op.Concat(*laid, axis=0), ctx.ints([0]))


@coarse_lowering(
    "nnx_lstm_cell",
    onnx_ops=("LSTM", "Unsqueeze", "Squeeze", "Concat", "Transpose", *rnn.GUARD_OPS),
    covers=("nnx.LSTMCell", "flax.linen.LSTMCell", "flax.linen.OptimizedLSTMCell"),
)
def _lstm_cell(ctx: LoweringContext, ops: Operands, *, hidden: int) -> Any:
    if _has_empty_dim(ops.aval("x"), ops.aval("h")):
        return NotApplicable
    w = _stacked_gates(ctx, [ops[f"w{i}"] for i in range(4)], "W", kernels=True, hidden=hidden)
    r = _stacked_gates(ctx, [ops[f"r{i}"] for i in range(4)], "R", kernels=True, hidden=hidden)
    b = _stacked_gates(
        ctx, [None] * 4 + [ops[f"b{i}"] for i in range(4)], "B", kernels=False, hidden=hidden
    )
    h, c = rnn.step(
        ctx,
        rnn.LSTM,
        _one_step(ctx, ops["x"]),
        [_one_step(ctx, ops[s]) for s in ("h", "c")],
        w,
        r,
        b,
        hidden,
    )
    h = _last_state(ctx, h)
    return [_last_state(ctx, c), h, h]


def _optimized_lstm_cell_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    """OptimizedLSTMCell: the LSTMCell's numbers from one input kernel ``(in, 4 * hidden)`` and
    one recurrent kernel with the bias, gates i, f, g, o along the kernels' last axis."""
    if len(args) != 2 or kwargs or not isinstance(args[0], tuple) or len(args[0]) != 2:
        return NotApplicable
    (c, h), x = args
    if not _cell_ok(module, nnx.OptimizedLSTMCell, h, x) or not (
        is_array(c) and c.ndim == 2 and c.dtype == np.float32
    ):
        return NotApplicable
    if not _plain_dense(module.dense_i, False) or not _plain_dense(module.dense_h, True):
        return NotApplicable
    return CoarseCall(
        "nnx_optimized_lstm_cell",
        inputs={"c": c, "h": h, "x": x},
        weights={
            "w": _value(module.dense_i.kernel),
            "r": _value(module.dense_h.kernel),
            "b": _value(module.dense_h.bias),
        },
        params={"hidden": int(module.hidden_features)},
    )


@coarse_lowering(
    "nnx_optimized_lstm_cell",
    onnx_ops=("LSTM", "Unsqueeze", "Squeeze", "Split", "Concat", "Transpose", *rnn.GUARD_OPS),
    covers=("nnx.OptimizedLSTMCell",),
)
def _optimized_lstm_cell(ctx: LoweringContext, ops: Operands, *, hidden: int) -> Any:
    if _has_empty_dim(ops.aval("x"), ops.aval("h")):
        return NotApplicable
    h, c = rnn.library_step(
        ctx,
        rnn.LSTM,
        _one_step(ctx, ops["x"]),
        [_one_step(ctx, ops[s]) for s in ("h", "c")],
        ops["w"],
        ops["r"],
        ops["b"],
        hidden=hidden,
        dtype=onnx_aval(ops.aval("b"))[0],
        gate_axis=1,
    )
    h = _last_state(ctx, h)
    return [_last_state(ctx, c), h, h]


# -- Linen cells: one Dense per gate, read from the bound module's params ------------------


def _linen_dense(
    params: Any, name: str, shape: tuple[int, int], bias: bool
) -> dict[str, Any] | None:
    """The float32 kernel (and bias) of the cell's Dense ``name``, as the cell will read them."""
    dense = params.get(name) if hasattr(params, "get") else None
    if dense is None or set(dense) != ({"kernel", "bias"} if bias else {"kernel"}):
        return None
    arrays = {"kernel": dense["kernel"], **({"bias": dense["bias"]} if bias else {})}
    shapes = {"kernel": shape, "bias": shape[1:]}
    if not all(
        is_array(a) and a.dtype == np.float32 and a.shape == shapes[k] for k, a in arrays.items()
    ):
        return None
    return arrays


def _linen_cell(
    module: Any, cls: type, h: Any, x: Any, recurrent: tuple[str, ...], with_bias: tuple[str, ...]
) -> dict[str, dict[str, Any]] | None:
    """The Dense weights of a bound plain Linen ``cls`` (flax's gates, float32) by name: the
    input side's ``i*`` (``(in, hidden)``) and the recurrent side's ``h*`` (``(hidden, hidden)``),
    a bias where ``with_bias`` names the Dense; None for anything else (init, boxed params)."""
    if not _cell_ok(module, cls, h, x) or module.scope is None or h.shape[-1] != module.features:
        return None
    params = module.variables.get("params")
    hidden, features = int(h.shape[-1]), int(x.shape[-1])
    names = [*(f"i{g}" for g in recurrent), *(f"h{g}" for g in recurrent)]
    if params is None or set(params) != set(names):
        return None
    found = {
        n: _linen_dense(params, n, (features if n[0] == "i" else hidden, hidden), n in with_bias)
        for n in names
    }
    return None if any(d is None for d in found.values()) else found


def _linen_gru_cell_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    """linen.GRUCell: Dense ``ir``, ``iz``, ``in`` (with biases) on the input, ``hr``, ``hz``,
    ``hn`` (only ``hn`` with a bias, inside the reset product) on the carry."""
    if len(args) != 2 or kwargs:
        return NotApplicable
    h, x = args
    dense = _linen_cell(module, linen.GRUCell, h, x, ("r", "z", "n"), ("ir", "iz", "in", "hn"))
    if dense is None:
        return NotApplicable
    weights = {f"w{g}": dense[f"i{g}"]["kernel"] for g in "rzn"} | {
        f"r{g}": dense[f"h{g}"]["kernel"] for g in "rzn"
    }
    weights |= {f"b{g}": dense[f"i{g}"]["bias"] for g in "rzn"} | {"bhn": dense["hn"]["bias"]}
    return CoarseCall(
        "linen_gru_cell",
        inputs={"h": h, "x": x},
        weights=weights,
        params={"hidden": int(h.shape[-1])},
    )


@coarse_lowering(
    "linen_gru_cell",
    onnx_ops=("GRU", "Unsqueeze", "Squeeze", "Concat", "Transpose", *rnn.GUARD_OPS),
    covers=("flax.linen.GRUCell",),
)
def _linen_gru_cell(ctx: LoweringContext, ops: Operands, *, hidden: int) -> Any:
    if _has_empty_dim(ops.aval("x"), ops.aval("h")):
        return NotApplicable
    gates = "zrn"  # ONNX's z, r, h
    w = _stacked_gates(ctx, [ops[f"w{g}"] for g in gates], "W", kernels=True, hidden=hidden)
    r = _stacked_gates(ctx, [ops[f"r{g}"] for g in gates], "R", kernels=True, hidden=hidden)
    b = _stacked_gates(
        ctx,
        [*(ops[f"b{g}"] for g in gates), None, None, ops["bhn"]],
        "B",
        kernels=False,
        hidden=hidden,
    )
    (h,) = rnn.step(
        ctx, rnn.GRU, _one_step(ctx, ops["x"]), [_one_step(ctx, ops["h"])], w, r, b, hidden
    )
    h = _last_state(ctx, h)
    return [h, h]


def _linen_lstm_cell_handler(cls: type) -> Handler:
    """linen.LSTMCell and linen.OptimizedLSTMCell (the same params, one dot per side): Dense
    ``ii``, ``if``, ``ig``, ``io`` on the input, ``hi``, ``hf``, ``hg``, ``ho`` (with biases)
    on h, as nnx.LSTMCell's coarse op."""

    def handler(module: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) != 2 or kwargs or not isinstance(args[0], tuple) or len(args[0]) != 2:
            return NotApplicable
        (c, h), x = args
        dense = _linen_cell(module, cls, h, x, ("i", "f", "g", "o"), ("hi", "hf", "hg", "ho"))
        if dense is None or not (is_array(c) and c.shape == h.shape and c.dtype == np.float32):
            return NotApplicable
        order = "iofg"  # ONNX's i, o, f, c
        weights = {f"w{k}": dense[f"i{g}"]["kernel"] for k, g in enumerate(order)}
        weights |= {f"r{k}": dense[f"h{g}"]["kernel"] for k, g in enumerate(order)}
        weights |= {f"b{k}": dense[f"h{g}"]["bias"] for k, g in enumerate(order)}
        return CoarseCall(
            "nnx_lstm_cell",
            inputs={"c": c, "h": h, "x": x},
            weights=weights,
            params={"hidden": int(h.shape[-1])},
        )

    return handler


# -- modules without a coarse op of their own (for the support table) -----------------------

describe_module("nnx.MultiHeadAttention", "its Linear layers, and jax.nn.dot_product_attention")
describe_module("nnx.Dropout", "(no node: identity in inference)")
describe_module("nnx.Sequential", "its layers")
