"""Pools as ONNX MaxPool / AveragePool.

onnxruntime's MaxPool skips NaN and gives the lowest float for a window of only -inf, where
JAX gives NaN and -inf: :func:`exact_max_pool` corrects both. Its pools take pads smaller than
the window only (:func:`fits_window`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.lower import LoweringContext


def fits_window(pads: Sequence[int], kernel: Sequence[int]) -> bool:
    """ONNX ``pads`` (begins, then ends) that onnxruntime's pools take: each in ``[0, kernel)``."""
    return all(0 <= p < k for p, k in zip(pads, (*kernel, *kernel), strict=True))


def exact_max_pool(ctx: LoweringContext, x: ir.Value, dtype: np.dtype, **attrs: Any) -> ir.Value:
    """MaxPool with JAX's results for NaN and -inf: a second pool over a flag (2: NaN, 1: above
    -inf, 0: -inf) says which windows hold a NaN or only -inf."""
    y = ctx.op.MaxPool(x, **attrs)
    two, one, zero = (ctx.const(np.asarray(v, dtype=dtype)) for v in (2, 1, 0))
    above = ctx.op.Where(ctx.op.Greater(x, ctx.const(np.asarray(-np.inf, dtype=dtype))), one, zero)
    flag = ctx.op.MaxPool(ctx.op.Where(ctx.op.IsNaN(x), two, above), **attrs)
    y = ctx.op.Where(ctx.op.Equal(flag, zero), ctx.const(np.asarray(-np.inf, dtype=dtype)), y)
    return ctx.op.Where(ctx.op.Equal(flag, two), ctx.const(np.asarray(np.nan, dtype=dtype)), y)


def pool(
    ctx: LoweringContext,
    x: ir.Value,
    kind: str,
    dtype: np.dtype,
    *,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    count_include_pad: bool = True,
) -> ir.Value:
    """A max (``kind="max"``, NaN-exact) or average pool over an NC<spatial> input."""
    attrs = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads)}
    if kind == "max":
        return exact_max_pool(ctx, x, dtype, **attrs)
    return ctx.op.AveragePool(x, count_include_pad=int(count_include_pad), **attrs)
