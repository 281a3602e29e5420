"""``bdsdc``'s divide and conquer (UPLO = 'U', COMPQ = 'I') for a static n above SMLSIZ (25):
``svd``'s bidiagonal step with LAPACK's vectors, signs included, for 26 <= n <= BDSDC_LIMIT.

The numpy transliteration checked against OpenBLAS 0.3.30 is ``benchmarks/bdsdc_reference.py``
(its design note is the layout here); the eigh counterpart is ``stedc.py``, whose pieces this
reuses. For n = 26..51 ``dlasdt``'s tree is one merge: the top leaf is the first n // 2 rows
with the centre row's column (an nl x (nl + 1) block, SQRE = 1), the bottom leaf the last
n - nl - 1 rows (SQRE = 0), both solved by ``leaf`` (``gesdd.lasdq``, dlasdq on our bdsqr);
``dlasd1`` merges them at the centre row with alpha = d_nl, beta = e_nl:

- ``dlasd2``: z from the leaves' VT (alpha times the top VT's last column, beta times the
  bottom VT's first), the two ascending halves merged by ``dlamrg`` (ranks, one-hot), then one
  ``Loop`` over the merged order: a small z deflates, a close pair (``|d_j - d_jprev| <= tol``)
  is rotated (U's two columns and VT's two rows) with d left as it is, the deflated list kept
  in discovery order (OpenBLAS 0.3.30's, not sorted by value); the centre row is the pole
  dsigma_1 = 0 (z_1 floored at tol), dsigma_2 floored at tol / 2;
- ``dlasd3``: the secular equation is solved in sigma^2 by ``stedc``'s dlaed4 (all roots at
  once; LAPACK's ``dlasd4`` iterates on sigma itself: the roots agree to rounding, not to the
  bit), Gu-Eisenstat's zhat as a masked ReduceProd with the pole gaps formed as (dsigma_i -
  dsigma_j)(dsigma_i + dsigma_j), right vectors zhat_i / (dsigma_i^2 - sigma^2) and left
  vectors (-1, dsigma_i times those), each normalised, then one GEMM per side (``coltyp``'s
  grouping only saves flops);
- the layout (roots ascending, then the deflated values in reverse discovery order) sorted by
  ``dbdsdc``'s selection sort into decreasing order.

Measured: ``python -m benchmarks.vector_signs --functions svd_full --sizes 26 32 50 --batch 16
--no-reproducers``: 192 of 192 matrices with JAX's vectors, signs included (float32 and float64,
perturbed and gaussian; Jacobi: 0). Cost (``benchmarks/linalg_bench.py --cases svd --sizes 32
50 --cpu-time``, batch 8 float32, onnxruntime CPU time): 81 / 192 ms against Jacobi's 16 / 37
ms; 14070 / 21067 nodes with Loop bodies (Jacobi 1475 / 1248).

Left out: dbdsdc's split at ``|e_i| < 0.9 eps`` (after scaling) into blocks solved separately
(the tree runs on the whole matrix: the values are the same to rounding, a vector of such a
block may differ in sign), and deeper trees (n >= 52: Jacobi there).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from jax2onnx_nn.core.lowerings.lapack.stedc import (
    DEFLATION_FACTOR,
    SMLSIZ,
    onehot,
    pick,
    safe,
    secular_roots,
)
from jax2onnx_nn.core.lowerings.lapack.steps import (
    Index,
    index_range,
    lapack_eps,
    mT,
    pick_where,
    where,
)

Leaf = Callable[[jax.Array, jax.Array, int], tuple[jax.Array, jax.Array, jax.Array]]
Sort = Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]

# the largest n of one merge (dlasdt: two leaves of at most SMLSIZ rows)
BDSDC_LIMIT = 2 * SMLSIZ + 1


def _blockdiag(a: jax.Array, b: jax.Array) -> jax.Array:
    batch = a.shape[:-2]
    (ra, ca), (rb, cb) = a.shape[-2:], b.shape[-2:]
    top = jnp.concatenate([a, jnp.zeros((*batch, ra, cb), a.dtype)], -1)
    bottom = jnp.concatenate([jnp.zeros((*batch, rb, ca), a.dtype), b], -1)
    return jnp.concatenate([top, bottom], -2)


def _lasd2(
    ds: jax.Array, zs: jax.Array, us: jax.Array, vts: jax.Array, tol: jax.Array
) -> tuple[jax.Array, ...]:
    """dlasd2's deflation loop over the merged (ascending) leaf entries ``ds``, ``zs`` (...,
    p) with their U columns ``us`` (..., n, p) and VT rows ``vts`` (..., p, n): (zs, us, vts,
    kept mask, discovery slot of the deflated (-1 otherwise))."""
    p = ds.shape[-1]
    batch = ds.shape[:-1]
    zero = jnp.zeros((), ds.dtype)
    ids = index_range(p)

    def step(j: Index, state: tuple) -> tuple:
        zs, us, vts, pj, kept, slot, count = state
        at_j, at_p = ids == j, ids == pj
        zj, dj = pick(zs, j), pick(ds, j)
        zp, dp = pick(zs, pj), pick(ds, pj)
        small = jnp.abs(zj) <= tol
        has_p = pj >= 0
        big, little = jnp.maximum(jnp.abs(zj), jnp.abs(zp)), jnp.minimum(jnp.abs(zj), jnp.abs(zp))
        big_safe = safe(big, big != 0)
        tau = where(little == 0, big, big * jnp.sqrt(1 + (little / big_safe) ** 2))  # dlapy2
        tau_safe = safe(tau, tau != 0)
        c, s = zj / tau_safe, -zp / tau_safe
        rotate = ~small & has_p & (jnp.abs(dj - dp) <= tol)
        keep_p = ~small & has_p & ~rotate
        # a small z, or the first of a rotated pair: the next entry of the deflated list
        slot = where(small & at_j, count, where(rotate & at_p, count, slot))
        count = count + (small | rotate).astype(jnp.int32)
        zs = where(rotate & at_j, tau, where(rotate & at_p, zero, zs))
        col_p = pick_where(us, at_p[..., None, :], -1)
        col_j = pick_where(us, at_j, -1)
        rot = rotate[..., None]
        us = where(
            rot & at_p[..., None, :],
            c[..., None] * col_p + s[..., None] * col_j,
            where(rot & at_j, c[..., None] * col_j - s[..., None] * col_p, us),
        )
        row_p = pick_where(vts, at_p[..., :, None], -2)
        row_j = pick_where(vts, at_j[:, None], -2)
        vts = where(
            rot & at_p[..., :, None],
            c[..., None] * row_p + s[..., None] * row_j,
            where(rot & at_j[:, None], c[..., None] * row_j - s[..., None] * row_p, vts),
        )
        kept = kept | (keep_p & at_p)
        pj = where(small, pj, j)
        return zs, us, vts, pj, kept, slot, count

    state = (
        zs,
        us,
        vts,
        jnp.full((*batch, 1), -1, jnp.int32),
        jnp.zeros((*batch, p), bool),
        jnp.full((*batch, p), -1, jnp.int32),
        jnp.zeros((*batch, 1), jnp.int32),
    )
    zs, us, vts, pj, kept, slot, _ = lax.fori_loop(0, p, step, state)
    kept = kept | ((ids == pj) & (pj >= 0))
    return zs, us, vts, kept, slot


def _lasd3(dsigma: jax.Array, z: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """dlasd3's roots and vectors of the k kept entries first in ``dsigma`` (dsigma_1 = 0) and
    ``z`` (..., n): (sigma (..., n), left (..., n poles, n roots), right (..., n roots, n
    poles)); padding entries are 0."""
    dtype = dsigma.dtype
    n = dsigma.shape[-1]
    zero, one = jnp.zeros((), dtype), jnp.ones((), dtype)
    ids = index_range(n)
    valid = ids < k
    rho = jnp.sqrt(jnp.sum(where(valid, z * z, zero), -1, keepdims=True))
    zn = where(valid, z / rho, zero)
    lam, delta = secular_roots(where(valid, dsigma * dsigma, zero), zn, rho * rho, k)
    sigma = where(valid, jnp.sqrt(jnp.maximum(lam, zero)), zero)
    kk = k[..., None]
    valid_pole = ids[None, :] < kk
    valid_root = ids[:, None] < kk
    both = valid_pole & valid_root
    # Gu-Eisenstat: zhat_i^2 = delta_ii prod_{j != i} delta_ji / (dsigma_i^2 - dsigma_j^2)
    off = both & (ids[:, None] != ids[None, :])
    gaps = (dsigma[..., None, :] - dsigma[..., :, None]) * (
        dsigma[..., None, :] + dsigma[..., :, None]
    )
    ratio = where(off, delta / safe(gaps, off), one)
    diag = jnp.sum(where(ids[:, None] == ids[None, :], delta, zero), axis=-2)
    zhat = where(valid, jnp.sqrt(jnp.abs(diag * jnp.prod(ratio, axis=-2))), zero)
    zhat = where(zn >= 0, zhat, -zhat)
    right = where(both, zhat[..., None, :] / safe(delta, both), zero)  # [root j, pole i]
    left = where(ids[None, :] == 0, -one, dsigma[..., None, :] * right)
    left = where(both, left, zero)
    right = right / safe(jnp.sqrt(jnp.sum(right * right, -1, keepdims=True)), valid_root)
    left = left / safe(jnp.sqrt(jnp.sum(left * left, -1, keepdims=True)), valid_root)
    # k = 1: sigma = |z_1|, VT's row as it is, U's column with z_1's sign
    single = (k == 1)[..., None]
    first = (ids[:, None] == 0) & (ids[None, :] == 0)
    right = where(single, where(first, one, zero), right)
    left = where(single, where(first, where(z[..., :1, None] > 0, one, -one), zero), left)
    sigma = where((k == 1) & (ids == 0), jnp.abs(z[..., :1]), sigma)
    return sigma, mT(left), right


def _lasd1(
    top: tuple[jax.Array, jax.Array, jax.Array],
    bottom: tuple[jax.Array, jax.Array, jax.Array],
    alpha: jax.Array,
    beta: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """dlasd1 with SQRE = 0: the top leaf (values ascending (..., nl), U, VT (nl + 1 rows)) and
    the bottom one (..., nr) tied by the centre row (alpha, beta (..., 1)): (d, U, VT) in
    LAPACK's layout (roots ascending, then the deflated list), not sorted."""
    d1, u1, vt1 = top
    d2, u2, vt2 = bottom
    dtype = d1.dtype
    nl, nr = d1.shape[-1], d2.shape[-1]
    n, p = nl + nr + 1, nl + nr
    batch = d1.shape[:-1]
    eps, _ = lapack_eps(dtype)
    zero = jnp.zeros((), dtype)
    ids = index_range(n)
    orgnrm = jnp.maximum(
        jnp.maximum(jnp.abs(alpha), jnp.abs(beta)),
        jnp.maximum(jnp.max(d1, -1, keepdims=True), jnp.max(d2, -1, keepdims=True)),
    )
    orgnrm = safe(orgnrm, orgnrm > 0)
    d1, d2, alpha, beta = d1 / orgnrm, d2 / orgnrm, alpha / orgnrm, beta / orgnrm
    one = jnp.ones((*batch, 1, 1), dtype)
    u = _blockdiag(_blockdiag(u1, one), u2)  # the centre row's column at nl
    vt = _blockdiag(vt1, vt2)  # the top leaf's null row at nl
    z1 = alpha * vt1[..., nl, nl : nl + 1]
    z = jnp.concatenate([alpha * vt1[..., :nl, nl], beta * vt2[..., :, 0]], -1)
    # dlamrg of the two ascending halves (ties: the top first), as ranks
    below = jnp.sum(where(d2[..., None, :] < d1[..., :, None], 1, 0), axis=-1)
    not_above = jnp.sum(where(d1[..., None, :] <= d2[..., :, None], 1, 0), axis=-1)
    rank = jnp.concatenate([index_range(nl) + below, index_range(nr) + not_above], -1)
    order = onehot(rank, p, jnp.ones(rank.shape, bool), dtype)  # [source, position]
    ds = jnp.sum(jnp.concatenate([d1, d2], -1)[..., :, None] * order, axis=-2)
    zs = jnp.sum(z[..., :, None] * order, axis=-2)
    us = jnp.concatenate([u[..., :, :nl], u[..., :, nl + 1 :]], -1) @ order
    vts = mT(order) @ jnp.concatenate([vt[..., :nl, :], vt[..., nl + 1 :, :]], -2)
    tol = (
        DEFLATION_FACTOR
        * eps
        * jnp.maximum(jnp.maximum(jnp.abs(alpha), jnp.abs(beta)), jnp.max(ds, -1, keepdims=True))
    )
    zs, us, vts, kept, slot = _lasd2(ds, zs, us, vts, tol)
    # the secular entries: the centre pole, then the kept ones in order
    position = jnp.cumsum(where(kept, 1, 0), axis=-1)
    compact = onehot(position, n, kept, dtype)  # [leaf position, entry]
    k = 1 + jnp.sum(where(kept, 1, 0), -1, keepdims=True).astype(jnp.int32)
    dsigma = jnp.sum(ds[..., :, None] * compact, axis=-2)
    dsigma = where((ids == 1) & (jnp.abs(dsigma) <= tol / 2), tol / 2, dsigma)
    dsigma = where(ids == 0, zero, dsigma)
    zk = jnp.sum(zs[..., :, None] * compact, axis=-2)
    zk = where(ids == 0, where(jnp.abs(z1) <= tol, tol, z1), zk)
    sigma, left, right = _lasd3(dsigma, zk, k)
    centre_u = jnp.broadcast_to((index_range(n) == nl).astype(dtype)[:, None], (*batch, n, 1))
    u2 = jnp.concatenate([centre_u, us @ compact[..., :, 1:]], -1)
    vt2 = jnp.concatenate([vt[..., nl : nl + 1, :], mT(compact[..., :, 1:]) @ vts], -2)
    u_roots = u2 @ left
    vt_roots = right @ vt2
    # the deflated list after the roots, in reverse discovery order
    deflated = slot >= 0
    to_deflated = onehot(n - 1 - slot, n, deflated, dtype)  # [leaf position, place]
    roots = ids < k
    d = where(roots, sigma, jnp.sum(ds[..., :, None] * to_deflated, axis=-2))
    u = where(roots[..., None, :], u_roots, us @ to_deflated)
    vt = where(roots[..., :, None], vt_roots, mT(to_deflated) @ vts)
    return d * orgnrm, u, vt


def bdsdc(
    d: jax.Array, e: jax.Array, leaf: Leaf, sort: Sort
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(s descending, U, VT) of the upper bidiagonal (``d`` (..., n), ``e`` (..., n - 1)),
    SMLSIZ < n <= BDSDC_LIMIT, as dbdsdc ('U', 'I') computes them (module docstring: what is
    left out); ``leaf``: dlasdq (``gesdd.lasdq``), ``sort``: dbdsdc's selection sort
    (``gesdd.bdsdc_sort``)."""
    n = d.shape[-1]
    dtype = d.dtype
    eps, _ = lapack_eps(dtype)
    zero = jnp.zeros((), dtype)
    orgnrm = jnp.maximum(
        jnp.max(jnp.abs(d), -1, keepdims=True), jnp.max(jnp.abs(e), -1, keepdims=True)
    )
    nonzero = orgnrm > 0
    orgnrm = safe(orgnrm, nonzero)
    d, e = d / orgnrm, e / orgnrm
    tiny = 0.9 * eps
    d = where(jnp.abs(d) < tiny, where(d >= 0, tiny, -tiny), d)
    nl = n // 2
    top = leaf(d[..., :nl], e[..., :nl], 1)
    bottom = leaf(d[..., nl + 1 :], e[..., nl + 1 :], 0)
    s, u, vt = _lasd1(top, bottom, d[..., nl : nl + 1], e[..., nl : nl + 1])
    s = s * orgnrm
    s, perm = sort(s, jnp.broadcast_to(index_range(n), s.shape))
    chooser = (index_range(n)[:, None] == perm[..., None, :]).astype(dtype)  # [a, i]
    eye = jnp.broadcast_to(jnp.eye(n, dtype=dtype), u.shape)
    u, vt = u @ chooser, mT(chooser) @ vt
    return (
        where(nonzero, s, zero),
        where(nonzero[..., None], u, eye),
        where(nonzero[..., None], vt, eye),
    )
