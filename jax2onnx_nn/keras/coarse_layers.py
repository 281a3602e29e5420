"""More Keras 3 layers as coarse ONNX ops: ``Embedding`` (Gather), ``EinsumDense`` (MatMul /
Gemm where its equation is a dense layer's), ``RMSNormalization``, ``UnitNormalization``,
``ReLU`` with ``max_value`` or ``threshold`` (Clip, ThresholdedRelu), ``Normalization`` (Sub and
Div by a folded constant) and ``Rescaling`` (Mul and Add).

As in :mod:`jax2onnx_nn.keras.coarse`, a handler returns ``NotApplicable`` for every call it
does not model (a subclass overriding ``call``, a quantized or LoRA layer, an equation or an
option without an ONNX op of the same numbers), and that call runs Keras's own ``call``,
lowered op by op.
"""

from __future__ import annotations

from typing import Any

import jax
import keras
import numpy as np

from jax2onnx_nn.core.layers.dense import dense
from jax2onnx_nn.core.layers.embed import TAKE_ROWS_OPS, take_rows
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
    coarse_lowering,
    map_calls,
)
from jax2onnx_nn.core.symbolic import has_zero
from jax2onnx_nn.keras.coarse import (
    ACTIVATION_OPS,
    FLOATS,
    activate,
    activation_name,
    one_input,
    out_dtype,
    plain,
    variable_array,
)

L = keras.layers
_INDICES = frozenset(np.dtype(t) for t in ("int8", "int16", "int32", "int64", "uint8", "uint16"))
"""Index dtypes whose values Keras's cast to int32 keeps (it wraps uint32 / uint64)."""


# -- Embedding: Gather with jnp.take's index semantics -------------------------------------------


@map_calls(L.Embedding, "call")
def _embedding_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    if len(args) != 1 or kwargs or not plain(layer, L.Embedding):
        return NotApplicable
    x = args[0]
    table = variable_array(getattr(layer, "_embeddings", None))
    if np.dtype(x.dtype) not in _INDICES or table is None or table.ndim != 2:
        return NotApplicable
    return CoarseCall("keras_embedding", inputs={"x": x}, weights={"table": table})


@coarse_lowering("keras_embedding", onnx_ops=TAKE_ROWS_OPS, covers=("keras.layers.Embedding",))
def _embedding(ctx: LoweringContext, ops: Operands) -> Any:
    dtype = out_dtype(ctx)
    rows = int(ops.aval("table").shape[0])
    if dtype.kind != "f" or rows == 0:
        return NotApplicable
    # Keras takes int32 / int64 indices as they are, other integers as int32 (no wrap below 2^31)
    return take_rows(ctx, ctx.cast(ops["table"], dtype), ops["x"], rows)


# -- EinsumDense: one matrix product between reshapes -------------------------------------------


def einsum_plan(equation: str, x_rank: int) -> tuple[int, tuple[int, ...], int] | None:
    """For ``"<x>,<kernel>-><out>"``: ``(kept, kernel_perm, contracted)`` when the einsum is
    ``x`` reshaped to ``[*kept dims, prod(contracted)]`` times the kernel transposed by
    ``kernel_perm`` (contracted axes first, in ``x``'s order, then the free ones in the
    output's) and reshaped to 2-d, then reshaped to the output; else None. ``x``'s leading
    axes (``...`` included) must be the output's leading axes, its contracted axes trailing."""
    if equation.count("->") != 1 or equation.count(",") != 1:
        return None
    inputs, out = equation.replace(" ", "").split("->")
    lhs, kernel = inputs.split(",")
    if "..." in kernel:
        return None
    if "..." in lhs or "..." in out:
        if not (lhs.startswith("...") and out.startswith("...")):
            return None
        n = x_rank - (len(lhs) - 3)
        fill = "".join(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation)[: max(n, 0)]
        if n < 0 or len(fill) != n:
            return None
        lhs, out = fill + lhs[3:], fill + out[3:]
    if len(lhs) != x_rank or any(len(set(s)) != len(s) for s in (lhs, kernel, out)):
        return None
    kept = [c for c in lhs if c not in kernel]
    contracted = [c for c in lhs if c in kernel]
    free = [c for c in out if c not in lhs]
    if (
        lhs != "".join(kept + contracted)
        or out != "".join(kept + free)
        or not contracted
        or sorted(kernel) != sorted(contracted + free)
    ):
        return None
    perm = tuple(kernel.index(c) for c in contracted + free)
    return len(kept), perm, len(contracted)


@map_calls(L.EinsumDense, "call")
def _einsum_dense_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    activation = activation_name(layer)
    if x is NotApplicable or activation is NotApplicable or not plain(layer, L.EinsumDense):
        return NotApplicable
    kernel = variable_array(getattr(layer, "_kernel", None))
    plan = None if kernel is None else einsum_plan(str(layer.equation), x.ndim)
    if plan is None:
        return NotApplicable
    kept, perm, contracted = plan
    return CoarseCall(
        "keras_einsum_dense",
        inputs={"x": x},
        weights={"kernel": kernel, "bias": variable_array(layer.bias)},
        params={"kept": kept, "perm": perm, "contracted": contracted, "activation": activation},
    )


def _struct(shape: list[Any], dtype: np.dtype) -> jax.ShapeDtypeStruct:
    """An aval for :meth:`LoweringContext.typed`."""
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


@coarse_lowering(
    "keras_einsum_dense",
    onnx_ops=("Gemm", "MatMul", "Add", "Transpose", "Reshape", "Shape", "Concat", *ACTIVATION_OPS),
    covers=("keras.layers.EinsumDense",),
)
def _einsum_dense(
    ctx: LoweringContext,
    ops: Operands,
    *,
    kept: int,
    perm: tuple[int, ...],
    contracted: int,
    activation: str,
) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in FLOATS or has_zero(ops.aval("x").shape) or has_zero(ctx.aval_out.shape):
        return NotApplicable
    # several contracted or produced axes: x as [*kept, K] times the kernel as [K, N], the
    # product reshaped to the output; a bias over the produced axes is added before that
    # reshape, so it meets the reshape of a consumer (an attention's [B, T, heads * size])
    # and the two cancel
    x_shape, out_shape = ops.aval("x").shape, ctx.aval_out.shape
    kernel_shape = [int(ops.aval("kernel").shape[p]) for p in perm]
    rows = int(np.prod(kernel_shape[:contracted]))
    cols = int(np.prod(kernel_shape[contracted:]))
    kernel = ctx.cast(ops["kernel"], dtype)
    if list(perm) != list(range(len(perm))):
        kernel = ctx.transposed_weight(kernel, perm)
    if len(perm) != 2:
        kernel = ctx.reshaped_weight(kernel, [rows, cols])
    x = ctx.cast(ops["x"], dtype)
    if contracted != 1:  # (typed: the layout passes cancel it against a reshape before it)
        flat = _struct([*x_shape[:kept], rows], dtype)
        x = ctx.typed(ctx.reshape(x, flat.shape), flat)
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    bias_shape = tuple(ops.aval("bias").shape) if bias is not None else ()
    fused = bias is not None and bias_shape == tuple(kernel_shape[contracted:])
    if fused and bias is not None and len(bias_shape) != 1:
        bias = ctx.reshaped_weight(bias, [cols])
    y = dense(ctx, x, kernel, bias if fused else None, rank=kept + 1)
    if len(perm) - contracted != 1:
        y = ctx.reshape(ctx.typed(y, _struct([*out_shape[:kept], cols], dtype)), out_shape)
    if bias is not None and not fused:
        y = ctx.op.Add(y, bias)  # Keras's bias shape broadcasts against the output as it is
    return activate(ctx, y, activation)


# -- RMSNormalization, UnitNormalization -------------------------------------------------------


def _trailing_axis(layer: Any, x: Any) -> int | None:
    """The first of ``layer.axis`` when those are ``x``'s trailing axes, else None."""
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    found = sorted(int(a) % x.ndim for a in axes)
    return found[0] if found and found == list(range(found[0], x.ndim)) else None


@map_calls(L.RMSNormalization, "call")
def _rms_norm_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    if x is NotApplicable or not plain(layer, L.RMSNormalization) or x.ndim < 1:
        return NotApplicable
    axis = _trailing_axis(layer, x)
    scale = variable_array(layer.scale)
    # (Keras computes bfloat16 / float16 in float32: those keep the lax path)
    if axis is None or np.dtype(x.dtype) not in FLOATS or scale.ndim != x.ndim - axis:
        return NotApplicable
    return CoarseCall(
        "keras_rms_norm",
        inputs={"x": x},
        weights={"scale": scale},
        params={"axis": axis, "epsilon": float(layer.epsilon)},
    )


@map_calls(L.UnitNormalization, "call")
def _unit_norm_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    if x is NotApplicable or not plain(layer, L.UnitNormalization) or x.ndim < 1:
        return NotApplicable
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    return CoarseCall(
        "keras_unit_norm",
        inputs={"x": x},
        params={"axes": tuple(sorted(int(a) % x.ndim for a in axes))},
    )


@coarse_lowering(
    "keras_unit_norm",
    onnx_ops=("ReduceSumSquare", "Sqrt", "Reciprocal", "Min", "Mul"),
    covers=("keras.layers.UnitNormalization",),
)
def _unit_norm(ctx: LoweringContext, ops: Operands, *, axes: tuple[int, ...]) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in FLOATS or np.dtype(ops.aval("x").dtype) != dtype:
        return NotApplicable
    x = ops["x"]
    # Keras: x * min(rsqrt(sum(x * x)), 1 / 1e-12), so a zero vector stays zero
    squares = ctx.op.ReduceSumSquare(x, ctx.ints(list(axes)), keepdims=1)
    inverse = ctx.op.Reciprocal(ctx.op.Sqrt(squares))
    return ctx.op.Mul(x, ctx.op.Min(inverse, ctx.const(np.asarray(1e12, dtype=dtype))))


# -- ReLU with max_value / threshold ----------------------------------------------------------


@map_calls(L.ReLU, "call")
def _relu_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    if x is NotApplicable or not plain(layer, L.ReLU) or float(layer.negative_slope) != 0:
        return NotApplicable  # a slope alone is jax.nn.leaky_relu's LeakyRelu already
    top, threshold = layer.max_value, float(layer.threshold)
    if threshold == 0 and (top is None or float(top) == 6):
        return NotApplicable  # jax.nn.relu / relu6: Relu / Clip already
    return CoarseCall(
        "keras_relu",
        inputs={"x": x},
        params={"max_value": None if top is None else float(top), "threshold": threshold},
    )


@coarse_lowering(
    "keras_relu", onnx_ops=("Clip", "ThresholdedRelu"), min_opset=10, covers=("keras.layers.ReLU",)
)
def _relu(ctx: LoweringContext, ops: Operands, *, max_value: float | None, threshold: float) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in FLOATS or np.dtype(ops.aval("x").dtype) != dtype:
        return NotApplicable
    y = ops["x"]
    if threshold != 0:  # Keras: where(x > threshold, x, 0)
        y = ctx.op.ThresholdedRelu(y, alpha=threshold)
    if max_value is not None:  # Keras: relu, then clip to [0, max_value]
        zero, top = (ctx.const(np.asarray(v, dtype=dtype)) for v in (0, max_value))
        y = ctx.op.Clip(y, zero, top)
    return y


# -- Normalization, Rescaling: elementwise affine maps ----------------------------------------


@map_calls(L.Normalization, "call")
def _normalization_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs)
    if x is NotApplicable or not plain(layer, L.Normalization) or layer.invert:
        return NotApplicable
    mean, variance = getattr(layer, "mean", None), getattr(layer, "variance", None)
    if mean is None or variance is None or np.dtype(x.dtype) not in FLOATS:
        return NotApplicable
    return CoarseCall(
        "keras_normalization", inputs={"x": x}, weights={"mean": mean, "variance": variance}
    )


@coarse_lowering(
    "keras_normalization",
    onnx_ops=("Sub", "Div", "Sqrt", "Max"),
    covers=("keras.layers.Normalization",),
)
def _normalization(ctx: LoweringContext, ops: Operands) -> Any:
    dtype = out_dtype(ctx)
    if dtype not in FLOATS:
        return NotApplicable
    epsilon = np.asarray(keras.config.epsilon(), dtype=dtype)
    variance = ctx.cast(ops["variance"], dtype)
    # Keras divides by max(sqrt(variance), epsilon): one constant when variance is a weight
    scale = ctx.derived_weight(
        variance,
        ("keras_normalization_scale", float(epsilon)),
        lambda a: np.maximum(np.sqrt(a.astype(dtype)), epsilon),
        lambda v: ctx.op.Max(ctx.op.Sqrt(v), ctx.const(epsilon)),
    )
    return ctx.op.Div(ctx.op.Sub(ctx.cast(ops["x"], dtype), ctx.cast(ops["mean"], dtype)), scale)


__all__ = ["einsum_plan"]
