"""``geev``'s eigenvectors of a real matrix from its real Schur form: ``dtrevc3``'s
substitution on the quasi-triangular T (x_kk = 1 for a real eigenvalue, a complex pair's 2x2
block solved as dtrevc3 starts it; upward for right vectors, forward on T^T for left ones),
back-transformed by Z, then ``gebak`` and geev's normalisation (unit 2-norm, a pair's
largest entry made real by ``dlartg``'s rotation)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jax2onnx_nn.core.lowerings.lapack.balance import back_rows, scaling_bound
from jax2onnx_nn.core.lowerings.lapack.complex_schur import Parts
from jax2onnx_nn.core.lowerings.lapack.steps import (
    Index,
    at_index,
    first_argmax,
    index_range,
    mT,
    where,
)


def _shifted(v: jax.Array, offset: int) -> jax.Array:
    """v[..., k + offset] along the last axis at position k, 0 where that leaves the vector."""
    n = v.shape[-1]
    zeros = jnp.zeros((*v.shape[:-1], min(abs(offset), n)), v.dtype)
    if offset >= 0:
        return jnp.concatenate([v[..., offset:], zeros], axis=-1)
    return jnp.concatenate([zeros, v[..., : n + offset]], axis=-1)


def _divide(nr: jax.Array, ni: jax.Array, er: jax.Array, ei: jax.Array) -> Parts:
    """(nr + i ni) / (er + i ei) on parts, the divisor scaled by its largest part first."""
    scale = jnp.maximum(jnp.abs(er), jnp.abs(ei))
    er, ei = er / scale, ei / scale
    q = (er * er + ei * ei) * scale
    return (nr * er + ni * ei) / q, (ni * er - nr * ei) / q


def _times(ar: jax.Array, ai: jax.Array, br: jax.Array, bi: jax.Array) -> Parts:
    return ar * br - ai * bi, ar * bi + ai * br


def schur_blocks(t: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(wr, wi, first, second) of a real Schur form t (..., n, n), each (..., 1, n) by column:
    the eigenvalues as dlahqr gives them (a pair's block [[x, b], [c, x]]: x +- i
    sqrt(|b|) sqrt(|c|), + first) and whether a column is a pair's first or second."""
    n = t.shape[-1]
    ids = index_range(n)
    rows, cols = ids[:, None], ids[None, :]
    zero = jnp.zeros((), t.dtype)
    wr = jnp.sum(where(rows == cols, t, zero), axis=-2, keepdims=True)
    sub = mT(jnp.sum(where(rows == cols + 1, t, zero), axis=-1, keepdims=True))  # t[k, k-1]
    sup = jnp.sum(where(rows + 1 == cols, t, zero), axis=-2, keepdims=True)  # t[k-1, k]
    second = sub != 0
    first = _shifted(second, 1)
    root = jnp.sqrt(jnp.abs(sub)) * jnp.sqrt(jnp.abs(sup))  # at the second column of a pair
    wi = where(second, -root, where(first, _shifted(root, 1), zero))
    return wr, wi, first, second


def right_eigenvectors(t: jax.Array) -> Parts:
    """X as (real, imag) parts, its column k solving (t - w_k) x = 0 as ``dtrevc3`` does: a
    real eigenvalue's x_kk = 1, a pair's (x_p, x_q) = (1, i wi / t[p, q]) when |t[p, q]| >=
    |t[q, p]|, else (-wi / t[q, p], i) (the w = wr + i wi of the pair's first column, its
    second column the conjugate); then upward substitution through t's 1x1 and 2x2 blocks,
    each updating the rows above by its column (daxpy), a divisor below eps |w| raised to it
    (dlaln2's smin) and a column scaled down where an entry would pass a bound."""
    n = t.shape[-1]
    ids = index_range(n)
    rows, cols = ids[:, None], ids[None, :]
    zero, one = jnp.zeros((), t.dtype), jnp.ones((), t.dtype)
    info = jnp.finfo(t.dtype)
    eps, tiny = float(info.eps), float(info.tiny)
    growth = 2.0 ** ((info.maxexp - scaling_bound(t.dtype)) // 2)
    wr, wi, first, second = schur_blocks(t)
    wi = jnp.abs(wi)  # both columns of a pair solve for wr + i |wi|; the second is conjugated
    smin = jnp.maximum(eps * (jnp.abs(wr) + wi), tiny)
    top = cols - second.astype(jnp.int32)  # the first row of column k's block
    # a pair's columns p (first), q = p + 1: t's columns p and q at both of them
    tp = where(second, _shifted(t, -1), t)
    tq = where(first, _shifted(t, 1), t)
    b = jnp.sum(where(rows == top, tq, zero), axis=-2, keepdims=True)  # t[p, q]
    c = jnp.sum(where(rows == top + 1, tp, zero), axis=-2, keepdims=True)  # t[q, p]
    pair = first | second
    big = jnp.abs(b) >= jnp.abs(c)
    safe_b, safe_c = where(pair & big, b, one), where(pair & ~big, c, one)
    x1 = where(pair & ~big, -wi / safe_c, one)  # real part at row p
    x2 = where(pair & big, wi / safe_b, one)  # imaginary part at row q
    xr = where(rows == top, x1, where(rows < top, -x1 * tp, zero))
    xi = where(pair & (rows == top + 1), x2, where(pair & (rows < top), -x2 * tq, zero))

    def step(j: Index, x: Parts) -> Parts:
        xr, xi = x
        below = jnp.maximum(j - 1, 0)
        djj = at_index(at_index(t, j, -2), j, -1)  # (..., 1, 1)
        sec = at_index(second, j, -1)
        fir = at_index(first, j, -1)
        active = top > j
        lone = active & ~sec & ~fir
        two = active & sec
        a11 = at_index(at_index(t, below, -2), below, -1)
        a12 = at_index(at_index(t, below, -2), j, -1)
        a21 = at_index(at_index(t, j, -2), below, -1)
        r2 = (at_index(xr, j, -2), at_index(xi, j, -2))
        r1 = (at_index(xr, below, -2), at_index(xi, below, -2))
        e2 = (djj - wr, -wi)  # t_jj - w
        e1 = (a11 - wr, -wi)
        # 1x1: x_j = r_j / e2; 2x2: adj(C) r / det(C), C = [[e1, a12], [a21, e2]]
        det = _times(*e1, *e2)
        det = (where(two, det[0] - a12 * a21, e2[0]), where(two, det[1], e2[1]))
        y2 = _times(*e1, *r2)
        y2 = (where(two, y2[0] - a21 * r1[0], r2[0]), where(two, y2[1] - a21 * r1[1], r2[1]))
        y1 = _times(*e2, *r1)
        y1 = (y1[0] - a12 * r2[0], y1[1] - a12 * r2[1])
        size = jnp.maximum(jnp.abs(det[0]), jnp.abs(det[1]))
        cmax = where(
            two,
            jnp.maximum(
                jnp.maximum(jnp.abs(e1[0]) + wi, jnp.abs(e2[0]) + wi),
                jnp.maximum(jnp.abs(a12), jnp.abs(a21)),
            ),
            one,
        )
        floor = smin * cmax
        small = size < floor
        det = (where(small, floor, det[0]), where(small, zero, det[1]))
        size = where(small, floor, size)
        # |y / det| <= 2 max|y| / size: a column whose new entries would pass growth is scaled
        # by growth size / that first (a vector's scale is free)
        reach = jnp.maximum(jnp.abs(y2[0]), jnp.abs(y2[1]))
        reach = where(two, jnp.maximum(reach, jnp.maximum(jnp.abs(y1[0]), jnp.abs(y1[1]))), reach)
        bar = growth * size
        shrink = where((lone | two) & (reach > bar), bar / where(reach == 0, one, reach), one)
        xr, xi = xr * shrink, xi * shrink
        s2 = _divide(y2[0] * shrink, y2[1] * shrink, *det)
        s1 = _divide(y1[0] * shrink, y1[1] * shrink, *det)
        col_j, col_b = at_index(t, j, -1), at_index(t, below, -1)  # (..., n, 1)
        solved = lone | two
        low = where(two, below, j)
        upd_r = where(solved, s2[0], zero) * col_j + where(two, s1[0], zero) * col_b
        upd_i = where(solved, s2[1], zero) * col_j + where(two, s1[1], zero) * col_b
        xr = where(rows < low, xr - upd_r, xr)
        xi = where(rows < low, xi - upd_i, xi)
        xr = where(solved & (rows == j), s2[0], where(two & (rows == below), s1[0], xr))
        xi = where(solved & (rows == j), s2[1], where(two & (rows == below), s1[1], xi))
        return xr, xi

    xr, xi = lax.fori_loop(0, n, lambda r, x: step(n - 1 - r, x), (xr, xi))  # a Loop
    return xr, where(second, -xi, xi)


def _reversed(m: jax.Array) -> jax.Array:
    """m with its rows and columns in reverse order: of t^T, an upper quasi-triangular matrix
    with t's 2x2 blocks, each block's t[p, q] and t[q, p] in the same places."""
    return jnp.flip(m, axis=(-2, -1))


def _left_from_reversed(t: jax.Array, x: Parts) -> Parts:
    """Y as (real, imag) parts, its column k solving y^H t = w_k y^H as ``dtrevc3``'s left
    side does (forward substitution on t^T: a real eigenvalue's y_kk = 1, a pair's (y_p, y_q)
    = (wi / t[p, q], i) when |t[p, q]| >= |t[q, p]|, else (1, -i wi / t[q, p]); the pair's
    second column the conjugate), from the right vectors ``x`` of t^T reversed: reversed
    back, that substitution is the same one; its start at a pair, (1, i wi / t[p, q]) or
    (-wi / t[q, p], i) on the reversed rows, is dtrevc3's left one times -i, conjugated, so
    the pair's first column is multiplied by i and its second by -i."""
    _, _, first, second = schur_blocks(t)
    xr, xi = _reversed(x[0]), _reversed(x[1])
    return where(first, -xi, where(second, xi, xr)), where(first, xr, where(second, -xr, xi))


def normalized(v: Parts) -> jax.Array:
    """geev's normalisation of the columns of v (parts): unit 2-norm, then the entry of largest
    |.|^2 (the first of equals) rotated real with the sign of its real part (``dlartg``: cs =
    |f| / r, sn = g / (sign(f) r)), the rotation being exactly 1 on a real column."""
    vr, vi = v
    one = jnp.ones((), vr.dtype)
    peak = jnp.max(jnp.maximum(jnp.abs(vr), jnp.abs(vi)), axis=-2, keepdims=True)
    peak = where(peak == 0, one, peak)  # scaled first, as dnrm2 does: no square leaves range
    vr, vi = vr / peak, vi / peak
    norm = jnp.sqrt(
        jnp.sum(vr * vr, axis=-2, keepdims=True) + jnp.sum(vi * vi, axis=-2, keepdims=True)
    )
    inv = one / where(norm == 0, one, norm)
    vr, vi = vr * inv, vi * inv
    big = first_argmax(vr * vr + vi * vi, axis=-2)
    f = jnp.take_along_axis(vr, big, axis=-2)
    g = jnp.take_along_axis(vi, big, axis=-2)
    d = jnp.sqrt(f * f + g * g)
    nil = d == 0
    r = where(f < 0, -d, d)
    cs = where(nil, one, jnp.abs(f) / where(nil, one, d))
    sn = where(nil, jnp.zeros((), vr.dtype), g / where(nil, one, r))
    rows = index_range(vr.shape[-2])[:, None]
    new_r, new_i = vr * cs + vi * sn, vi * cs - vr * sn
    new_i = where(rows == big, jnp.zeros((), vr.dtype), new_i)
    return lax.complex(new_r, new_i)


def real_eig(
    t: jax.Array,
    z: jax.Array,
    inverse: jax.Array | None,
    d: jax.Array | None,
    *,
    left: bool,
    right: bool,
) -> list[jax.Array]:
    """geev's [left vectors if ``left``, right vectors if ``right``] (complex, columns) of the
    balanced matrix with real Schur form (t, z), ``gebak`` undoing its balancing
    (``inverse`` permutation, scaling ``d``: right vectors' rows times d, left ones' over d).
    Both sides are one substitution (one Loop) over t and t^T reversed, stacked."""
    sides = [True] * left + [False] * right  # whether each is the left one
    if not sides:
        return []
    # t^T reversed is solved as right vectors: both sides stacked, one substitution loop
    stacked = [_reversed(mT(t)) if is_left else t for is_left in sides]
    if len(sides) == 1:
        solved = [right_eigenvectors(stacked[0])]
    else:
        xr, xi = right_eigenvectors(jnp.stack(stacked))
        solved = [(xr[k], xi[k]) for k in range(len(sides))]
    out = []
    for is_left, x in zip(sides, solved, strict=True):
        x = _left_from_reversed(t, x) if is_left else x
        vr, vi = z @ x[0], z @ x[1]
        if inverse is not None and d is not None:
            scale = 1 / d if is_left else d  # gebak: a left vector's rows over the scaling
            vr, vi = back_rows(vr, inverse, scale), back_rows(vi, inverse, scale)
        out.append(normalized((vr, vi)))
    return out
