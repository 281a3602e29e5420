"""Equinox layers as coarse ONNX ops.

Each layer has a handler and a rule. The handler sees one call (``module, *args, **kwargs``)
while an export runs and returns a :class:`CoarseCall` (which arrays play which role, the
static config) or ``NotApplicable`` for anything it does not model: a subclass overriding a
method, mixed dtypes, a padding mode, training-mode dropout... Those calls run the original
``__call__`` and are lowered op by op, so they are never wrong. The rule emits the coarse op,
or returns ``NotApplicable`` (a dtype, rank or opset it does not cover), and then the traced
original call is lowered in its place.

Equinox layers work on one example; batches come from ``jax.vmap``. The primitives here are
re-bound under vmap (``jxi.rebind_under_vmap``), so a rule sees the vmapped operands with the
batch dims in front, and ``vmap_levels`` says which operand carries which of them:
``jax.vmap(linear)`` over ``("B", 784)`` is one Gemm with the batch dim kept symbolic.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.layers import rnn
from jax2onnx_nn.core.layers.attention import attention, lowest_mask_value
from jax2onnx_nn.core.layers.conv import (
    conv,
    conv_pads,
    conv_transpose,
    conv_transpose_kernel,
    conv_transpose_pads,
)
from jax2onnx_nn.core.layers.dense import dense
from jax2onnx_nn.core.layers.norm import group_norm, layer_norm, rms_norm, weight_or_fill
from jax2onnx_nn.core.layers.pool import fits_window, pool
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.patching import (
    CoarseCall,
    Handler,
    NotApplicable,
    Operands,
    active_options,
    bind_coarse,
    coarse_lowering,
    coarse_wrapper,
    describe_module,
    is_array,
    overrides_nothing,
)
from jax2onnx_nn.core.precision import LOW_FLOATS
from jax2onnx_nn.core.symbolic import has_zero
from jax2onnx_nn.equinox.functions import without_named_scope

MakeWrapper = Callable[[Any], Any]

_F32_F64 = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_ALLOWED_OVERRIDES = frozenset(
    {"__init__", "__call__", "__check_init__", "__post_init__", "__init_subclass__"}
)


def eqx_lowering(
    primitive: str,
    *,
    onnx_ops: tuple[str, ...] = (),
    min_opset: int = 1,
    covers: tuple[str, ...] = (),
) -> Callable[[Any], Any]:
    """:func:`coarse_lowering` for a primitive that vmap re-binds on batched operands."""
    jxi.rebind_under_vmap(primitive)
    return coarse_lowering(primitive, onnx_ops=onnx_ops, min_opset=min_opset, covers=covers)


# -- shared checks and helpers -------------------------------------------------------------


def plain(module: Any, cls: type) -> bool:
    """True when ``module`` is a ``cls`` whose subclasses (if any) override no method."""
    return overrides_nothing(module, cls, _ALLOWED_OVERRIDES)


def float_arrays(*arrays: Any) -> bool:
    """All arrays (None for absent ones) of one float32 / float64 dtype, or of one bfloat16 /
    float16 dtype (computed in float32 where the target has no kernel: core/precision.py)."""
    present = [a for a in arrays if a is not None]
    if not all(is_array(a) for a in present):
        return False
    dtypes = {np.dtype(a.dtype) for a in present}
    return len(dtypes) == 1 and (dtypes <= _F32_F64 or dtypes <= LOW_FLOATS)


class Levels:
    """Which operands of a coarse op carry which vmap dims (see ``jxi.rebind_under_vmap``)."""

    def __init__(self, ctx: LoweringContext) -> None:
        params = ctx.eqn.params
        self.levels: tuple[tuple[bool, ...], ...] = tuple(params.get("vmap_levels", ()))
        self.index = dict(params["roles"])

    def __len__(self) -> int:
        return len(self.levels)

    def of(self, role: str) -> tuple[bool, ...]:
        i = self.index[role]
        return tuple(level[i] for level in self.levels)

    def full(self, role: str) -> bool:
        """The role's operand carries every vmap dim."""
        return all(self.of(role))

    def unbatched(self, *roles: str) -> bool:
        return all(not any(self.of(r)) for r in roles if r in self.index)

    def aligned(self, ctx: LoweringContext, role: str, value: ir.Value) -> ir.Value:
        """The operand with a size-1 dim for each vmap dim it lacks, so that it broadcasts
        against operands that carry them (numpy broadcasting aligns trailing dims)."""
        missing = [i for i, has in enumerate(self.of(role)) if not has]
        if not missing or all(not has for has in self.of(role)):
            return value  # all dims or none: trailing alignment is right
        return ctx.op.Unsqueeze(value, ctx.ints(missing))


def _has_empty(ctx: LoweringContext) -> bool:
    """Some operand or result has a size-0 dim (onnxruntime's Conv/pools reject those; the
    lax path handles them)."""
    return any(has_zero(aval.shape) for aval in (*ctx.avals_in, *ctx.avals_out))


def _out_dtype(ctx: LoweringContext) -> np.dtype:
    return onnx_aval(ctx.aval_out)[0]


def _shape(ops: Operands, role: str) -> tuple[Any, ...]:
    return tuple(ops.aval(role).shape)


# -- eqx.nn.Linear: Gemm (MatMul + Add beyond one batch dim) -------------------------------


def _linear_handler(module: Any, x: Any, *, key: Any = None) -> Any:
    if not plain(module, eqx.nn.Linear) or not float_arrays(x, module.weight, module.bias):
        return NotApplicable
    scalar_in, scalar_out = module.in_features == "scalar", module.out_features == "scalar"
    if x.ndim != (0 if scalar_in else 1):
        return NotApplicable
    return CoarseCall(
        "eqx_linear",
        inputs={"x": x},
        weights={"weight": module.weight, "bias": module.bias},
        params={"scalar_in": scalar_in, "scalar_out": scalar_out},
    )


@eqx_lowering(
    "eqx_linear",
    onnx_ops=("Gemm", "MatMul", "Add", "Transpose", "Squeeze", "Unsqueeze"),
    covers=("eqx.nn.Linear",),
)
def _linear(ctx: LoweringContext, ops: Operands, *, scalar_in: bool, scalar_out: bool) -> Any:
    levels = Levels(ctx)
    if not levels.full("x") or not levels.unbatched("weight", "bias"):
        return NotApplicable
    x, weight = ops["x"], ops["weight"]
    bias = ops.get("bias")
    if scalar_in:
        x = ctx.op.Unsqueeze(x, ctx.ints([-1]))
    y = dense(ctx, x, weight, bias, rank=len(levels) + 1, out_in=True)
    return ctx.op.Squeeze(y, ctx.ints([-1])) if scalar_out else y


# -- batch dims: ops that take exactly one batch dim (Conv, pools, norms, RNN cells) --------


def _flatten_batch(
    ctx: LoweringContext,
    x: ir.Value,
    per_example: Sequence[Any],
    n_levels: int,
    front: Sequence[int] = (),
) -> ir.Value:
    """``x`` (vmap dims, then one example) as ``[*front, N, *example]`` with all vmap dims in N."""
    if n_levels == 1 and not front:
        return x
    if n_levels <= 1:
        return ctx.op.Unsqueeze(x, ctx.ints(list(range(len(front) + 1 - n_levels))))
    if any(jxi.is_symbolic_dim(d) for d in per_example):
        return ctx.op.Reshape(
            x, ctx.op.Concat(ctx.ints([*front, -1]), ctx.shape_tensor(list(per_example)), axis=0)
        )
    return ctx.op.Reshape(x, ctx.ints([*front, -1, *(int(d) for d in per_example)]))


def _unflatten_batch(
    ctx: LoweringContext, y: ir.Value, n_levels: int, aval: Any, front: int = 0
) -> ir.Value:
    """The inverse of :func:`_flatten_batch` for an output of aval ``aval``."""
    if n_levels == 1 and not front:
        return y
    if n_levels <= 1:
        return ctx.op.Squeeze(y, ctx.ints(list(range(front + 1 - n_levels))))
    return ctx.reshape(y, aval.shape)


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
    size = int(_shape(ops, "bias")[0])
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
    if _has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    dtype = _out_dtype(ctx)
    if (
        not levels.full("x")
        or not levels.unbatched("weight", "bias")
        or not kernels.supports("Conv", dtype)
    ):
        return NotApplicable
    example = _shape(ops, "x")[len(levels) :]
    x = _flatten_batch(ctx, ops["x"], example, len(levels))
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
    return _unflatten_batch(ctx, y, len(levels), ctx.aval_out)


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
    if _has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    dtype = _out_dtype(ctx)
    if (
        not levels.full("x")
        or not levels.unbatched("weight", "bias")
        or not kernels.supports("ConvTranspose", dtype)
    ):
        return NotApplicable
    w_shape = _shape(ops, "weight")
    weight = conv_transpose_kernel(
        ctx, ops["weight"], range(len(w_shape)), w_shape, group, weight=True
    )
    example = _shape(ops, "x")[len(levels) :]
    x = _flatten_batch(ctx, ops["x"], example, len(levels))
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
    return _unflatten_batch(ctx, y, len(levels), ctx.aval_out)


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
    dtype = _out_dtype(ctx)
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
    if _has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    if not levels.full("x") or not levels.unbatched("weight", "bias"):
        return NotApplicable
    dtype = _out_dtype(ctx)
    example = _shape(ops, "x")[len(levels) :]
    x = _flatten_batch(ctx, ops["x"], example, len(levels))
    scale = weight_or_fill(ctx, ops.get("weight"), (channels,), dtype, 1.0)
    bias = weight_or_fill(ctx, ops.get("bias"), (channels,), dtype, 0.0)
    y = group_norm(ctx, x, scale, bias, num_groups=groups, epsilon=epsilon, dtype=dtype)
    return _unflatten_batch(ctx, y, len(levels), ctx.aval_out)


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
    if _has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    if not levels.full("x") or not levels.unbatched(*(r for r in ops if r != "x")):
        return NotApplicable
    dtype = _out_dtype(ctx)
    mean, var = ops["mean"], ops["var"]
    if momentum is not None:
        mean, var = _batch_statistics(ctx, ops, momentum, dtype)
    scale = weight_or_fill(ctx, ops.get("weight"), (channels,), dtype, 1.0)
    bias = weight_or_fill(ctx, ops.get("bias"), (channels,), dtype, 0.0)
    example = _shape(ops, "x")[len(levels) :]
    x = _flatten_batch(ctx, ops["x"], example, len(levels))
    y = ctx.op.BatchNormalization(x, scale, bias, mean, var, epsilon=epsilon)
    return _unflatten_batch(ctx, y, len(levels), ctx.aval_out)


# -- attention: eqx's dot_product_attention (what MultiheadAttention runs per head) --------


def _attention_spec(
    query: Any,
    key_: Any,
    value: Any,
    mask: Any = None,
    dropout: Any = None,
    *,
    key: Any = None,
    inference: Any = None,
) -> Any:
    if not float_arrays(query, key_, value) or not (query.ndim == key_.ndim == value.ndim == 2):
        return NotApplicable
    if dropout is not None:
        p = dropout.p
        active = (
            not (isinstance(p, (int, float)) and p == 0)
            and (dropout.inference if inference is None else inference) is not True
        )
        if active or not plain(dropout, eqx.nn.Dropout):
            return NotApplicable
    inputs = {"query": query, "key": key_, "value": value}
    if mask is not None:
        # eqx masks with jnp.where, which takes any real dtype (nonzero is True): the Equinox
        # BERT example passes a float mask
        if (
            not is_array(mask)
            or np.dtype(mask.dtype).kind not in "biuf"
            or tuple(mask.shape) != (query.shape[0], key_.shape[0])
        ):
            return NotApplicable
        inputs["mask"] = mask
    head = query.shape[-1]
    if jxi.is_symbolic_dim(head):
        return NotApplicable
    return CoarseCall("eqx_attention", inputs=inputs, params={"scale": math.sqrt(head)})


def _attention_wrapper(original: Any) -> Any:
    signature = inspect.signature(original)

    def handler(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        return _attention_spec(*bound.args, **bound.kwargs)

    return coarse_wrapper(handler)(original)


def _swap_last(ctx: LoweringContext, x: ir.Value, rank: int) -> ir.Value:
    return ctx.op.Transpose(x, perm=[*range(rank - 2), rank - 1, rank - 2])


def _mask_as_bool(ctx: LoweringContext, ops: Operands) -> ir.Value:
    """The mask as jnp.where reads it: ``mask != 0`` unless it is bool (NaN counts as True)."""
    dtype = onnx_aval(ops.aval("mask"))[0]
    if dtype == np.bool_:
        return ops["mask"]
    return ctx.op.Not(ctx.op.Equal(ops["mask"], ctx.const(np.asarray(0, dtype=dtype))))


@eqx_lowering(
    "eqx_attention",
    onnx_ops=("MatMul", "Div", "Where", "Softmax", "Equal", "Not", "Transpose", "Unsqueeze"),
    covers=("eqx.nn.MultiheadAttention",),
)
def _attention(ctx: LoweringContext, ops: Operands, *, scale: float) -> Any:
    levels = Levels(ctx)
    if not all(any(levels.of(r)[i] for r in ops) for i in range(len(levels))):
        return NotApplicable  # a vmap dim none of q, k, v, mask carries (only the dropout key)
    dtype = _out_dtype(ctx)
    q, k, v = (levels.aligned(ctx, r, ops[r]) for r in ("query", "key", "value"))
    k_rank = len(levels) + 2 if any(levels.of("key")) else 2
    keep = levels.aligned(ctx, "mask", _mask_as_bool(ctx, ops)) if "mask" in ops else None
    return attention(
        ctx,
        q,
        _swap_last(ctx, k, k_rank),
        v,
        dtype=dtype,
        mask_value=lowest_mask_value(dtype),
        query_divisor=scale,
        keep=keep,
    )


# -- eqx.nn.Embedding: Gather, with JAX's index semantics ----------------------------------


def _embedding_handler(module: Any, x: Any, *, key: Any = None) -> Any:
    if (
        not plain(module, eqx.nn.Embedding)
        or not is_array(x)
        or x.ndim != 0
        or not np.issubdtype(x.dtype, np.integer)
    ):
        return NotApplicable
    if not is_array(module.weight) or module.weight.ndim != 2 or module.weight.shape[0] == 0:
        return NotApplicable
    return CoarseCall("eqx_embedding", inputs={"x": x}, weights={"weight": module.weight})


@eqx_lowering(
    "eqx_embedding",
    onnx_ops=("Gather", "Where", "Clip", "Add", "Less", "Cast"),
    covers=("eqx.nn.Embedding",),
)
def _embedding(ctx: LoweringContext, ops: Operands) -> Any:
    levels = Levels(ctx)
    if not levels.full("x") or not levels.unbatched("weight"):
        return NotApplicable
    # JAX indexing: a negative index counts from the end, then the index is clamped
    rows = int(_shape(ops, "weight")[0])
    dtype = onnx_aval(ops.aval("x"))[0]
    index = ops["x"]
    if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        index, dtype = ctx.op.Cast(index, to=ir.DataType.INT64), np.dtype(np.int64)
        signed = np.issubdtype(onnx_aval(ops.aval("x"))[0], np.signedinteger)
    else:
        signed = True
    zero = ctx.const(np.asarray(0, dtype=dtype))
    if signed:
        index = ctx.op.Where(
            ctx.op.Less(index, zero),
            ctx.op.Add(index, ctx.const(np.asarray(rows, dtype=dtype))),
            index,
        )
    index = ctx.op.Clip(index, zero, ctx.const(np.asarray(rows - 1, dtype=dtype)))
    return ctx.op.Gather(ops["weight"], index, axis=0)


# -- eqx.nn.PReLU: PRelu -------------------------------------------------------------------


def _prelu_handler(module: Any, x: Any) -> Any:
    slope = module.negative_slope
    if not plain(module, eqx.nn.PReLU) or not float_arrays(x, slope) or slope.ndim > x.ndim:
        return NotApplicable
    return CoarseCall("eqx_prelu", inputs={"x": x}, weights={"slope": slope})


@eqx_lowering(
    "eqx_prelu",
    onnx_ops=("PRelu",),
    covers=("eqx.nn.PReLU",),
)
def _prelu(ctx: LoweringContext, ops: Operands) -> Any:
    levels = Levels(ctx)
    if (
        not levels.full("x")
        or not levels.unbatched("slope")
        or not kernels.supports("PRelu", _out_dtype(ctx))
    ):
        return NotApplicable
    return ctx.op.PRelu(ops["x"], ops["slope"])


# -- eqx.nn.RotaryPositionalEmbedding: x * cos + rotate_half(x) * sin ----------------------


def _rope_tables(
    original: Any, module: Any, seq: int, size: int, dtype: Any
) -> tuple[np.ndarray, np.ndarray]:
    """The cos and sin tables eqx multiplies with, read off the layer itself.

    eqx caches its tables per (size, dtype) only, not per ``theta``, so recomputing them could
    give other numbers than the layer uses. The layer is linear: y = x * cos + rotate_half(x) *
    sin, so x = [1, 0] gives [cos_1, sin_2] and x = [0, 1] gives [-sin_1, cos_2] exactly.
    """
    half = size // 2
    ones, zeros = np.ones((seq, half), dtype), np.zeros((seq, half), dtype)
    with jax.ensure_compile_time_eval():
        first = np.asarray(original(module, np.concatenate([ones, zeros], axis=1)))
        second = np.asarray(original(module, np.concatenate([zeros, ones], axis=1)))
    cos = np.concatenate([first[:, :half], second[:, half:]], axis=1)
    sin = np.concatenate([-second[:, :half], first[:, half:]], axis=1)
    return cos, sin


def _rope_handler(original: Any, module: Any, x: Any, *, key: Any = None) -> Any:
    if not plain(module, eqx.nn.RotaryPositionalEmbedding) or not float_arrays(x) or x.ndim != 2:
        return NotApplicable
    seq, size = x.shape
    if (
        jxi.is_symbolic_dim(seq)
        or size != module.embedding_size
        or np.dtype(module.dtype) != np.dtype(x.dtype)
    ):
        return NotApplicable
    tables = _rope_tables(original, module, int(seq), int(size), np.dtype(x.dtype))
    return CoarseCall("eqx_rope", inputs={"x": x}, params={"tables": _Tables(tables)})


class _Tables:
    """Constant tables as a hashable param (compared by content)."""

    def __init__(self, arrays: tuple[np.ndarray, ...]) -> None:
        self.arrays = arrays
        self._key = tuple((a.dtype.str, a.shape, a.tobytes()) for a in arrays)

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Tables) and other._key == self._key

    def __repr__(self) -> str:  # printed in jaxprs: equal tables print alike (function dedup)
        digest = hashlib.sha256(repr(self._key).encode()).hexdigest()[:16]
        return f"Tables({digest})"


ROTARY_OPSET = 23  # ONNX RotaryEmbedding


@eqx_lowering(
    "eqx_rope",
    onnx_ops=(
        "Split",
        "Neg",
        "Concat",
        "Mul",
        "Add",
        "RotaryEmbedding",
        "Reshape",
        "Unsqueeze",
        "Squeeze",
        "Transpose",
        "Shape",
        "Slice",
        "Expand",
    ),
    covers=("eqx.nn.RotaryPositionalEmbedding",),
)
def _rope(ctx: LoweringContext, ops: Operands, *, tables: _Tables) -> Any:
    """``x * cos + rotate_half(x) * sin``: ONNX RotaryEmbedding from opset 23 (float32, its
    non-interleaved form is this formula: x1 cos - x2 sin, x2 cos + x1 sin), else its ops."""
    levels = Levels(ctx)
    if not levels.full("x"):
        return NotApplicable
    x = ops["x"]
    half = tables.arrays[0].shape[-1] // 2
    cos_sin = [t[:, :half] for t in tables.arrays]
    tiled = all(
        np.array_equal(t[:, :half], t[:, half:]) for t in tables.arrays
    )  # eqx tiles its (seq, size / 2) tables
    if (
        ctx.opset >= ROTARY_OPSET
        and tiled
        and _out_dtype(ctx) == np.float32
        and not _has_empty(ctx)
    ):
        heads_in_place = _rope_on_untransposed_heads(ctx, x, _shape(ops, "x"), cos_sin)
        if heads_in_place is not None:
            return heads_in_place
        # every vmap dim as a head of one batch: [1, N, seq, size], the tables [1, seq, size / 2]
        example = _shape(ops, "x")[len(levels) :]
        heads = _flatten_batch(ctx, x, example, len(levels), front=(1,))
        y = ctx.op.RotaryEmbedding(heads, *(ctx.const(t[None]) for t in cos_sin), interleaved=0)
        return _unflatten_batch(ctx, y, len(levels), ctx.aval_out, front=1)
    cos, sin = (ctx.const(t) for t in tables.arrays)
    first, second = ctx.op.Split(x, ctx.ints([half, half]), axis=-1, _outputs=2)
    rotated = ctx.op.Concat(ctx.op.Neg(second), first, axis=-1)
    return ctx.op.Add(ctx.op.Mul(x, cos), ctx.op.Mul(rotated, sin))


def _rope_on_untransposed_heads(
    ctx: LoweringContext, x: ir.Value, shape: tuple[Any, ...], cos_sin: list[np.ndarray]
) -> ir.Value | None:
    """RoPE per head inside a batch (``vmap(vmap(rope, in_axes=1))`` of ``[B, seq, heads,
    size]``, as Equinox's ``process_heads`` does): vmap moved the heads before the sequence
    (``Transpose(perm=[0, 2, 1, 3])``). RotaryEmbedding takes the untransposed tensor as
    ``[B, seq, heads * size]`` with ``num_heads``, so no data moves: onnxruntime cancels such
    Transposes around elementwise ops, not around RotaryEmbedding (measured 1.2x slower with
    them at B=8, seq 512, 12 heads of 64). None where ``x`` is not such a Transpose."""
    producer = x.producer()
    if (
        producer is None
        or producer.op_type != "Transpose"
        or producer.domain not in ("", "ai.onnx")
    ):
        return None
    perm = producer.attributes.get("perm")
    if perm is None or list(perm.value) != [0, 2, 1, 3] or len(shape) != 4:
        return None
    _, heads, seq, size = shape
    if any(map(jxi.is_symbolic_dim, (heads, seq, size))):
        return None
    source = producer.inputs[0]  # [B, seq, heads, size]
    flat = ctx.op.Reshape(source, ctx.ints([0, int(seq), int(heads) * int(size)]))
    batch = ctx.op.Slice(ctx.op.Shape(source), ctx.ints([0]), ctx.ints([1]))
    positions = ctx.op.Expand(
        ctx.const(np.arange(int(seq), dtype=np.int64)[None]),
        ctx.op.Concat(batch, ctx.ints([int(seq)]), axis=0),
    )
    y = ctx.op.RotaryEmbedding(
        flat, *(ctx.const(t) for t in cos_sin), positions, interleaved=0, num_heads=int(heads)
    )
    return ctx.op.Transpose(
        ctx.op.Reshape(y, ctx.ints([0, int(seq), int(heads), int(size)])), perm=[0, 2, 1, 3]
    )


# -- eqx.nn.GRUCell / LSTMCell: one step of ONNX GRU / LSTM -------------------------------


def _gru_handler(module: Any, input: Any, hidden: Any, *, key: Any = None) -> Any:
    if not plain(module, eqx.nn.GRUCell) or not float_arrays(
        input, hidden, module.weight_ih, module.weight_hh, module.bias, module.bias_n
    ):
        return NotApplicable
    if input.ndim != 1 or hidden.ndim != 1:
        return NotApplicable
    return CoarseCall(
        "eqx_gru",
        inputs={"input": input, "hidden": hidden},
        weights={
            "weight_ih": module.weight_ih,
            "weight_hh": module.weight_hh,
            "bias": module.bias,
            "bias_n": module.bias_n,
        },
        params={"hidden_size": int(module.hidden_size)},
    )


def _lstm_handler(module: Any, input: Any, hidden: Any, *, key: Any = None) -> Any:
    if not isinstance(hidden, tuple) or len(hidden) != 2:
        return NotApplicable
    h, c = hidden
    if not plain(module, eqx.nn.LSTMCell) or not float_arrays(
        input, h, c, module.weight_ih, module.weight_hh, module.bias
    ):
        return NotApplicable
    if input.ndim != 1 or h.ndim != 1 or c.ndim != 1:
        return NotApplicable
    return CoarseCall(
        "eqx_lstm",
        inputs={"input": input, "h": h, "c": c},
        weights={"weight_ih": module.weight_ih, "weight_hh": module.weight_hh, "bias": module.bias},
        params={"hidden_size": int(module.hidden_size)},
    )


def _rnn_inputs(
    ctx: LoweringContext, ops: Operands, levels: Levels, roles: Sequence[str]
) -> list[ir.Value] | None:
    """Input and states as [1, N, features] (one time step, every vmap dim in N)."""
    if not all(levels.full(r) for r in roles):
        return None
    return [
        _flatten_batch(ctx, ops[r], _shape(ops, r)[-1:], len(levels), front=(1,)) for r in roles
    ]


def _rnn_output(ctx: LoweringContext, value: ir.Value, n_levels: int, aval: Any) -> ir.Value:
    """A [1, N, hidden] state as the cell's output (vmap dims, hidden)."""
    return _unflatten_batch(ctx, value, n_levels, aval, front=1)


def _cell(
    cell: rnn.Cell,
    states: tuple[str, ...],
    ctx: LoweringContext,
    ops: Operands,
    *,
    hidden_size: int,
) -> Any:
    """One GRU / LSTM step for both cells: operands to ``[1, N, features]``, the layer
    emitter (eqx's gate order on axis 0; a GRU's ``bias_n`` is the recurrent candidate bias),
    the new states back to the cell's shape."""
    if _has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    dtype = _out_dtype(ctx)
    weights = [r for r in ops if r.startswith(("weight", "bias"))]
    inputs = _rnn_inputs(ctx, ops, levels, ("input", *states))
    if inputs is None or not levels.unbatched(*weights) or not kernels.supports(cell.op, dtype):
        return NotApplicable
    x, *carried = inputs
    new = rnn.library_step(
        ctx,
        cell,
        x,
        carried,
        ops["weight_ih"],
        ops["weight_hh"],
        ops.get("bias"),
        hidden=hidden_size,
        dtype=dtype,
        gate_axis=0,
        candidate=ops.get("bias_n"),
    )
    return [
        _rnn_output(ctx, state, len(levels), aval)
        for state, aval in zip(new, ctx.avals_out, strict=True)
    ]


for _name, _kind, _states, _module in (
    ("eqx_gru", rnn.GRU, ("hidden",), "GRUCell"),
    ("eqx_lstm", rnn.LSTM, ("h", "c"), "LSTMCell"),
):
    eqx_lowering(
        _name,
        onnx_ops=(_kind.op, "Reshape", "Squeeze", "Unsqueeze", "Concat", "Split", *rnn.GUARD_OPS),
        covers=(f"eqx.nn.{_module}",),
    )(functools.partial(_cell, _kind, _states))


# -- pools: MaxPool / AveragePool ----------------------------------------------------------

_MAX_POOLS = (eqx.nn.MaxPool1d, eqx.nn.MaxPool2d, eqx.nn.MaxPool3d)
_AVG_POOLS = (eqx.nn.AvgPool1d, eqx.nn.AvgPool2d, eqx.nn.AvgPool3d)
_POOL_CLASSES = (*_MAX_POOLS, *_AVG_POOLS)


def _pool_handler(module: Any, x: Any, *, key: Any = None) -> Any:
    cls = next((c for c in _POOL_CLASSES if type(module) is c or plain(module, c)), None)
    if (
        cls is None
        or not plain(module, cls)
        or not float_arrays(x)
        or x.ndim != module.num_spatial_dims + 1
    ):
        return NotApplicable
    kind = "max" if cls in _MAX_POOLS else "avg"
    if module.operation is not (jax.lax.max if kind == "max" else jax.lax.add) or module.init != (
        -np.inf if kind == "max" else 0
    ):
        return NotApplicable
    padding = module._update_padding_for_ceil(x.shape) if module.use_ceil else module.padding
    kernel = tuple(int(k) for k in module.kernel_size)
    pairs = [tuple(int(v) for v in p) for p in padding]
    pads = tuple(p[0] for p in pairs) + tuple(p[1] for p in pairs)
    if not fits_window(pads, kernel):
        return NotApplicable
    return CoarseCall(
        "eqx_pool",
        inputs={"x": x},
        params={
            "kind": kind,
            "kernel": kernel,
            "strides": tuple(int(s) for s in module.stride),
            "pads": pads,
        },
    )


@eqx_lowering(
    "eqx_pool",
    onnx_ops=(
        "MaxPool",
        "AveragePool",
        "IsNaN",
        "Equal",
        "Greater",
        "Where",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
    ),
    covers=(
        "eqx.nn.MaxPool1d",
        "eqx.nn.MaxPool2d",
        "eqx.nn.MaxPool3d",
        "eqx.nn.AvgPool1d",
        "eqx.nn.AvgPool2d",
        "eqx.nn.AvgPool3d",
        "eqx.nn.AdaptiveAvgPool1d",
        "eqx.nn.AdaptiveAvgPool2d",
        "eqx.nn.AdaptiveAvgPool3d",
        "eqx.nn.AdaptiveMaxPool1d",
        "eqx.nn.AdaptiveMaxPool2d",
        "eqx.nn.AdaptiveMaxPool3d",
    ),
)
def _pool_rule(
    ctx: LoweringContext,
    ops: Operands,
    *,
    kind: str,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads: tuple[int, ...],
) -> Any:
    if _has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    dtype = _out_dtype(ctx)
    if not levels.full("x") or not kernels.supports(
        "MaxPool" if kind == "max" else "AveragePool", dtype
    ):
        return NotApplicable
    example = _shape(ops, "x")[len(levels) :]
    x = _flatten_batch(ctx, ops["x"], example, len(levels))
    y = pool(ctx, x, kind, dtype, kernel=kernel, strides=strides, pads=pads)
    return _unflatten_batch(ctx, y, len(levels), ctx.aval_out)


def _adaptive_pool_handler(module: Any, x: Any, *, key: Any = None) -> Any:
    if (
        not plain(module, eqx.nn.AdaptivePool)
        or not float_arrays(x)
        or x.ndim != len(module.target_shape) + 1
    ):
        return NotApplicable
    kind = {id(jax.numpy.mean): "avg", id(jax.numpy.max): "max"}.get(id(module.operation))
    spatial = x.shape[1:]
    if kind is None or any(jxi.is_symbolic_dim(d) for d in spatial):
        return NotApplicable
    targets = tuple(int(t) for t in module.target_shape)
    if any(t <= 0 or int(d) % t for d, t in zip(spatial, targets, strict=True)):
        return NotApplicable  # uneven windows (eqx's own split): the lax path
    kernel = tuple(int(d) // t for d, t in zip(spatial, targets, strict=True))
    return CoarseCall(
        "eqx_pool",
        inputs={"x": x},
        params={
            "kind": kind,
            "kernel": kernel,
            "strides": kernel,
            "pads": (0,) * (2 * len(kernel)),
        },
    )


# -- the table -----------------------------------------------------------------------------


def _coarse(cls: type, handler: Handler) -> tuple[Any, str, MakeWrapper]:
    return (
        cls,
        "__call__",
        lambda original: coarse_wrapper(handler)(without_named_scope(original, cls)),
    )


def _coarse_with_original(cls: type, handler: Handler) -> tuple[Any, str, MakeWrapper]:
    """For a handler that also needs the original method: ``handler(original, module, ...)``."""

    def make(original: Any) -> Any:
        inner = without_named_scope(original, cls)
        return coarse_wrapper(functools.partial(handler, inner))(inner)

    return cls, "__call__", make


describe_module("eqx.nn.MLP", "its Linear layers and activations")
describe_module("eqx.nn.Sequential", "its layers")
describe_module("eqx.nn.Lambda", "its function")
describe_module("eqx.nn.Dropout", "(no node: identity in inference)")
describe_module("eqx.nn.Identity", "(no node)")


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of every patch applied while an export runs."""
    attention_module = sys.modules[eqx.nn.MultiheadAttention.__module__]
    return [
        _coarse(eqx.nn.Linear, _linear_handler),
        _coarse(eqx.nn.Conv, _conv_handler),
        _coarse(eqx.nn.ConvTranspose, _conv_transpose_handler),
        _coarse(eqx.nn.LayerNorm, _layer_norm_handler),
        _coarse(eqx.nn.RMSNorm, _rms_norm_handler),
        _coarse(eqx.nn.GroupNorm, _group_norm_handler),
        (eqx.nn.BatchNorm, "__call__", _batch_norm_wrapper),
        (attention_module, "dot_product_attention", _attention_wrapper),
        _coarse(eqx.nn.Embedding, _embedding_handler),
        _coarse(eqx.nn.PReLU, _prelu_handler),
        _coarse_with_original(eqx.nn.RotaryPositionalEmbedding, _rope_handler),
        _coarse(eqx.nn.GRUCell, _gru_handler),
        _coarse(eqx.nn.LSTMCell, _lstm_handler),
        *[_coarse(cls, _pool_handler) for cls in _POOL_CLASSES],
        _coarse(eqx.nn.AdaptivePool, _adaptive_pool_handler),
    ]


__all__ = ["Levels", "eqx_lowering", "float_arrays", "patches", "plain"]
