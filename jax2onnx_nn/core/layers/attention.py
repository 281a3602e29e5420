"""The attention core: scores, masking and softmax, then the weighted sum of the values.

``softmax(where(keep, q @ k_t * scale (+ bias), fill)) @ v``. The libraries differ in two
details, which the callers pass as they are: where the scale is applied (``jax.nn`` multiplies
the logits, Equinox divides the query first) and the value a masked logit gets (``jax.nn``:
``-0.7 * finfo.max``, capped at float32's; Equinox: ``finfo.min``). The value matters where a
row's unmasked logits are below it: then the masked positions get the weight in JAX too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.lower import LoweringContext


def jax_nn_mask_value(dtype: Any) -> np.ndarray:
    """What ``jax.nn.dot_product_attention`` puts at masked logits (its ``_get_large_negative``)."""
    largest = min(float(np.finfo(dtype).max), float(np.finfo(np.float32).max))
    return np.asarray(-0.7 * largest, dtype=dtype)


def lowest_mask_value(dtype: Any) -> np.ndarray:
    """``finfo(dtype).min``: what Equinox's attention puts at masked logits."""
    return np.asarray(np.finfo(dtype).min, dtype=dtype)


def causal_keep(ctx: LoweringContext, queries: Any, keys: Any) -> ir.Value:
    """``[T, S]``: key position <= query position."""
    return ctx.op.LessOrEqual(ctx.iota(keys), ctx.iota(queries, axis=0, rank=2))


def attention(
    ctx: LoweringContext, q: ir.Value, k_t: ir.Value, v: ir.Value, *, dtype: np.dtype, mask_value: np.ndarray,
    scale: float | None = None, query_divisor: float | None = None, bias: ir.Value | None = None, keep: ir.Value | None = None,
) -> ir.Value:
    """``softmax(where(keep, logits, mask_value)) @ v`` with the logits ``q @ k_t * scale + bias``
    (or ``(q / query_divisor) @ k_t``); ``keep`` broadcasts against the logits."""
    if query_divisor is not None:
        q = ctx.op.Div(q, ctx.const(np.asarray(query_divisor, dtype=dtype)))
    logits = ctx.op.MatMul(q, k_t)
    if scale is not None:
        logits = ctx.op.Mul(logits, ctx.const(np.asarray(scale, dtype=dtype)))
    if bias is not None:
        logits = ctx.op.Add(logits, bias)
    if keep is not None:
        logits = ctx.op.Where(keep, logits, ctx.const(np.asarray(mask_value, dtype=dtype)))
    return ctx.op.MatMul(ctx.op.Softmax(logits, axis=-1), v)
