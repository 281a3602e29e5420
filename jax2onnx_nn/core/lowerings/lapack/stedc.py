"""``stedc``'s divide and conquer for a static n above SMLSIZ (25): ``eigh``'s tridiagonal step
with LAPACK's vectors, signs included, for 26 <= n <= ``STEDC_LIMIT``.

LAPACK's ``dstedc`` (COMPZ = 'I') scales the tridiagonal by its largest entry and runs
``dlaed0``: a fixed tree for a static n (halve every size until the last is at most 25,
subtract ``|e|`` at each cut from the two diagonal entries around it), ``dsteqr`` on the leaves
(``syevd.steqr``, the leaves of one size batched as one call), then the pairs merged level by
level by ``dlaed1``: ``dlaed2`` (deflation), ``dlaed3`` / ``dlaed4`` (the secular equation,
Gu-Eisenstat's z, the vectors) and ``dlamrg`` (the merged order). The numpy transliteration
checked against OpenBLAS is ``benchmarks/dstedc_reference.py``; its design note is the layout
here:

- every block is kept sorted (its values ascending, its vectors' columns with them): LAPACK
  keeps an index ``indxq`` instead, and applies it at the end; both orders are ``dlamrg``'s
  (ties: the first list first), computed as ranks, and applied as one-hot products (exact);
- ``dlaed2``'s deflation is one ``Loop`` over the merged order (m steps: a small ``z`` deflated,
  or a Givens rotation of the last kept column and this one when ``|t c s| <= tol``, inserted
  into the deflated list as LAPACK's insertion does), on a mask of kept entries;
- ``coltyp``'s column grouping only saves flops: the kept vectors are one product
  ``Q_kept @ U`` over the whole block;
- ``dlaed4`` runs for all roots at once: the roots strictly between two poles as one
  ``while`` loop of masked iterations (each root frozen at its own convergence test, so it
  keeps LAPACK's value), ``dlaed6`` (its three-pole step) a nested masked loop, the root
  beyond the last pole its own loop, ``k = 1`` and ``k = 2`` (``dlaed5``) in closed form; the
  sums over the poles are ReduceSums (LAPACK adds them in order: values differ by rounding,
  not by path);
- Gu-Eisenstat's ``w`` is a masked ReduceProd.

Left out: ``dstedc``'s initial split at a negligible ``e`` (``|e_i| <= eps sqrt|d_i d_i+1|``)
into blocks solved (and scaled) separately: such an entry is set to 0 here and the fixed tree
runs on the whole matrix (a cut at it deflates completely, a leaf splits there as steqr does),
so the values are the same to rounding but a vector of a block LAPACK would have solved on its
own may differ in sign; the bitwise order of the secular sums (above); ``dlaed4``'s
non-convergence exit (after 30 iterations the root stays where it is). LAPACK master's 64 eps
deflation tolerance is not followed: OpenBLAS 0.3.30 (jaxlib's) has 8 eps. Above 32 rows
JAX's ``sytrd`` is blocked (``dlatrd``); ``tridiagonal`` is ``sytd2``'s, equal to rounding.

Measured (``python -m benchmarks.vector_signs --functions eigh_lower eigh_upper --sizes 26 32
64 --batch 16``): 384 of 384 matrices with JAX's vectors, signs included (one-sided Jacobi: 0);
at 100 and 128 (``--batch 8``) 127 of 128, the other a float32 column JAX itself negates on
OpenBLAS's Sandybridge kernels; at 160 and 256 (``--batch 4``) 63 of 64, the other a float32
perturbed 256x256 (lower triangle); at 384 and 512 (``--batch 2``) 32 of 32. Float64 vectors within
~1e-13 of JAX's, values ~1e-15.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax2onnx_nn.core.lowerings.lapack.steps import (
    Index,
    index_range,
    lapack_eps,
    pick_where,
    where,
)

Leaf = Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]

# dstedc's SMLSIZ: the largest leaf (and the largest n steqr solves alone)
SMLSIZ = 25
# eigh of a static n in 26..STEDC_LIMIT takes this path (above it, Jacobi): onnxruntime CPU
# time, batch of 8 float32, against Jacobi: 26 23 / 8 ms, 64 80 / 48 ms, 100 166 / 150 ms,
# 128 255 / 261 ms, 160 445 / 459 ms, 192 647 / 731 ms, 256 1415 / 1611 ms
# (benchmarks/linalg_bench.py --cases eigh --cpu-time); the graph grows with the tree (4244
# nodes at 64, 5735 at 128, 7290 at 256, Loop bodies included; Jacobi's 245), its export too
# (6 s at 192 and 256, Jacobi's 0.2 s); batch of 2 (STEDC_LIMIT monkeypatched): 384 1099 /
# 1367 ms and again 1067 / 1197 ms, 512 2385 / 2624 ms; 7719 / 8927 nodes, an export of 2.7 /
# 3.6 s CPU; vector_signs --sizes 384 512 --batch 2: 32 of 32 with JAX's vectors
STEDC_LIMIT = 512
# dlaed4's and dlaed6's iteration bounds (MAXIT)
LAED4_MAXIT = 30
LAED6_MAXIT = 40
# dlaed2's deflation tolerance factor: OpenBLAS 0.3.30 (LAPACK master has 64)
DEFLATION_FACTOR = 8.0


def rotate_columns(
    x: jax.Array, at_p: jax.Array, at_j: jax.Array, c: jax.Array, s: jax.Array, rotate: jax.Array
) -> jax.Array:
    """A deflation's Givens pair on x's columns p and j (one-hot masks ``at_p``, ``at_j``),
    where ``rotate``: column p becomes c x_p + s x_j, column j c x_j - s x_p (dlaed2's and
    dlasd2's ``drot``)."""
    col_p = pick_where(x, at_p[..., None, :], -1)
    col_j = pick_where(x, at_j, -1)
    rot = rotate[..., None]
    return where(
        rot & at_p[..., None, :],
        c[..., None] * col_p + s[..., None] * col_j,
        where(rot & at_j, c[..., None] * col_j - s[..., None] * col_p, x),
    )


def leaf_sizes(n: int) -> list[int]:
    """dlaed0's leaves: every size halved (``s // 2``, ``(s + 1) // 2``) until the last is at
    most SMLSIZ."""
    sizes = [n]
    while sizes[-1] > SMLSIZ:
        sizes = [h for s in sizes for h in (s // 2, (s + 1) // 2)]
    return sizes


def pick(x: jax.Array, index: jax.Array) -> jax.Array:
    """x[..., index] along the last axis, kept as a size-1 axis (index broadcasts, exact)."""
    return pick_where(x, index_range(x.shape[-1]) == index, -1)


def safe(x: jax.Array, ok: jax.Array) -> jax.Array:
    """x where ok, else 1 (a divisor that cannot be 0 where its quotient is discarded)."""
    return where(ok, x, jnp.ones((), x.dtype))


def _quadratic(a: jax.Array, b: jax.Array, c: jax.Array, plus: bool) -> jax.Array:
    """LAPACK's stable root of a x^2 - ... : ``a <= 0``: (a - sqrt|a^2 - 4bc|) / 2c, else
    2b / (a + sqrt|a^2 - 4bc|) (``plus``: the branch on ``a >= 0`` with the other signs, as
    dlaed4's last root)."""
    root = jnp.sqrt(jnp.abs(a * a - 4 * b * c))
    if plus:
        return where(a >= 0, (a + root) / safe(2 * c, c != 0), 2 * b / (a - root))
    return where(a <= 0, (a - root) / safe(2 * c, c != 0), 2 * b / safe(a + root, a + root != 0))


def _laed6(
    first: jax.Array,
    orgati: jax.Array,
    rho: jax.Array,
    d: tuple[jax.Array, jax.Array, jax.Array],
    z: tuple[jax.Array, jax.Array, jax.Array],
    finit: jax.Array,
    active: jax.Array,
) -> jax.Array:
    """dlaed6 for every root at once (arrays of one shape): the root tau of
    rho + sum z_i / (d_i - x) = 0 near the poles ``orgati`` names; ``first``: dlaed4's
    KNITER = 2 (its first step)."""
    dtype = rho.dtype
    eps, safmin = lapack_eps(dtype)
    zero = jnp.zeros((), dtype)
    d0, d1, d2 = d
    z0, z1, z2 = z
    lbd = where(orgati, d1, d0)
    ubd = where(orgati, d2, d1)
    lbd = where(finit < 0, zero, lbd)
    ubd = where(finit < 0, ubd, zero)
    # KNITER = 2: a first guess from the two poles and the third one's term frozen
    half = where(orgati, (d2 - d1) / 2, (d0 - d1) / 2)
    c = where(orgati, rho + z0 / ((d0 - d1) - half), rho + z2 / ((d2 - d1) - half))
    a = where(orgati, c * (d1 + d2) + z1 + z2, c * (d0 + d1) + z0 + z1)
    b = where(orgati, c * d1 * d2 + z1 * d2 + z2 * d1, c * d0 * d1 + z0 * d1 + z1 * d0)
    big = jnp.maximum(jnp.maximum(jnp.abs(a), jnp.abs(b)), jnp.abs(c))
    big = safe(big, big != 0)
    a, b, c = a / big, b / big, c / big
    tau = where(c == 0, b / safe(a, a != 0), _quadratic(a, b, c, plus=False))
    tau = where((tau < lbd) | (tau > ubd), (lbd + ubd) / 2, tau)
    hit = (d0 == tau) | (d1 == tau) | (d2 == tau)
    sd = lambda di: safe(di * (di - tau), di * (di - tau) != 0)  # noqa: E731
    temp = finit + tau * z0 / sd(d0) + tau * z1 / sd(d1) + tau * z2 / sd(d2)
    lbd = where(first & ~hit & (temp <= 0), tau, lbd)
    ubd = where(first & ~hit & (temp > 0), tau, ubd)
    tau = where(first & ~hit & (jnp.abs(finit) > jnp.abs(temp)), tau, zero)
    # scaling where tau is close to a pole
    small1 = 2.0 ** int(math.log(safmin) / math.log(2.0) / 3.0)
    small2 = small1 * small1
    near = jnp.minimum(jnp.abs(where(orgati, d1, d0) - tau), jnp.abs(where(orgati, d2, d1) - tau))
    scale = near <= small1
    sclfac = where(near <= small2, 1 / small2, 1 / small1)
    sclfac = where(scale, sclfac, jnp.ones((), dtype))
    sclinv = where(near <= small2, small2, small1)
    ds = (d0 * sclfac, d1 * sclfac, d2 * sclfac)
    zs = (z0 * sclfac, z1 * sclfac, z2 * sclfac)
    tau, lbd, ubd = tau * sclfac, lbd * sclfac, ubd * sclfac

    def sums(tau: jax.Array) -> tuple[jax.Array, ...]:
        fc = df = ddf = erretm = zero
        hit = jnp.zeros(tau.shape, bool)
        for di, zi in zip(ds, zs, strict=True):
            gap = di - tau
            hit = hit | (gap == 0)
            t = 1 / safe(gap, gap != 0)
            t1 = zi * t
            t2 = t1 * t
            t3 = t2 * t
            t4 = t1 / di
            fc, erretm, df, ddf = fc + t4, erretm + jnp.abs(t4), df + t2, ddf + t3
        return fc, df, ddf, erretm, hit

    fc, df, ddf, _, _ = sums(tau)
    f = finit + tau * fc
    running = active & (jnp.abs(f) > 0)
    lbd = where(running & (f <= 0), tau, lbd)
    ubd = where(running & (f > 0), tau, ubd)

    def cond(state: tuple) -> jax.Array:
        return jnp.any(state[-2]) & (state[-1] <= LAED6_MAXIT)

    def body(state: tuple) -> tuple:
        tau, f, df, ddf, lbd, ubd, running, niter = state
        t1 = where(orgati, ds[1], ds[0]) - tau
        t2 = where(orgati, ds[2], ds[1]) - tau
        a = (t1 + t2) * f - t1 * t2 * df
        b = t1 * t2 * f
        c = f - (t1 + t2) * df + t1 * t2 * ddf
        big = jnp.maximum(jnp.maximum(jnp.abs(a), jnp.abs(b)), jnp.abs(c))
        big = safe(big, big != 0)
        a, b, c = a / big, b / big, c / big
        eta = where(c == 0, b / safe(a, a != 0), _quadratic(a, b, c, plus=False))
        eta = where(f * eta >= 0, -f / safe(df, df != 0), eta)
        new = tau + eta
        new = where((new < lbd) | (new > ubd), (lbd + ubd) / 2, new)
        fc, df1, ddf1, erretm, hit = sums(new)
        f1 = finit + new * fc
        erretm = 8 * (jnp.abs(finit) + jnp.abs(new) * erretm) + jnp.abs(new) * df1
        done = hit | (jnp.abs(f1) <= 4 * eps * erretm) | ((ubd - lbd) <= 4 * eps * jnp.abs(new))
        go = running & ~hit
        lbd1 = where(go & ~done & (f1 <= 0), new, lbd)
        ubd1 = where(go & ~done & (f1 > 0), new, ubd)
        return (
            where(running, new, tau),
            where(go, f1, f),
            where(go, df1, df),
            where(go, ddf1, ddf),
            lbd1,
            ubd1,
            running & ~done,
            niter + 1,
        )

    state = (tau, f, df, ddf, lbd, ubd, running, jnp.int32(2))
    tau = lax.while_loop(cond, body, state)[0]
    return where(scale, tau * sclinv, tau)


def _middle_roots(
    dl: jax.Array, w: jax.Array, rho: jax.Array, k: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """dlaed4 for roots r = 0..k-2 (between poles r and r+1), all at once: (lambda (..., m, 1),
    delta (..., m roots, m poles)); rows r >= k-1 are padding. dl, w: (..., m) with the
    k kept entries first; rho, k: (..., 1)."""
    dtype = dl.dtype
    m = dl.shape[-1]
    eps, _ = lapack_eps(dtype)
    zero = jnp.zeros((), dtype)
    poles = index_range(m)
    r = poles[:, None]
    big_d, big_z = dl[..., None, :], w[..., None, :]
    kk, rho = k[..., None], rho[..., None]  # (..., 1, 1)
    valid = poles < kk
    roots = (r < kk - 1) & (kk >= 3)
    rhoinv = 1 / rho
    di, dip1 = pick(big_d, r), pick(big_d, r + 1)
    zi, zp = pick(big_z, r), pick(big_z, r + 1)
    dlt = dip1 - di
    midpt = dlt / 2
    delta = (big_d - di) - midpt
    ok = valid & (delta != 0)
    terms = where(ok, big_z * big_z / safe(delta, ok), zero)
    psi = jnp.sum(where(poles < r, terms, zero), axis=-1, keepdims=True)
    phi = jnp.sum(where(poles > r + 1, terms, zero), axis=-1, keepdims=True)
    c = rhoinv + psi + phi
    w0 = c + zi * zi / safe(pick(delta, r), roots) + zp * zp / safe(pick(delta, r + 1), roots)
    orgati = w0 > 0
    a = where(orgati, c * dlt + zi * zi + zp * zp, c * dlt - zi * zi - zp * zp)
    b = where(orgati, zi * zi * dlt, zp * zp * dlt)
    root_o = jnp.sqrt(jnp.abs(a * a - 4 * b * c))
    root_n = jnp.sqrt(jnp.abs(a * a + 4 * b * c))
    c_safe = safe(2 * c, c != 0)
    tau = where(
        orgati,
        where(a > 0, 2 * b / safe(a + root_o, a + root_o != 0), (a - root_o) / c_safe),
        where(a < 0, 2 * b / safe(a - root_n, a - root_n != 0), -(a + root_n) / c_safe),
    )
    tau = where(roots, tau, zero)
    dltlb = where(orgati, zero, -midpt)
    dltub = where(orgati, midpt, zero)
    origin = where(orgati, di, dip1)
    delta = (big_d - origin) - tau
    ii = where(orgati, r, r + 1)
    z_ii = pick(big_z, ii)
    swtch3 = roots & (ii != 0) & (ii != kk - 1)

    def evaluate(delta: jax.Array, tau: jax.Array) -> tuple[jax.Array, ...]:
        ok = valid & (delta != 0)
        t = where(ok, big_z / safe(delta, ok), zero)
        zt = big_z * t
        below, above = poles < ii, (poles > ii) & valid
        psi = jnp.sum(where(below, zt, zero), axis=-1, keepdims=True)
        dpsi = jnp.sum(where(below, t * t, zero), axis=-1, keepdims=True)
        phi = jnp.sum(where(above, zt, zero), axis=-1, keepdims=True)
        dphi = jnp.sum(where(above, t * t, zero), axis=-1, keepdims=True)
        # LAPACK's erretm adds the running sums of psi (then phi): weights by distance to ii
        weight = jnp.abs(poles - ii).astype(dtype)
        err = jnp.abs(jnp.sum(where(below, zt * weight, zero), axis=-1, keepdims=True))
        err = err + jnp.sum(where(above, zt * weight, zero), axis=-1, keepdims=True)
        t_ii = z_ii / safe(pick(delta, ii), roots)
        dw = dpsi + dphi + t_ii * t_ii
        t_ii = z_ii * t_ii
        w = rhoinv + phi + psi + t_ii
        err = 8 * (phi - psi) + err + 2 * rhoinv + 3 * jnp.abs(t_ii) + jnp.abs(tau) * dw
        return psi, dpsi, phi, dphi, dw, w, err

    psi, dpsi, phi, dphi, dw, w, err = evaluate(delta, tau)
    w_first = rhoinv + phi + psi
    swtch3 = swtch3 & where(orgati, w_first < 0, w_first > 0)
    d_r, d_r1 = di, dip1
    d_m1, d_p1 = pick(big_d, ii - 1), pick(big_d, ii + 1)
    z_m1, z_p1 = pick(big_z, ii - 1), pick(big_z, ii + 1)

    def step_eta(state: tuple, first: jax.Array, active: jax.Array) -> jax.Array:
        delta, _, psi, dpsi, phi, dphi, dw, w, _, _, _, swtch, *_ = state
        dl_r, dl_r1 = pick(delta, r), pick(delta, r + 1)
        plain = first | ~swtch
        # the two-pole step (not swtch3)
        t_ii = z_ii / safe(pick(delta, ii), roots)
        dpsi2 = where(orgati, dpsi + t_ii * t_ii, dpsi)
        dphi2 = where(orgati, dphi, dphi + t_ii * t_ii)
        c_plain = where(
            orgati,
            w - dl_r1 * dw - (d_r - d_r1) * (zi / safe(dl_r, roots)) ** 2,
            w - dl_r * dw - (d_r1 - d_r) * (zp / safe(dl_r1, roots)) ** 2,
        )
        c = where(plain, c_plain, w - dl_r * dpsi2 - dl_r1 * dphi2)
        a = (dl_r + dl_r1) * w - dl_r * dl_r1 * dw
        b = dl_r * dl_r1 * w
        a_zero = where(
            plain,
            where(
                orgati,
                zi * zi + dl_r1 * dl_r1 * (dpsi + dphi),
                zp * zp + dl_r * dl_r * (dpsi + dphi),
            ),
            dl_r * dl_r * dpsi2 + dl_r1 * dl_r1 * dphi2,
        )
        a_c0 = where(a == 0, a_zero, a)
        eta2 = where(c == 0, b / safe(a_c0, a_c0 != 0), _quadratic(a, b, c, plus=False))
        # the three-pole step (swtch3): dlaed6 on poles ii-1, ii, ii+1
        dl_m1, dl_ii, dl_p1 = pick(delta, ii - 1), pick(delta, ii), pick(delta, ii + 1)
        temp = rhoinv + psi + phi
        t1_o = (z_m1 / safe(dl_m1, swtch3)) ** 2
        t1_n = (z_p1 / safe(dl_p1, swtch3)) ** 2
        c3 = where(
            plain,
            where(
                orgati,
                temp - dl_p1 * (dpsi + dphi) - (d_m1 - d_p1) * t1_o,
                temp - dl_m1 * (dpsi + dphi) - (d_p1 - d_m1) * t1_n,
            ),
            temp - dl_m1 * dpsi - dl_p1 * dphi,
        )
        zz0 = where(
            plain,
            where(orgati, z_m1 * z_m1, dl_m1 * dl_m1 * (dpsi + (dphi - t1_n))),
            dl_m1 * dl_m1 * dpsi,
        )
        zz2 = where(
            plain,
            where(orgati, dl_p1 * dl_p1 * ((dpsi - t1_o) + dphi), z_p1 * z_p1),
            dl_p1 * dl_p1 * dphi,
        )
        eta3 = _laed6(
            jnp.broadcast_to(first, orgati.shape),
            orgati,
            c3,
            (dl_m1, dl_ii, dl_p1),
            (zz0, z_ii * z_ii, zz2),
            w,
            active & swtch3,
        )
        return where(swtch3, eta3, eta2)

    def cond(state: tuple) -> jax.Array:
        *_, w, err, _, _, _, done, niter = state
        return jnp.any(~done & ~(jnp.abs(w) <= eps * err)) & (niter <= LAED4_MAXIT)

    def body(state: tuple) -> tuple:
        delta, tau, psi, dpsi, phi, dphi, dw, w, err, dltlb, dltub, swtch, done, niter = state
        done = done | (jnp.abs(w) <= eps * err)
        active = ~done
        first = niter == 2
        dltlb = where(active & (w <= 0), jnp.maximum(dltlb, tau), dltlb)
        dltub = where(active & (w > 0), jnp.minimum(dltub, tau), dltub)
        eta = step_eta(state, first, active)
        dw_safe = safe(dw, dw != 0)
        eta = where(w * eta >= 0, -w / dw_safe, eta)
        out = ((tau + eta) > dltub) | ((tau + eta) < dltlb)
        eta = where(out, where(w < 0, (dltub - tau) / 2, (dltlb - tau) / 2), eta)
        prew = w
        new_delta = delta - eta
        new_tau = tau + eta
        new = evaluate(new_delta, new_tau)
        w1 = new[5]
        toggled = (w1 * prew > 0) & (jnp.abs(w1) > jnp.abs(prew) / 10)
        swtch1 = where(
            first,
            where(orgati, -w1 > jnp.abs(prew) / 10, w1 > jnp.abs(prew) / 10),
            swtch != toggled,
        )
        keep = lambda x, y: where(active, x, y)  # noqa: E731
        return (
            keep(new_delta, delta),
            keep(new_tau, tau),
            *(keep(x, y) for x, y in zip(new, (psi, dpsi, phi, dphi, dw, w, err), strict=True)),
            dltlb,
            dltub,
            keep(swtch1, swtch),
            done,
            niter + 1,
        )

    state = (
        delta,
        tau,
        psi,
        dpsi,
        phi,
        dphi,
        dw,
        w,
        err,
        dltlb,
        dltub,
        jnp.zeros(orgati.shape, bool),
        ~roots,
        jnp.int32(2),
    )
    delta, tau, *_ = lax.while_loop(cond, body, state)
    return origin + tau, delta


def _last_root(
    dl: jax.Array, w: jax.Array, rho: jax.Array, k: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """dlaed4 for the root beyond the last pole (k >= 3): (lambda (..., 1, 1), delta
    (..., 1, m))."""
    dtype = dl.dtype
    m = dl.shape[-1]
    eps, _ = lapack_eps(dtype)
    zero = jnp.zeros((), dtype)
    poles = index_range(m)
    big_d, big_z = dl[..., None, :], w[..., None, :]
    kk, rho = k[..., None], rho[..., None]
    valid = poles < kk
    live = kk >= 3
    rhoinv = 1 / rho
    dn, dn1 = pick(big_d, kk - 1), pick(big_d, kk - 2)
    zn, zn1 = pick(big_z, kk - 1), pick(big_z, kk - 2)
    midpt = rho / 2
    delta = (big_d - dn) - midpt
    ok = valid & (delta != 0)
    terms = where(ok, big_z * big_z / safe(delta, ok), zero)
    psi = jnp.sum(where(poles < kk - 2, terms, zero), axis=-1, keepdims=True)
    c = rhoinv + psi
    w0 = c + zn1 * zn1 / safe(pick(delta, kk - 2), live) + zn * zn / safe(pick(delta, kk - 1), live)
    gap = dn - dn1
    a = -c * gap + zn1 * zn1 + zn * zn
    b = zn * zn * gap
    root = jnp.sqrt(a * a + 4 * b * c)
    tau_f = where(a < 0, 2 * b / safe(root - a, root - a != 0), (a + root) / safe(2 * c, c != 0))
    temp = zn1 * zn1 / (gap + rho) + zn * zn / rho
    neg = w0 <= 0
    tau = where(neg & (c <= temp), rho, tau_f)
    tau = where(live, tau, zero)
    dltlb = where(neg, midpt, zero)
    dltub = where(neg, rho, midpt)
    delta = (big_d - dn) - tau
    below = poles < kk - 1

    def evaluate(delta: jax.Array, tau: jax.Array) -> tuple[jax.Array, ...]:
        ok = valid & (delta != 0)
        t = where(ok, big_z / safe(delta, ok), zero)
        zt = big_z * t
        psi = jnp.sum(where(below, zt, zero), axis=-1, keepdims=True)
        dpsi = jnp.sum(where(below, t * t, zero), axis=-1, keepdims=True)
        weight = (kk - 1 - poles).astype(dtype)
        err = jnp.abs(jnp.sum(where(below, zt * weight, zero), axis=-1, keepdims=True))
        t_n = zn / safe(pick(delta, kk - 1), live)
        phi = zn * t_n
        dphi = t_n * t_n
        err = 8 * (-phi - psi) + err - phi + rhoinv + jnp.abs(tau) * (dpsi + dphi)
        return psi, dpsi, phi, dphi, rhoinv + phi + psi, err

    def cond(state: tuple) -> jax.Array:
        *_, w, err, _, _, done, niter = state
        return jnp.any(~done & ~(jnp.abs(w) <= eps * err)) & (niter <= LAED4_MAXIT)

    def body(state: tuple) -> tuple:
        delta, tau, psi, dpsi, phi, dphi, w, err, dltlb, dltub, done, niter = state
        done = done | (jnp.abs(w) <= eps * err)
        active = ~done
        first = niter == 2
        dltlb = where(active & (w <= 0), jnp.maximum(dltlb, tau), dltlb)
        dltub = where(active & (w > 0), jnp.minimum(dltub, tau), dltub)
        d1, d2 = pick(delta, kk - 2), pick(delta, kk - 1)
        c = w - d1 * dpsi - d2 * dphi
        a = (d1 + d2) * w - d1 * d2 * (dpsi + dphi)
        b = d1 * d2 * w
        c = where(first & (c < 0), jnp.abs(c), c)
        dd = safe(dpsi + dphi, dpsi + dphi != 0)
        eta = _quadratic(a, b, c, plus=True)
        eta = where(first & (c == 0), -w / dd, eta)
        eta = where(w * eta > 0, -w / dd, eta)
        out = ((tau + eta) > dltub) | ((tau + eta) < dltlb)
        eta = where(out, where(w < 0, (dltub - tau) / 2, (dltlb - tau) / 2), eta)
        new_delta, new_tau = delta - eta, tau + eta
        new = evaluate(new_delta, new_tau)
        keep = lambda x, y: where(active, x, y)  # noqa: E731
        return (
            keep(new_delta, delta),
            keep(new_tau, tau),
            *(keep(x, y) for x, y in zip(new, (psi, dpsi, phi, dphi, w, err), strict=True)),
            dltlb,
            dltub,
            done,
            niter + 1,
        )

    state = (delta, tau, *evaluate(delta, tau), dltlb, dltub, ~live, jnp.int32(2))
    delta, tau, *_ = lax.while_loop(cond, body, state)
    return dn + tau, delta


def _laed5(
    d1: jax.Array, d2: jax.Array, z1: jax.Array, z2: jax.Array, rho: jax.Array
) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
    """dlaed5 (k = 2): (lambda_1, lambda_2), root 1's unit vector, root 2's."""
    dl = d2 - d1
    dl_safe = safe(dl, dl != 0)
    w = 1 + 2 * rho * (z2 * z2 - z1 * z1) / dl_safe
    # root 1, w > 0: from d1
    b = dl + rho * (z1 * z1 + z2 * z2)
    c = rho * z1 * z1 * dl
    tau_a = 2 * c / (b + jnp.sqrt(jnp.abs(b * b - 4 * c)))
    tau_a = safe(tau_a, tau_a != 0)
    # root 1, w <= 0, and root 2: from d2
    b2 = -dl + rho * (z1 * z1 + z2 * z2)
    c2 = rho * z2 * z2 * dl
    disc = jnp.sqrt(b2 * b2 + 4 * c2)
    tau_b = where(b2 > 0, -2 * c2 / safe(b2 + disc, b2 + disc != 0), (b2 - disc) / 2)
    tau_b = safe(tau_b, tau_b != 0)
    tau_2 = where(b2 > 0, (b2 + disc) / 2, 2 * c2 / safe(-b2 + disc, -b2 + disc != 0))
    tau_2 = safe(tau_2, tau_2 != 0)
    pos = w > 0
    lam1 = where(pos, d1 + tau_a, d2 + tau_b)
    x1 = where(pos, -z1 / tau_a, -z1 / safe(dl + tau_b, dl + tau_b != 0))
    x2 = where(pos, z2 / safe(dl - tau_a, dl - tau_a != 0), -z2 / tau_b)
    norm1 = jnp.sqrt(x1 * x1 + x2 * x2)
    norm1 = safe(norm1, norm1 != 0)
    y1 = -z1 / safe(dl + tau_2, dl + tau_2 != 0)
    y2 = -z2 / tau_2
    norm2 = jnp.sqrt(y1 * y1 + y2 * y2)
    norm2 = safe(norm2, norm2 != 0)
    return (lam1, d2 + tau_2), (x1 / norm1, x2 / norm1), (y1 / norm2, y2 / norm2)


def secular_roots(
    dl: jax.Array, w: jax.Array, rho: jax.Array, k: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """dlaed4 for every root of the k kept entries first in ``dl`` (ascending) and ``w``:
    (lambda (..., m), delta (..., m roots, m poles) = dl_i - lambda_j); k = 2 (dlaed5) and
    k = 1 give delta as the difference itself. Padding rows are not meaningful."""
    ids = index_range(dl.shape[-1])
    lam_mid, delta_mid = _middle_roots(dl, w, rho, k)
    lam_last, delta_last = _last_root(dl, w, rho, k)
    is_last = ids[:, None] == k[..., None] - 1
    delta = where(is_last, delta_last, delta_mid)  # (..., roots, poles)
    lam = where(is_last, lam_last, lam_mid)[..., 0]
    (l1, l2), _, _ = _laed5(dl[..., :1], dl[..., 1:2], w[..., :1], w[..., 1:2], rho)
    two, single = k == 2, k == 1
    lam = where(two & (ids == 0), l1, where(two & (ids == 1), l2, lam))
    lam = where(single & (ids == 0), dl[..., :1] + rho * w[..., :1] * w[..., :1], lam)
    small = (two | single)[..., None]
    delta = where(small, dl[..., None, :] - lam[..., :, None], delta)
    return lam, delta


def _secular(
    dl: jax.Array, w: jax.Array, rho: jax.Array, k: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """dlaed3's roots and vectors: (lambda (..., m), U (..., m poles, m roots)) for the k kept
    entries first in ``dl`` (ascending) and ``w``; padding roots and poles are 0 in U."""
    dtype = dl.dtype
    m = dl.shape[-1]
    zero, one = jnp.zeros((), dtype), jnp.ones((), dtype)
    ids = index_range(m)
    lam, delta = secular_roots(dl, w, rho, k)
    kk = k[..., None]
    # Gu-Eisenstat: w_i^2 = -delta_ii prod_{j != i} delta_ji / (dl_i - dl_j)
    valid_pole = ids[None, :] < kk
    valid_root = ids[:, None] < kk
    off = valid_pole & valid_root & (ids[:, None] != ids[None, :])
    gaps = dl[..., None, :] - dl[..., :, None]  # [j, i] = dl_i - dl_j
    ratio = where(off, delta / safe(gaps, off), one)
    diag = jnp.sum(where(ids[:, None] == ids[None, :], delta, zero), axis=-2)
    ww = diag * jnp.prod(ratio, axis=-2)
    ww = where(ids < k, jnp.sqrt(jnp.abs(ww)), zero)
    ww = where(w >= 0, jnp.abs(ww), -jnp.abs(ww))
    both = valid_pole & valid_root
    u = where(both, ww[..., None, :] / safe(delta, both), zero)  # [root j, pole i]
    u = u / safe(jnp.sqrt(jnp.sum(u * u, axis=-1, keepdims=True)), valid_root)
    # k = 2: dlaed5; k = 1: lambda = d + rho z^2, the vector 1
    _, (x1, x2), (y1, y2) = _laed5(dl[..., :1], dl[..., 1:2], w[..., :1], w[..., 1:2], rho)
    two = k == 2
    pair = where(ids[:, None] == 0, where(ids[None, :] == 0, x1[..., None], x2[..., None]), zero)
    pair = where(ids[:, None] == 1, where(ids[None, :] == 0, y1[..., None], y2[..., None]), pair)
    pair = where((ids[:, None] < 2) & (ids[None, :] < 2), pair, zero)
    u = where(two[..., None], pair, u)
    single = k == 1
    u = where(single[..., None], where((ids[:, None] == 0) & (ids[None, :] == 0), one, zero), u)
    return lam, jnp.swapaxes(u, -1, -2)


def onehot(rows: jax.Array, cols: int, mask: jax.Array, dtype: Any) -> jax.Array:
    """(..., len(rows), cols): 1 at [i, rows[i]] where mask[i]."""
    return where(mask[..., None] & (rows[..., None] == index_range(cols)), 1, 0).astype(dtype)


def _merge(
    d1: jax.Array, q1: jax.Array, d2: jax.Array, q2: jax.Array, rho: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """dlaed1: two sorted halves (values (..., n1), vectors (..., n1, n1); ...) tied by the
    off-diagonal ``rho`` (..., 1) merged into one sorted block (values, vectors)."""
    dtype = d1.dtype
    n1, n2 = d1.shape[-1], d2.shape[-1]
    m = n1 + n2
    batch = d1.shape[:-1]
    eps, _ = lapack_eps(dtype)
    zero = jnp.zeros((), dtype)
    ids = index_range(m)
    # the merged block: Q = diag(Q1, Q2), z = Q1's last row, Q2's first
    q = jnp.concatenate(
        [
            jnp.concatenate([q1, jnp.zeros((*batch, n1, n2), dtype)], -1),
            jnp.concatenate([jnp.zeros((*batch, n2, n1), dtype), q2], -1),
        ],
        -2,
    )
    d = jnp.concatenate([d1, d2], -1)
    z = jnp.concatenate([q1[..., n1 - 1, :], where(rho < 0, -q2[..., 0, :], q2[..., 0, :])], -1)
    z = z * (1 / math.sqrt(2.0))
    rho = jnp.abs(2 * rho)
    # dlamrg of the two sorted halves (ties: the first half first), as ranks
    below = jnp.sum(where(d2[..., None, :] < d1[..., :, None], 1, 0), axis=-1)
    not_above = jnp.sum(where(d1[..., None, :] <= d2[..., :, None], 1, 0), axis=-1)
    rank = jnp.concatenate([index_range(n1) + below, index_range(n2) + not_above], -1)
    order = onehot(rank, m, jnp.ones(rank.shape, bool), dtype)  # [source, position]
    ds = jnp.sum(d[..., :, None] * order, axis=-2)
    zs = jnp.sum(z[..., :, None] * order, axis=-2)
    qs = q @ order
    tol = (
        DEFLATION_FACTOR
        * eps
        * jnp.maximum(
            jnp.max(jnp.abs(d), -1, keepdims=True), jnp.max(jnp.abs(z), -1, keepdims=True)
        )
    )

    # dlaed2's deflation, one step per position of the merged order
    def step(j: Index, state: tuple) -> tuple:
        ds, zs, qs, pj, kept, slot, count = state
        at_j, at_p = ids == j, ids == pj
        zj, dj = pick(zs, j), pick(ds, j)
        zp, dp = pick(zs, pj), pick(ds, pj)
        small = rho * jnp.abs(zj) <= tol
        has_p = pj >= 0
        big, little = jnp.maximum(jnp.abs(zj), jnp.abs(zp)), jnp.minimum(jnp.abs(zj), jnp.abs(zp))
        big_safe = safe(big, big != 0)
        tau = where(little == 0, big, big * jnp.sqrt(1 + (little / big_safe) ** 2))  # dlapy2
        tau_safe = safe(tau, tau != 0)
        t = dj - dp
        c, s = zj / tau_safe, -zp / tau_safe
        rotate = ~small & has_p & (jnp.abs(t * c * s) <= tol)
        keep_p = ~small & has_p & ~rotate
        # a small z: deflated, appended to the deflated list
        slot = where(small & at_j, count, slot)
        count = count + small.astype(jnp.int32)
        # a rotation: z[j] = tau, z[p] = 0, columns p, j rotated, p deflated by insertion
        tp = dp * (c * c) + dj * (s * s)
        tj = dp * (s * s) + dj * (c * c)
        zs = where(rotate & at_j, tau, where(rotate & at_p, zero, zs))
        ds = where(rotate & at_p, tp, where(rotate & at_j, tj, ds))
        qs = rotate_columns(qs, at_p, at_j, c, s, rotate)
        after = jnp.max(
            where((slot >= 0) & (ds <= tp), slot, jnp.int32(-1)), axis=-1, keepdims=True
        )
        slot = where(rotate & (slot > after), slot + 1, slot)
        slot = where(rotate & at_p, after + 1, slot)
        count = count + rotate.astype(jnp.int32)
        kept = kept | (keep_p & at_p)
        pj = where(small, pj, j)
        return ds, zs, qs, pj, kept, slot, count

    minus = jnp.full((*batch, 1), -1, jnp.int32)
    state = (
        ds,
        zs,
        qs,
        minus,
        jnp.zeros((*batch, m), bool),
        jnp.full((*batch, m), -1, jnp.int32),
        jnp.zeros((*batch, 1), jnp.int32),
    )
    ds, zs, qs, pj, kept, slot, _ = lax.fori_loop(0, m, step, state)
    kept = kept | ((ids == pj) & (pj >= 0))
    deflated = slot >= 0
    k = jnp.sum(where(kept, 1, 0), -1, keepdims=True).astype(jnp.int32)
    # the kept entries first, in order
    position = jnp.cumsum(where(kept, 1, 0), axis=-1) - 1
    compact = onehot(position, m, kept, dtype)
    dl = jnp.sum(ds[..., :, None] * compact, axis=-2)
    w = jnp.sum(zs[..., :, None] * compact, axis=-2)
    lam, u = _secular(where(ids < k, dl, zero), where(ids < k, w, zero), rho, k)
    vectors = (qs @ compact) @ u
    # dlamrg(k, m - k, d, 1, -1): the roots ascending, the deflated list, ties: roots first
    is_root = ids < k
    lower = jnp.sum(
        where(deflated[..., None, :] & (ds[..., None, :] < lam[..., :, None]), 1, 0), axis=-1
    )
    at_most = jnp.sum(
        where(is_root[..., None, :] & (lam[..., None, :] <= ds[..., :, None]), 1, 0), axis=-1
    )
    to_root = onehot(ids + lower, m, is_root, dtype)
    to_deflated = onehot(slot + at_most, m, deflated, dtype)
    values = jnp.sum(lam[..., :, None] * to_root + ds[..., :, None] * to_deflated, axis=-2)
    return values, vectors @ to_root + qs @ to_deflated


def stedc(d: jax.Array, e: jax.Array, leaf: Leaf) -> tuple[jax.Array, jax.Array]:
    """(values ascending, vectors as columns) of the symmetric tridiagonal matrix with diagonal
    ``d`` (..., n) and off-diagonal ``e`` (..., n-1) for a static n > SMLSIZ, as LAPACK's
    ``stedc`` (COMPZ = 'I') computes them (module docstring: what is left out); ``leaf``:
    the solver of the leaves (``syevd.steqr``), on batches of (d, e)."""

    n = d.shape[-1]
    dtype = d.dtype
    eps, _ = lapack_eps(dtype)
    zero = jnp.zeros((), dtype)
    # negligible off-diagonal entries: LAPACK's split points, zero here
    tiny = eps * jnp.sqrt(jnp.abs(d[..., :-1])) * jnp.sqrt(jnp.abs(d[..., 1:]))
    e = where(jnp.abs(e) <= tiny, zero, e)
    orgnrm = jnp.maximum(
        jnp.max(jnp.abs(d), -1, keepdims=True), jnp.max(jnp.abs(e), -1, keepdims=True)
    )
    nonzero = orgnrm > 0
    orgnrm = safe(orgnrm, nonzero)
    d, e = d * (1 / orgnrm), e * (1 / orgnrm)
    sizes = leaf_sizes(n)
    cuts = [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)]
    ids = index_range(n)
    for b in cuts:
        cut = jnp.abs(e[..., b - 1 : b])
        d = where((ids == b - 1) | (ids == b), d - cut, d)
    # the leaves, those of one size as one steqr call
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    blocks: list[Any] = [None] * len(sizes)
    for size in sorted(set(sizes)):
        which = [i for i, s in enumerate(sizes) if s == size]
        dd = jnp.stack([d[..., starts[i] : starts[i] + size] for i in which], -2)
        ee = jnp.stack([e[..., starts[i] : starts[i] + size - 1] for i in which], -2)
        values, vectors = leaf(dd, ee)
        for slot, i in enumerate(which):
            blocks[i] = (values[..., slot, :], vectors[..., slot, :, :])
    while len(blocks) > 1:
        # block i spans starts[i]..; the pair (2i, 2i+1) is tied by e at the second's start
        pairs = [(blocks[i], blocks[i + 1], starts[i + 1]) for i in range(0, len(blocks), 2)]
        merged: list[Any] = [None] * len(pairs)
        for shape in sorted({(p[0][0].shape[-1], p[1][0].shape[-1]) for p in pairs}):
            which = [
                i for i, p in enumerate(pairs) if (p[0][0].shape[-1], p[1][0].shape[-1]) == shape
            ]
            d1 = jnp.stack([pairs[i][0][0] for i in which], -2)
            q1 = jnp.stack([pairs[i][0][1] for i in which], -3)
            d2 = jnp.stack([pairs[i][1][0] for i in which], -2)
            q2 = jnp.stack([pairs[i][1][1] for i in which], -3)
            rho = jnp.stack([e[..., pairs[i][2] - 1] for i in which], -1)[..., None]
            values, vectors = _merge(d1, q1, d2, q2, rho)
            for slot, i in enumerate(which):
                merged[i] = (values[..., slot, :], vectors[..., slot, :, :])
        blocks, starts = merged, starts[::2]
    values, vectors = blocks[0]
    eye = jnp.broadcast_to(jnp.eye(n, dtype=dtype), vectors.shape)
    return where(nonzero, values * orgnrm, zero), where(nonzero[..., None], vectors, eye)
