"""lax.linalg reductions to condensed form: ``hessenberg``, ``tridiagonal``.

Same machinery as the other routines here (``steps.py``): JAX code on the equation's avals, one step
per column (unrolled for small static sizes, an ONNX ``Loop`` otherwise), with LAPACK's reflectors
(``dlarfg``, shared with ``geqrf``), so the packed results match JAX's CPU results (``gehrd``,
``sytrd``) entry by entry, not only up to signs; ``hessenberg_q``
(h and q) for the Schur forms.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import onnx_ir as ir
from jax import lax

from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.lowerings.lapack.householder import householder_product, reflector, scaled
from jax2onnx_nn.core.lowerings.lapack.steps import (
    Index,
    at_index,
    index_range,
    iterate,
    lower_as_jax,
    mT,
    refuse_half_precision,
    where,
)
from jax2onnx_nn.core.registry import lowering

REDUCTION_OPS = ("Slice", "MatMul", "Mul", "Sub", "Div", "Sqrt", "Where", "Loop")


# -- hessenberg: gehrd -------------------------------------------------------------------------
def hessenberg(a: jax.Array, *, unroll: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """``a`` (..., n, n) = Q H Q^T as ``gehrd``: H on and above the first subdiagonal, the
    reflectors' vectors below it (reflector j acts on rows j+1..), and their n-1 ``taus``
    (the last one 0); ``unroll`` as ``iterate``'s."""
    n = a.shape[-1]
    rows, cols = index_range(n)[:, None], index_range(n)[None, :]

    def step(j: Index, carry: tuple) -> tuple:
        h, taus = carry
        x = at_index(h, j, -1)
        below = rows > j + 1
        v, tau, head = reflector(x, j + 1, below)
        h = h - (h @ v) * (tau * mT(v))  # from the right: columns j+1..
        h = where(cols > j, h - (tau * v) * (mT(v) @ h), h)  # from the left: rows j+1..
        h = where(cols == j, where(rows == j + 1, head, where(below, v, x)), h)
        return h, where(index_range(n - 1)[None, :] == j, tau, taus)

    taus = jnp.zeros((*a.shape[:-2], 1, n - 1), a.dtype)
    h, taus = iterate(n - 2, step, (a, taus), unroll=unroll)
    return h, taus[..., 0, :]


@lowering(
    "hessenberg",
    onnx_ops=(
        *REDUCTION_OPS,
        "LessOrEqual",
        "Abs",
        "Add",
        "Cast",
        "Concat",
        "ConstantOfShape",
        "CumSum",
        "Equal",
        "Expand",
        "Gather",
        "Greater",
        "GreaterOrEqual",
        "IsNaN",
        "Less",
        "Max",
        "Min",
        "Neg",
        "Or",
        "Pad",
        "Range",
        "ReduceMax",
        "ReduceSum",
        "Reshape",
        "Scan",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
)
def _hessenberg(ctx: LoweringContext, a: ir.Value) -> list[ir.Value]:
    refuse_half_precision(ctx, "hessenberg", "jax.scipy.linalg.hessenberg(a.astype(jnp.float32))")
    return lower_as_jax(ctx, scaled(hessenberg, lambda rows, cols: rows <= cols + 1), [a])


# -- tridiagonal: sytrd ------------------------------------------------------------------------
def tridiagonal(a: jax.Array, *, lower: bool) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The symmetric matrix in ``a``'s lower (upper) triangle = Q T Q^T as ``sytd2``: (packed,
    d, e, taus). ``lower`` reduces columns 0..n-2 top down (reflector i acts on rows i+1..),
    upper columns n-1..1 bottom up (reflector i on rows ..i); the packed matrix holds d and e
    in place and the vectors beyond them, the other triangle as given."""
    n = a.shape[-1]
    rows, cols = index_range(n)[:, None], index_range(n)[None, :]
    keep = rows >= cols if lower else rows <= cols
    sym = where(keep, a, mT(a))

    def step(i: Index, carry: tuple) -> tuple:
        s, packed, taus = carry
        # lower: column i, pivot row i+1, tail below; upper: column i+1, pivot row i, tail above
        col, pivot = (i, i + 1) if lower else (i + 1, i)
        x = at_index(s, col, -1)
        tail = rows > pivot if lower else rows < pivot
        v, tau, beta = reflector(x, pivot, tail)
        # s <- H s H as sytd2: w = tau s v - (tau^2 / 2) (v^T s v) v; s - v w^T - w v^T
        p = tau * (s @ v)
        w = p - (tau / 2) * (mT(p) @ v) * v
        s = s - v * mT(w) - w * mT(v)
        packed = where(cols == col, where(rows == pivot, beta, where(tail, v, packed)), packed)
        return s, packed, where(index_range(n - 1)[None, :] == i, tau, taus)

    taus = jnp.zeros((*a.shape[:-2], 1, n - 1), a.dtype)
    s, packed, taus = iterate(n - 1, step, (sym, a, taus), reverse=not lower)
    eye = rows == cols
    d = jnp.sum(where(eye, s, jnp.zeros((), a.dtype)), axis=-1)
    packed = where(eye, s, packed)
    e = jnp.sum(
        where(rows == cols + (1 if lower else -1), packed, jnp.zeros((), a.dtype)), axis=-2
    )  # per column
    e = lax.slice_in_dim(e, 0, n - 1, axis=-1) if lower else lax.slice_in_dim(e, 1, n, axis=-1)
    return packed, d, e, taus[..., 0, :]


@lowering(
    "tridiagonal",
    onnx_ops=(
        *REDUCTION_OPS,
        "ReduceSum",
        "Abs",
        "Add",
        "Cast",
        "Concat",
        "Equal",
        "Expand",
        "Greater",
        "GreaterOrEqual",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Neg",
        "Or",
        "Range",
        "Reshape",
        "Scan",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
)
def _tridiagonal(ctx: LoweringContext, a: ir.Value, *, lower: bool) -> list[ir.Value]:
    refuse_half_precision(ctx, "tridiagonal", "lax.linalg.tridiagonal(a.astype(jnp.float32))")
    return lower_as_jax(ctx, lambda a: tridiagonal(a, lower=lower), [a])


def hessenberg_q(a: jax.Array, *, unroll: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """(h, q) with a = q h q^T, h upper Hessenberg (zeros below its subdiagonal): ``gehrd``
    and ``orghr`` (q's first row and column are e_0, the reflectors act on rows 1..)."""
    n = a.shape[-1]
    ids = index_range(n)
    packed, taus = hessenberg(a, unroll=unroll)
    h = where(ids[:, None] > ids[None, :] + 1, jnp.zeros((), a.dtype), packed)
    inner = householder_product(
        packed[..., 1:, :-1], taus[..., :-1], unroll=unroll
    )  # (..., n-1, n-1)
    pad = [(0, 0)] * (a.ndim - 2) + [(1, 0), (1, 0)]
    corner = ((ids[:, None] == 0) & (ids[None, :] == 0)).astype(a.dtype)
    return h, jnp.pad(inner, pad) + corner
