"""The complex Schur form as LAPACK's ``zgees`` / ``zgeev`` compute it (so JAX's eigenvalue
order, T and Z): ``zgehd2`` + ``zung2r`` (complex Householder reflectors, ``zlarfg``), then
``zlahqr``'s single-shift QR, one Loop iteration per sweep or deflation of each matrix, as
``schur.py`` follows ``dlahqr``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jax2onnx_nn.core.lowerings.lapack.complex_schur import Parts, cmul, schur_grid
from jax2onnx_nn.core.lowerings.lapack.schur import (
    KEXSH,
    SWEEPS_PER_ROW,
    diagonals,
    lapack_constants,
    moved,
    nrm2,
    reciprocal,
)
from jax2onnx_nn.core.lowerings.lapack.steps import index_range, mT, pick_where, where

# Largest static size that takes this path (above it, complex_schur's Givens sweeps): the
# sweep is unrolled over the n - 1 static positions, so a Loop body grows as n^2.
GEES_LIMIT = 16
# zlahqr's exceptional shift: h[k, k] + DAT1 |h[k, k-1]| at the block's bottom or top
DAT1 = 0.75


# -- complex arithmetic on (real, imag) parts, as gfortran compiles it (no fused multiply-adds) --
def _conj(a: Parts) -> Parts:
    return a[0], -a[1]


def _sub(a: Parts, b: Parts) -> Parts:
    return a[0] - b[0], a[1] - b[1]


def _real_times(s: jax.Array, a: Parts) -> Parts:
    return s * a[0], s * a[1]


def _over(a: Parts, s: jax.Array) -> Parts:
    """a / s for a real s: each part divided (gfortran's complex by real division)."""
    return a[0] / s, a[1] / s


def _cabs1(a: Parts) -> jax.Array:
    return jnp.abs(a[0]) + jnp.abs(a[1])


def _select(which: jax.Array, a: Parts, b: Parts) -> Parts:
    return where(which, a[0], b[0]), where(which, a[1], b[1])


def _ladiv2(
    a: jax.Array, b: jax.Array, c: jax.Array, d: jax.Array, r: jax.Array, t: jax.Array
) -> jax.Array:
    br = b * r
    return where(
        r != 0,
        where(br != 0, (a + br) * t, a * t + (b * t) * r),
        (a + d * (b / where(c != 0, c, jnp.ones((), c.dtype)))) * t,
    )


def _ladiv(num: Parts, den: Parts) -> Parts:
    """num / den as ``zladiv`` (``dladiv``: Baudin and Smith's robust division; its rescaling
    of operands near over- or underflow left out: the matrix comes scaled by a power of two)."""
    a, b = num
    c, d = den
    swap = jnp.abs(d) > jnp.abs(c)
    aa, bb = where(swap, b, a), where(swap, a, b)
    cc, dd = where(swap, d, c), where(swap, c, d)
    safe = where(cc != 0, cc, jnp.ones((), cc.dtype))
    r = dd / safe
    t = reciprocal(cc + dd * r)
    p = _ladiv2(aa, bb, cc, dd, r, t)
    q = _ladiv2(bb, -aa, cc, dd, r, t)
    return p, where(swap, -q, q)


def _abs(a: Parts) -> jax.Array:
    """|a| as the libm hypot that gfortran's ABS of a complex calls (correctly rounded)."""
    return nrm2(a[0], a[1])


def _sqrt(z: Parts) -> Parts:
    """The principal square root as glibc's csqrt computes it (in the normal range)."""
    x, y = z
    zero, one = jnp.zeros((), x.dtype), jnp.ones((), x.dtype)
    d = _abs(z)
    positive = x > 0
    big = jnp.sqrt(0.5 * where(positive, d + x, d - x))  # r for x > 0, else s
    other = 0.5 * (y / where(big != 0, big, one))
    r = where(positive, big, jnp.abs(other))
    s = where(positive, other, where(y < 0, -big, big))
    # y = 0: sqrt(x) real, or i sqrt(-x)
    root = jnp.sqrt(jnp.abs(x))
    real_axis = y == 0
    r = where(real_axis, where(x < 0, zero, root), r)
    s = where(real_axis, where(x < 0, root, zero), s)
    return r, s


def _dlapy3(x: jax.Array, y: jax.Array, z: jax.Array) -> jax.Array:
    xa, ya, za = jnp.abs(x), jnp.abs(y), jnp.abs(z)
    w = jnp.maximum(jnp.maximum(xa, ya), za)
    safe = where(w == 0, jnp.ones((), x.dtype), w)
    return where(
        w == 0, xa + ya + za, w * jnp.sqrt((xa / safe) ** 2 + (ya / safe) ** 2 + (za / safe) ** 2)
    )


def _larfg(alpha: Parts, xnorm: jax.Array) -> tuple[Parts, Parts, jax.Array, jax.Array]:
    """``zlarfg``'s (tau, scal, beta, trivial) for the pivot ``alpha`` and the 2-norm of the
    rest: the reflector's vector is the rest times scal = 1 / (alpha - beta) (``zladiv``),
    beta real; ``trivial`` (rest 0, alpha real): tau = 0, nothing changes."""
    ar, ai = alpha
    zero, one = jnp.zeros((), ar.dtype), jnp.ones((), ar.dtype)
    trivial = (xnorm == 0) & (ai == 0)
    norm = _dlapy3(ar, ai, xnorm)
    beta = where(ar >= 0, -norm, norm)
    safe = where(trivial, one, beta)
    tau = where(trivial, zero, (beta - ar) / safe), where(trivial, zero, -ai / safe)
    scal = _ladiv((one, zero), (where(trivial, one, ar - beta), where(trivial, zero, ai)))
    return tau, scal, beta, trivial


# -- zgehd2 + zung2r: the Hessenberg form and its unitary Q ------------------------------------
def _hessenberg(a: Parts) -> tuple[Parts, Parts]:
    """(h, q) with a = q h q^H, h upper Hessenberg with a real subdiagonal, as ``zgehd2`` (n - 1
    reflectors, the last a 1x1 one that makes h[n-1, n-2] real) and ``zung2r``."""
    ar, _ = a
    n = ar.shape[-1]
    ids = index_range(n)
    rows, cols = ids[:, None], ids[None, :]
    zero = jnp.zeros((), ar.dtype)
    h = a
    reflectors = []
    for j in range(n - 1):
        col = (h[0][..., :, j : j + 1], h[1][..., :, j : j + 1])  # (..., n, 1)
        alpha = (col[0][..., j + 1 : j + 2, :], col[1][..., j + 1 : j + 2, :])
        tail = rows > j + 1
        rest = _select(tail, col, (zero, zero))
        xnorm = jnp.sqrt(
            jnp.sum(rest[0] * rest[0] + rest[1] * rest[1], axis=-2, keepdims=True)
        )  # dznrm2
        tau, scal, beta, trivial = _larfg(alpha, xnorm)
        scaled = cmul(scal, rest)  # zscal
        v = (
            where(rows == j + 1, jnp.ones((), ar.dtype), where(trivial, zero, scaled[0])),
            where(trivial, zero, scaled[1]),
        )
        # zlarf('Right', tau): w = h v, h += w (-tau conj(v))^T (zgemv, zgerc)
        w = (h[0] @ v[0] - h[1] @ v[1], h[0] @ v[1] + h[1] @ v[0])
        temp = cmul((-tau[0], -tau[1]), _conj((mT(v[0]), mT(v[1]))))
        h = (h[0] + (w[0] * temp[0] - w[1] * temp[1]), h[1] + (w[0] * temp[1] + w[1] * temp[0]))
        # zlarf('Left', conj(tau)) on columns j+1..: y = h^H v, h += v (-tau conj(y))^T
        y = (mT(h[0]) @ v[0] + mT(h[1]) @ v[1], mT(h[0]) @ v[1] - mT(h[1]) @ v[0])  # (..., n, 1)
        temp = cmul((-tau[0], tau[1]), _conj((mT(y[0]), mT(y[1]))))
        left = (h[0] + (v[0] * temp[0] - v[1] * temp[1]), h[1] + (v[0] * temp[1] + v[1] * temp[0]))
        h = _select(cols > j, left, h)
        head = (where(trivial, alpha[0], beta), where(trivial, alpha[1], zero))
        h = _select(
            cols == j,
            _select(rows == j + 1, head, _select(tail, (zero, zero), h)),
            h,
        )
        reflectors.append((v, tau))
    # zung2r: q = H(0) H(1) ... H(n-2), accumulated from the last
    eye = jnp.broadcast_to((rows == cols).astype(ar.dtype), ar.shape)
    q = (eye, jnp.zeros_like(eye))
    for v, tau in reversed(reflectors):
        y = (mT(q[0]) @ v[0] + mT(q[1]) @ v[1], mT(q[0]) @ v[1] - mT(q[1]) @ v[0])
        temp = cmul((-tau[0], -tau[1]), _conj((mT(y[0]), mT(y[1]))))
        q = (q[0] + (v[0] * temp[0] - v[1] * temp[1]), q[1] + (v[0] * temp[1] + v[1] * temp[0]))
    return h, q


# -- zlahqr ------------------------------------------------------------------------------------
def _negligible(d: Parts, sub: Parts, sup: Parts, ulp: float, smlnum: float) -> jax.Array:
    """Per row k, whether ``zlahqr`` takes h[k, k-1] as negligible (row 0 always)."""
    n = d[0].shape[-1]
    ids = index_range(n)
    hk, up = _cabs1(sub), _cabs1(sup)
    prev = (moved(d[0], -1), moved(d[1], -1))
    tst = _cabs1(prev) + _cabs1(d)
    tst = where(tst == 0, tst + jnp.abs(moved(sub[0], -1)) + jnp.abs(moved(sub[0], 1)), tst)
    ab, ba = jnp.maximum(hk, up), jnp.minimum(hk, up)
    diff = _cabs1(_sub(prev, d))
    aa, bb = jnp.maximum(_cabs1(d), diff), jnp.minimum(_cabs1(d), diff)
    s = aa + ab
    s = where(s == 0, jnp.ones((), s.dtype), s)
    tisseur = ba * (ab / s) <= jnp.maximum(smlnum, ulp * (bb * (aa / s)))
    return (hk <= smlnum) | ((jnp.abs(sub[0]) <= ulp * tst) & tisseur) | (ids == 0)


def _shift(
    d: Parts, sub: Parts, sup: Parts, lo: jax.Array, hi: jax.Array, kdefl: jax.Array
) -> Parts:
    """``zlahqr``'s shift: Wilkinson's from the trailing 2x2 of the block lo..hi, or an
    exceptional one at every KEXSH-th sweep since the last deflation."""
    ids = index_range(d[0].shape[-1])
    one = jnp.ones((), d[0].dtype)

    def at(v: Parts, i: jax.Array) -> Parts:
        return pick_where(v[0], ids == i, -1), pick_where(v[1], ids == i, -1)

    hii, sub_i = at(d, hi), at(sub, hi)
    u = cmul(_sqrt(at(sup, hi)), _sqrt(sub_i))
    s = _cabs1(u)
    x = _real_times(jnp.asarray(0.5, d[0].dtype), _sub(at(d, hi - 1), hii))
    sx = _cabs1(x)
    s = jnp.maximum(s, sx)
    safe = where(s == 0, one, s)
    xs, us = _over(x, safe), _over(u, safe)
    xx, uu = cmul(xs, xs), cmul(us, us)
    y = _real_times(safe, _sqrt((xx[0] + uu[0], xx[1] + uu[1])))
    xsx = _over(x, where(sx > 0, sx, one))
    flip = (sx > 0) & (xsx[0] * y[0] + xsx[1] * y[1] < 0)
    y = _select(flip, (-y[0], -y[1]), y)
    xy = (x[0] + y[0], x[1] + y[1])
    nonzero = (xy[0] != 0) | (xy[1] != 0)
    q = cmul(u, _ladiv(u, (where(nonzero, xy[0], one), xy[1])))
    wilkinson = _select(_cabs1(u) != 0, _sub(hii, q), hii)
    bottom = kdefl % (2 * KEXSH) == 0
    top = (kdefl % KEXSH == 0) & ~bottom
    lo_d, lo_sub = at(d, lo), at(sub, lo + 1)
    es = DAT1 * jnp.abs(where(bottom, sub_i[0], lo_sub[0]))
    exceptional = (es + where(bottom, hii[0], lo_d[0]), where(bottom, hii[1], lo_d[1]))
    return _select(bottom | top, exceptional, wilkinson)


def _sweep_start(
    d: Parts, sub: Parts, lo: jax.Array, hi: jax.Array, t: Parts, ulp: float
) -> tuple[jax.Array, Parts, jax.Array]:
    """``zlahqr``'s row m where the sweep starts (the lowest in lo..hi-1 where starting would
    leave h[m, m-1] negligible, else lo) and its first vector (h11s, h21), for every m at once."""
    ids = index_range(d[0].shape[-1])
    one = jnp.ones((), d[0].dtype)
    h22 = (moved(d[0], 1), moved(d[1], 1))
    h11s = _sub(d, t)
    h21 = moved(sub[0], 1)
    s = _cabs1(h11s) + jnp.abs(h21)
    s = where(s == 0, one, s)
    h11s, h21 = _over(h11s, s), h21 / s
    ok = jnp.abs(sub[0]) * jnp.abs(h21) <= ulp * (_cabs1(h11s) * (_cabs1(d) + _cabs1(h22)))
    ok = ((ids == lo) | ok) & (ids >= lo) & (ids <= hi - 1)
    m = jnp.max(where(ok, ids, -1), axis=-1, keepdims=True)
    hit = ids == m
    return m, (pick_where(h11s[0], hit, -1), pick_where(h11s[1], hit, -1)), pick_where(h21, hit, -1)


def _rows(h: Parts, p: int) -> tuple[Parts, Parts]:
    return (h[0][..., p : p + 1, :], h[1][..., p : p + 1, :]), (
        h[0][..., p + 1 : p + 2, :],
        h[1][..., p + 1 : p + 2, :],
    )


def _cols(h: Parts, p: int) -> tuple[Parts, Parts]:
    return (h[0][..., :, p : p + 1], h[1][..., :, p : p + 1]), (
        h[0][..., :, p + 1 : p + 2],
        h[1][..., :, p + 1 : p + 2],
    )


def _put(x: jax.Array, p: int, first: jax.Array, second: jax.Array, axis: int) -> jax.Array:
    if axis == -2:
        return jnp.concatenate([x[..., :p, :], first, second, x[..., p + 2 :, :]], axis=-2)
    return jnp.concatenate([x[..., :p], first, second, x[..., p + 2 :]], axis=-1)


def _from_right(x: Parts, p: int, t1: Parts, t2: jax.Array, v2: Parts, rows: jax.Array) -> Parts:
    """Columns p, p+1 of x times the reflector: sum = t1 x_p + t2 x_p+1, x_p -= sum, x_p+1 -=
    sum conj(v2), on the rows where ``rows``."""
    c0, c1 = _cols(x, p)
    total = cmul(t1, c0)
    total = (total[0] + t2 * c1[0], total[1] + t2 * c1[1])
    n0 = _select(rows, _sub(c0, total), c0)
    n1 = _select(rows, _sub(c1, cmul(total, _conj(v2))), c1)
    return _put(x[0], p, n0[0], n1[0], -1), _put(x[1], p, n0[1], n1[1], -1)


def _scale_lines(x: Parts, factor: Parts, mask: jax.Array) -> Parts:
    return _select(mask, cmul(x, factor), x)


def _rescale(
    h: Parts, z: Parts | None, p: int, hi: jax.Array, t1: Parts, rescale: jax.Array
) -> tuple[Parts, Parts | None]:
    """``zlahqr``'s scaling after a sweep's first reflector at row p = m > lo, where
    ``rescale``: temp = (1 - t1) / |1 - t1| on rows m..hi but m+1 right of the diagonal,
    conj(temp) on those columns above it (and z's), h[m+1, m] and h[m+2, m+1] by conj(temp),
    temp, so that h[m, m-1] stays real."""
    n = h[0].shape[-1]
    ids = index_range(n)
    rows, cols = ids[:, None], ids[None, :]
    one = jnp.ones((), h[0].dtype)
    temp = (one - t1[0], -t1[1])
    temp = _over(temp, where(rescale, _abs(temp), one))
    line = (ids >= p) & (ids <= hi[..., 0, :]) & (ids != p + 1)  # (..., n)
    row_in, col_in = line[..., :, None], line[..., None, :]
    upper = rows < cols
    h = _scale_lines(h, temp, rescale & upper & row_in)
    h = _scale_lines(h, _conj(temp), rescale & upper & col_in)
    h = _scale_lines(h, _conj(temp), rescale & (rows == p + 1) & (cols == p))
    h = _scale_lines(h, temp, rescale & (rows == p + 2) & (cols == p + 1) & (p + 2 <= hi))
    return h, None if z is None else _scale_lines(z, _conj(temp), rescale & col_in)


def _sweep(
    h: Parts,
    z: Parts | None,
    sweeping: jax.Array,
    lo: jax.Array,
    hi: jax.Array,
    m: jax.Array,
    first: tuple[Parts, jax.Array],
) -> tuple[Parts, Parts | None]:
    """One ``zlahqr`` single-shift sweep on rows m..hi of each matrix where ``sweeping``: a
    2-element reflector at every static position p in 0..n-2 (tau 0 outside m..hi-1), each on
    the lines it reaches, in LAPACK's order of operations."""
    n = h[0].shape[-1]
    ids = index_range(n)
    rows, cols = ids[:, None], ids[None, :]
    zero, one = jnp.zeros((), h[0].dtype), jnp.ones((), h[0].dtype)
    v1, v2r = first
    for p in range(n - 1):
        active = sweeping & (m <= p) & (p <= hi - 1)
        start = m == p
        r0, r1 = _rows(h, p)
        if p == 0:
            alpha, x = v1, (v2r, jnp.zeros_like(v2r))
        else:
            b0 = (r0[0][..., p - 1 : p], r0[1][..., p - 1 : p])
            b1 = (r1[0][..., p - 1 : p], r1[1][..., p - 1 : p])
            alpha = _select(start, v1, b0)
            x = _select(start, (v2r, jnp.zeros_like(v2r)), b1)
        # a matrix not sweeping here gets the trivial reflector (tau 0, nothing non-finite)
        alpha = _select(active, alpha, (one, zero))
        x = _select(active, x, (zero, zero))
        tau, scal, beta, trivial = _larfg(alpha, nrm2(x[0], x[1]))
        t1 = tau
        v2 = _select(trivial, x, cmul(scal, x))
        t2 = t1[0] * v2[0] - t1[1] * v2[1]  # dble(t1 v2)
        # from the left on the rows p, p+1 in columns p..
        total = cmul(_conj(t1), r0)
        total = (total[0] + t2 * r1[0], total[1] + t2 * r1[1])
        right = cols >= p
        n0 = _select(right, _sub(r0, total), r0)
        n1 = _select(right, _sub(r1, cmul(total, v2)), r1)
        if p > 0:
            chase = active & ~start  # the bulge's column p-1: beta, and 0 below
            at_col = cols == p - 1
            head = _select(trivial, alpha, (beta, zero))
            n0 = _select(at_col & chase, head, n0)
            n1 = _select(at_col & chase, (zero, zero), n1)
        h = _put(h[0], p, n0[0], n1[0], -2), _put(h[1], p, n0[1], n1[1], -2)
        # from the right on the columns p, p+1 in rows ..min(p+2, hi), and z's
        h = _from_right(h, p, t1, t2, v2, (rows <= p + 2) & (rows <= hi))
        if z is not None:
            z = _from_right(z, p, t1, t2, v2, rows >= 0)
        # started below lo (two small subdiagonals, rare): the diagonal similarity that keeps
        # h[m, m-1] real, in an If that the common sweep skips
        rescale = active & start & (m > lo)
        h, z = lax.cond(
            jnp.any(rescale),
            lambda h, z, p=p, rescale=rescale, t1=t1: _rescale(h, z, p, hi, t1, rescale),
            lambda h, z: (h, z),
            h,
            z,
        )
    # h[hi, hi-1] made real: its phase moved into row hi (right of it) and column hi (above)
    sub = (
        pick_where(pick_where(h[0], rows == hi, -2), cols == hi - 1, -1),
        pick_where(pick_where(h[1], rows == hi, -2), cols == hi - 1, -1),
    )
    phase = sweeping & (sub[1] != 0)
    size = _abs(sub)
    temp = _over(sub, where(phase, size, one))
    h = _scale_lines(h, _conj(temp), phase & (rows == hi) & (cols > hi))
    h = _scale_lines(h, temp, phase & (cols == hi) & (rows < hi))
    h = _select(phase & (rows == hi) & (cols == hi - 1), (size, zero), h)
    if z is not None:
        z = _scale_lines(z, temp, phase & (cols == hi))
    return h, z


def complex_gees(a: jax.Array, *, vectors: bool = True) -> tuple[jax.Array, jax.Array | None]:
    """(t, z) complex with a = z t z^H (z None unless ``vectors``), t upper triangular, for a
    complex ``a`` (..., n, n) of static size, as ``zgees`` computes them: ``zgehd2``,
    ``zung2r``, then ``zlahqr``: one ``Loop`` whose iteration is, per matrix, a deflation at
    the bottom of its active block or one whole single-shift sweep (``_sweep``, unrolled over
    the static positions and masked to the block), until the batch has converged. T's
    diagonal is then in LAPACK's order. A matrix that does not converge within LAPACK's
    number of sweeps, or holds an inf or NaN, is NaN."""
    n, ids, rows, cols, eye = schur_grid(a)
    dtype = jnp.result_type(a.dtype, jnp.complex64)
    if n < 2:
        return a.astype(dtype), eye.astype(dtype)
    real = jnp.real(a).dtype
    zero = jnp.zeros((), real)
    h, q = _hessenberg((jnp.real(a), jnp.imag(a)))
    h = _select(rows > cols + 1, (zero, zero), h)
    ulp, smlnum = lapack_constants(real, n)
    index = jnp.zeros((*a.shape[:-2], 1, 1), jnp.int32)
    finite = jnp.all(jnp.isfinite(h[0]) & jnp.isfinite(h[1]), axis=(-2, -1), keepdims=True)

    def step(carry: tuple) -> tuple:
        h, z, hi, kdefl, count = carry
        running = finite & (hi >= 1)
        (dr, sr, ur), (di, si, ui) = diagonals(h[0]), diagonals(h[1])
        d, sub, sup = (dr, di), (sr, si), (ur, ui)
        small = _negligible(d, sub, sup, ulp, smlnum)
        lo = jnp.max(where(small & (ids <= hi), ids, 0), axis=-1, keepdims=True)
        cut = running & (lo > 0)
        h = _select(cut & (rows == lo) & (cols == lo - 1), (zero, zero), h)
        sub = _select(cut & (ids == lo), (zero, zero), sub)
        deflate = running & (lo >= hi)
        sweeping = running & ~deflate
        kdefl = where(deflate, 0, where(sweeping, kdefl + 1, kdefl))
        t = _shift(d, sub, sup, lo, hi, kdefl)
        m, v1, v2 = _sweep_start(d, sub, lo, hi, t, ulp)
        h, z = _sweep(h, z, sweeping, lo, hi, m, (v1, v2))
        return h, z, where(deflate, lo - 1, hi), kdefl, count + 1

    limit = SWEEPS_PER_ROW * max(10, n) * n
    init = (h, q if vectors else None, index + n - 1, index, jnp.zeros((), jnp.int32))
    (hr, hi_), z, hi, _, _ = lax.while_loop(
        lambda c: jnp.any(finite & (c[2] >= 1)) & (c[4] < limit), step, init
    )
    failed = (hi >= 1) | ~finite
    nan = jnp.full((), jnp.nan, real)
    upper = rows <= cols
    t = lax.complex(
        where(failed | ~upper, where(failed, nan, zero), hr),
        where(failed | ~upper, where(failed, nan, zero), hi_),
    )
    if z is None:
        return t, None
    return t, lax.complex(where(failed, nan, z[0]), where(failed, nan, z[1]))
