"""``bdsdc``'s divide and conquer (UPLO = 'U', COMPQ = 'I') for a static n above SMLSIZ (25):
``svd``'s bidiagonal step with LAPACK's vectors, signs included (gesdd.py calls it for 26 <=
n <= ``gesdd.GESDD_LIMIT``).

The numpy transliteration checked against OpenBLAS 0.3.30 is ``benchmarks/bdsdc_reference.py``
(its design note is the layout here); the eigh counterpart is ``stedc.py``, whose pieces and
structure this reuses. ``dlasdt``'s tree depends only on n (``lasdt``: the root's centre row
n // 2, every half halved again around its own centre row until its blocks have at most 25
rows: one merge for 26..51, three for 52..103, seven for 104..207). The leaves are ``dlasdq``
(``leaf``: ``gesdd.lasdq``, dlasdq on our bdsqr), every one but the last n_l x (n_l + 1) (SQRE
= 1: the column that ties it to the centre row above it), those of one size and SQRE as one
batched call; the merges run bottom up per level, those of one level with the same sizes and
SQRE as one batched ``dlasd1`` (all but a level's last have SQRE = 1):

- ``dlasd1``'s scale by max(|alpha|, |beta|, max d);
- ``dlasd2``: z from the blocks' VT (alpha times the top VT's last column, beta times the
  bottom VT's first), the two halves merged by ``dlamrg`` (positions, one-hot), then one
  ``Loop`` over the merged order: a small z deflates, a close pair (``|d_j - d_jprev| <= tol``)
  is rotated (U's two columns and VT's two rows) with d left as it is, the deflated list kept
  in discovery order (OpenBLAS 0.3.30's, not sorted by value); the centre row is the pole
  dsigma_1 = 0 (z_1 floored at tol), dsigma_2 floored at tol / 2; with SQRE = 1 the bottom
  block's null row (VT's last) is rotated into z_1 (a Givens pair on VT's rows nl and m - 1),
  and the rotated null row stays VT's last row for the level above;
- ``dlasd3``: the secular equation is solved in sigma^2 by ``stedc``'s dlaed4 (all roots at
  once; LAPACK's ``dlasd4`` iterates on sigma itself: the roots agree to rounding, not to the
  bit), Gu-Eisenstat's zhat as a masked ReduceProd with the pole gaps formed as (dsigma_i -
  dsigma_j)(dsigma_i + dsigma_j), right vectors zhat_i / (dsigma_i^2 - sigma^2) and left
  vectors (-1, dsigma_i times those), each normalised, then one GEMM per side (``coltyp``'s
  grouping only saves flops);
- below the root, the block is reordered by dlasd1's closing ``dlamrg(k, n - k, d, 1, -1)``
  (the roots forward, the deflated list backward), which is the order the next level's
  dlasd2 reads each half in (LAPACK keeps the index ``idxq`` instead; applying it is exact).
  Neither run need be ascending (the deflated list is in discovery order), and dlamrg's
  two-pointer merge of unsorted runs is the merge of their running maxima: the positions are
  ranks of those. The root's layout (roots ascending, then the deflated values in reverse
  discovery order) is sorted by ``dbdsdc``'s selection sort into decreasing order.

Measured: ``python -m benchmarks.vector_signs --functions svd_full --sizes 26 32 50 --batch 16
--no-reproducers``: 192 of 192 matrices with JAX's vectors, signs included (float32 and float64,
perturbed and gaussian; Jacobi: 0); ``--sizes 52 64 100 --batch 8``: 96 of 96 (Jacobi: 0). With
OpenBLAS's own dlasdq as the leaves (through a callback) the tree gives dbdsdc's signs on 8 of 8
bidiagonals per n = 52, 64, 100 of ``bdsdc_reference``'s gaussian and clustered families
(clustered at 128: 7 of 8); its repeated family (singular values equal to the bit) differs only
in columns of a repeated value, whose vectors are not unique. With our leaves (``gesdd.lasdq``)
gaussian and gebrd (issue 34's kind) bidiagonals: 4 of 4 per n = 52, 64, 100, 128; clustered
ones follow the leaves' last bits (5 of 8 at 50 and at 52, as the one-merge version). Cost:
gesdd.py's GESDD_LIMIT.

Left out: dbdsdc's split at ``|e_i| < 0.9 eps`` (after scaling) into blocks solved separately
(the tree runs on the whole matrix: the values are the same to rounding, a vector of such a
block may differ in sign).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx_nn.core.lowerings.lapack.stedc import (
    DEFLATION_FACTOR,
    SMLSIZ,
    onehot,
    pick,
    rotate_columns,
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
Block = tuple[jax.Array, jax.Array, jax.Array]  # values, U, VT


def _blockdiag(a: jax.Array, b: jax.Array) -> jax.Array:
    batch = a.shape[:-2]
    (ra, ca), (rb, cb) = a.shape[-2:], b.shape[-2:]
    top = jnp.concatenate([a, jnp.zeros((*batch, ra, cb), a.dtype)], -1)
    bottom = jnp.concatenate([jnp.zeros((*batch, rb, ca), a.dtype), b], -1)
    return jnp.concatenate([top, bottom], -2)


def _lapy2(x: jax.Array, y: jax.Array) -> jax.Array:
    """dlapy2: sqrt(x^2 + y^2) without overflow."""
    big, little = jnp.maximum(jnp.abs(x), jnp.abs(y)), jnp.minimum(jnp.abs(x), jnp.abs(y))
    return where(little == 0, big, big * jnp.sqrt(1 + (little / safe(big, big != 0)) ** 2))


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
        tau = _lapy2(zj, zp)
        tau_safe = safe(tau, tau != 0)
        c, s = zj / tau_safe, -zp / tau_safe
        rotate = ~small & has_p & (jnp.abs(dj - dp) <= tol)
        keep_p = ~small & has_p & ~rotate
        # a small z, or the first of a rotated pair: the next entry of the deflated list
        slot = where(small & at_j, count, where(rotate & at_p, count, slot))
        count = count + (small | rotate).astype(jnp.int32)
        zs = where(rotate & at_j, tau, where(rotate & at_p, zero, zs))
        us = rotate_columns(us, at_p, at_j, c, s, rotate)
        rot = rotate[..., None]
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


def _lasd5(
    d1: jax.Array, d2: jax.Array, z1: jax.Array, z2: jax.Array, rho: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """dlasd5 (k = 2): (sigma_1, sigma_2, (dsigma_i - sigma_j)(dsigma_i + sigma_j) as (...,
    2 roots, 2 poles)) from its offsets tau, not as a difference of squares (which loses a
    root next to its pole: z_2 ~ 1e-10 gave 0, and a NaN vector)."""
    dl = d2 - d1
    delsq = dl * (d2 + d1)
    zz = rho * (z1 * z1 + z2 * z2)
    w = 1 + 4 * rho * (z2 * z2 / (d1 + 3 * d2) - z1 * z1 / safe(3 * d1 + d2, 3 * d1 + d2 != 0))
    w = w / safe(dl, dl != 0)
    # root 1 from d1 (w > 0)
    b, c = delsq + zz, rho * z1 * z1 * delsq
    tau = 2 * c / safe(b + jnp.sqrt(jnp.abs(b * b - 4 * c)), b != 0)
    tau_1 = tau / (d1 + jnp.sqrt(d1 * d1 + tau))
    # root 1 from d2 (w <= 0), root 2
    b, c = -delsq + zz, rho * z2 * z2 * delsq
    root = jnp.sqrt(b * b + 4 * c)
    tau = where(b > 0, -2 * c / safe(b + root, b + root != 0), (b - root) / 2)
    tau_2 = tau / safe(d2 + jnp.sqrt(jnp.abs(d2 * d2 + tau)), d2 != 0)
    tau = where(b > 0, (b + root) / 2, 2 * c / safe(root - b, root - b != 0))
    tau_3 = tau / (d2 + jnp.sqrt(d2 * d2 + tau))
    low = w > 0
    first_near = (-tau_1 * (2 * d1 + tau_1), (dl - tau_1) * ((d1 + tau_1) + d2))
    first_far = (-(dl + tau_2) * (d1 + tau_2 + d2), -tau_2 * (2 * d2 + tau_2))
    second = (-(dl + tau_3) * (d1 + tau_3 + d2), -tau_3 * (2 * d2 + tau_3))
    row_1 = jnp.concatenate(
        [where(low, a, b) for a, b in zip(first_near, first_far, strict=True)], -1
    )
    row_2 = jnp.concatenate(second, -1)
    sigma_1 = where(low, d1 + tau_1, d2 + tau_2)
    return sigma_1, d2 + tau_3, jnp.stack([row_1, row_2], -2)


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
    # k = 2: dlasd5's roots and gaps
    s1, s2, pair = _lasd5(dsigma[..., :1], dsigma[..., 1:2], zn[..., :1], zn[..., 1:2], rho * rho)
    two = (k == 2)[..., None]
    sigma = where((k == 2) & (ids == 0), s1, where((k == 2) & (ids == 1), s2, sigma))
    corner = (ids[:, None] < 2) & (ids[None, :] < 2)
    padded = jnp.pad(pair, [(0, 0)] * (pair.ndim - 2) + [(0, n - 2), (0, n - 2)])
    delta = where(two & corner, padded, delta)
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


def _running_max(x: jax.Array, before: jax.Array) -> jax.Array:
    """The largest x[q] over the q with before[p, q], per p (-inf where none)."""
    return jnp.max(where(before, x[..., None, :], jnp.asarray(-np.inf, x.dtype)), axis=-1)


def _merge_positions(first: jax.Array, second: jax.Array) -> tuple[jax.Array, jax.Array]:
    """dlamrg's output positions of the entries of two runs (keys (..., p), (..., q), each
    read in order, ties: the first run first). The runs need not be ascending (a deflated
    list in discovery order is not): dlamrg's two-pointer merge of them is the merge of their
    running maxima, which these keys must already be."""
    below = jnp.sum(where(second[..., None, :] < first[..., :, None], 1, 0), axis=-1)
    not_above = jnp.sum(where(first[..., None, :] <= second[..., :, None], 1, 0), axis=-1)
    return index_range(first.shape[-1]) + below, index_range(second.shape[-1]) + not_above


def _kept_order(d: jax.Array, k: jax.Array) -> jax.Array:
    """dlasd1's closing ``dlamrg(k, n - k, d, 1, -1)`` on the layout (..., n): the k roots
    forward, the deflated list backward; the one-hot [position, place] of that order."""
    n = d.shape[-1]
    ids = index_range(n)
    root = ids < k
    same = root[..., :, None] == root[..., None, :]
    before = same & where(
        root[..., :, None], ids[None, :] <= ids[:, None], ids[None, :] >= ids[:, None]
    )
    key = _running_max(d, before)
    lower = jnp.sum(where(~root[..., None, :] & (key[..., None, :] < key[..., :, None]), 1, 0), -1)
    at_most = jnp.sum(
        where(root[..., None, :] & (key[..., None, :] <= key[..., :, None]), 1, 0), -1
    )
    place = where(root, ids + lower, (n - 1 - ids) + at_most)
    return onehot(place, n, jnp.ones(place.shape, bool), d.dtype)


def _lasd1(
    top: tuple[jax.Array, jax.Array, jax.Array],
    bottom: tuple[jax.Array, jax.Array, jax.Array],
    alpha: jax.Array,
    beta: jax.Array,
    *,
    ordered: bool,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """dlasd1: the top block (values (..., nl) in dlamrg's order, U, VT (nl + 1 rows, the
    last its null row)) and the bottom one (..., nr; VT nr + SQRE rows) tied by the centre row
    (alpha, beta (..., 1)): (d, U, VT (n + SQRE rows)) in LAPACK's layout (roots ascending,
    then the deflated list, VT's null row last), or (``ordered``) in the closing dlamrg's
    order that the next level reads."""
    d1, u1, vt1 = top
    d2, u2, vt2 = bottom
    dtype = d1.dtype
    nl, nr = d1.shape[-1], d2.shape[-1]
    sqre = vt2.shape[-1] - nr
    n, p = nl + nr + 1, nl + nr
    m = n + sqre
    batch = d1.shape[:-1]
    eps, _ = lapack_eps(dtype)
    zero, unit = jnp.zeros((), dtype), jnp.ones((), dtype)
    ids = index_range(n)
    orgnrm = jnp.maximum(
        jnp.maximum(jnp.abs(alpha), jnp.abs(beta)),
        jnp.maximum(jnp.max(d1, -1, keepdims=True), jnp.max(d2, -1, keepdims=True)),
    )
    orgnrm = safe(orgnrm, orgnrm > 0)
    d1, d2, alpha, beta = d1 / orgnrm, d2 / orgnrm, alpha / orgnrm, beta / orgnrm
    one = jnp.ones((*batch, 1, 1), dtype)
    u = _blockdiag(_blockdiag(u1, one), u2)  # the centre row's column at nl
    vt = _blockdiag(vt1, vt2)  # the top block's null row at nl, the bottom's (SQRE) at m - 1
    z1 = alpha * vt1[..., nl, nl : nl + 1]
    z = jnp.concatenate([alpha * vt1[..., :nl, nl], beta * vt2[..., :nr, 0]], -1)
    # dlamrg of the two halves (each in its own dlamrg order), as positions
    first, second = _merge_positions(
        _running_max(d1, index_range(nl)[None, :] <= index_range(nl)[:, None]),
        _running_max(d2, index_range(nr)[None, :] <= index_range(nr)[:, None]),
    )
    rank = jnp.concatenate([first, second], -1)
    order = onehot(rank, p, jnp.ones(rank.shape, bool), dtype)  # [source, position]
    ds = jnp.sum(jnp.concatenate([d1, d2], -1)[..., :, None] * order, axis=-2)
    zs = jnp.sum(z[..., :, None] * order, axis=-2)
    us = jnp.concatenate([u[..., :, :nl], u[..., :, nl + 1 :]], -1) @ order
    vts = mT(order) @ jnp.concatenate([vt[..., :nl, :], vt[..., nl + 1 : n, :]], -2)
    # dlasd2's tol: the last merged value (the largest where the runs are ascending)
    tol = (
        DEFLATION_FACTOR
        * eps
        * jnp.maximum(jnp.maximum(jnp.abs(alpha), jnp.abs(beta)), jnp.abs(ds[..., p - 1 :]))
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
    centre_row, null_row = vt[..., nl : nl + 1, :], vt[..., m - 1 :, :]
    if sqre:
        # the bottom block's null row rotated into z_1: VT's rows nl and m - 1
        zm = beta * vt2[..., nr, :1]
        r = _lapy2(z1, zm)
        small = r <= tol
        c = where(small, unit, z1 / safe(r, ~small))[..., None]
        s = where(small, zero, zm / safe(r, ~small))[..., None]
        left_cols = index_range(m) <= nl
        centre_row, null_row = (
            where(left_cols, c * centre_row, s * null_row),
            where(left_cols, -s * centre_row, c * null_row),
        )
        z_first = where(small, tol, r)
    else:
        z_first = where(jnp.abs(z1) <= tol, tol, z1)
    zk = where(ids == 0, z_first, zk)
    sigma, left, right = _lasd3(dsigma, zk, k)
    centre_u = jnp.broadcast_to((ids == nl).astype(dtype)[:, None], (*batch, n, 1))
    u2 = jnp.concatenate([centre_u, us @ compact[..., :, 1:]], -1)
    vt2 = jnp.concatenate([centre_row, mT(compact[..., :, 1:]) @ vts], -2)
    u_roots = u2 @ left
    vt_roots = right @ vt2
    # the deflated list after the roots, in reverse discovery order
    deflated = slot >= 0
    to_deflated = onehot(n - 1 - slot, n, deflated, dtype)  # [leaf position, place]
    roots = ids < k
    d = where(roots, sigma, jnp.sum(ds[..., :, None] * to_deflated, axis=-2)) * orgnrm
    u = where(roots[..., None, :], u_roots, us @ to_deflated)
    vt = where(roots[..., :, None], vt_roots, mT(to_deflated) @ vts)
    if ordered:
        order = _kept_order(d, k)  # [position, place]
        d = jnp.sum(d[..., :, None] * order, axis=-2)
        u, vt = u @ order, mT(order) @ vt
    if sqre:
        vt = jnp.concatenate([vt, null_row], -2)
    return d, u, vt


def lasdt(n: int) -> list[list[tuple[int, int, int]]]:
    """dlasdt's tree for n rows (SMLSIZ leaves): its levels from the root down, each a list of
    nodes (centre row (0-based), rows above it, rows below it) from left to right; the last
    level's nodes hold the leaves."""
    depth = int(math.log(max(1, n) / (SMLSIZ + 1)) / math.log(2.0)) + 1
    levels = [[(n // 2, n // 2, n - n // 2 - 1)]]
    for _ in range(1, depth):
        level = []
        for centre, nl, nr in levels[-1]:
            ll, lr = nl // 2, nl - nl // 2 - 1
            rl, rr = nr // 2, nr - nr // 2 - 1
            level += [(centre - lr - 1, ll, lr), (centre + rl + 1, rl, rr)]
        levels.append(level)
    return levels


def _stack(blocks: list[Block]) -> Block:
    """Blocks (values, U, VT) of one shape as one batch (a new axis before each one's own)."""
    values, u, vt = zip(*blocks, strict=True)
    return jnp.stack(values, -2), jnp.stack(u, -3), jnp.stack(vt, -3)


def _unstack(block: Block) -> list[Block]:
    """The blocks of a batch that ``_stack`` made."""
    values, u, vt = block
    return [(values[..., i, :], u[..., i, :, :], vt[..., i, :, :]) for i in range(values.shape[-2])]


def bdsdc(
    d: jax.Array, e: jax.Array, leaf: Leaf, sort: Sort
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(s descending, U, VT) of the upper bidiagonal (``d`` (..., n), ``e`` (..., n - 1)),
    n > SMLSIZ, as dbdsdc ('U', 'I') computes them (module docstring: what is
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
    levels = lasdt(n)
    # the leaves: each last-level node's two, all but the very last n_l x (n_l + 1) (SQRE = 1);
    # those of one size and SQRE solved as one batch
    spans = []
    for i, (centre, nl, nr) in enumerate(levels[-1]):
        spans += [(centre - nl, nl, 1), (centre + 1, nr, int(i < len(levels[-1]) - 1))]
    blocks: dict[int, Block] = {}  # by position, left to right
    for size, sqre in sorted({(size, sqre) for _, size, sqre in spans}):
        which = [i for i, span in enumerate(spans) if span[1:] == (size, sqre)]
        dd = jnp.stack([d[..., spans[i][0] : spans[i][0] + size] for i in which], -2)
        ee = jnp.stack([e[..., spans[i][0] : spans[i][0] + size - 1 + sqre] for i in which], -2)
        for slot, block in zip(which, _unstack(leaf(dd, ee, sqre)), strict=True):
            blocks[slot] = block
    # the merges bottom up, those of one level with the same sizes and SQRE as one batch
    for depth in range(len(levels) - 1, -1, -1):
        nodes = levels[depth]
        merged: dict[int, Block] = {}
        shapes = [(nl, nr, int(i < len(nodes) - 1)) for i, (_, nl, nr) in enumerate(nodes)]
        for shape in sorted(set(shapes)):
            which = [i for i, s in enumerate(shapes) if s == shape]
            top = _stack([blocks[2 * i] for i in which])
            bottom = _stack([blocks[2 * i + 1] for i in which])
            alpha = jnp.stack([d[..., nodes[i][0]] for i in which], -1)[..., None]
            beta = jnp.stack([e[..., nodes[i][0]] for i in which], -1)[..., None]
            for slot, block in zip(
                which, _unstack(_lasd1(top, bottom, alpha, beta, ordered=depth > 0)), strict=True
            ):
                merged[slot] = block
        blocks = merged
    s, u, vt = blocks[0]
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
