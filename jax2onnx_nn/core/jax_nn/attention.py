"""``jax.nn.dot_product_attention`` (what ``nnx.MultiHeadAttention`` calls) as one coarse op:
ONNX Attention where the runtime has it, else the attention core (MatMul / Softmax / MatMul)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.calls import is_array
from jax2onnx_nn.core.coarse import (
    CoarseCall,
    Handler,
    NotApplicable,
    Operands,
    coarse_lowering,
)
from jax2onnx_nn.core.layers.attention import (
    CONTRIB,
    attention,
    attention_op,
    causal_keep,
    jax_nn_mask_value,
    multi_head_attention_op,
)
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.precision import is_low_float
from jax2onnx_nn.core.symbolic import has_zero, same_dim

# -- attention: jax.nn.dot_product_attention (what nnx.MultiHeadAttention calls) -----------


def attention_handler(original: Callable[..., Any]) -> Handler:
    """The handler of a ``dot_product_attention`` call (``original`` is the function the patch
    replaces): its coarse op where the call is modelled, else ``NotApplicable``."""
    signature = inspect.signature(original)

    def handler(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return NotApplicable
        return _attention_call(bound.arguments)

    return handler


def _attention_call(a: dict[str, Any]) -> Any:
    operands: list[Any] = [a.get(n) for n in ("query", "key", "value", "bias", "mask")]
    q, k, v, bias, mask = operands
    if not all(is_array(t) and t.ndim == 4 for t in (q, k, v)):
        return NotApplicable
    if any(t is not None and not (is_array(t) and t.ndim == 4) for t in (bias, mask)):
        return NotApplicable
    if not (q.dtype == k.dtype == v.dtype and (q.dtype == np.float32 or is_low_float(q.dtype))):
        return NotApplicable  # (float64: the lax path)
    heads, kv_heads = q.shape[2], k.shape[2]
    if (
        any(map(jxi.is_symbolic_dim, (heads, kv_heads)))
        or kv_heads != v.shape[2]
        or heads % kv_heads
    ):
        return NotApplicable  # (JAX's own error for heads that do not group)
    if mask is not None and mask.dtype != np.bool_:
        return NotApplicable
    for name in ("query_seq_lengths", "key_value_seq_lengths", "local_window_size"):
        if a.get(name) is not None:
            return NotApplicable
    # cudnn is a GPU kernel of the same attention: the body is traced with JAX's portable one
    if a.get("implementation") not in (None, "xla", "cudnn") or a.get("return_residual", False):
        return NotApplicable
    if not _without_extras(a):
        return NotApplicable
    scale = a.get("scale")
    head_dim = q.shape[-1]
    if scale is None:
        if jxi.is_symbolic_dim(head_dim):
            return NotApplicable
        scale = 1.0 / np.sqrt(head_dim)
    if not isinstance(scale, (int, float)):
        return NotApplicable
    inputs = {"query": q, "key": k, "value": v}
    if bias is not None:
        inputs["bias"] = bias
    if mask is not None:
        inputs["mask"] = mask
    portable = {"implementation": None} if a.get("implementation") == "cudnn" else {}
    return CoarseCall(
        "jax_dot_product_attention",
        inputs=inputs,
        params={"scale": float(scale), "is_causal": bool(a.get("is_causal", False))},
        call_kwargs=portable,
    )


def _without_extras(a: dict[str, Any]) -> bool:
    """Whether the arguments of a framework's own attention function (``flax.nnx``'s adds
    dropout, a compute dtype, precision and a module to sow weights into) ask for nothing the
    coarse op leaves out: attention dropout in training mode keeps JAX's body (and its mask)."""
    rate = a.get("dropout_rate", 0.0)
    dropout = (
        not (isinstance(rate, (int, float)) and rate == 0.0)
        and a.get("deterministic", False) is not True
    )
    dtype = a.get("dtype")
    return (
        not dropout
        and (dtype is None or np.dtype(dtype) == np.float32 or is_low_float(dtype))
        and a.get("precision") is None
        and a.get("module") is None
    )


@coarse_lowering(
    "jax_dot_product_attention",
    onnx_ops=(
        "Transpose",
        "MatMul",
        "Softmax",
        "Where",
        "Mul",
        "Add",
        "And",
        "LessOrEqual",
        "Range",
        "Squeeze",
        "Unsqueeze",
        "Attention",
        "Expand",
        "Reshape",
        "Concat",
        "Shape",
        "Size",
        "Equal",
        "Or",
        "If",
        "Identity",
        "MultiHeadAttention",
        "ConstantOfShape",
    ),
    covers=("jax.nn.dot_product_attention",),
)
def _attention(ctx: LoweringContext, ops: Operands, *, scale: float, is_causal: bool) -> Any:
    """ONNX Attention where the target has its kernel (:func:`attention_op`), else the attention
    core's ops; a symbolic dim chooses at run time (onnxruntime's Attention refuses a batch of
    0).

    Attention takes JAX's ``[B, T, N, H]`` reshaped to ``[B, T, N*H]`` (no transposes; the
    reshapes stay outside the run-time choice, where they cancel against the model's own),
    or, with a symbolic head size, transposed to ``[B, N, T, H]``."""
    dims = [d for role in ("query", "key", "value") for d in ops.aval(role).shape]
    (_, t, n, h), (_, _, kv, _) = ops.aval("query").shape, ops.aval("key").shape
    hv = ops.aval("value").shape[3]
    flat = not any(map(jxi.is_symbolic_dim, (h, hv)))
    fused = _attention_op if ctx.has_kernel("Attention") else None
    if (
        fused is None
        and flat
        and n == kv
        and not ("mask" in ops or "bias" in ops)  # (its rows masked everywhere are zeros)
        and ctx.has_kernel("MultiHeadAttention", CONTRIB)
    ):
        fused = _multi_head_attention_op
    if fused is None or has_zero(dims):
        return _attention_decomposed(ctx, ops, scale=scale, is_causal=is_causal)
    if flat:
        # Reshape's 0 copies the batch and sequence dims (typed: the layout passes cancel a
        # reshape to [B, T, N*H] before it, a projection's)
        qkv = [
            ctx.typed(
                ctx.op.Reshape(ops[role], ctx.ints([0, 0, heads * size])),
                jax.ShapeDtypeStruct(
                    (*ops.aval(role).shape[:2], heads * size), ops.aval(role).dtype
                ),
            )
            for role, heads, size in (("query", n, h), ("key", kv, h), ("value", kv, hv))
        ]
    else:
        qkv = [ctx.op.Transpose(ops[role], perm=[0, 2, 1, 3]) for role in ("query", "key", "value")]
    b = ops.aval("query").shape[0]
    y_type = onnx_aval(ctx.aval_out)
    if flat:
        y_type = (y_type[0], (b, t, n * hv))
    symbolic = list({str(d): d for d in dims if jxi.is_symbolic_dim(d)}.values())
    out_dims = ctx.aval_out.shape
    if all(any(same_dim(d, o) for o in out_dims) for d in symbolic):
        # every dim tested is the result's: a 0 there makes it empty, any value of its shape
        # is it (the projections' reshapes to heads need not stay for the decomposition)
        def empty(where: LoweringContext) -> list[ir.Value]:
            return [where.zeros(jax.ShapeDtypeStruct(y_type[1], y_type[0]))]
    else:

        def empty(where: LoweringContext) -> list[ir.Value]:
            core = _attention_decomposed(where, ops, scale=scale, is_causal=is_causal)
            return [_flat(where, core, n * hv if flat else None)]

    (y,) = ctx.unless_empty(
        symbolic,
        [y_type],
        lambda full: [fused(full, ops, qkv, scale=scale, is_causal=is_causal, flat=flat)],
        empty,
    )
    return ctx.op.Reshape(y, ctx.ints([0, 0, n, hv])) if flat else y


def _flat(ctx: LoweringContext, y: ir.Value, width: int | None) -> ir.Value:
    """``[B, T, N, H]`` as ``[B, T, N*H]`` (``width``) where the Attention op's result is flat."""
    return y if width is None else ctx.op.Reshape(y, ctx.ints([0, 0, width]))


def _attention_op(
    ctx: LoweringContext,
    ops: Operands,
    qkv: list[ir.Value],
    *,
    scale: float,
    is_causal: bool,
    flat: bool,
) -> ir.Value:
    """ONNX Attention on ``qkv``: ``[B, T, N*H]`` (``flat``) or ``[B, N, T, H]``; the result in
    the same layout, ``[B, T, N, H]`` when not flat."""
    dtype = np.dtype(np.float32)
    (b, t, n, _), (_, s, kv, _) = ops.aval("query").shape, ops.aval("key").shape
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    keep = ops["mask"] if "mask" in ops else None
    mask_shapes = [ops.aval(role).shape for role in ("mask", "bias") if role in ops]
    if is_causal and keep is not None:
        keep = ctx.op.And(keep, causal_keep(ctx, t, s))
        mask_shapes.append((1, 1, t, s))
    y = attention_op(
        ctx,
        *qkv,
        dtype=dtype,
        mask_value=jax_nn_mask_value(dtype),
        scale=scale,
        bias=bias,
        keep=keep,
        causal=is_causal and keep is None,
        logits_shape=(b, n, t, s),
        mask_shape=broadcast_dims(mask_shapes),
        heads=(n, kv) if flat else None,
    )
    return y if flat else ctx.op.Transpose(y, perm=[0, 2, 1, 3])


def _multi_head_attention_op(
    ctx: LoweringContext,
    ops: Operands,
    qkv: list[ir.Value],
    *,
    scale: float,
    is_causal: bool,
    flat: bool,
) -> ir.Value:
    """onnxruntime's ``com.microsoft.MultiHeadAttention`` on the flat ``qkv`` (as many key as
    query heads): below opset 23 its time is 0.92x the decomposition's (8x64x8x32 causal, one
    thread). Its causal mask is JAX's where the keys are as many as the queries; otherwise the
    causal mask is given as floats added to the logits (a row keeps its first key). Not for a
    mask or bias: it answers a row masked everywhere with zeros, JAX with the mean of the
    values."""
    del flat  # (always: the op takes [B, T, N*H] only)
    dtype = np.dtype(np.float32)
    (b, t, n, _), s = ops.aval("query").shape, ops.aval("key").shape[1]
    unidirectional = is_causal and same_dim(t, s)
    keep = None
    if is_causal and not unidirectional:  # (its attention_bias is [B|1, N|1, T, S])
        keep = ctx.op.Unsqueeze(causal_keep(ctx, t, s), ctx.ints([0, 1]))
    return multi_head_attention_op(
        ctx,
        *qkv,
        heads=n,
        dtype=dtype,
        mask_value=jax_nn_mask_value(dtype),
        scale=scale,
        keep=keep,
        causal=unidirectional,
        logits_shape=(b, n, t, s),
        mask_shape=(1, 1, t, s),
    )


def _attention_decomposed(
    ctx: LoweringContext, ops: Operands, *, scale: float, is_causal: bool
) -> ir.Value:
    dtype = np.dtype(np.float32)
    q = ctx.op.Transpose(ops["query"], perm=[0, 2, 1, 3])  # B N T H
    _, s, _, h = ops.aval("key").shape
    k = _repeat_heads(ctx, ctx.op.Transpose(ops["key"], perm=[0, 2, 3, 1]), ops, (h, s))  # B N H S
    v = _repeat_heads(
        ctx, ctx.op.Transpose(ops["value"], perm=[0, 2, 1, 3]), ops, (s, ops.aval("value").shape[3])
    )  # B N S H
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    keep = ops["mask"] if "mask" in ops else None
    if is_causal:
        causal = causal_keep(ctx, ops.aval("query").shape[1], ops.aval("key").shape[1])
        keep = causal if keep is None else ctx.op.And(keep, causal)
    y = attention(
        ctx,
        q,
        k,
        v,
        dtype=dtype,
        mask_value=jax_nn_mask_value(dtype),
        scale=scale,
        bias=bias,
        keep=keep,
    )
    return ctx.op.Transpose(y, perm=[0, 2, 1, 3])


def _repeat_heads(
    ctx: LoweringContext, x: ir.Value, ops: Operands, tail: tuple[Any, Any]
) -> ir.Value:
    """Grouped heads: keys or values ``[B, K, *tail]`` of K heads for N query heads, each head
    repeated N / K times in a row, as JAX groups them (query head n uses head n // (N / K))."""
    heads, kv_heads = ops.aval("query").shape[2], ops.aval("key").shape[2]
    if heads == kv_heads:
        return x
    groups = ctx.op.Expand(
        ctx.op.Unsqueeze(x, ctx.ints([2])), ctx.ints([1, 1, heads // kv_heads, 1, 1])
    )
    return ctx.reshape(groups, [ops.aval("key").shape[0], heads, *tail])


def broadcast_dims(shapes: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The broadcast of same-rank shapes: per axis the dim that is not a static 1."""
    if not shapes:
        return ()
    return tuple(
        next((d for d in dims if not (isinstance(d, int) and d == 1)), 1)
        for dims in zip(*shapes, strict=True)
    )
