"""The attention core: scores, masking and softmax, then the weighted sum of the values.

``softmax(where(keep, q @ k_t * scale (+ bias), fill)) @ v``. The libraries differ in two
details, which the callers pass as they are: where the scale is applied (``jax.nn`` multiplies
the logits, Equinox divides the query first) and the value a masked logit gets (``jax.nn``:
``-0.7 * finfo.max``, capped at float32's; Equinox: ``finfo.min``). The value matters where a
row's unmasked logits are below it: then the masked positions get the weight in JAX too.

From opset 23, :func:`attention_op` writes the same arithmetic as one ONNX ``Attention``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.symbolic import same_shape


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
    ctx: LoweringContext,
    q: ir.Value,
    k_t: ir.Value,
    v: ir.Value,
    *,
    dtype: np.dtype,
    mask_value: np.ndarray,
    scale: float | None = None,
    query_divisor: float | None = None,
    bias: ir.Value | None = None,
    keep: ir.Value | None = None,
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


def attention_op(
    ctx: LoweringContext,
    q: ir.Value,
    k: ir.Value,
    v: ir.Value,
    *,
    dtype: np.dtype,
    mask_value: np.ndarray,
    scale: float,
    bias: ir.Value | None = None,
    keep: ir.Value | None = None,
    causal: bool = False,
    logits_shape: Sequence[Any] = (),
    mask_shape: Sequence[Any] = (),
    heads: tuple[int, int] | None = None,
) -> ir.Value:
    """:func:`attention` as ONNX ``Attention`` on ``[B, N, T, H]`` queries and ``[B, K, S, H]``
    keys and values (K divides N: grouped heads), or with ``heads=(N, K)`` on ``[B, T, N*H]``
    and ``[B, S, K*H]`` (the layout JAX's ``[B, T, N, H]`` has without a transpose: measured
    1.3x faster in onnxruntime 1.32 than the 4-d form with its transposes; the result is
    ``[B, T, N*H]``); ``causal`` is top-left (ONNX's alignment without a cache, and JAX's).

    ONNX's boolean mask is -inf where it is False and a row masked everywhere gives zeros,
    where JAX (a finite ``mask_value``) gives the mean of the values. So a mask is given as
    floats added to the logits: the bias (or 0) where kept, ``mask_value`` elsewhere. A
    logit plus ``mask_value`` rounds to ``mask_value`` for any logit below its half ulp (1e31
    in float32), so the masked logits are JAX's. The causal mask alone is ``is_causal``: it
    keeps the first key of every row, so no row is masked everywhere.

    onnxruntime broadcasts the mask's leading dims only (a last dim shorter than the keys is
    padded): a ``mask_shape`` (of ``keep`` and ``bias`` broadcast) whose last two dims are not
    those of ``logits_shape`` ``[B, N, T, S]`` is expanded to them.
    """
    mask = additive_mask(
        ctx,
        dtype=dtype,
        mask_value=mask_value,
        bias=bias,
        keep=keep,
        logits_shape=logits_shape,
        mask_shape=mask_shape,
    )
    attributes = {} if heads is None else {"q_num_heads": heads[0], "kv_num_heads": heads[1]}
    return ctx.op.Attention(q, k, v, mask, scale=float(scale), is_causal=int(causal), **attributes)


def additive_mask(
    ctx: LoweringContext,
    *,
    dtype: np.dtype,
    mask_value: np.ndarray,
    bias: ir.Value | None,
    keep: ir.Value | None,
    logits_shape: Sequence[Any],
    mask_shape: Sequence[Any],
) -> ir.Value | None:
    """The bias (or 0) where ``keep``, ``mask_value`` elsewhere, as floats added to the logits
    (see :func:`attention_op`), its last two dims those of the logits; None without either."""
    mask = bias
    if keep is not None:
        kept = bias if bias is not None else ctx.const(np.zeros((), dtype))
        mask = ctx.op.Where(keep, kept, ctx.const(np.asarray(mask_value, dtype=dtype)))
    if mask is not None and not same_shape(mask_shape[-2:], logits_shape[-2:]):
        mask = ctx.expand(mask, [1] * (len(mask_shape) - 2) + list(logits_shape[-2:]))
    return mask


CONTRIB = "com.microsoft"  # onnxruntime's contrib ops


def multi_head_attention_op(
    ctx: LoweringContext,
    q: ir.Value,
    k: ir.Value,
    v: ir.Value,
    *,
    heads: int,
    dtype: np.dtype,
    mask_value: np.ndarray,
    scale: float,
    bias: ir.Value | None = None,
    keep: ir.Value | None = None,
    causal: bool = False,
    logits_shape: Sequence[Any] = (),
    mask_shape: Sequence[Any] = (),
) -> ir.Value:
    """:func:`attention_op` as onnxruntime's ``com.microsoft.MultiHeadAttention`` on
    ``[B, T, N*H]`` queries, keys and values (as many key as query heads), for the opsets
    without ONNX ``Attention``: the mask as floats added to the logits (its
    ``attention_bias``), ``causal`` (``unidirectional``: only for as many keys as queries,
    where its alignment is JAX's) masking with ``mask_value`` too. It answers a row masked
    everywhere with zeros (JAX: the mean of the values), so no row may be."""
    mask = additive_mask(
        ctx,
        dtype=dtype,
        mask_value=mask_value,
        bias=bias,
        keep=keep,
        logits_shape=logits_shape,
        mask_shape=mask_shape,
    )
    ctx.builder.opset_imports[CONTRIB] = 1
    return ctx.op.MultiHeadAttention(
        q,
        k,
        v,
        None,
        None,
        mask,
        _domain=CONTRIB,
        num_heads=heads,
        scale=float(scale),
        unidirectional=int(causal),
        mask_filter_value=float(mask_value),
    )
