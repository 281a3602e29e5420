"""The real Schur form: Householder Hessenberg reduction + Francis double-shift QR (``dhseqr``),
with LAPACK's standardized 2x2 blocks."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax2onnx_nn.core.lowerings.lapack.complex_schur import schur_grid
from jax2onnx_nn.core.lowerings.lapack.hessenberg import hessenberg_q
from jax2onnx_nn.core.lowerings.lapack.householder import reflector
from jax2onnx_nn.core.lowerings.lapack.steps import index_range, mT, pick_where, where

# -- the real Schur form: Householder Hessenberg reduction + Francis double-shift QR -----------
# dlahqr's exceptional shifts: every KEXSH-th sweep without a deflation at the bottom of the
# active block, a shift from the block's top (bottom every 2 KEXSH-th), so that matrices on
# which the standard double shift cycles (a permutation's) converge.
KEXSH = 10
EXCEPTIONAL_DIAG, EXCEPTIONAL_OFF = 0.75, -0.4375
# LAPACK's bound: 30 sweeps per row of the matrix (at least 10 rows); a sweep is at most n-1
# reflector steps, and the loop below takes one step per iteration.
SWEEPS_PER_ROW = 30


def _column(m: jax.Array, j: Any) -> jax.Array:
    """m[..., :, j] as (..., n, 1) for a per-matrix index ``j`` (..., 1, 1)."""
    return pick_where(m, index_range(m.shape[-1])[None, :] == j, -1)


def _split(h: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Negligible subdiagonal entries (|h[i, i-1]| <= eps (|h[i-1, i-1]| + |h[i, i]|), the
    test of ``dlahqr``) set to 0; then the bottom-most unreduced block of 3 rows or more:
    (h, lo, hi, live), its rows lo..hi (..., 1, 1) and whether there is one. Blocks of 1 and 2
    rows are final (a 2x2 one is put into standard form at the end)."""
    n = h.shape[-1]
    ids = index_range(n)
    rows, cols = ids[:, None], ids[None, :]
    zero = jnp.zeros((), h.dtype)
    mag = jnp.abs(h)
    diag = jnp.sum(where(rows == cols, mag, zero), axis=-1)  # (..., n)
    sub = jnp.sum(where(rows == cols + 1, mag, zero), axis=-1)  # sub[i] = |h[i, i-1]|
    prev = jnp.concatenate([diag[..., :1], diag[..., :-1]], axis=-1)
    eps = float(jnp.finfo(h.dtype).eps)
    small = (sub <= eps * (diag + prev)) | (ids == 0)
    h = where((rows == cols + 1) & small[..., :, None], zero, h)
    small_prev = jnp.concatenate([jnp.ones_like(small[..., :1]), small[..., :-1]], axis=-1)
    none = jnp.zeros((), ids.dtype)
    hi = jnp.max(where(small | small_prev, none, ids), axis=-1)[..., None, None]
    lo = jnp.max(where(small & (ids <= hi[..., 0]), ids, none), axis=-1)[..., None, None]
    return h, lo, hi, hi > 0


def _window(m: jax.Array, i: jax.Array) -> jax.Array:
    """The 3x3 block m[..., i:i+3, i:i+3] for a per-matrix index ``i`` (..., 1, 1) (zero
    where it leaves the matrix), as two products with one-hot rows: a few nodes, where masked
    sums take several per entry. The sweeps' matrices are finite (a matrix with inf or NaN
    takes none), so the products' zeros meet no inf."""
    hot = (index_range(m.shape[-1])[None, :] == i + index_range(3)[:, None]).astype(
        m.dtype
    )  # (..., 3, n)
    return hot @ m @ mT(hot)


def _double_shift(
    h: jax.Array, lo: jax.Array, hi: jax.Array, sweeps: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(sum, product) of the two shifts of a Francis sweep on rows lo..hi, ``dlahqr``'s: the
    eigenvalues of the block's trailing 2x2 (a complex pair, or twice the real one nearer
    h[hi, hi]), an exceptional pair every KEXSH-th sweep without deflation; and the block's
    leading 3x3 (the sweep's first reflector reads it). All three over sigma (the sum over
    sigma, the product over sigma^2), the larger of that 3x3's magnitudes' sum and the shifts'
    scale: the sweep's first column is quadratic in them and only its direction matters, so a
    block below ~sqrt(tiny) of max |a| keeps it from underflowing (float32 1e-25, float64
    1e-200, the noise block of a matrix of ones: a zero column, no reflection, no convergence,
    and T and Z came out NaN)."""
    top, bottom_3 = _window(h, lo), _window(h, hi - 2)
    at = lambda w, i, j: w[..., i : i + 1, j : j + 1]  # noqa: E731
    h11, h12, h21, h22 = (
        at(bottom_3, 1, 1),
        at(bottom_3, 1, 2),
        at(bottom_3, 2, 1),
        at(bottom_3, 2, 2),
    )
    bottom = sweeps % (2 * KEXSH) == 0
    s = jnp.where(
        bottom,
        jnp.abs(h21) + jnp.abs(at(bottom_3, 1, 0)),
        jnp.abs(at(top, 1, 0)) + jnp.abs(at(top, 2, 1)),
    )
    exceptional = sweeps % KEXSH == 0
    diag = EXCEPTIONAL_DIAG * s + jnp.where(bottom, h22, at(top, 0, 0))
    h11, h12, h21, h22 = (
        jnp.where(exceptional, e, x)
        for e, x in ((diag, h11), (EXCEPTIONAL_OFF * s, h12), (s, h21), (diag, h22))
    )
    scale = jnp.abs(h11) + jnp.abs(h12) + jnp.abs(h21) + jnp.abs(h22)
    scale = jnp.where(scale == 0, 1, scale)
    h11, h12, h21, h22 = h11 / scale, h12 / scale, h21 / scale, h22 / scale
    tr = (h11 + h22) / 2
    det = (h11 - tr) * (h22 - tr) - h12 * h21
    rtdisc = jnp.sqrt(jnp.abs(det))
    near = jnp.where(
        jnp.abs(tr + rtdisc - h22) <= jnp.abs(tr - rtdisc - h22), tr + rtdisc, tr - rtdisc
    )
    pair = det >= 0  # complex conjugate shifts tr +- i rtdisc
    sigma = jnp.maximum(jnp.sum(jnp.abs(top), axis=(-2, -1), keepdims=True), scale)
    ratio = scale / sigma
    total = jnp.where(pair, 2 * tr, 2 * near) * ratio
    product = jnp.where(pair, tr * tr + det, near * near) * ratio * ratio
    return total, product, top / sigma


def _standard_blocks(
    a: jax.Array, b: jax.Array, c: jax.Array, d: jax.Array
) -> tuple[jax.Array, ...]:
    """``dlanv2`` on each 2x2 block [[a, b], [c, d]] (elementwise): (cs, sn, a, b, c, d) with
    block = [[cs, -sn], [sn, cs]] [[a', b'], [c', d']] [[cs, sn], [-sn, cs]], the new block
    upper triangular when its eigenvalues are real, else with a' = d' and b' c' < 0."""
    eps = float(jnp.finfo(a.dtype).eps)
    sign = lambda x: jnp.where(x >= 0, 1.0, -1.0).astype(a.dtype)  # noqa: E731  Fortran SIGN(1, x)
    zero, one = jnp.zeros_like(a), jnp.ones_like(a)
    temp = a - d
    p = temp / 2
    bcmax = jnp.maximum(jnp.abs(b), jnp.abs(c))
    bcmis = jnp.minimum(jnp.abs(b), jnp.abs(c)) * sign(b) * sign(c)
    scale = jnp.maximum(jnp.abs(p), bcmax)
    z = (p / scale) * p + (bcmax / scale) * bcmis
    # real eigenvalues, well apart: one rotation to upper triangular form
    zr = p + sign(p) * jnp.sqrt(scale) * jnp.sqrt(jnp.maximum(z, 0))
    tau = jnp.hypot(c, zr)
    real = (d + zr, b - c, zero, d - (bcmax / zr) * bcmis, zr / tau, c / tau)
    # complex (or nearly equal real) eigenvalues: make the diagonal entries equal
    sigma = b + c
    tau = jnp.hypot(sigma, temp)
    cs = jnp.sqrt((1 + jnp.abs(sigma) / tau) / 2)
    sn = -(p / (tau * cs)) * sign(sigma)
    aa, bb, cc, dd = a * cs + b * sn, -a * sn + b * cs, c * cs + d * sn, -c * sn + d * cs
    a2, b2, c2, d2 = aa * cs + cc * sn, bb * cs + dd * sn, -aa * sn + cc * cs, -bb * sn + dd * cs
    mean = (a2 + d2) / 2
    sab, sac = jnp.sqrt(jnp.abs(b2)), jnp.sqrt(jnp.abs(c2))
    root = sign(c2) * sab * sac
    tau1 = 1 / jnp.sqrt(jnp.abs(b2 + c2))
    cs1, sn1 = sab * tau1, sac * tau1
    split = (
        mean + root,
        b2 - c2,
        zero,
        mean - root,
        cs * cs1 - sn * sn1,
        cs * sn1 + sn * cs1,
    )  # real after all
    flip = (mean, -c2, zero, mean, -sn, cs)  # b2 = 0: swap
    equal = (mean, b2, c2, mean, cs, sn)
    same_sign = (c2 != 0) & (b2 != 0) & (sign(b2) == sign(c2))
    cplx = tuple(
        jnp.where(same_sign, s, jnp.where((c2 != 0) & (b2 == 0), f, e))
        for s, f, e in zip(split, flip, equal, strict=True)
    )
    general = tuple(jnp.where(z >= 4 * eps, r, x) for r, x in zip(real, cplx, strict=True))
    keep = (a, b, c, d, one, zero)
    swap = (d, -c, zero, a, zero, one)
    standard = (c == 0) | ((temp == 0) & (sign(b) != sign(c)))
    out = tuple(
        jnp.where(standard, k, jnp.where(b == 0, s, g))
        for k, s, g in zip(keep, swap, general, strict=True)
    )
    return out[4], out[5], *out[:4]


def real_schur(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(t, z) with a = z t z^T, t quasi upper triangular (1x1 blocks for real eigenvalues,
    standard 2x2 blocks [[x, b], [c, x]], b c < 0, for complex pairs) and z orthogonal, for a
    real ``a`` (..., n, n) of static size, as ``dgees``: Hessenberg form (``gehrd``), then
    Francis double-shift QR steps (``dlahqr``) in one loop that runs until every matrix of the
    batch has converged, one reflector per iteration (each matrix at its own position of its
    own sweep), then ``dlanv2`` on the 2x2 blocks. A matrix that does not converge within
    LAPACK's number of sweeps is NaN, as JAX's result when gees fails, and so is one with an
    inf or NaN entry (JAX's T is NaN then; its Z is partly so)."""
    n, ids, rows, cols, eye = schur_grid(a)
    if n < 2:
        return a, eye
    zero = jnp.zeros((), a.dtype)
    h, z = hessenberg_q(a) if n > 2 else (a, eye)
    index = jnp.zeros((*a.shape[:-2], 1, 1), jnp.int32)
    finite = jnp.all(
        jnp.isfinite(a), axis=(-2, -1), keepdims=True
    )  # else NaN, as JAX's T: no sweeps

    def step(carry: tuple) -> tuple:
        h, z, k, lo, hi, total, product, top, sweeps, live, it = carry
        start = k >= hi  # the sweep is over (or none began): deflate and begin the next one
        h_split, lo_new, hi_new, live_new = _split(h)
        sweeps_new = jnp.where(hi_new == hi, sweeps + 1, 1)
        total_new, product_new, top_new = _double_shift(h_split, lo_new, hi_new, sweeps_new)
        h = where(start, h_split, h)
        live_new = live_new & finite
        lo, hi, live, sweeps, k = (
            jnp.where(start, new, old)
            for new, old in (
                (lo_new, lo),
                (hi_new, hi),
                (live_new, live),
                (sweeps_new, sweeps),
                (lo_new, k),
            )
        )
        total, product, top = (
            jnp.where(start, new, old)
            for new, old in ((total_new, total), (product_new, product), (top_new, top))
        )
        # the reflector's column: the shift polynomial's first column at the sweep's start,
        # else the bulge below the subdiagonal in column k-1; rows k..min(k+2, hi)
        first = k == lo
        h_ll, h_l1, h_1l, h_11, h_21 = (
            top[..., i : i + 1, j : j + 1] for i, j in ((0, 0), (0, 1), (1, 0), (1, 1), (2, 1))
        )
        head = (
            h_ll * h_ll + h_l1 * h_1l - total * h_ll + product,
            h_1l * (h_ll + h_11 - total),
            h_1l * h_21,
        )
        start_col = where(
            rows == lo,
            head[0],
            where(rows == lo + 1, head[1], where(rows == lo + 2, head[2], zero)),
        )
        window = (rows >= k) & (rows <= jnp.minimum(k + 2, hi))
        x = where(first, start_col, where(window, _column(h, k - 1), zero))
        tail = window & (rows > k)
        v, tau, beta = reflector(x, k, tail)
        tau = where(live, tau, zero)
        h = h - (tau * v) * (mT(v) @ h)
        bulge = live & ~first & (cols == k - 1)
        h = where(bulge & tail, zero, where(bulge & (rows == k), beta, h))
        h = h - (h @ v) * (tau * mT(v))
        z = z - (z @ v) * (tau * mT(v))
        return h, z, k + 1, lo, hi, total, product, top, sweeps, live, it + 1

    limit = SWEEPS_PER_ROW * max(10, n) * (n - 1)
    scalar = jnp.zeros(index.shape, a.dtype)
    init = (
        h,
        z,
        index + n,
        index,
        index,
        scalar,
        scalar,
        jnp.zeros((*a.shape[:-2], 3, 3), a.dtype),
        index,
        finite,
        jnp.zeros((), jnp.int32),
    )
    h, z, *_, live, _ = lax.while_loop(lambda c: jnp.any(c[-2]) & (c[-1] < limit), step, init)
    h, _, _, live = _split(h)  # the last sweep's deflations; live: not converged
    h = where(rows > cols + 1, zero, h)

    # the 2x2 blocks in standard form: one rotation each (blocks are disjoint: one product)
    def diag(off):
        return jnp.sum(where(cols == rows + off, h, zero), axis=-2)[
            ..., max(off, 0) : n + min(off, 0)
        ]

    cs, sn, ba, bb, bc, bd = _standard_blocks(
        diag(0)[..., :-1], diag(1), diag(-1), diag(0)[..., 1:]
    )
    block = diag(-1) != 0  # (..., n-1): a block on rows j, j+1
    first_row = jnp.pad(block, [(0, 0)] * (block.ndim - 1) + [(0, 1)])  # (..., n) by row
    second_row = jnp.pad(block, [(0, 0)] * (block.ndim - 1) + [(1, 0)])
    pad_end = lambda x, fill: jnp.concatenate([x, jnp.full_like(x[..., :1], fill)], axis=-1)  # noqa: E731
    pad_start = lambda x, fill: jnp.concatenate([jnp.full_like(x[..., :1], fill), x], axis=-1)  # noqa: E731
    one = jnp.ones((), a.dtype)
    g_diag = where(first_row, pad_end(cs, 1), where(second_row, pad_start(cs, 1), one))  # by column
    g_up = where(second_row, pad_start(-sn, 0), zero)  # g[j, j+1] = -sn, by column j+1
    g_low = where(first_row, pad_end(sn, 0), zero)  # g[j+1, j] = sn, by column j
    g = where(
        rows == cols,
        g_diag[..., None, :],
        where(
            rows + 1 == cols, g_up[..., None, :], where(rows == cols + 1, g_low[..., None, :], zero)
        ),
    )
    t = mT(g) @ h @ g
    z = z @ g
    # the blocks' entries exactly as dlanv2 gives them (the product leaves rounding there)
    t_diag = where(
        first_row,
        pad_end(ba, 0),
        where(second_row, pad_start(bd, 0), jnp.sum(where(rows == cols, t, zero), axis=-2)),
    )
    t = where(rows == cols, t_diag[..., None, :], t)
    t = where((rows + 1 == cols) & second_row[..., None, :], pad_start(bb, 0)[..., None, :], t)
    t = where((rows == cols + 1) & first_row[..., None, :], pad_end(bc, 0)[..., None, :], t)
    t = where(rows > cols + 1, zero, t)
    nan = jnp.full((), jnp.nan, a.dtype)
    failed = live | ~finite
    return where(failed, nan, t), where(failed, nan, z)
