"""lax.linalg reductions to condensed form and the non-symmetric eigenproblem: ``hessenberg``,
``tridiagonal``.

Same machinery as ``decompositions.py``: JAX code on the equation's avals, one step per
column (unrolled for small static sizes, an ONNX ``Loop`` otherwise), with LAPACK's
reflectors (``dlarfg``, shared with ``geqrf``), so the packed results match JAX's CPU results
(``gehrd``, ``sytrd``) entry by entry, not only up to signs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from jax import lax

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
    reflector,
    where,
)
from jax2onnx_nn.core.registry import lowering

REDUCTION_OPS = ("Slice", "MatMul", "Mul", "Sub", "Div", "Sqrt", "Where", "Loop")


# -- hessenberg: gehrd -------------------------------------------------------------------------
def hessenberg(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``a`` (..., n, n) = Q H Q^T as ``gehrd``: H on and above the first subdiagonal, the
    reflectors' vectors below it (reflector j acts on rows j+1..), and their n-1 ``taus``
    (the last one 0)."""
    n = a.shape[-1]
    rows, cols = _ids(n)[:, None], _ids(n)[None, :]

    def step(j: Index, carry: tuple) -> tuple:
        h, taus = carry
        x = _at(h, j, -1)
        below = rows > j + 1
        v, tau, head = reflector(x, j + 1, below)
        h = h - (h @ v) * (tau * _mT(v))  # from the right: columns j+1..
        h = where(cols > j, h - (tau * v) * (_mT(v) @ h), h)  # from the left: rows j+1..
        h = where(cols == j, where(rows == j + 1, head, where(below, v, x)), h)
        return h, where(_ids(n - 1)[None, :] == j, tau, taus)

    taus = jnp.zeros((*a.shape[:-2], 1, n - 1), a.dtype)
    h, taus = iterate(n - 2, step, (a, taus))
    return h, taus[..., 0, :]


@lowering("hessenberg", onnx_ops=REDUCTION_OPS)
def _hessenberg(ctx: LoweringContext, a: ir.Value) -> list[ir.Value]:
    return lower_as_jax(ctx, hessenberg, [a])


# -- tridiagonal: sytrd ------------------------------------------------------------------------
def tridiagonal(a: jax.Array, *, lower: bool) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The symmetric matrix in ``a``'s lower (upper) triangle = Q T Q^T as ``sytd2``: (packed,
    d, e, taus). ``lower`` reduces columns 0..n-2 top down (reflector i acts on rows i+1..),
    upper columns n-1..1 bottom up (reflector i on rows ..i); the packed matrix holds d and e
    in place and the vectors beyond them, the other triangle as given."""
    n = a.shape[-1]
    rows, cols = _ids(n)[:, None], _ids(n)[None, :]
    keep = rows >= cols if lower else rows <= cols
    sym = where(keep, a, _mT(a))

    def step(i: Index, carry: tuple) -> tuple:
        s, packed, taus = carry
        # lower: column i, pivot row i+1, tail below; upper: column i+1, pivot row i, tail above
        col, pivot = (i, i + 1) if lower else (i + 1, i)
        x = _at(s, col, -1)
        tail = rows > pivot if lower else rows < pivot
        v, tau, beta = reflector(x, pivot, tail)
        # s <- H s H as sytd2: w = tau s v - (tau^2 / 2) (v^T s v) v; s - v w^T - w v^T
        p = tau * (s @ v)
        w = p - (tau / 2) * (_mT(p) @ v) * v
        s = s - v * _mT(w) - w * _mT(v)
        packed = where(cols == col, where(rows == pivot, beta, where(tail, v, packed)), packed)
        return s, packed, where(_ids(n - 1)[None, :] == i, tau, taus)

    taus = jnp.zeros((*a.shape[:-2], 1, n - 1), a.dtype)
    s, packed, taus = iterate(n - 1, step, (sym, a, taus), reverse=not lower)
    eye = rows == cols
    d = jnp.sum(where(eye, s, jnp.zeros((), a.dtype)), axis=-1)
    packed = where(eye, s, packed)
    e = jnp.sum(where(rows == cols + (1 if lower else -1), packed, jnp.zeros((), a.dtype)), axis=-2)  # per column
    e = lax.slice_in_dim(e, 0, n - 1, axis=-1) if lower else lax.slice_in_dim(e, 1, n, axis=-1)
    return packed, d, e, taus[..., 0, :]


@lowering("tridiagonal", onnx_ops=(*REDUCTION_OPS, "ReduceSum"))
def _tridiagonal(ctx: LoweringContext, a: ir.Value, *, lower: bool) -> list[ir.Value]:
    return lower_as_jax(ctx, lambda a: tridiagonal(a, lower=lower), [a])



# -- the complex Schur form: Givens Hessenberg reduction + shifted QR ---------------------------
# Sweeps of the single-shift QR algorithm, per row of the matrix: with Wilkinson shifts each
# eigenvalue converges in 2-3 sweeps (LAPACK's zlahqr allows 30); the spare sweeps cost
# nothing in accuracy (a deflated matrix is left as it is). 4 per row converged every one of
# 200 Gaussian matrices at n = 5 and 16 in float64 (3 per row missed 9 at n = 16). zlahqr's
# exceptional shifts, applied every k-th sweep without its stagnation count, made it worse.
QR_SWEEPS_PER_ROW = 4
QR_SWEEPS_EXTRA = 8

# The iteration works on (real, imag) parts as separate real arrays: a rotation is then a few
# dozen real nodes, where complex jnp code on pairs adds the inf/NaN cases of complex
# division and abs to each one (~1200 nodes per rotation).
Parts = tuple[jax.Array, jax.Array]


def _cmul(a: Parts, b: Parts) -> Parts:
    return a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]


def _rotate(h: Parts, z: Parts, k: Index, x: Parts, y: Parts, active: jax.Array, col: Index) -> tuple[Parts, Parts]:
    """The similarity G h G^H (and z G^H) with the complex Givens rotation G on rows k, k+1
    that maps (x, y) to (r, 0): c = |x| / r, s = sign(x) conj(y) / r; identity where not
    ``active`` or r = 0. When (x, y) is column ``col`` of those rows, h[k+1, col] is set to an
    exact 0: rounding left there would leak into deflated entries through later rotations."""
    dtype = h[0].dtype
    zero, one = jnp.zeros((), dtype), jnp.ones((), dtype)
    ax = jnp.sqrt(x[0] * x[0] + x[1] * x[1])
    r = jnp.sqrt(ax * ax + y[0] * y[0] + y[1] * y[1])
    rotates = active & (r != 0)
    inv_r = 1 / where(rotates, r, one)
    has_x = ax != 0
    inv_ax = 1 / where(has_x, ax, one)
    pr, pi = where(has_x, x[0] * inv_ax, one), where(has_x, x[1] * inv_ax, zero)
    c = where(rotates, ax * inv_r, one)
    s = where(rotates, (pr * y[0] + pi * y[1]) * inv_r, zero), where(rotates, (pi * y[0] - pr * y[1]) * inv_r, zero)
    s_bar = s[0], -s[1]
    ids = _ids(h[0].shape[-1])
    rows, cols = ids[:, None], ids[None, :]

    def left(m: Parts) -> Parts:
        top, bottom = (_at(p, k, -2) for p in m), (_at(p, k + 1, -2) for p in m)
        top, bottom = tuple(top), tuple(bottom)
        new_top = tuple(c * t + u for t, u in zip(top, _cmul(s, bottom), strict=True))
        new_bottom = tuple(c * b - u for b, u in zip(bottom, _cmul(s_bar, top), strict=True))
        return tuple(where(rows == k, nt, where(rows == k + 1, nb, p)) for p, nt, nb in zip(m, new_top, new_bottom, strict=True))

    def right(m: Parts) -> Parts:
        lc, rc = tuple(_at(p, k, -1) for p in m), tuple(_at(p, k + 1, -1) for p in m)
        new_l = tuple(c * a + u for a, u in zip(lc, _cmul(s_bar, rc), strict=True))
        new_r = tuple(c * b - u for b, u in zip(rc, _cmul(s, lc), strict=True))
        return tuple(where(cols == k, nl, where(cols == k + 1, nr, p)) for p, nl, nr in zip(m, new_l, new_r, strict=True))

    h = left(h)
    annihilated = active & (rows == k + 1) & (cols == col)
    h = tuple(where(annihilated, zero, p) for p in h)
    return right(h), right(z)


def _take(m: jax.Array, i: Any, j: Any) -> jax.Array:
    """m[..., i, j] for per-matrix indices i, j (..., 1, 1) (or a loop's scalar index)."""
    ids_r, ids_c = _ids(m.shape[-2])[:, None], _ids(m.shape[-1])[None, :]
    return jnp.sum(where((ids_r == i) & (ids_c == j), m, jnp.zeros((), m.dtype)), axis=(-2, -1), keepdims=True)


def _wilkinson_shift(a11: jax.Array, a12: jax.Array, a21: jax.Array, a22: jax.Array) -> jax.Array:
    """The eigenvalue of [[a11, a12], [a21, a22]] nearer a22, in the cancellation-free form
    a22 - a12 a21 / (half + root), the root's sign chosen so that |half + root| is largest."""
    half = (a11 - a22) / 2
    root = jnp.sqrt(half * half + a12 * a21)
    root = jnp.where(jnp.real(jnp.conj(half) * root) < 0, -root, root)
    denom = half + root
    return jnp.where(denom != 0, a22 - a12 * a21 / jnp.where(denom != 0, denom, 1), a22)


def complex_schur(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(t, z) with a = z t z^H, t upper triangular and z unitary, for a complex ``a`` (...,
    n, n) of static size: Givens rotations to Hessenberg form, then implicit single-shift QR
    sweeps (Wilkinson shift from the active block's trailing 2x2) with deflation where a
    subdiagonal entry falls below eps * (|h[l, l]| + |h[l-1, l-1]|), LAPACK's ``zlahqr`` test."""
    n = int(a.shape[-1])
    ids = _ids(n)
    rows, cols = ids[:, None], ids[None, :]
    eye = jnp.broadcast_to((rows == cols).astype(a.dtype), a.shape)
    if n < 2:
        return a, eye
    real_dtype = jnp.real(a).dtype
    h, z = (jnp.real(a), jnp.imag(a)), (jnp.real(eye), jnp.imag(eye))
    zero = jnp.zeros((), real_dtype)
    true = jnp.ones((*a.shape[:-2], 1, 1), bool)
    # Hessenberg form: zero h[i, j] (i > j + 1) against h[i-1, j], bottom up per column
    pairs = np.array([(i, j) for j in range(n - 2) for i in range(n - 1, j + 1, -1)], np.int32).reshape(-1, 2)
    table = jnp.asarray(pairs)

    def reduce(t: Any, carry: tuple) -> tuple:
        h, z = carry
        i, j = table[t, 0], table[t, 1]
        x, y = tuple(_take(p, i - 1, j) for p in h), tuple(_take(p, i, j) for p in h)
        return _rotate(h, z, i - 1, x, y, true, j)

    if len(pairs):
        h, z = lax.fori_loop(0, len(pairs), reduce, (h, z))
    eps = float(jnp.finfo(real_dtype).eps)
    sub_pos = rows == cols + 1

    def sweep(_: Any, carry: tuple) -> tuple:
        h, z = carry
        modulus = jnp.sqrt(h[0] * h[0] + h[1] * h[1])
        diag = jnp.sum(where(rows == cols, modulus, zero), axis=-1)  # (..., n)
        sub = jnp.sum(where(sub_pos, modulus, zero), axis=-1)  # sub[l] = |h[l, l-1]|, sub[0] = 0
        prev = jnp.concatenate([diag[..., :1], diag[..., :-1]], axis=-1)
        small = (sub <= eps * (diag + prev)) | (ids == 0)
        h = tuple(where(sub_pos & small[..., :, None], zero, p) for p in h)
        hi = jnp.max(where(small, 0, ids), axis=-1)[..., None, None]  # last unreduced row
        lo = jnp.max(where(small & (ids <= hi[..., 0]), ids, 0), axis=-1)[..., None, None]
        live = hi > 0
        hi1 = jnp.maximum(hi - 1, 0)
        entries = [lax.complex(*(_take(p, r, c) for p in h)) for r, c in ((hi1, hi1), (hi1, hi), (hi, hi1), (hi, hi))]
        shift = _wilkinson_shift(*entries)
        shift = jnp.real(shift), jnp.imag(shift)

        def chase(k: Any, carry: tuple) -> tuple:
            h, z = carry
            first = k == lo
            km1 = jnp.maximum(k - 1, 0)
            x = tuple(where(first, _take(p, k, k) - sh, _take(p, k, km1)) for p, sh in zip(h, shift, strict=True))
            y = tuple(where(first, _take(p, k + 1, k), _take(p, k + 1, km1)) for p in h)
            return _rotate(h, z, k, x, y, live & (k >= lo) & (k < hi), where(first, -1, km1))

        return lax.fori_loop(0, n - 1, chase, (h, z))

    h, z = lax.fori_loop(0, QR_SWEEPS_PER_ROW * n + QR_SWEEPS_EXTRA, sweep, (h, z))
    t = lax.complex(*(where(rows > cols, zero, p) for p in h))
    return t, lax.complex(*z)


# -- eigenvectors of the Schur form ------------------------------------------------------------
def triangular_eigenvectors(t: jax.Array) -> jax.Array:
    """Columns x_k with t x_k = t_kk x_k, x_kk = 1, for an upper triangular ``t``: back
    substitution as LAPACK's ``trevc``, a divisor smaller than eps |t_kk| raised to it."""
    n = t.shape[-1]
    ids = _ids(n)
    rows, cols = ids[:, None], ids[None, :]
    diag = jnp.sum(jnp.where(rows == cols, t, 0), axis=-2, keepdims=True)  # (..., 1, n)
    eps, tiny = float(jnp.finfo(t.dtype).eps), float(jnp.finfo(t.dtype).tiny)
    smin = jnp.maximum(eps * jnp.abs(diag), tiny)

    def step(i: Index, x: jax.Array) -> jax.Array:
        t_row = jnp.where(cols > i, _at(t, i, -2), 0)
        denom = _at(diag, i, -1) - diag
        denom = jnp.where(jnp.abs(denom) < smin, smin.astype(t.dtype), denom)
        row = jnp.where(cols > i, -(t_row @ x) / denom, (cols == i).astype(t.dtype))
        return jnp.where(rows == i, row, x)

    x = jnp.broadcast_to((rows == cols).astype(t.dtype), t.shape)
    return lax.fori_loop(0, n, lambda r, x: step(n - 1 - r, x), x)  # a Loop: complex steps are large


def _normalized(v: jax.Array) -> jax.Array:
    """Columns of norm 1 whose largest-magnitude entry (the first of equals) is real positive."""
    mag = jnp.abs(v)
    norm = jnp.sqrt(jnp.sum(mag * mag, axis=-2, keepdims=True))
    big = jnp.argmax(mag, axis=-2, keepdims=True)
    lead = jnp.take_along_axis(v, big, axis=-2)
    phase = jnp.where(lead != 0, jnp.conj(lead) / jnp.where(lead != 0, jnp.abs(lead), 1).astype(v.dtype), 1)
    return v * phase / jnp.where(norm != 0, norm, 1).astype(v.dtype)


def eig(a: jax.Array, *, left: bool, right: bool) -> list[jax.Array]:
    """[values, left vectors (u^H a = w u^H) if ``left``, right vectors (a v = w v) if
    ``right``] of a square ``a``, complex, from its complex Schur form."""
    dtype = jnp.result_type(a.dtype, jnp.complex64)
    t, z = complex_schur(a.astype(dtype))
    n = a.shape[-1]
    ids = _ids(n)
    values = jnp.sum(jnp.where(ids[:, None] == ids[None, :], t, 0), axis=-1)
    out = [values]
    if left:  # right vectors of t^H, reversed into upper triangular form
        flip = lambda m: jnp.flip(m, axis=(-2, -1))  # noqa: E731
        y = flip(triangular_eigenvectors(flip(jnp.conj(_mT(t)))))
        out.append(_normalized(z @ y))
    if right:
        out.append(_normalized(z @ triangular_eigenvectors(t)))
    return out


def _static_size(ctx: LoweringContext, what: str) -> None:
    if jxi.is_symbolic_dim(ctx.aval_in.shape[-1]):
        raise ConversionError(
            f"{what} of a matrix with a symbolic size at {ctx.source_line or '<unknown location>'} is not supported; "
            "give the matrix a static size"
        )


EIG_OPS = ("Slice", "MatMul", "Mul", "Add", "Sub", "Div", "Sqrt", "Abs", "Where", "ReduceSum", "ReduceMax", "ArgMax", "Loop")


@lowering("eig", onnx_ops=EIG_OPS, complex_pairs=True)
def _eig(ctx: LoweringContext, a: ir.Value, *, compute_left_eigenvectors: bool, compute_right_eigenvectors: bool, **params: Any) -> list[ir.Value]:
    del params  # implementation, enable_eigvec_derivs: choices of JAX's backends and derivatives
    _static_size(ctx, "eig")
    if jxi.is_complex_dtype(ctx.aval_in.dtype):
        raise ConversionError(f"eig of a complex matrix at {ctx.source_line or '<unknown location>'} is not supported; real matrices are")
    fn = lambda a: eig(a, left=compute_left_eigenvectors, right=compute_right_eigenvectors)  # noqa: E731
    return lower_as_jax(ctx, fn, [a])


@lowering("schur", onnx_ops=EIG_OPS, complex_pairs=True)
def _schur(ctx: LoweringContext, a: ir.Value, *, compute_schur_vectors: bool, sort_eig_vals: bool, select_callable: Any) -> list[ir.Value]:
    _static_size(ctx, "schur")
    where_ = ctx.source_line or "<unknown location>"
    if not jxi.is_complex_dtype(ctx.aval_in.dtype):
        raise ConversionError(
            f"schur of a real matrix (the real quasi-triangular Schur form) at {where_} is not supported; "
            "use the complex form: jax.scipy.linalg.schur(a, output='complex')"
        )
    if sort_eig_vals or select_callable is not None:
        raise ConversionError(f"schur with sorted eigenvalues at {where_} is not supported")

    def fn(a: jax.Array) -> tuple[jax.Array, ...]:
        t, z = complex_schur(a)
        return (t, z) if compute_schur_vectors else (t,)

    return lower_as_jax(ctx, fn, [a])
