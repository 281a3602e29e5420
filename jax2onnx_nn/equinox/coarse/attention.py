"""Equinox attention: ``dot_product_attention`` (what ``eqx.nn.MultiheadAttention`` runs per
head) as one attention op."""

from __future__ import annotations

import inspect
import math
import sys
from typing import Any

import equinox as eqx
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.layers.attention import attention, lowest_mask_value
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
    coarse_wrapper,
    is_array,
)
from jax2onnx_nn.equinox.coarse.common import (
    Levels,
    MakeWrapper,
    eqx_lowering,
    float_arrays,
    out_dtype,
    plain,
)

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
    dtype = out_dtype(ctx)
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


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of equinox's dot_product_attention."""
    return [
        (
            sys.modules[eqx.nn.MultiheadAttention.__module__],
            "dot_product_attention",
            _attention_wrapper,
        ),
    ]
