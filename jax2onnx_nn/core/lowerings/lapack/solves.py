"""lax.linalg solves and products that are not factorizations: ``tridiagonal_solve``,
``custom_linear_solve``, ``symmetric_product`` and ``cholesky_update``.

Like ``decompositions.py`` (whose step machinery they reuse), each rule is JAX code traced on
the equation's avals and lowered through the interpreter, so leading batch dims and symbolic
sizes come for free. What JAX's CPU path computes, and these rules compute the same way:

- ``tridiagonal_solve`` is LAPACK's ``gtsv``: Gaussian elimination with partial pivoting
  between each row and the next (a swap fills in a second superdiagonal), then back
  substitution; an exact zero pivot (a singular matrix) makes that system's solution all NaN.
  On a diagonally dominant matrix no row is swapped and this is the Thomas algorithm.
- ``custom_linear_solve`` runs its ``solve`` jaxpr (the matvec only defines derivatives);
  ``jnp.linalg.solve``'s (lu_solve with the lu of the matvec's matrix, as ``inv`` calls it too)
  of a matrix up to ``UNROLL_LIMIT`` is getrf's elimination on [a | b] and U's substitution
  (``lu.solve_by_elimination``): the same arithmetic without L or the permutation.
- ``symmetric_product`` is ``alpha * a @ a^T + beta * c``, both triangles (JAX's CPU rule).
- ``cholesky_update`` is JAX's own Givens sweep (``drotg``/``drot``) over the rows of R.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.lower import LoweringContext, is_float
from jax2onnx_nn.core.lowerings.lapack import steps
from jax2onnx_nn.core.lowerings.lapack.lu import lu_of, solve_by_elimination
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


# -- tridiagonal_solve -------------------------------------------------------------------------
def tridiagonal_solve(dl: jax.Array, d: jax.Array, du: jax.Array, b: jax.Array) -> jax.Array:
    """Solve the tridiagonal system (``dl[i] = A[i, i-1]``, ``d[i] = A[i, i]``, ``du[i] =
    A[i, i+1]``, each (..., m)) for ``b`` (..., m, k) as ``gtsv``; ``dl[0]`` and ``du[m-1]``
    are not read."""
    m = d.shape[-1]
    if not jxi.is_symbolic_dim(m) and m == 0:
        return b
    ids = index_range(m)
    zero = jnp.zeros((), d.dtype)
    du = where(ids < m - 1, du, zero)  # the row past the last one contributes nothing

    def eliminate(i: Index, carry: tuple) -> tuple:
        # row i (its entries at i, i+1, and b) against row i+1 of the input
        cd, cdu, cb, diag, up, up2, rhs, failed = carry
        low, nd, ndu, nb = (
            at_index(dl, i + 1, -1),
            at_index(d, i + 1, -1),
            at_index(du, i + 1, -1),
            at_index(b, i + 1, -2),
        )
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

    start = (
        at_index(d, 0, -1),
        at_index(du, 0, -1),
        at_index(b, 0, -2),
        jnp.zeros_like(d),
        jnp.zeros_like(d),
        jnp.zeros_like(d),
        jnp.zeros_like(b),
        jnp.zeros(d.shape[:-1] + (1,), bool),
    )
    cd, cdu, cb, diag, up, up2, rhs, failed = iterate(m - 1, eliminate, start)
    last = ids == m - 1
    diag, up, rhs = where(last, cd, diag), where(last, cdu, up), where(last[:, None], cb, rhs)
    failed = failed | (cd == 0)

    def substitute(i: Index, carry: tuple) -> tuple:
        x, x1, x2 = carry  # x1, x2: the solution's rows i+1 and i+2 (0 past the end)
        xi = (
            at_index(rhs, i, -2)
            - at_index(up, i, -1)[..., None] * x1
            - at_index(up2, i, -1)[..., None] * x2
        ) / at_index(diag, i, -1)[..., None]
        return where((ids == i)[:, None], xi, x), xi, x1

    row0 = jnp.zeros_like(b[..., :1, :])
    x, _, _ = iterate(m, substitute, (jnp.zeros_like(b), row0, row0), reverse=True)
    return where(failed[..., None], jnp.asarray(np.nan, b.dtype), x)


@lowering(
    "tridiagonal_solve",
    onnx_ops=(
        "Slice",
        "Abs",
        "Mul",
        "Sub",
        "Div",
        "Where",
        "Loop",
        "Add",
        "And",
        "Cast",
        "Concat",
        "ConstantOfShape",
        "Equal",
        "Expand",
        "Gather",
        "GreaterOrEqual",
        "Identity",
        "Less",
        "Max",
        "Min",
        "Neg",
        "Not",
        "Or",
        "Range",
        "Reshape",
        "Scan",
        "Squeeze",
        "Unsqueeze",
    ),
)
def _tridiagonal_solve(
    ctx: LoweringContext,
    dl: ir.Value,
    d: ir.Value,
    du: ir.Value,
    b: ir.Value,
    *,
    perturb_singular: bool,
) -> list[ir.Value]:
    if perturb_singular:
        # JAX's CPU kernel replaces zero pivots by a perturbation of its own; not reproduced
        raise ConversionError(
            "tridiagonal_solve(perturb_singular=True) at "
            f"{ctx.source_line or '<unknown location>'} is not supported. "
            "jax.scipy.linalg.eigh_tridiagonal(..., eigvals_only=False) calls it for the "
            "eigenvectors: use "
            "jnp.linalg.eigh(jnp.diag(d) + jnp.diag(e, 1) + jnp.diag(e, -1)) instead; a "
            "tridiagonal_solve "
            "of your own: perturb_singular=False (an exactly singular system then gives NaN)"
        )
    refuse_half_precision(
        ctx,
        "tridiagonal_solve",
        "lax.linalg.tridiagonal_solve(*(a.astype(jnp.float32) for a in (dl, d, du, b)))",
    )
    return lower_as_jax(ctx, tridiagonal_solve, [dl, d, du, b])


# -- custom_linear_solve -----------------------------------------------------------------------
@lowering("custom_linear_solve", onnx_ops=("Concat", "ConstantOfShape"))
def _custom_linear_solve(
    ctx: LoweringContext, *args: ir.Value, const_lengths: Any, jaxprs: Any
) -> list[ir.Value]:
    """The ``solve`` jaxpr on its constants and the right-hand side (what JAX's impl runs);
    ``matvec`` and the transposes only serve differentiation. ``jnp.linalg.solve`` (and
    ``inv``) of a small matrix is one elimination on [a | b] instead (``_lu_solve_of``)."""
    counts = [
        const_lengths.matvec,
        const_lengths.vecmat,
        const_lengths.solve,
        const_lengths.transpose_solve,
    ]
    start = sum(counts[:2])
    consts, b = args[start : start + counts[2]], args[sum(counts) :]
    fused = _lu_solve_of(jaxprs, args[: counts[0]], consts, b)
    if fused is not None:
        a, axes = fused
        avals = [jaxprs.matvec.jaxpr.invars[0].aval, ctx.avals_in[-1]]
        return lower_as_jax(
            ctx,
            partial(_solve_along, axes=axes),
            [a, b[0]],
            avals=avals,
            cache_key=("solve_along", steps.UNROLL_LIMIT, axes),
        )
    return ctx.lower_sub(jaxprs.solve, [*consts, *b])


def _lu_solve_of(
    jaxprs: Any,
    matvec_consts: Sequence[ir.Value],
    solve_consts: Sequence[ir.Value],
    b: Sequence[ir.Value],
) -> tuple[ir.Value, tuple[int, ...]] | None:
    """(a, the axes of b as (a's batch axes, a's row axis, b's other axes)) when this solve is
    ``jnp.linalg.solve``'s: the matvec is ``a`` applied along one axis of b (a dot_general and
    the transpose back to b's layout), the solve is ``lu_solve`` (P, then L's and U's
    triangular solves, nothing transposed) with the ``lu`` of that same ``a``, and ``a`` is
    small enough to be unrolled. Else None (the solve jaxpr is lowered as it is)."""
    if len(matvec_consts) != 1 or len(solve_consts) != 2 or len(b) != 1:
        return None
    made = lu_of(solve_consts[0])
    if made is None or made[0] is not matvec_consts[0] or made[1] is not solve_consts[1]:
        return None
    matvec = jaxprs.matvec.jaxpr
    a_aval, x_aval = (v.aval for v in matvec.invars)
    n = a_aval.shape[-1]
    if (
        jxi.is_symbolic_dim(n)
        or not 0 < n <= steps.UNROLL_LIMIT
        or not is_float(a_aval.dtype)
        or a_aval.dtype != x_aval.dtype
    ):
        return None
    axes = _matvec_axes(matvec, a_aval.ndim, x_aval.ndim)
    if axes is None or any(
        jxi.is_symbolic_dim(x_aval.shape[i]) or x_aval.shape[i] == 0
        for i in axes[a_aval.ndim - 1 :]
    ):
        return None
    inner = _lu_solve_body(jaxprs.solve.jaxpr)
    if inner is None:
        return None
    solves = [e.params for e in inner.eqns if e.primitive.name == "triangular_solve"]
    plain = all(p["left_side"] and not p["transpose_a"] and not p["conjugate_a"] for p in solves)
    if not plain or [(p["lower"], p["unit_diagonal"]) for p in solves] != [
        (True, True),
        (False, False),
    ]:
        return None
    return made[0], axes


def _matvec_axes(matvec: Any, a_rank: int, x_rank: int) -> tuple[int, ...] | None:
    """The axes of x (batch axes, the axis ``a`` contracts, the other axes) when ``matvec`` is
    ``a`` (..., n, n) times x along one axis, batched over a's leading axes, with the result
    transposed back to x's layout."""
    eqns = matvec.eqns
    if (
        not 1 <= len(eqns) <= 2
        or eqns[0].primitive.name != "dot_general"
        or list(eqns[0].invars) != list(matvec.invars)
    ):
        return None
    (contract_a, contract_x), (batch_a, batch_x) = eqns[0].params["dimension_numbers"]
    batch = a_rank - 2
    if (
        tuple(contract_a) != (a_rank - 1,)
        or tuple(batch_a) != tuple(range(batch))
        or len(contract_x) != 1
    ):
        return None
    row = int(contract_x[0])
    others = [i for i in range(x_rank) if i != row and i not in batch_x]
    axes = (*(int(i) for i in batch_x), row, *others)
    # the dot_general's result is (batch, a's rows, x's other axes); b's layout puts them back
    expected = [0] * x_rank
    for source, axis in enumerate(axes):
        expected[axis] = source
    if len(eqns) == 2:
        if eqns[1].primitive.name != "transpose" or eqns[1].invars[0] is not eqns[0].outvars[0]:
            return None
        layout, out = list(eqns[1].params["permutation"]), eqns[1].outvars[0]
    else:
        layout, out = list(range(x_rank)), eqns[0].outvars[0]
    if layout != expected or list(matvec.outvars) != [out]:
        return None
    return axes


# what JAX's ``_lu_solve`` does besides its two triangular solves: the permutation of b (index
# wrapping and a gather) and b's layout; an equation of any other kind is arithmetic of the
# caller's own, which the elimination would drop
_LU_SOLVE_PLUMBING = frozenset(
    {
        "broadcast_in_dim",
        "lt",
        "add",
        "select_n",
        "gather",
        "transpose",
        "reshape",
        "squeeze",
        "triangular_solve",
    }
)


def _lu_solve_body(solve: Any) -> Any | None:
    """The jaxpr of JAX's ``_lu_solve`` when ``solve`` is nothing but one call of it on its
    own inputs (lu, permutation, b), as ``jnp.linalg.solve`` writes it; else None."""
    if len(solve.eqns) != 1:
        return None
    call = solve.eqns[0]
    if call.primitive.name not in ("jit", "pjit") or call.params.get("name") != "_lu_solve":
        return None
    if list(call.invars) != list(solve.invars) or list(call.outvars) != list(solve.outvars):
        return None
    body = call.params["jaxpr"].jaxpr
    return body if all(e.primitive.name in _LU_SOLVE_PLUMBING for e in body.eqns) else None


def _solve_along(a: jax.Array, b: jax.Array, *, axes: tuple[int, ...]) -> jax.Array:
    """``solve_by_elimination`` of ``a`` (..., n, n) and ``b`` laid out as ``axes`` says (see
    ``_matvec_axes``): b's other axes become the right-hand sides' columns and back."""
    batch = a.ndim - 2
    x = jnp.transpose(b, axes)
    shape = x.shape
    x = x.reshape((*shape[: batch + 1], math.prod(shape[batch + 1 :])))
    return jnp.transpose(
        solve_by_elimination(a, x).reshape(shape), tuple(int(i) for i in np.argsort(axes))
    )


# -- symmetric_product -------------------------------------------------------------------------
@lowering(
    "symmetric_product", onnx_ops=("Transpose", "MatMul", "Mul", "Add", "Squeeze", "Unsqueeze")
)
def _symmetric_product(
    ctx: LoweringContext, a: ir.Value, c: ir.Value, *, alpha: float, beta: float
) -> list[ir.Value]:
    return lower_as_jax(ctx, lambda a, c: alpha * (a @ mT(a)) + beta * c, [a, c])


# -- cholesky_update ---------------------------------------------------------------------------
def cholesky_update(r: jax.Array, w: jax.Array) -> jax.Array:
    """R' with R'^T R' = R^T R + w w^T: row k of R and w rotated by the Givens rotation that
    zeroes w[k] against R[k, k] (``drotg`` scaled by the larger magnitude, none for w[k] = 0)."""
    n = r.shape[-1]
    rows = index_range(n)[:, None]
    one = jnp.ones((), r.dtype)

    def step(k: Index, carry: tuple) -> tuple:
        r, z = carry  # z (1, n)
        row = at_index(r, k, -2)
        x, y = at_index(row, k, -1), at_index(z, k, -1)
        scale = where(jnp.abs(x) > jnp.abs(y), jnp.abs(x), jnp.abs(y))
        scale = where(y == 0, one, scale)
        x, y = x / scale, y / scale
        rh = 1 / jnp.sqrt(x**2 + y**2)
        c, s = where(y == 0, one, x * rh), where(y == 0, jnp.zeros((), r.dtype), -y * rh)
        return where(rows == k, c * row - s * z, r), c * z + s * row

    r, _ = iterate(n, step, (r, w[None, :]))
    return r


@lowering(
    "cholesky_update",
    onnx_ops=(
        "Slice",
        "Abs",
        "Div",
        "Mul",
        "Sub",
        "Add",
        "Sqrt",
        "Where",
        "Loop",
        "Cast",
        "Equal",
        "Greater",
        "Less",
        "Max",
        "Min",
        "Neg",
        "Range",
        "Scan",
        "Squeeze",
        "Unsqueeze",
    ),
)
def _cholesky_update(ctx: LoweringContext, r: ir.Value, w: ir.Value) -> list[ir.Value]:
    return lower_as_jax(ctx, cholesky_update, [r, w])
