"""The real Schur form: Householder Hessenberg reduction + Francis double-shift QR (``dhseqr``),
with LAPACK's standardized 2x2 blocks."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax2onnx_nn.core.lowerings.lapack.complex_schur import schur_grid
from jax2onnx_nn.core.lowerings.lapack.hessenberg import hessenberg_q
from jax2onnx_nn.core.lowerings.lapack.steps import index_range, mT, pick_where, where

# -- the real Schur form: Householder Hessenberg reduction + Francis double-shift QR -----------
# dlahqr's exceptional shifts: every KEXSH-th sweep without a deflation at the bottom of the
# active block, a shift from the block's top (bottom every 2 KEXSH-th), so that matrices on
# which the standard double shift cycles (a permutation's) converge.
KEXSH = 10
EXCEPTIONAL_DIAG, EXCEPTIONAL_OFF = 0.75, -0.4375
# LAPACK's bound: 30 sweeps per row of the matrix (at least 10 rows) for each deflation.
SWEEPS_PER_ROW = 30


def lapack_constants(dtype: Any, n: int) -> tuple[float, float]:
    """(ulp, smlnum) of ``dlahqr``: dlamch('P') and safmin n / ulp."""
    info = jnp.finfo(dtype)
    ulp = float(info.eps)
    return ulp, float(info.tiny) * (n / ulp)


def moved(v: jax.Array, offset: int) -> jax.Array:
    """v[..., k + offset] along the last axis at position k, 0 where that leaves the vector."""
    n = v.shape[-1]
    zeros = jnp.zeros((*v.shape[:-1], min(abs(offset), n)), v.dtype)
    if offset >= 0:
        return jnp.concatenate([v[..., offset:], zeros], axis=-1)
    return jnp.concatenate([zeros, v[..., : n + offset]], axis=-1)


def diagonals(h: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(d, sub, sup) of h (..., n, n) as (..., 1, n) by row k: h[k, k], h[k, k-1], h[k-1, k]
    (0 at k = 0), masked sums (exact)."""
    rows, cols = index_range(h.shape[-1])[:, None], index_range(h.shape[-1])[None, :]
    zero = jnp.zeros((), h.dtype)
    d = jnp.sum(where(rows == cols, h, zero), axis=-2, keepdims=True)
    sub = mT(jnp.sum(where(rows == cols + 1, h, zero), axis=-1, keepdims=True))
    sup = jnp.sum(where(rows + 1 == cols, h, zero), axis=-2, keepdims=True)
    return d, sub, sup


def _negligible(
    d: jax.Array, sub: jax.Array, sup: jax.Array, ulp: float, smlnum: float
) -> jax.Array:
    """Per row k, whether ``dlahqr`` takes h[k, k-1] as negligible: below smlnum, or below
    ulp (|h[k-1, k-1]| + |h[k, k]|) and then the Ahues-Tisseur test on the 2x2 at k-1, k;
    row 0 always (the matrix's top)."""
    n = d.shape[-1]
    ids = index_range(n)
    hk, up = jnp.abs(sub), jnp.abs(sup)
    dk, dk1 = d, moved(d, -1)
    tst = jnp.abs(dk1) + jnp.abs(dk)
    tst = where(tst == 0, tst + jnp.abs(moved(sub, -1)) + jnp.abs(moved(sub, 1)), tst)
    ab, ba = jnp.maximum(hk, up), jnp.minimum(hk, up)
    diff = jnp.abs(dk1 - dk)
    aa, bb = jnp.maximum(jnp.abs(dk), diff), jnp.minimum(jnp.abs(dk), diff)
    s = aa + ab
    s = where(s == 0, jnp.ones((), d.dtype), s)
    tisseur = ba * (ab / s) <= jnp.maximum(smlnum, ulp * (bb * (aa / s)))
    return (hk <= smlnum) | ((hk <= ulp * tst) & tisseur) | (ids == 0)


def _shifts(
    d: jax.Array, sub: jax.Array, sup: jax.Array, lo: jax.Array, hi: jax.Array, kdefl: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``dlahqr``'s shifts (rt1r, rt1i, rt2r, rt2i) for the active block lo..hi: the
    eigenvalues of its trailing 2x2 (a real pair as twice the one nearer h[hi, hi]), or an
    exceptional pair at every KEXSH-th sweep since the last deflation."""
    ids = index_range(d.shape[-1])

    def at(v: jax.Array, i: jax.Array) -> jax.Array:
        return pick_where(v, ids == i, -1)

    bottom = kdefl % (2 * KEXSH) == 0
    top = (kdefl % KEXSH == 0) & ~bottom
    s = where(
        bottom,
        jnp.abs(at(sub, hi)) + jnp.abs(at(sub, hi - 1)),
        jnp.abs(at(sub, lo + 1)) + jnp.abs(at(sub, lo + 2)),
    )
    diag = EXCEPTIONAL_DIAG * s + where(bottom, at(d, hi), at(d, lo))
    exceptional = bottom | top
    h11 = where(exceptional, diag, at(d, hi - 1))
    h12 = where(exceptional, EXCEPTIONAL_OFF * s, at(sup, hi))
    h21 = where(exceptional, s, at(sub, hi))
    h22 = where(exceptional, diag, at(d, hi))
    s = jnp.abs(h11) + jnp.abs(h12) + jnp.abs(h21) + jnp.abs(h22)
    nil = s == 0
    s_safe = where(nil, jnp.ones((), d.dtype), s)
    h11, h12, h21, h22 = h11 / s_safe, h12 / s_safe, h21 / s_safe, h22 / s_safe
    tr = (h11 + h22) / 2
    det = (h11 - tr) * (h22 - tr) - h12 * h21
    rtdisc = jnp.sqrt(jnp.abs(det))
    pair = det >= 0
    plus, minus = tr + rtdisc, tr - rtdisc
    real = where(jnp.abs(plus - h22) <= jnp.abs(minus - h22), plus, minus) * s
    zero = jnp.zeros((), d.dtype)
    rt1r = where(nil, zero, where(pair, tr * s, real))
    rt1i = where(nil | ~pair, zero, rtdisc * s)
    return rt1r, rt1i, rt1r, -rt1i


def _sweep_start(
    d: jax.Array,
    sub: jax.Array,
    sup: jax.Array,
    lo: jax.Array,
    hi: jax.Array,
    shifts: tuple[jax.Array, ...],
    ulp: float,
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
    """``dlahqr``'s row m where the double-shift sweep starts (the lowest in lo..hi-2 where
    starting would leave h[m, m-1] negligible, else lo) and its first column v (3 entries),
    evaluated for every m at once."""
    rt1r, rt1i, rt2r, rt2i = shifts
    ids = index_range(d.shape[-1])
    one = jnp.ones((), d.dtype)
    hmm, h1m, hm1 = d, moved(sub, 1), moved(sup, 1)
    h11, h21 = moved(d, 1), moved(sub, 2)
    s = jnp.abs(hmm - rt2r) + jnp.abs(rt2i) + jnp.abs(h1m)
    s = where(s == 0, one, s)
    h21s = h1m / s
    v1 = h21s * hm1 + (hmm - rt1r) * ((hmm - rt2r) / s) - rt1i * (rt2i / s)
    v2 = h21s * (hmm + h11 - rt1r - rt2r)
    v3 = h21s * h21
    s = jnp.abs(v1) + jnp.abs(v2) + jnp.abs(v3)
    s = where(s == 0, one, s)
    v1, v2, v3 = v1 / s, v2 / s, v3 / s
    lhs = jnp.abs(sub) * (jnp.abs(v2) + jnp.abs(v3))
    rhs = ulp * jnp.abs(v1) * (jnp.abs(moved(d, -1)) + jnp.abs(hmm) + jnp.abs(h11))
    ok = ((ids == lo) | (lhs <= rhs)) & (ids >= lo) & (ids <= hi - 2)
    m = jnp.max(where(ok, ids, -1), axis=-1, keepdims=True)
    hit = ids == m
    return m, (pick_where(v1, hit, -1), pick_where(v2, hit, -1), pick_where(v3, hit, -1))


def _square(a: jax.Array, split: float) -> tuple[jax.Array, jax.Array]:
    """a^2 as an unevaluated sum (p, e), exact (Dekker's split of a into halves)."""
    p = a * a
    t = split * a
    hi = t - (t - a)
    lo = a - hi
    return p, ((hi * hi - p) + 2 * hi * lo) + lo * lo


def nrm2(x1: jax.Array, x2: jax.Array) -> jax.Array:
    """sqrt(x1^2 + x2^2) correctly rounded, as BLAS's nrm2 gives it on JAX's CPU (OpenBLAS sums
    the squares in extended precision for float64, in float64 for float32): the squares and
    their sum as exact pairs, one Newton correction of the square root. Rounded once, where
    sqrt(x1 x1 + x2 x2) is off by an ulp for ~17% of pairs: a different last bit in dlarfg's
    beta changes which matrices deflate when, and so the signs of their Schur vectors."""
    info = jnp.finfo(x1.dtype)
    split = float(2 ** ((info.nmant + 2) // 2) + 1)
    # entries below 2^low (a block far below the matrix's largest entry) are taken times
    # 2^lift first (exact), so that their squares and the pairs' low parts stay normal
    low, lift = info.minexp // 2 + info.nmant, info.nmant - info.minexp // 2
    big = jnp.maximum(jnp.abs(x1), jnp.abs(x2))
    factor = where(big < 2.0**low, jnp.asarray(2.0**lift, x1.dtype), jnp.ones((), x1.dtype))
    x1, x2 = x1 * factor, x2 * factor
    pa, ea = _square(x1, split)
    pb, eb = _square(x2, split)
    total = pa + pb
    virtual = total - pa
    low_part = ((pa - (total - virtual)) + (pb - virtual)) + (ea + eb)
    hi = total + low_part
    lo = low_part - (hi - total)
    r = jnp.sqrt(hi)
    rp, re = _square(r, split)
    residual = ((hi - rp) - re) + lo
    r = where(r > 0, r + residual / where(r > 0, 2 * r, jnp.ones((), r.dtype)), r)
    return r / factor


def _dlapy2(x: jax.Array, y: jax.Array) -> jax.Array:
    """LAPACK's dlapy2: sqrt(x^2 + y^2) as max * sqrt(1 + (min / max)^2)."""
    w, z = jnp.maximum(jnp.abs(x), jnp.abs(y)), jnp.minimum(jnp.abs(x), jnp.abs(y))
    safe = where(w == 0, jnp.ones((), x.dtype), w)
    return where(z == 0, w, w * jnp.sqrt(1 + (z / safe) ** 2))


def _from_right(
    x: jax.Array, p: int, v2: jax.Array, v3: jax.Array, taus: tuple[jax.Array, ...]
) -> jax.Array:
    """x's columns p..p+len(taus)-1 times the reflector (1, v2, v3) with taus (t1, t2, t3),
    as dlahqr's loop: sum = x_p + v2 x_p+1 + v3 x_p+2, x_p+i -= sum t_i."""
    k = len(taus)
    c = [x[..., :, p + i : p + i + 1] for i in range(k)]
    total = c[0] + v2 * c[1]
    if k == 3:
        total = total + v3 * c[2]
    c = [ci - total * t for ci, t in zip(c, taus, strict=True)]
    return jnp.concatenate([x[..., :, :p], *c, x[..., :, p + k :]], axis=-1)


def _sweep(
    h: jax.Array,
    z: jax.Array,
    sweeping: jax.Array,
    lo: jax.Array,
    hi: jax.Array,
    m: jax.Array,
    first: tuple[jax.Array, jax.Array, jax.Array],
) -> tuple[jax.Array, jax.Array]:
    """One ``dlahqr`` double-shift sweep on rows m..hi of each matrix where ``sweeping``:
    the reflector of every static position p in 0..n-2 (tau 0 outside m..hi-1), each on the
    lines it reaches, in LAPACK's order of operations (so its rounding)."""
    n = h.shape[-1]
    cols = index_range(n)[None, :]
    zero, one = jnp.zeros((), h.dtype), jnp.ones((), h.dtype)
    for p in range(n - 1):
        k = min(3, n - p)  # rows of the reflector that exist
        active = sweeping & (m <= p) & (p <= hi - 1)
        start = m == p
        three = p + 2 <= hi  # NR = 3 (else the last, NR = 2)
        rows = [h[..., p + i : p + i + 1, :] for i in range(k)]  # (..., 1, n)
        if p == 0:
            x0, x1, x2 = first
        else:
            below = [r[..., :, p - 1 : p] for r in rows]
            x0 = where(start, first[0], below[0])
            x1 = where(start, first[1], below[1])
            x2 = where(start, first[2], where(three, below[2], zero)) if k == 3 else zero
        # dlarfg(NR, x0, (x1, x2)): beta = -sign(x0) |(x0, x1, x2)|, v = x / (x0 - beta)
        xnorm = nrm2(x1, x2)
        trivial = xnorm == 0
        norm = _dlapy2(x0, xnorm)
        beta = where(x0 >= 0, -norm, norm)
        tau = where(trivial | ~active, zero, (beta - x0) / where(trivial, one, beta))
        scal = reciprocal(where(trivial, one, x0 - beta))  # dscal by it, as LAPACK
        v2, v3 = x1 * scal, x2 * scal
        t1, t2, t3 = tau, tau * v2, tau * v3
        # from the left on the rows p.. in columns p..
        total = rows[0] + v2 * rows[1]
        if k == 3:
            total = total + v3 * rows[2]
        total = where(cols >= p, total, zero)
        rows = [r - total * t for r, t in zip(rows, (t1, t2, t3)[:k], strict=True)]
        if p > 0:
            # the bulge's column p-1: beta and zeros below; at the sweep's start below lo,
            # h[m, m-1] (1 - t1) (dlahqr's, in place of its negation)
            chase = active & ~start
            rescale = active & start & (m > lo)
            at_col = cols == p - 1
            x = below[0]
            head = where(chase, where(trivial, x, beta), where(rescale, x * (one - t1), x))
            rows[0] = where(at_col, head, rows[0])
            rows[1] = where(at_col & chase, zero, rows[1])
            if k == 3:
                rows[2] = where(at_col & chase & three, zero, rows[2])
        h = jnp.concatenate([h[..., :p, :], *rows, h[..., p + k :, :]], axis=-2)

        # from the right on the columns p.. (h's rows to hi and z's rows: the others are 0)
        taus = (t1, t2, t3)[:k]
        h, z = _from_right(h, p, v2, v3, taus), _from_right(z, p, v2, v3, taus)
    return h, z


def reciprocal(x: jax.Array) -> jax.Array:
    """1 / x for a product by it, as LAPACK scales: the numerator is a 1 computed from x, as
    onnxruntime's DivMulFusion turns y * (1 / x) with a constant 1 into y / x (another
    rounding, which changed which way a float64 3x3 Schur block was standardized)."""
    one = jnp.ones((), x.dtype)
    return where(x != 0, one, one) / x


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
    tau1 = reciprocal(jnp.sqrt(jnp.abs(b2 + c2)))
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
    real ``a`` (..., n, n) of static size, as ``dgees`` computes them (so z carries LAPACK's
    signs): Hessenberg form (``gehrd``, ``orghr``), then ``dlahqr``: one ``Loop`` whose
    iteration is, per matrix, either a deflation at the bottom of its active block or one
    whole double-shift sweep (``_sweep``, unrolled over the static positions and masked to
    the block), until every matrix of the batch has converged; then ``dlanv2`` on the 2x2
    blocks (applied at the end: they are untouched by the later sweeps, and their rotations
    act on other columns of z). A matrix that does not converge within LAPACK's number of
    sweeps is NaN, as JAX's result when gees fails, and so is one with an inf or NaN entry
    (JAX's T is NaN then; its Z is partly so)."""
    n, ids, rows, cols, eye = schur_grid(a)
    if n < 2:
        return a, eye
    zero = jnp.zeros((), a.dtype)
    h, z = hessenberg_q(a) if n > 2 else (a, eye)
    h = where(rows > cols + 1, zero, h)
    ulp, smlnum = lapack_constants(a.dtype, n)
    index = jnp.zeros((*a.shape[:-2], 1, 1), jnp.int32)
    finite = jnp.all(jnp.isfinite(a), axis=(-2, -1), keepdims=True)  # else NaN: no sweeps

    def step(carry: tuple) -> tuple:
        h, z, hi, kdefl, count = carry
        running = finite & (hi >= 1)
        d, sub, sup = diagonals(h)
        small = _negligible(d, sub, sup, ulp, smlnum)
        lo = jnp.max(where(small & (ids <= hi), ids, 0), axis=-1, keepdims=True)
        h = where(running & (lo > 0) & (rows == lo) & (cols == lo - 1), zero, h)
        sub = where(running & (lo > 0) & (ids == lo), zero, sub)
        deflate = running & (lo >= hi - 1)
        sweeping = running & ~deflate
        kdefl = where(deflate, 0, where(sweeping, kdefl + 1, kdefl))
        if n > 2:
            shifts = _shifts(d, sub, sup, lo, hi, kdefl)
            m, first = _sweep_start(d, sub, sup, lo, hi, shifts, ulp)
            h, z = _sweep(h, z, sweeping, lo, hi, m, first)
        return h, z, where(deflate, lo - 1, hi), kdefl, count + 1

    # LAPACK's bound: 30 sweeps per row (at least 10 rows) for each deflation
    limit = SWEEPS_PER_ROW * max(10, n) * n
    init = (h, z, index + n - 1, index, jnp.zeros((), jnp.int32))
    h, z, hi, _, _ = lax.while_loop(
        lambda c: jnp.any(finite & (c[2] >= 1)) & (c[4] < limit), step, init
    )
    live = hi >= 1  # not converged

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
