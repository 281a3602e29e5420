"""``svd`` with LAPACK's vectors, signs included: ``gesdd``'s own path for small static sizes.

JAX's CPU svd is LAPACK's ``gesdd`` (``jobz`` 'A' for ``full_matrices``, else 'S'). A
singular vector pair is defined only up to sign; LAPACK's comes out of its path, so the only
way to give the user JAX's signs is to follow it. For an m x n matrix, k = min(m, n):

- m >= n: when m >= ``mnthr`` = int(11 n / 6), a QR first (``geqrf``, Q from ``orgqr``) and
  the rest on R; ``gebrd`` (``gebd2``'s reflectors, upper bidiagonal); ``bdsdc`` with COMPQ =
  'I', which up to SMLSIZ = 25 rows is ``lasdq``, i.e. ``bdsqr``'s QR sweeps on the identity,
  then its sorts, and above it divide and conquer (``bdsdc.py``, up to GESDD_LIMIT = 128 rows:
  ``dlasdt``'s tree of ``lasdq`` leaves and ``dlasd1`` merges); ``ormbr`` applies the
  reflectors to the bidiagonal's vectors.
- m < n: when n >= int(11 m / 6), an LQ first (the QR of a^T, transposed) and ``gebrd`` of
  the square L (upper bidiagonal); otherwise ``gebrd`` of the wide matrix itself, which is
  lower bidiagonal (the same reflectors as the upper reduction of a^T, roles swapped), and
  ``bdsdc`` rotates it to upper bidiagonal first (its rotations applied to U at the end).

``bdsqr`` is one ONNX ``Loop`` whose iteration is one visit of its main loop (label 60): a
run of deflations, then either a 2x2 block (``lasv2``), a convergence test that zeroes an
off-diagonal entry, or one whole implicit-shift (or zero-shift) QR sweep, unrolled over the
static positions and masked to the active block (c = 1, s = 0 outside: exact). A sweep
chasing bottom to top (``idir`` = 2) is the top-to-bottom sweep of the mirrored bidiagonal
(d and e reversed) with U and V^T swapped, the same arithmetic on mirrored indices: the
matrices of the batch that chase upward are mirrored before the sweep and back after it (a
``Where`` of reversed copies), so the loop body holds one sweep. Each position takes one
``dlartg`` pair on the arguments of the chase each matrix takes (shifted or zero shift), and
the positions run in ``If`` chunks of SWEEP_CHUNK that a step skips where no matrix of the
batch rotates (a skipped position's rotations are identities: only a zero entry of U or
V^T could keep a -0.0 it would have lost; the outputs matched bit for bit where measured).

Left out: ``gesdd``'s scaling of a matrix whose largest entry is outside [sqrt(safmin) / eps,
its reciprocal] (the matrix is divided by a power of two near its largest entry first, exact),
``dlartg``'s scaled branch (entries below sqrt(safmin) ~1e-19 in float32), and the
non-convergence exit (the loop stops after ``MAXITR n^2`` visits).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx_nn.core.lowerings.lapack import bdsdc
from jax2onnx_nn.core.lowerings.lapack.householder import (
    apply_reflectors,
    geqrf,
    householder_product,
    power_of_two_scale,
    reflector,
)
from jax2onnx_nn.core.lowerings.lapack.steps import index_range, lapack_eps, mT, pick_where, where
from jax2onnx_nn.core.lowerings.lapack.syevd import fortran_sign

# bdsdc calls lasdq (bdsqr) up to this size (ilaenv's SMLSIZ); above it divide and conquer
# (bdsdc.py), followed up to GESDD_LIMIT (svd.py: Jacobi above it). JAX's signs cost time and
# graph: onnxruntime CPU time, batch of 8 float32, against Jacobi (benchmarks/linalg_bench.py
# --cases svd --cpu-time, medians): 32 83 / 16 ms, 50 194 / 39 ms, 64 186 / 75 ms, 100 428 /
# 198 ms, 128 496 / 389 ms; nodes with Loop bodies 14252 / 26344 / 39623 at 32 / 64 / 128
# (Jacobi ~1250-1480); export 3 / 6 / 12 s (Jacobi 1-7 s). Not raised: at 160 (limit
# monkeypatched) 934 / 558 ms (batch of 2: 416 / 160 ms), 47053 nodes (Jacobi 1479), an export
# of 13 s CPU, 950 MB peak (Jacobi 400 MB), and vector_signs --sizes 160 --batch 2 7 of 8
BDSQR_LIMIT = 25
GESDD_LIMIT = 128
# bdsqr's MAXITR: at most MAXITR n^2 inner steps
MAXITR = 6
# positions of bdsqr's unrolled sweep per If (skipped by the batch where none rotates)
SWEEP_CHUNK = 4


def crossover(k: int) -> int:
    """gesdd's ``mnthr``: a QR (LQ) comes first when the long side is at least this."""
    return int(k * 11.0 / 6.0)


# -- gebrd: Householder bidiagonalization ------------------------------------------------------
def gebrd(a: jax.Array) -> tuple[jax.Array, ...]:
    """``gebd2`` of ``a`` (..., m, n), m >= n: a = Q B P^T with B upper bidiagonal, as
    (d (..., n), e (..., n-1), q_vectors (..., m, n), q_taus (..., n), p_vectors (..., n-1,
    n-1), p_taus (..., n-1)); H_i's vector has 1 at row i, G_i's (acting on columns 1..)
    1 at row i of p_vectors: Q = H_0 ... H_{n-1}, P = diag(1, G_0 ... G_{n-2})."""
    m, n = a.shape[-2], a.shape[-1]
    rows, cols = index_range(m)[:, None], index_range(n)[None, :]
    lines = index_range(n)[:, None]
    d, e, qv, qt, pv, pt = [], [], [], [], [], []
    r = a
    for i in range(n):
        v, tau, beta = reflector(r[..., :, i : i + 1], i, rows > i)
        d.append(beta)
        qv.append(v)
        qt.append(tau)
        if i == n - 1:
            break
        r = where(cols > i, r - (tau * v) * (mT(v) @ r), r)  # H_i from the left
        w, taup, betap = reflector(mT(r[..., i : i + 1, :]), i + 1, lines > i + 1)
        e.append(betap)
        pv.append(w[..., 1:, :])
        pt.append(taup)
        r = where(rows > i, r - (r @ w) * (taup * mT(w)), r)  # G_i from the right
    flat = lambda xs: jnp.concatenate(xs, axis=-1)[..., 0, :]  # noqa: E731
    p_vectors = jnp.concatenate(pv, axis=-1) if pv else jnp.zeros((*a.shape[:-2], 0, 0), a.dtype)
    p_taus = flat(pt) if pt else jnp.zeros((*a.shape[:-2], 0), a.dtype)
    e_out = flat(e) if e else jnp.zeros((*a.shape[:-2], 0), a.dtype)
    return flat(d), e_out, jnp.concatenate(qv, axis=-1), flat(qt), p_vectors, p_taus


# -- small LAPACK kernels -------------------------------------------------------------------------
def _lartg(f: jax.Array, g: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """LAPACK 3.10's dlartg, both branches: (c, s, r), c >= 0, r = sign(f) |(f, g)|; f and g
    divided by their larger magnitude first where either is outside (sqrt(safmin),
    sqrt(safmax / 2)), as dlartg does (values 1e-22 of the largest have squares under float32's
    range: V^T lost its orthogonality there)."""
    info = jnp.finfo(f.dtype)
    safmin, safmax = float(info.tiny), 1 / float(info.tiny)
    f1, g1 = jnp.abs(f), jnp.abs(g)
    rtmin, rtmax = float(np.sqrt(safmin)), float(np.sqrt(safmax / 2))
    big = jnp.maximum(f1, g1)
    plain = (jnp.minimum(f1, g1) > rtmin) & (big < rtmax)
    one = jnp.ones((), f.dtype)
    u = where(plain, one, jnp.clip(big, safmin, safmax))
    fs, gs = f / u, g / u
    d = jnp.sqrt(fs * fs + gs * gs)
    zero = d == 0
    safe = where(zero, one, d)
    r = where(f >= 0, safe, -safe)  # SIGN(safe, f): safe >= 0
    c = where(zero, one, jnp.abs(fs) / safe)
    return c, where(zero, jnp.zeros((), f.dtype), gs / r), where(zero, f, r * u)


def _las2(f: jax.Array, g: jax.Array, h: jax.Array) -> jax.Array:
    """dlas2's smaller singular value of [[f, g], [0, h]] (bdsqr's shift)."""
    one = jnp.ones((), f.dtype)
    fa, ga, ha = jnp.abs(f), jnp.abs(g), jnp.abs(h)
    fhmn, fhmx = jnp.minimum(fa, ha), jnp.maximum(fa, ha)
    safe_mx = where(fhmx == 0, one, fhmx)
    safe_ga = where(ga == 0, one, ga)
    as_ = 1 + fhmn / safe_mx
    at = (fhmx - fhmn) / safe_mx
    au = (ga / safe_mx) ** 2
    small_g = 2 / (jnp.sqrt(as_ * as_ + au) + jnp.sqrt(at * at + au))
    au2 = fhmx / safe_ga
    c2 = 1 / (jnp.sqrt(1 + (as_ * au2) ** 2) + jnp.sqrt(1 + (at * au2) ** 2))
    big_g = where(au2 == 0, (fhmn * fhmx) / safe_ga, 2 * ((fhmn * c2) * au2))
    return where(fhmn == 0, jnp.zeros((), f.dtype), where(ga < fhmx, fhmn * small_g, big_g))


def _lasv2(f: jax.Array, g: jax.Array, h: jax.Array, eps: float) -> tuple[jax.Array, ...]:
    """dlasv2 of [[f, g], [0, h]]: (ssmin, ssmax, snr, csr, snl, csl), its own signs."""
    one, zero = jnp.ones((), f.dtype), jnp.zeros((), f.dtype)
    swap = jnp.abs(h) > jnp.abs(f)
    ft, ht = where(swap, h, f), where(swap, f, h)
    fa, ha = jnp.abs(ft), jnp.abs(ht)
    gt, ga = g, jnp.abs(g)
    diagonal = ga == 0
    g_biggest = ga > fa
    huge_g = g_biggest & (fa / where(diagonal, one, ga) < eps)
    safe_g = where(diagonal, one, gt)
    safe_f = where(ft == 0, one, ft)
    # very large g
    ssmax_h = ga
    ssmin_h = where(
        ha > 1, fa / (ga / where(ha == 0, one, ha)), (fa / where(diagonal, one, ga)) * ha
    )
    clt_h, slt_h, srt_h, crt_h = one, ht / safe_g, one, ft / safe_g
    # the normal case
    dd = fa - ha
    ll = where(dd == fa, one, dd / where(fa == 0, one, fa))
    mm_ = gt / safe_f
    t = 2 - ll
    mm, tt = mm_ * mm_, t * t
    s = jnp.sqrt(tt + mm)
    r = where(ll == 0, jnp.abs(mm_), jnp.sqrt(ll * ll + mm))
    aa = 0.5 * (s + r)
    ssmin_n, ssmax_n = ha / aa, fa * aa
    t_tiny = where(
        ll == 0,
        fortran_sign(2 * one, ft) * fortran_sign(one, gt),
        gt / fortran_sign(dd, ft) + mm_ / t,
    )
    t_n = where(mm == 0, t_tiny, (mm_ / (s + t) + mm_ / (r + ll)) * (1 + aa))
    l2 = jnp.sqrt(t_n * t_n + 4)
    crt_n, srt_n = 2 / l2, t_n / l2
    clt_n = (crt_n + srt_n * mm_) / aa
    slt_n = (ht / safe_f) * srt_n / aa
    pick = lambda diag, big, normal: where(diagonal, diag, where(huge_g, big, normal))  # noqa: E731
    ssmin = pick(ha, ssmin_h, ssmin_n)
    ssmax = pick(fa, ssmax_h, ssmax_n)
    clt, crt = pick(one, clt_h, clt_n), pick(one, crt_h, crt_n)
    slt, srt = pick(zero, slt_h, slt_n), pick(zero, srt_h, srt_n)
    csl, snl = where(swap, srt, clt), where(swap, crt, slt)
    csr, snr = where(swap, slt, crt), where(swap, clt, srt)
    sgn = lambda x: fortran_sign(one, x)  # noqa: E731
    pmax3 = swap & ~(g_biggest & ~diagonal)
    tsign = where(
        g_biggest & ~diagonal,
        sgn(snr) * sgn(csl) * sgn(g),
        where(pmax3, sgn(snr) * sgn(snl) * sgn(h), sgn(csr) * sgn(csl) * sgn(f)),
    )
    ssmax = fortran_sign(ssmax, tsign)
    ssmin = fortran_sign(ssmin, tsign * sgn(f) * sgn(h))
    return ssmin, ssmax, snr, csr, snl, csl


# -- bdsqr ----------------------------------------------------------------------------------------
def _mirror(x: jax.Array, axis: int) -> jax.Array:
    return jnp.flip(x, axis=axis)


def bdsqr(d: jax.Array, e: jax.Array, *, lower: bool = False) -> tuple[jax.Array, ...]:
    """(s, U, V^T) of the bidiagonal matrix with diagonal ``d`` (..., n) and off-diagonal
    ``e`` (..., n-1), n >= 2, upper (or ``lower``), as ``bdsdc`` with COMPQ = 'I' gives them up
    to SMLSIZ rows: (lower: rotated to upper first) ``bdsqr`` on the identity, its signs
    (values made positive by negating rows of V^T), its and ``lasdq``'s and ``bdsdc``'s
    selection sorts. Module docstring: how the loop is laid out."""
    n = d.shape[-1]
    batch = d.shape[:-1]
    dtype = d.dtype
    eps, unfl = lapack_eps(dtype)
    one, zero = jnp.ones((), dtype), jnp.zeros((), dtype)
    ids = index_range(n)
    rotations: list = []
    if lower:  # bdsdc: rotate to upper bidiagonal, its rotations applied to U at the end
        d, e, rotations = lower_to_upper(d, e)
    tolmul = max(10.0, min(100.0, eps**-0.125))
    tol = tolmul * eps
    # thresh from the initial matrix (bdsqr's sminoa, relative accuracy)
    mu = jnp.abs(d[..., :1])
    sminoa = mu
    for i in range(1, n):
        mu = jnp.abs(d[..., i : i + 1]) * (mu / (mu + jnp.abs(e[..., i - 1 : i])))
        sminoa = jnp.minimum(sminoa, mu)
    thresh = jnp.maximum(tol * sminoa / np.sqrt(n), MAXITR * (n * (n * unfl)))[..., None]
    e = jnp.concatenate([e, jnp.zeros((*batch, 1), dtype)], axis=-1)
    eye = jnp.broadcast_to(jnp.eye(n, dtype=dtype), (*batch, n, n))
    col = lambda v: jnp.asarray(v, jnp.int32).reshape((1,) * (len(batch) + 2))  # noqa: E731
    full = lambda v: jnp.broadcast_to(col(v), (*batch, 1, 1))  # noqa: E731
    # d, e, V^T, U^T (rows by position), M, OLDLL, OLDM, IDIR, visits
    state: tuple = (d[..., None, :], e[..., None, :], eye, eye)
    state += (full(n - 1), full(-1), full(-1), full(1), jnp.int32(0))

    def pick(v: jax.Array, i: jax.Array) -> jax.Array:
        """v[..., 0, i] for an index (..., 1, 1), as (..., 1, 1) (0 for i out of range)."""
        return pick_where(v, ids == i, -1)

    def cond(state: tuple) -> jax.Array:
        return jnp.any(state[4] > 0) & (state[8] < MAXITR * n * n)

    def body(state: tuple) -> tuple:
        d, e, vt, ut, m, oldll, oldm, idir, count = state
        ad, ae = jnp.abs(d), jnp.abs(e)
        negligible = (ae <= thresh) | (ae == 0)
        # label 60 repeated while the bottom value has converged: M moves up
        before = jnp.concatenate([jnp.ones((*batch, 1, 1), bool), negligible[..., :-1]], -1)
        m = jnp.max(where((ids <= m) & ~before, ids, 0), axis=-1, keepdims=True)
        running = m > 0
        ll = jnp.max(where((ids < m) & negligible, ids, -1), axis=-1, keepdims=True) + 1
        in_d, in_e = (ids >= ll) & (ids <= m), (ids >= ll) & (ids < m)
        smax = jnp.maximum(
            jnp.max(where(in_d, ad, zero), axis=-1, keepdims=True),
            jnp.max(where(in_e, ae, zero), axis=-1, keepdims=True),
        )
        pair = running & (ll == m - 1)
        work = running & (ll < m - 1)
        # a new block: its direction, from the larger end towards the smaller
        fresh = work & ((ll > oldm) | (m < oldll))
        two = jnp.int32(2)
        idir = where(fresh, where(pick(ad, ll) >= pick(ad, m), jnp.int32(1), two), idir)
        flip = work & (idir == 2)

        def mirrored(d: jax.Array, e: jax.Array, vt: jax.Array, ut: jax.Array) -> tuple:
            e_m = jnp.concatenate([_mirror(e[..., : n - 1], -1), e[..., n - 1 :]], -1)
            return (
                where(flip, _mirror(d, -1), d),
                where(flip, e_m, e),
                where(flip, _mirror(ut, -2), vt),
                where(flip, _mirror(vt, -2), ut),
            )

        d, e, vt, ut = mirrored(d, e, vt, ut)
        lo, hi = where(flip, n - 1 - m, ll), where(flip, n - 1 - ll, m)
        ad, ae = jnp.abs(d), jnp.abs(e)
        ads, aes = jnp.split(ad, n, axis=-1), jnp.split(ae, n, axis=-1)
        # convergence tests: the bottom entry, then the forward criterion (first hit zeroed)
        bottom = pick(ae, hi - 1) <= tol * pick(ad, hi)
        mu = pick(ad, lo)
        smin, hit, hit_at = mu, jnp.zeros_like(work), full(n)
        # the masks of every position at once, split (one node each, not one per position)
        inside = jnp.split((ids >= lo) & (ids < hi), n, axis=-1)
        for i in range(n - 1):
            on = inside[i] & ~hit
            here = on & (aes[i] <= tol * mu)
            hit_at, hit = where(here, i, hit_at), hit | here
            on = on & ~here
            mu = where(on, ads[i + 1] * (mu / (mu + aes[i])), mu)
            smin = where(on, jnp.minimum(smin, mu), smin)
        zeroed = where(bottom, hi - 1, hit_at)
        e = where(work & (bottom | hit) & (ids == zeroed), zero, e)
        chase = work & ~bottom & ~hit
        oldll, oldm = where(chase, ll, oldll), where(chase, m, oldm)
        # the shift: zero where it would ruin relative accuracy or is negligible
        f_, g_, h_ = pick(d, hi - 1), pick(e, hi - 1), pick(d, hi)
        shift = _las2(f_, g_, h_)
        sll = pick(ad, lo)
        ratio = shift / where(sll > 0, sll, one)
        shift = where((sll > 0) & (ratio * ratio < eps), zero, shift)
        no_shift = (n * tol * (smin / where(smax > 0, smax, one)) <= max(eps, 0.01 * tol)) | (
            shift == 0
        )
        # a 2x2 block (never mirrored): lasv2 on rows m-1, m
        # (an If: steps where no matrix of the batch is at a 2x2 block skip it)
        sigmn, sigmx, sinr, cosr, sinl, cosl = lax.cond(
            jnp.any(pair),
            lambda x: _lasv2(x[0], x[1], x[2], eps),
            lambda x: (x[0],) * 6,
            (f_, g_, h_),
        )
        at_pair = pair & (ids == m - 1)
        pair_r = (where(at_pair, cosr, one), where(at_pair, sinr, zero))
        pair_l = (where(at_pair, cosl, one), where(at_pair, sinl, zero))
        # the sweep, top to bottom over lo..hi-1. bdsqr's shifted and zero-shift chases each
        # take two dlartg per position, on different arguments: one dlartg on the arguments each
        # matrix's chase picks (elementwise, so every matrix gets its own chase's bits)
        d_lo = pick(d, lo)
        f = (jnp.abs(d_lo) - shift) * (
            fortran_sign(one, d_lo) + shift / where(d_lo == 0, one, d_lo)
        )
        g = pick(e, lo)
        # V^T's and U^T's rows side by side (one rotation of each row pair per position): the
        # 2x2 block's coefficients per position, V^T's half then U^T's
        half = index_range(2 * n) < n
        pair_c, pair_s = (
            jnp.split(where(half, mT(vx), mT(ux)), n, axis=-2)
            for vx, ux in ((pair_r[0], pair_l[0]), (pair_r[1], pair_l[1]))
        )
        span = chase & (ids >= lo) & (ids < hi)
        later_at = jnp.split(span & (ids > lo), n, axis=-1)
        span_s = span & ~no_shift
        inner_s = jnp.split(span_s & (ids < hi - 1), n, axis=-1)
        ons, s_on, z_on = (jnp.split(x, n, axis=-1) for x in (span, span_s, span & no_shift))
        busy = span | at_pair  # the positions that rotate anything, per matrix

        def position(i: int, rows: tuple) -> tuple:
            """Position i of the sweep on the rows it touches (dicts by position)."""
            ds, es, xs, (cs, oldcs, oldsn, f, g) = rows
            on, s_ = ons[i], s_on[i]
            # the first rotation: zero shift (d[i] cs, e[i]), shifted (f, g)
            c1, s1, r1 = _lartg(where(no_shift, ds[i] * cs, f), where(no_shift, es[i], g))
            # shifted: the first rotation applied
            e_i = c1 * es[i] - s1 * ds[i]
            d_next = c1 * ds[i + 1]
            # the second rotation: zero shift (oldcs r, d[i+1] sn), shifted (fs, gs)
            c2, s2, r2 = _lartg(
                where(no_shift, oldcs * r1, c1 * ds[i] + s1 * es[i]), ds[i + 1] * s1
            )
            if i < n - 2:
                g_next = s2 * es[i + 1]
                es[i + 1] = where(inner_s[i], c2 * es[i + 1], es[i + 1])
            else:
                g_next = g
            if i > 0:
                es[i - 1] = where(later_at[i], where(no_shift, oldsn * r1, r1), es[i - 1])
            ds[i] = where(on, r2, ds[i])
            ds[i + 1] = where(s_, c2 * d_next - s2 * e_i, ds[i + 1])
            es[i] = where(s_, e_i, es[i])
            z = z_on[i]
            cs, oldcs, oldsn = where(z, c1, cs), where(z, c2, oldcs), where(z, s2, oldsn)
            f, g = where(s_, c2 * e_i + s2 * d_next, f), where(s_, g_next, g)
            # the rotations of V^T's rows and U's columns i, i+1 (a 2x2 block's from lasv2)
            xc = where(on, where(half, c1, c2), pair_c[i])
            xs_ = where(on, where(half, s1, s2), pair_s[i])
            xs[i], xs[i + 1] = xc * xs[i] + xs_ * xs[i + 1], xc * xs[i + 1] - xs_ * xs[i]
            return ds, es, xs, (cs, oldcs, oldsn, f, g)

        def chunk(first: int, stop: int) -> Callable[[tuple], tuple]:
            def run(rows: tuple) -> tuple:
                rows = tuple(dict(x) if isinstance(x, dict) else x for x in rows)
                for i in range(first, stop):
                    rows = position(i, rows)
                return rows

            return run

        # the positions in chunks, each an If that the batch skips where no matrix rotates
        # there (the active block shrinks as values converge at its bottom)
        ds, es = jnp.split(d, n, axis=-1), jnp.split(e, n, axis=-1)
        xs = jnp.split(jnp.concatenate([vt, ut], axis=-1), n, axis=-2)
        ones, zeros = jnp.ones_like(f), jnp.zeros_like(f)
        scalars = (ones, ones, zeros, f, g)  # cs, oldcs, oldsn, f, g
        for first in range(0, n - 1, SWEEP_CHUNK):
            stop = min(first + SWEEP_CHUNK, n - 1)
            at_d, at_e = range(first, stop + 1), range(max(first - 1, 0), min(stop, n - 2) + 1)
            rows = (
                {j: ds[j] for j in at_d},
                {j: es[j] for j in at_e},
                {j: xs[j] for j in at_d},
                scalars,
            )
            rows = lax.cond(
                jnp.any(busy[..., first:stop]), chunk(first, stop), lambda rows: rows, rows
            )
            for j in at_d:
                ds[j], xs[j] = rows[0][j], rows[2][j]
            for j in at_e:
                es[j] = rows[1][j]
            scalars = rows[3]
        cs, oldcs, oldsn, f, g = scalars
        d, e = jnp.concatenate(ds, -1), jnp.concatenate(es, -1)
        x = jnp.concatenate(xs, -2)
        vt, ut = x[..., :n], x[..., n:]
        # after the sweep: zero shift d[hi] = h oldcs, e[hi-1] = h oldsn (h = d[hi] cs);
        # shifted e[hi-1] = f; then the threshold test on e[hi-1]
        h = pick(d, hi) * cs
        d = where(chase & no_shift & (ids == hi), h * oldcs, d)
        last = where(no_shift, h * oldsn, f)
        last = where(jnp.abs(last) <= thresh, zero, last)
        e = where(chase & (ids == hi - 1), last, e)
        d, e, vt, ut = mirrored(d, e, vt, ut)
        # the 2x2 block's values
        d = where(pair & (ids == m - 1), sigmx, where(pair & (ids == m), sigmn, d))
        e = where(pair & (ids == m - 1), zero, e)
        m = where(pair, m - 2, m)
        return d, e, vt, ut, m, oldll, oldm, idir, count + 1

    d, _, vt, ut, *_ = lax.while_loop(cond, body, state)
    d = d[..., 0, :]
    # positive values, negating V^T's rows
    vt = where((d < 0)[..., :, None], -vt, vt)
    d = jnp.abs(d)
    d, perm = _sorts(d)
    chooser = (ids[:, None] == perm[..., None, :]).astype(dtype)  # column k picks row perm[k]
    vt = mT(chooser) @ vt
    u = mT(ut) @ chooser
    if lower:
        u = apply_lower_rotations(u, rotations)
    return d, u, vt


def lower_to_upper(d: jax.Array, e: jax.Array) -> tuple[jax.Array, jax.Array, list]:
    """bdsdc's rotations of a lower bidiagonal (d, e) into an upper one: (d, e, the
    rotations (cs, sn) for ``apply_lower_rotations``)."""
    n = d.shape[-1]
    rotations = []
    ds, es = list(jnp.split(d, n, axis=-1)), list(jnp.split(e, n - 1, axis=-1))
    for i in range(n - 1):
        cs, sn, r = _lartg(ds[i], es[i])
        ds[i], es[i], ds[i + 1] = r, sn * ds[i + 1], cs * ds[i + 1]
        rotations.append((cs, sn))
    return jnp.concatenate(ds, -1), jnp.concatenate(es, -1), rotations


def apply_lower_rotations(u: jax.Array, rotations: list) -> jax.Array:
    """bdsdc's U = P U with the rotations (cs, -sn) of ``lower_to_upper``, last first."""
    n = u.shape[-2]
    rows_u = list(jnp.split(u, n, axis=-2))
    for i in range(n - 2, -1, -1):
        cs, sn = rotations[i]
        cs, sn = cs[..., None], sn[..., None]
        rows_u[i], rows_u[i + 1] = (
            cs * rows_u[i] - sn * rows_u[i + 1],
            cs * rows_u[i + 1] + sn * rows_u[i],
        )
    return jnp.concatenate(rows_u, -2)


def lasdq(d: jax.Array, e: jax.Array, sqre: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``dlasdq`` ('U', sqre) with vectors as bdsdc's divide and conquer calls it on a leaf
    (``d`` (..., n), ``e`` (..., n - 1 + sqre)): (values ascending, U (..., n, n), VT
    (..., n + sqre, n + sqre)). With sqre = 1 a sweep of right rotations folds the extra
    column in (VT's rows rotated), leaving a lower bidiagonal for ``bdsqr``; bdsqr's (bdsdc's)
    descending selection sort is undone into dlasdq's ascending order (ties as dlasdq)."""
    n = d.shape[-1]
    m = n + sqre
    dtype = d.dtype
    rows = list(jnp.split(jnp.broadcast_to(jnp.eye(m, dtype=dtype), (*d.shape[:-1], m, m)), m, -2))
    if sqre:
        ds, es = list(jnp.split(d, n, axis=-1)), list(jnp.split(e, n, axis=-1))
        for i in range(n):
            cs, sn, r = _lartg(ds[i], es[i])
            ds[i] = r
            if i < n - 1:
                es[i], ds[i + 1] = sn * ds[i + 1], cs * ds[i + 1]
            cs, sn = cs[..., None], sn[..., None]
            rows[i], rows[i + 1] = sn * rows[i + 1] + cs * rows[i], cs * rows[i + 1] - sn * rows[i]
        d, e = jnp.concatenate(ds, -1), jnp.concatenate(es[: n - 1], -1)
    values, u, vtb = bdsqr(d, e, lower=bool(sqre))
    ascending = jnp.flip(values, -1)
    _, at = bdsdc_sort(ascending, jnp.broadcast_to(index_range(n), ascending.shape))
    chooser = (index_range(n)[:, None] == at[..., None, :]).astype(dtype)  # [a, i]: a == at[i]
    vt_asc = chooser @ vtb
    head = vt_asc @ jnp.concatenate(rows[:n], -2)
    vt = jnp.concatenate([head, *rows[n:]], -2)
    return ascending, u @ mT(chooser), vt


def _select(d: jax.Array, perm: jax.Array, i: int, k: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Entries i and k (..., 1) of ``d`` and ``perm`` swapped."""
    ids = index_range(d.shape[-1])
    hit_i, hit_k = ids == i, ids == k
    dk, pk = pick_where(d, hit_k, -1), pick_where(perm, hit_k, -1)
    d = where(hit_i, dk, where(hit_k, d[..., i : i + 1], d))
    perm = where(hit_i, pk, where(hit_k, perm[..., i : i + 1], perm))
    return d, perm


def _sorts(d: jax.Array) -> tuple[jax.Array, jax.Array]:
    """bdsqr's, lasdq's and bdsdc's selection sorts of ``d`` (..., n), equal values moved as
    they move them: (d descending, the permutation: entry k from position perm[k])."""
    n = d.shape[-1]
    ids = index_range(n)
    perm = jnp.broadcast_to(ids, d.shape)
    big = jnp.asarray(np.inf, d.dtype)
    for i in range(n - 1):  # bdsqr: the last smallest of d[:n-i] to position n-1-i
        end = n - 1 - i
        key = where(ids <= end, d, big)
        low = jnp.min(key, axis=-1, keepdims=True)
        k = jnp.max(where((ids <= end) & (key == low), ids, -1), axis=-1, keepdims=True)
        d, perm = _select(d, perm, end, k)
    for i in range(n - 1):  # lasdq: the first smallest of d[i:] to position i
        key = where(ids >= i, d, big)
        low = jnp.min(key, axis=-1, keepdims=True)
        k = jnp.min(where((ids >= i) & (key == low), ids, n), axis=-1, keepdims=True)
        d, perm = _select(d, perm, i, k)
    return bdsdc_sort(d, perm)


def bdsdc_sort(d: jax.Array, perm: jax.Array) -> tuple[jax.Array, jax.Array]:
    """bdsdc's selection sort of ``d`` (..., n) into decreasing order (the first largest of
    d[i:] to position i), ``perm`` moved with it."""
    n = d.shape[-1]
    ids = index_range(n)
    big = jnp.asarray(np.inf, d.dtype)
    for i in range(n - 1):
        key = where(ids >= i, d, -big)
        top = jnp.max(key, axis=-1, keepdims=True)
        k = jnp.min(where((ids >= i) & (key == top), ids, n), axis=-1, keepdims=True)
        d, perm = _select(d, perm, i, k)
    return d, perm


def _bidiagonal(d: jax.Array, e: jax.Array, *, lower: bool) -> tuple[jax.Array, ...]:
    """dbdsdc ('I'): ``bdsqr`` up to BDSQR_LIMIT rows, divide and conquer (bdsdc.py) above."""
    if d.shape[-1] <= BDSQR_LIMIT:
        return bdsqr(d, e, lower=lower)
    rotations: list = []
    if lower:
        d, e, rotations = lower_to_upper(d, e)
    s, u, vt = bdsdc.bdsdc(d, e, lasdq, bdsdc_sort)
    if lower:
        u = apply_lower_rotations(u, rotations)
    return s, u, vt


# -- gesdd ----------------------------------------------------------------------------------------
def _p_apply(p_vectors: jax.Array, p_taus: jax.Array, c: jax.Array, *, left: bool) -> jax.Array:
    """P c (``left``) or c P^T for P = diag(1, G_0 ... G_{n-2}) of ``gebrd``."""
    if p_taus.shape[-1] == 0:
        return c
    if left:
        rest = apply_reflectors(p_vectors, p_taus, c[..., 1:, :], left=True, transpose=False)
        return jnp.concatenate([c[..., :1, :], rest], axis=-2)
    rest = apply_reflectors(p_vectors, p_taus, c[..., :, 1:], left=False, transpose=True)
    return jnp.concatenate([c[..., :, :1], rest], axis=-1)


def _embed(x: jax.Array, rows: int, cols: int) -> jax.Array:
    """``x`` (..., k, k) at the top left of (..., rows, cols), the identity on the rest of the
    diagonal (gesdd's dlaset of the corner)."""
    k = x.shape[-1]
    eye = jnp.broadcast_to(jnp.eye(rows, cols, dtype=x.dtype), (*x.shape[:-2], rows, cols))
    padded = jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, rows - k), (0, cols - k)])
    inside = (index_range(rows)[:, None] < k) & (index_range(cols)[None, :] < k)
    return where(inside, padded, eye)


def _tall(a: jax.Array, full_matrices: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """gesdd of ``a`` (..., m, n), m >= n >= 2: (s, U, V^T)."""
    m, n = a.shape[-2], a.shape[-1]
    if m >= crossover(n) and m > n:  # paths 3 and 4: QR first
        packed, taus = geqrf(a)
        r = where(index_range(n)[:, None] <= index_range(n)[None, :], packed[..., :n, :], 0.0)
        s, u_r, vt = _square_or_tall(r, full_matrices=False)
        q = householder_product(packed, taus, m if full_matrices else n)
        u = q[..., :, :n] @ u_r
        if full_matrices:
            u = jnp.concatenate([u, q[..., :, n:]], axis=-1)
        return s, u, vt
    return _square_or_tall(a, full_matrices)


def _square_or_tall(a: jax.Array, full_matrices: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """gesdd's path 5 (m >= n, no QR first): gebrd, bdsdc, ormbr."""
    m, n = a.shape[-2], a.shape[-1]
    d, e, qv, qt, pv, pt = gebrd(a)
    s, u_b, vt_b = _bidiagonal(d, e, lower=False)
    u = _embed(u_b, m, m if full_matrices else n)
    u = apply_reflectors(qv, qt, u, left=True, transpose=False)
    return s, u, _p_apply(pv, pt, vt_b, left=False)


def _wide(a: jax.Array, full_matrices: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """gesdd of ``a`` (..., m, n), 2 <= m < n: (s, U, V^T)."""
    m, n = a.shape[-2], a.shape[-1]
    at = mT(a)
    if n >= crossover(m):  # paths 3t and 4t: LQ first (the QR of a^T), gebrd of L
        packed, taus = geqrf(at)
        r = where(index_range(m)[:, None] <= index_range(m)[None, :], packed[..., :m, :], 0.0)
        s, u, vt_l = _square_or_tall(mT(r), full_matrices=False)
        q = mT(householder_product(packed, taus, n if full_matrices else m))
        vt = vt_l @ q[..., :m, :]
        if full_matrices:
            vt = jnp.concatenate([vt, q[..., m:, :]], axis=-2)
        return s, u, vt
    # path 5t: gebrd of the wide matrix (lower bidiagonal) = that of a^T transposed
    d, e, qv, qt, pv, pt = gebrd(at)
    s, u_b, vt_b = _bidiagonal(d, e, lower=True)
    u = _p_apply(pv, pt, u_b, left=True)
    vt = _embed(vt_b, n if full_matrices else m, n)
    vt = apply_reflectors(qv, qt, vt, left=False, transpose=True)
    return s, u, vt


def gesdd(a: jax.Array, *, full_matrices: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(s, U, V^T) of ``a`` (..., m, n), both sides from 2 to GESDD_LIMIT (the short one), as
    LAPACK's ``gesdd`` computes them with vectors (jobz 'A' or 'S'), signs included. ``a`` is
    divided by a power of two near its largest entry first (exact)."""
    scale = power_of_two_scale(a)
    a = a / scale
    m, n = a.shape[-2], a.shape[-1]
    s, u, vt = _tall(a, full_matrices) if m >= n else _wide(a, full_matrices)
    # a matrix with an inf or NaN: all NaN (JAX's values are NaN; the sweeps' masked tests
    # would otherwise stop on it with finite numbers)
    broken = ~jnp.all(jnp.isfinite(a), axis=(-2, -1), keepdims=True)
    nan = jnp.asarray(np.nan, a.dtype)
    s = where(broken[..., 0], nan, s * scale[..., 0])
    return s, where(broken, nan, u), where(broken, nan, vt)
