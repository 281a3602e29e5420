"""lax.linalg solves and products that are not factorizations: ``tridiagonal_solve``,
``custom_linear_solve``, ``symmetric_product`` and ``cholesky_update``.

Like ``decompositions.py`` (whose step machinery they reuse), each rule is JAX code traced on
the equation's avals and lowered through the interpreter, so leading batch dims and symbolic
sizes come for free. What JAX's CPU path computes, and these rules compute the same way:

- ``tridiagonal_solve`` is LAPACK's ``gtsv``: Gaussian elimination with partial pivoting
  between each row and the next (a swap fills in a second superdiagonal), then back
  substitution; an exact zero pivot (a singular matrix) makes that system's solution all NaN.
  On a diagonally dominant matrix no row is swapped and this is the Thomas algorithm.
- ``custom_linear_solve`` runs its ``solve`` jaxpr (the matvec only defines derivatives).
- ``symmetric_product`` is ``alpha * a @ a^T + beta * c``, both triangles (JAX's CPU rule).
- ``cholesky_update`` is JAX's own Givens sweep (``drotg``/``drot``) over the rows of R.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.lowerings.decompositions import (
    Index,
    _at,
    _ids,
    _mT,
    iterate,
    lower_as_jax,
    where,
)
from jax2onnx_nn.core.registry import lowering


# -- tridiagonal_solve -------------------------------------------------------------------------
def tridiagonal_solve(dl: jax.Array, d: jax.Array, du: jax.Array, b: jax.Array) -> jax.Array:
    """Solve the tridiagonal system (``dl[i] = A[i, i-1]``, ``d[i] = A[i, i]``, ``du[i] =
    A[i, i+1]``, each (..., m)) for ``b`` (..., m, k) as ``gtsv``; ``dl[0]`` and ``du[m-1]``
    are not read."""
    m = d.shape[-1]
    if not jxi.is_symbolic_dim(m) and m == 0:
        return b
    ids = _ids(m)
    zero = jnp.zeros((), d.dtype)
    du = where(ids < m - 1, du, zero)  # the row past the last one contributes nothing

    def eliminate(i: Index, carry: tuple) -> tuple:
        # row i (its entries at i, i+1, and b) against row i+1 of the input
        cd, cdu, cb, diag, up, up2, rhs, failed = carry
        low, nd, ndu, nb = _at(dl, i + 1, -1), _at(d, i + 1, -1), _at(du, i + 1, -1), _at(b, i + 1, -2)
        keep = jnp.abs(cd) >= jnp.abs(low)  # gtsv's test: else rows i and i+1 swap
        fact = where(keep, low, cd) / where(keep, where(cd != 0, cd, jnp.ones((), d.dtype)), low)
        kept = (nd - fact * cdu, ndu, nb - fact[..., None] * cb)
        swapped = (cdu - fact * nd, -fact * ndu, cb - fact[..., None] * nb)
        row = ids == i
        diag = where(row, where(keep, cd, low), diag)
        up = where(row, where(keep, cdu, nd), up)
        up2 = where(row, where(keep, zero, ndu), up2)
        rhs = where(row[:, None], where(keep[..., None], cb, nb), rhs)
        failed = failed | (keep & (cd == 0))
        cd, cdu = where(keep, kept[0], swapped[0]), where(keep, kept[1], swapped[1])
        return cd, cdu, where(keep[..., None], kept[2], swapped[2]), diag, up, up2, rhs, failed

    start = (_at(d, 0, -1), _at(du, 0, -1), _at(b, 0, -2), jnp.zeros_like(d), jnp.zeros_like(d), jnp.zeros_like(d), jnp.zeros_like(b), jnp.zeros(d.shape[:-1] + (1,), bool))
    cd, cdu, cb, diag, up, up2, rhs, failed = iterate(m - 1, eliminate, start)
    last = ids == m - 1
    diag, up, rhs = where(last, cd, diag), where(last, cdu, up), where(last[:, None], cb, rhs)
    failed = failed | (cd == 0)

    def substitute(i: Index, carry: tuple) -> tuple:
        x, x1, x2 = carry  # x1, x2: the solution's rows i+1 and i+2 (0 past the end)
        xi = (_at(rhs, i, -2) - _at(up, i, -1)[..., None] * x1 - _at(up2, i, -1)[..., None] * x2) / _at(diag, i, -1)[..., None]
        return where((ids == i)[:, None], xi, x), xi, x1

    row0 = jnp.zeros_like(b[..., :1, :])
    x, _, _ = iterate(m, substitute, (jnp.zeros_like(b), row0, row0), reverse=True)
    return where(failed[..., None], jnp.asarray(np.nan, b.dtype), x)


@lowering("tridiagonal_solve", onnx_ops=("Slice", "Abs", "Mul", "Sub", "Div", "Where", "Loop"))
def _tridiagonal_solve(ctx: LoweringContext, dl: ir.Value, d: ir.Value, du: ir.Value, b: ir.Value, *, perturb_singular: bool) -> list[ir.Value]:
    if perturb_singular:
        raise ConversionError(
            f"tridiagonal_solve(perturb_singular=True) at {ctx.source_line or '<unknown location>'} is not supported; "
            "use perturb_singular=False"
        )
    return lower_as_jax(ctx, tridiagonal_solve, [dl, d, du, b])


# -- custom_linear_solve -----------------------------------------------------------------------
@lowering("custom_linear_solve")
def _custom_linear_solve(ctx: LoweringContext, *args: ir.Value, const_lengths: Any, jaxprs: Any) -> list[ir.Value]:
    """The ``solve`` jaxpr on its constants and the right-hand side (what JAX's impl runs);
    ``matvec`` and the transposes only serve differentiation."""
    counts = [const_lengths.matvec, const_lengths.vecmat, const_lengths.solve, const_lengths.transpose_solve]
    start = sum(counts[:2])
    consts, b = args[start : start + counts[2]], args[sum(counts) :]
    return ctx.lower_sub(jaxprs.solve, [*consts, *b])


# -- symmetric_product -------------------------------------------------------------------------
@lowering("symmetric_product", onnx_ops=("Transpose", "MatMul", "Mul", "Add"))
def _symmetric_product(ctx: LoweringContext, a: ir.Value, c: ir.Value, *, alpha: float, beta: float) -> list[ir.Value]:
    return lower_as_jax(ctx, lambda a, c: alpha * (a @ _mT(a)) + beta * c, [a, c])


# -- cholesky_update ---------------------------------------------------------------------------
def cholesky_update(r: jax.Array, w: jax.Array) -> jax.Array:
    """R' with R'^T R' = R^T R + w w^T: row k of R and w rotated by the Givens rotation that
    zeroes w[k] against R[k, k] (``drotg`` scaled by the larger magnitude, none for w[k] = 0)."""
    n = r.shape[-1]
    rows = _ids(n)[:, None]
    one = jnp.ones((), r.dtype)

    def step(k: Index, carry: tuple) -> tuple:
        r, z = carry  # z (1, n)
        row = _at(r, k, -2)
        x, y = _at(row, k, -1), _at(z, k, -1)
        scale = where(jnp.abs(x) > jnp.abs(y), jnp.abs(x), jnp.abs(y))
        scale = where(y == 0, one, scale)
        x, y = x / scale, y / scale
        rh = 1 / jnp.sqrt(x**2 + y**2)
        c, s = where(y == 0, one, x * rh), where(y == 0, jnp.zeros((), r.dtype), -y * rh)
        return where(rows == k, c * row - s * z, r), c * z + s * row

    r, _ = iterate(n, step, (r, w[None, :]))
    return r


@lowering("cholesky_update", onnx_ops=("Slice", "Abs", "Div", "Mul", "Sub", "Add", "Sqrt", "Where", "Loop"))
def _cholesky_update(ctx: LoweringContext, r: ir.Value, w: ir.Value) -> list[ir.Value]:
    return lower_as_jax(ctx, cholesky_update, [r, w])
