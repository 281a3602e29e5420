"""lax's spatial arithmetic as ONNX, shared by convolutions and window reductions.

``lax.pad`` (negative amounts crop), dilation holes, one strided slice per window tap, and the
small shape helpers these need (reshapes and fills are the toolkit's: ``ctx.reshape``,
``ctx.full``). Convolutions (``core/layers/conv.py``, ``lowerings/linalg.py``)
and window reductions (``lowerings/windows.py``) both build on them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.symbolic import has_zero, same_dim

Padding = Sequence[tuple[int, int]]
_INT64_MAX = np.iinfo(np.int64).max


def permute(ctx: LoweringContext, x: ir.Value, perm: Sequence[int] | np.ndarray) -> ir.Value:
    """Transpose, or ``x`` itself for the identity permutation."""
    return x if list(perm) == sorted(perm) else ctx.op.Transpose(x, perm=list(perm))


def pad(ctx: LoweringContext, x: ir.Value, padding: Padding, fill: ir.Value) -> ir.Value:
    """``lax.pad`` without interior padding: positive pads hold ``fill``, negative ones crop."""
    if symbolic_padding(padding):
        # "SAME" padding of a symbolic size (max(..., 0) expressions, never negative): the
        # amounts are computed at run time
        amounts = [ctx.dim(lo) for lo, _ in padding] + [ctx.dim(hi) for _, hi in padding]
        return ctx.op.Pad(x, ctx.op.Concat(*amounts, axis=0), fill)
    grow = [max(lo, 0) for lo, _ in padding] + [max(hi, 0) for _, hi in padding]
    if any(grow):
        x = ctx.op.Pad(x, ctx.const(np.asarray(grow, np.int64)), fill)
    crop = [a for a, (lo, hi) in enumerate(padding) if lo < 0 or hi < 0]
    if not crop:
        return x
    starts = [-min(padding[a][0], 0) for a in crop]
    ends = [padding[a][1] if padding[a][1] < 0 else _INT64_MAX for a in crop]
    return ctx.op.Slice(x, ctx.ints(starts), ctx.ints(ends), ctx.ints(crop))


def symbolic_padding(padding: Padding) -> bool:
    return any(jxi.is_symbolic_dim(p) for pair in padding for p in pair)


def dilate(
    ctx: LoweringContext, x: ir.Value, dims: Sequence[Any], factors: Sequence[int], fill: ir.Value
) -> ir.Value:
    """Insert ``factor - 1`` holes holding ``fill`` between neighbours along each axis."""
    axes = [a for a, f in enumerate(factors) if f > 1]
    if not axes:
        return x
    # [.., n, ..] -> [.., n, 1, ..] -> pad the new axis to f -> [.., n*f, ..] -> drop the last f-1
    rank = len(dims) + len(axes)
    inserted = [a + i + 1 for i, a in enumerate(axes)]
    grow = np.zeros(2 * rank, np.int64)
    for a, new in zip(axes, inserted, strict=True):
        grow[rank + new] = factors[a] - 1
    y = ctx.op.Pad(ctx.op.Unsqueeze(x, ctx.ints(inserted)), ctx.const(grow), fill)
    y = ctx.reshape(y, [d * f for d, f in zip(dims, factors, strict=True)])
    ends = [1 - factors[a] for a in axes]
    return ctx.op.Slice(y, ctx.ints([0] * len(axes)), ctx.ints(ends), ctx.ints(axes))


def dilated_dims(dims: Sequence[Any], factors: Sequence[int]) -> list[Any]:
    """Dims after :func:`dilate` (a size-0 dim stays 0)."""
    return [
        d if f == 1 or has_zero([d]) else (d - 1) * f + 1
        for d, f in zip(dims, factors, strict=True)
    ]


def window_slices(
    ctx: LoweringContext,
    x: ir.Value,
    dims: Sequence[Any],
    axes: Sequence[int],
    window: Sequence[int],
    strides: Sequence[int],
    dilation: Sequence[int],
    out_dims: Sequence[Any],
) -> list[ir.Value]:
    """One strided slice of ``x`` per window position, in row-major window order.

    Slice ``o`` holds ``x[o * dilation + i * stride]`` at output index ``i`` along each of
    ``axes`` (``dims`` is the shape of ``x``; ``window`` etc. are given per axis in ``axes``).
    """
    slices = []
    for offset in itertools.product(*(range(k) for k in window)):
        starts = [o * d for o, d in zip(offset, dilation, strict=True)]
        ends = [s0 + (n - 1) * s + 1 for s0, n, s in zip(starts, out_dims, strides, strict=True)]
        whole = all(
            s0 == 0 and s == 1 and same_dim(e, dims[a])
            for s0, s, e, a in zip(starts, strides, ends, axes, strict=True)
        )
        if whole:
            slices.append(x)
            continue
        slices.append(
            ctx.op.Slice(
                x, ctx.ints(starts), ctx.shape_tensor(ends), ctx.ints(axes), ctx.ints(strides)
            )
        )
    return slices
