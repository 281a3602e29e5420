"""dot_general -> MatMul (or Einsum); conv_general_dilated -> Conv / ConvTranspose.

Operands are cast to the result type first (``preferred_element_type``, mixed inputs), so
each ONNX op computes in the type JAX returns; types without an onnxruntime kernel (int8
MatMul, ...) are widened by the builder and wrap back like JAX's integer arithmetic.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.layers.conv import (
    can_conv,
    conv_padding,
    conv_transpose,
    conv_transpose_kernel,
    conv_transpose_pads,
)
from jax2onnx_nn.core.layers.spatial import (
    dilate,
    dilated_dims,
    pad,
    permute,
    window_slices,
)
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.registry import lowering
from jax2onnx_nn.core.symbolic import has_zero

# -- dot_general ------------------------------------------------------------------------------


def _matmul_plan(
    lhs_rank: int, rhs_rank: int, dimension_numbers: tuple
) -> tuple[bool, list[int], list[int]] | None:
    """(swap operands?, lhs perm, rhs perm) making dot_general one numpy-style MatMul, or None.

    MatMul contracts the last axis of its first operand with the second-to-last of its second
    (the only axis of a vector) and broadcasts the leading axes, so it fits one contracting
    axis with either batch axes and one free axis per side, or no batch axes and at most one
    free axis on one side.
    """
    (lc, rc), (lb, rb) = dimension_numbers
    if len(lc) != 1:
        return None
    lfree = [i for i in range(lhs_rank) if i not in lc and i not in lb]
    rfree = [i for i in range(rhs_rank) if i not in rc and i not in rb]
    if lb:
        if len(lfree) != 1 or len(rfree) != 1:
            return None
        return False, [*lb, *lfree, *lc], [*rb, *rc, *rfree]
    if rhs_rank == 1 and lhs_rank > 1 and lc[0] != lhs_rank - 1:
        # vector @ matrix rather than transposed-matrix @ vector: onnxruntime fuses the
        # latter into a FusedMatMul that computes a wrong result
        return True, [*lfree[:-1], *lc, *lfree[-1:]], [*rc]
    if rhs_rank <= 2 or lhs_rank == 1:
        return False, [*lfree, *lc], [*rfree[:-1], *rc, *rfree[-1:]]
    return None


def _einsum_equation(lhs_rank: int, rhs_rank: int, dimension_numbers: tuple) -> str:
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter(string.ascii_lowercase + string.ascii_uppercase)
    lhs = [next(letters) for _ in range(lhs_rank)]
    rhs = [""] * rhs_rank
    for a, b in [*zip(lb, rb, strict=True), *zip(lc, rc, strict=True)]:
        rhs[b] = lhs[a]
    rhs = [s or next(letters) for s in rhs]
    out = [lhs[i] for i in lb]
    out += [lhs[i] for i in range(lhs_rank) if i not in lb and i not in lc]
    out += [rhs[i] for i in range(rhs_rank) if i not in rb and i not in rc]
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


@lowering(
    "dot_general", onnx_ops=("MatMul", "Einsum", "Transpose", "Cast", "ConstantOfShape", "Concat")
)
def _dot_general(
    ctx: LoweringContext,
    lhs: ir.Value,
    rhs: ir.Value,
    *,
    dimension_numbers: tuple,
    precision: object = None,
    preferred_element_type: object = None,
    out_sharding: object = None,
) -> ir.Value:
    # the output aval's dtype is the preferred one; ONNX multiplies in the operands' own type,
    # as Precision.HIGHEST (JAX's CPU computes so at every precision); a sharding places
    # values on devices, a graph none
    del precision, preferred_element_type, out_sharding
    out_dtype = onnx_aval(ctx.aval_out)[0]
    if has_zero([*ctx.avals_in[0].shape, *ctx.avals_in[1].shape]):
        # an empty result or an empty sum (onnxruntime's Einsum divides by zero on these)
        return ctx.zeros(ctx.aval_out)
    # bool: count the true products in int32 (no overflow: at most the contracted size)
    dtype = np.dtype(np.int32) if out_dtype == np.bool_ else out_dtype
    lhs, rhs = ctx.cast(lhs, dtype), ctx.cast(rhs, dtype)
    ranks = len(ctx.avals_in[0].shape), len(ctx.avals_in[1].shape)
    plan = _matmul_plan(*ranks, dimension_numbers)
    if plan is not None:
        swap, lhs_perm, rhs_perm = plan
        operands = permute(ctx, lhs, lhs_perm), permute(ctx, rhs, rhs_perm)
        out = ctx.op.MatMul(*(operands[::-1] if swap else operands))
    else:
        out = ctx.op.Einsum(lhs, rhs, equation=_einsum_equation(*ranks, dimension_numbers))
    return ctx.op.Cast(out, to=ir.DataType.BOOL) if out_dtype == np.bool_ else out


# -- conv_general_dilated ---------------------------------------------------------------------


@lowering(
    "conv_general_dilated",
    onnx_ops=(
        "Conv",
        "ConvTranspose",
        "Transpose",
        "Einsum",
        "Cast",
        "Concat",
        "ConstantOfShape",
        "Pad",
        "Reshape",
        "Slice",
        "Unsqueeze",
    ),
)
def _conv_general_dilated(
    ctx: LoweringContext,
    lhs: ir.Value,
    rhs: ir.Value,
    *,
    window_strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int],
    rhs_dilation: Sequence[int],
    dimension_numbers: Any,
    feature_group_count: int,
    batch_group_count: int,
    precision: object = None,
    preferred_element_type: object = None,
    out_sharding: object = None,
) -> ir.Value:
    """Transpose to NC<spatial> / OI<spatial>, convolve, transpose to the output layout."""
    del precision, preferred_element_type, out_sharding  # as dot_general's
    lhs_spec, rhs_spec, out_spec = (tuple(s) for s in dimension_numbers)
    dtype, out_shape = onnx_aval(ctx.aval_out)
    x_dims = [ctx.avals_in[0].shape[a] for a in lhs_spec]
    w_dims = [ctx.avals_in[1].shape[a] for a in rhs_spec]
    y_dims = [out_shape[a] for a in out_spec]
    if any(jxi.is_symbolic_dim(k) for k in w_dims[2:]):
        raise NotImplementedError("conv_general_dilated with a symbolic kernel size")
    if has_zero(y_dims) or has_zero(x_dims[1:]) or has_zero(w_dims[1:]):
        # an empty result, or an empty sum (no input feature, kernel tap or input position)
        return ctx.zeros(ctx.aval_out)
    x = permute(ctx, ctx.cast(lhs, dtype), lhs_spec)
    rhs = ctx.cast(rhs, dtype)
    groups = feature_group_count
    if batch_group_count > 1:
        x, x_dims = _batch_groups_to_features(ctx, x, x_dims, batch_group_count)
        groups = batch_group_count
    conv = _Conv(
        tuple(window_strides),
        tuple(padding),
        tuple(lhs_dilation),
        tuple(rhs_dilation),
        groups,
        y_dims,
    )
    if conv.fits_conv_transpose(w_dims) and can_conv(dtype):
        return permute(
            ctx, _conv_transpose(ctx, x, rhs, rhs_spec, w_dims, conv), np.argsort(out_spec)
        )
    w = permute(ctx, rhs, rhs_spec)
    if not can_conv(dtype) or len(x_dims) == 2:
        y = _conv_by_einsum(ctx, x, w, x_dims, w_dims, conv, dtype)
    else:
        zero = ctx.const(np.zeros((), dtype))
        x = dilate(ctx, x, x_dims, (1, 1, *conv.lhs_dilation), zero)
        x, pads = conv_padding(ctx, x, [(0, 0), (0, 0), *conv.padding], zero)
        y = ctx.op.Conv(
            x,
            w,
            kernel_shape=[int(k) for k in w_dims[2:]],
            strides=list(conv.strides),
            dilations=list(conv.rhs_dilation),
            pads=pads,
            group=groups,
        )
    return permute(ctx, y, np.argsort(out_spec))


@dataclass(frozen=True)
class _Conv:
    """The spatial parameters of one convolution; ``y_dims`` is its output in NC<spatial> order."""

    strides: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    lhs_dilation: tuple[int, ...]
    rhs_dilation: tuple[int, ...]
    groups: int
    y_dims: list[Any]

    def transpose_pads(
        self, w_dims: Sequence[Any]
    ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """ConvTranspose ``pads`` and ``output_padding`` equal to this conv (see
        _conv_transpose)."""
        if any(jxi.is_symbolic_dim(k) for k in w_dims):
            return None
        return conv_transpose_pads(self.padding, w_dims[2:], self.lhs_dilation, self.rhs_dilation)

    def fits_conv_transpose(self, w_dims: Sequence[Any]) -> bool:
        if all(d == 1 for d in self.lhs_dilation) or any(s != 1 for s in self.strides):
            return False
        return self.transpose_pads(w_dims) is not None


def _batch_groups_to_features(
    ctx: LoweringContext, x: ir.Value, dims: list[Any], groups: int
) -> tuple[ir.Value, list[Any]]:
    """[G*N, C, S..] -> [N, G*C, S..]: batch group g (a block of the batch) meets feature group
    g."""
    n, c, spatial = dims[0] // groups, dims[1], dims[2:]
    x = ctx.reshape(x, [groups, n, c, *spatial])
    x = ctx.op.Transpose(x, perm=[1, 0, *range(2, len(dims) + 1)])
    new_dims = [n, groups * c, *spatial]
    return ctx.reshape(x, new_dims), new_dims


def _conv_transpose(
    ctx: LoweringContext,
    x: ir.Value,
    rhs: ir.Value,
    rhs_spec: Sequence[int],
    w_dims: Sequence[Any],
    conv: _Conv,
) -> ir.Value:
    """A conv with lhs dilation s and stride 1 is a ConvTranspose with stride s (see
    ``core/layers/conv.py``)."""
    w = conv_transpose_kernel(ctx, rhs, rhs_spec, w_dims, conv.groups, weight=False)
    transposed = conv.transpose_pads(w_dims)
    assert transposed is not None  # the caller checked fits_conv_transpose
    pads, extra = transposed
    return conv_transpose(
        ctx,
        x,
        w,
        None,
        kernel_shape=w_dims[2:],
        strides=conv.lhs_dilation,
        dilations=conv.rhs_dilation,
        pads=pads,
        output_padding=extra,
        group=conv.groups,
    )


def _conv_by_einsum(
    ctx: LoweringContext,
    x: ir.Value,
    w: ir.Value,
    x_dims: list[Any],
    w_dims: list[Any],
    conv: _Conv,
    dtype: np.dtype,
) -> ir.Value:
    """Conv for types onnxruntime has no Conv kernel for (float64, integers): gather one
    strided slice of the input per kernel tap, then contract taps and features in an Einsum."""
    n = len(x_dims) - 2
    zero = ctx.const(np.zeros((), dtype))
    x = dilate(ctx, x, x_dims, (1, 1, *conv.lhs_dilation), zero)
    x = pad(ctx, x, [(0, 0), (0, 0), *conv.padding], zero)
    dims = [
        *x_dims[:2],
        *(
            d + lo + hi
            for d, (lo, hi) in zip(
                dilated_dims(x_dims[2:], conv.lhs_dilation), conv.padding, strict=True
            )
        ),
    ]
    spatial = list(range(2, 2 + n))
    kernel = [int(k) for k in w_dims[2:]]
    taps = window_slices(
        ctx, x, dims, spatial, kernel, conv.strides, conv.rhs_dilation, conv.y_dims[2:]
    )
    taps = [ctx.op.Unsqueeze(t, ctx.ints([2])) for t in taps]
    patches = ctx.op.Concat(*taps, axis=2) if len(taps) > 1 else taps[0]  # [N, C, taps, S'..]
    k = math.prod(kernel)
    g = conv.groups
    out_f, in_f = w_dims[0], w_dims[1]
    s = string.ascii_lowercase[-n:] if n else ""
    if g == 1:
        w = ctx.reshape(w, [out_f, in_f, k])
        return ctx.op.Einsum(patches, w, equation=f"nck{s},ock->no{s}")
    patches = ctx.reshape(patches, [x_dims[0], g, in_f, k, *conv.y_dims[2:]])
    w = ctx.reshape(w, [g, out_f // g, in_f, k])
    y = ctx.op.Einsum(patches, w, equation=f"ngck{s},gock->ngo{s}")
    return ctx.reshape(y, conv.y_dims)
