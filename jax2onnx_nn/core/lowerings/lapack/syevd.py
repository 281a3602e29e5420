"""``eigh`` with LAPACK's vectors, signs included: ``syevd``'s own path for static sizes up to
``stedc.STEDC_LIMIT``.

JAX's CPU eigh is LAPACK's ``syevd``: ``sytrd`` (unblocked ``sytd2`` below 32 columns) reduces
the matrix to tridiagonal form, ``stedc`` solves the tridiagonal problem (which is ``steqr``
up to ``STEQR_LIMIT`` = 25 rows, its SMLSIZ) and ``ormtr`` applies the reflectors to its
vectors. An eigenvector is defined only up to sign; LAPACK's comes out of that path, so the
only way to give the user JAX's signs is to follow it: ``tridiagonal`` (``hessenberg.py``,
``sytd2``'s reflectors), ``steqr`` here (above 25 rows ``stedc.py``'s divide and conquer, whose
leaves are this ``steqr``), the reflectors applied.

``steqr`` is one ONNX ``Loop`` whose iteration is one implicit QL iteration (a whole chase),
not one rotation: a previous port (one loop step per rotation, per split search, per
deflation, each a chain of masked reads and writes of the whole state) took onnxruntime
164 ms for a batch of 8 4x4 matrices (Jacobi: 0.46 ms). Here

- the blocks (splits at negligible off-diagonal entries) and each block's direction (QL, or QR
  when its last diagonal entry is the smaller) are fixed before the loop: a block's entries are
  untouched until LAPACK reaches it, so its tests then see the initial values;
- a QR iteration is a QL iteration on the block reversed (the same arithmetic on mirrored
  indices, rotations (c, -s) on mirrored columns), so each QR block is reversed in place once
  (one Gather by a permutation) and the loop only runs QL;
- the chase is unrolled over the static positions n-2 .. 0, each position's rotation masked to
  the identity outside the block's active range (c = 1, s = 0: exact), on d, e and the columns
  of z held as separate tensors (one Split, one Concat per iteration);
- runs of deflations (``steqr``'s label 40 with ``m = l``) are one vectorized search, and a 2x2
  block (``dlaev2``) is folded into the chase's position l.

Without vectors (``syevd_values``, what ``eigvalsh`` lowers to) the path is LAPACK's JOBZ = 'N'
one in its reduction, ``sytd2``, but its tridiagonal values come from bisection on Sturm
counts (``sturm_values``), every value at once, where LAPACK runs ``sterf``'s QL iterations:
that loop, whose steps are n dependent rotations each, measured 2.5x to 7x slower than the
bisection (and than ``stedc`` with its vectors) at 26 to 128 rows.

Left out: ``steqr``'s scaling of a block whose largest entry is below sqrt(safmin) / eps^2 or
above sqrt(1 / safmin) / 3 (the matrix is divided by a power of two near its largest entry
first, which is exact and leaves the path unchanged), and its non-convergence exit (after
30 n iterations LAPACK stops with info > 0, JAX returns NaN; the loop here stops too).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lowerings.lapack.hessenberg import tridiagonal
from jax2onnx_nn.core.lowerings.lapack.householder import power_of_two_scale
from jax2onnx_nn.core.lowerings.lapack.stedc import stedc
from jax2onnx_nn.core.lowerings.lapack.steps import (
    Index,
    first_argmax,
    index_range,
    iterate,
    lapack_eps,
    mT,
    pick_where,
    where,
)

# LAPACK's stedc calls steqr up to this size (ilaenv's SMLSIZ); above it divide and conquer
# (stedc.py).
STEQR_LIMIT = 25
# steqr's bound on QL/QR iterations, per row (its MAXIT)
STEQR_MAXIT = 30


def fortran_sign(x: jax.Array, y: jax.Array) -> jax.Array:
    """Fortran's SIGN(x, y): |x| with y's sign (+ for y = 0)."""
    return where(y >= 0, jnp.abs(x), -jnp.abs(x))


def _lartg(f: jax.Array, g: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """LAPACK 3.10's dlartg: (c, s, r) with c >= 0, r = sign(f) sqrt(f^2 + g^2), s = g / r
    (its unscaled branch: the entries are near 1 after the power-of-two scaling); f = 0 gives
    c = 0, s = sign(g), r = |g| and g = 0 gives c = 1, s = 0, r = f, as the formulas do."""
    d = jnp.sqrt(f * f + g * g)
    zero = d == 0
    safe = where(zero, jnp.ones((), d.dtype), d)
    r = fortran_sign(safe, f)
    c = where(zero, jnp.ones((), d.dtype), jnp.abs(f) / safe)
    return c, where(zero, jnp.zeros((), d.dtype), g / r), where(zero, f, r)


def _laev2(a: jax.Array, b: jax.Array, c: jax.Array) -> tuple[jax.Array, ...]:
    """dlaev2 on [[a, b], [b, c]]: (rt1, rt2, cs1, sn1), rt1 the value of larger magnitude,
    (cs1, sn1) its unit vector, with dlaev2's own sign choice."""
    one = jnp.ones((), a.dtype)
    sm, df, tb = a + c, a - c, b + b
    adf, ab = jnp.abs(df), jnp.abs(tb)
    bigger = jnp.abs(a) > jnp.abs(c)
    acmx, acmn = where(bigger, a, c), where(bigger, c, a)
    rt = where(
        adf > ab,
        adf * jnp.sqrt(1 + (ab / where(adf == 0, one, adf)) ** 2),
        where(
            adf < ab,
            ab * jnp.sqrt(1 + (adf / where(ab == 0, one, ab)) ** 2),
            ab * float(np.sqrt(2.0)),
        ),
    )
    rt1 = where(sm < 0, 0.5 * (sm - rt), where(sm > 0, 0.5 * (sm + rt), 0.5 * rt))
    safe = where(rt1 == 0, one, rt1)
    rt2 = where(sm == 0, -0.5 * rt, (acmx / safe) * acmn - (b / safe) * b)
    negative = sm < 0
    cs = where(df >= 0, df + rt, df - rt)
    ct = -tb / where(cs == 0, one, cs)
    sn_a = 1 / jnp.sqrt(1 + ct * ct)
    tn = -cs / where(tb == 0, one, tb)
    cs_b = 1 / jnp.sqrt(1 + tn * tn)
    wide = jnp.abs(cs) > ab
    cs1 = where(wide, ct * sn_a, where(ab == 0, one, cs_b))
    sn1 = where(wide, sn_a, where(ab == 0, jnp.zeros((), a.dtype), tn * cs_b))
    swap = negative == (df < 0)  # sgn1 == sgn2
    return rt1, rt2, where(swap, -sn1, cs1), where(swap, cs1, sn1)


def _first(hits: jax.Array, default: jax.Array) -> jax.Array:
    """The first index (..., n) where ``hits`` along the last axis, else ``default``."""
    n = hits.shape[-1]
    key = where(hits, n - 1 - index_range(n), -1)
    best = jnp.max(key, axis=-1)
    return where(best < 0, default, n - 1 - best)


def steqr(d: jax.Array, e: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(values, vectors) of the symmetric tridiagonal matrix with diagonal ``d`` (..., n) and
    off-diagonal ``e`` (..., n-1), as LAPACK's ``steqr`` with COMPZ = 'I' gives them, so the
    vectors (columns) carry its signs: its splits, its choice of QL or QR per block, Wilkinson
    shifts, ``dlartg`` rotations (c >= 0), ``dlaev2`` on 2x2 blocks, accumulated on the
    identity, then its selection sort. Module docstring: how the loop is laid out."""
    n = d.shape[-1]
    batch = d.shape[:-1]
    dtype = d.dtype
    eps, safmin = lapack_eps(dtype)
    eps2 = eps * eps
    ids = index_range(n)
    zero, one = jnp.zeros((), dtype), jnp.ones((), dtype)
    e = jnp.concatenate([e, jnp.zeros((*batch, 1), dtype)], axis=-1)  # e[n-1] = 0: a split

    # -- the blocks, fixed before the loop (steqr's label 10 with the initial entries)
    d_next = jnp.concatenate([d[..., 1:], d[..., :1]], axis=-1)
    split = (e == 0) | (jnp.abs(e) <= jnp.sqrt(jnp.abs(d)) * jnp.sqrt(jnp.abs(d_next)) * eps)
    split = split | (ids == n - 1)
    # each position's block: its first and last positions
    ends = jnp.where(split, ids, n)
    block_end = lax.cummin(ends, axis=ends.ndim - 1, reverse=True)
    starts = jnp.where(jnp.concatenate([jnp.ones((*batch, 1), bool), split[..., :-1]], -1), ids, -1)
    block_start = lax.cummax(starts, axis=starts.ndim - 1)
    at = lambda v, i: pick_where(v[..., None, :], i[..., :, None] == ids, -1)[..., 0]  # noqa: E731
    # QR (reversed) where the block's last diagonal entry is smaller than its first
    reverse = jnp.abs(at(d, block_end)) < jnp.abs(at(d, block_start))
    # a block of zeros is skipped (steqr: anorm = 0); a block of one row is done
    in_block = (ids[None, :] >= block_start[..., :, None]) & (
        ids[None, :] <= block_end[..., :, None]
    )
    mag = jnp.maximum(jnp.abs(d), jnp.where(split, zero, jnp.abs(e)))
    anorm = jnp.max(where(in_block, mag[..., None, :], zero), axis=-1)
    live = (block_end > block_start) & (anorm > 0)
    order = where(reverse, block_start + block_end - ids, ids)  # position -> original index
    d = at(d, order)
    # e between positions j, j+1 of a reversed block: the original e between its mirrors
    e_order = where(reverse & (ids < block_end), block_start + block_end - ids - 1, ids)
    e = where(split, zero, at(e, e_order))
    z = jnp.broadcast_to((ids[:, None] == order[..., None, :]).astype(dtype), (*batch, n, n))
    # the loop's layout: scalars (..., 1, 1), d and e (..., 1, n), z's columns as rows (z^T),
    # so each position's piece (one Split) broadcasts against the others without reshapes
    col = lambda v: v[..., None, None]  # noqa: E731
    first_live = _first(live, jnp.full(batch, n, jnp.int32))
    lend = pick_where(block_end, ids == first_live[..., None], -1)[..., 0]
    block_end, live = block_end[..., None, :], live[..., None, :]
    reversed_at = reverse.astype(dtype)[..., None, :]  # picked as a number
    z_rows = (order[..., :, None] == ids[None, :]).astype(dtype)  # z^T: row j is column j
    state = (d[..., None, :], e[..., None, :], z_rows, col(first_live), col(lend), jnp.int32(0))

    def cond(state: tuple) -> jax.Array:
        ell, count = state[3], state[5]
        return jnp.any(ell < n) & (count < STEQR_MAXIT * n)

    def pick(v: jax.Array, i: jax.Array) -> jax.Array:
        """v[..., 0, i] for an index (..., 1, 1), as (..., 1, 1) (0 for i = n)."""
        return pick_where(v, ids == i, -1)

    def body(state: tuple) -> tuple:
        d, e, z, ell, lend, count = state
        running = ell < n
        # label 40, repeated while m = l: the first m >= l with a negligible e[m] (else lend);
        # every e[l..m-1] was negligible too: l moves to the first that is not
        d_next = jnp.concatenate([d[..., 1:], d[..., :1]], axis=-1)
        small = e * e <= (eps2 * jnp.abs(d)) * jnp.abs(d_next) + safmin
        to_end = (ids >= ell) & (ids < lend)
        ell = where(running, _first(to_end & ~small, lend[..., 0])[..., None], ell)
        m = _first((ids >= ell) & (ids < lend) & small, lend[..., 0])[..., None]
        e = where((ids == m) & (m < lend), zero, e)
        pair = running & (m == ell + 1)
        chase = running & (m > ell + 1)
        # the shift (QL: from d[l], d[l+1], e[l])
        p, e_l, d_l1 = pick(d, ell), pick(e, ell), pick(d, ell + 1)
        g = (d_l1 - p) / (2 * where(e_l == 0, one, e_l))
        big, little = jnp.maximum(jnp.abs(g), one), jnp.minimum(jnp.abs(g), one)
        r = big * jnp.sqrt(1 + (little / big) ** 2)  # dlapy2(g, 1)
        g = pick(d, m) - p + e_l / (g + fortran_sign(r, g))
        # a 2x2 block: dlaev2 on rows l, l+1; of a reversed (QR) block on the mirrored rows,
        # its first value at l+1 and its rotation (c, -s)
        flipped = pick(reversed_at, ell) > 0
        rt1, rt2, c2, s2 = _laev2(where(flipped, d_l1, p), e_l, where(flipped, p, d_l1))
        rt1, rt2, s2 = where(flipped, rt2, rt1), where(flipped, rt1, rt2), where(flipped, -s2, s2)
        # the chase from m-1 down to l, one static position each (identity where inactive);
        # e[i+1] is written from the chase's second rotation on
        active = (ids >= ell) & (ids < m) & chase
        writes = active & (ids < m - 1)
        at_pair = (ids == ell) & pair
        pair_c, pair_s = where(at_pair, c2, one), where(at_pair, s2, zero)
        ds, es, zs, ons, wrs, pcs, pss = (
            jnp.split(x, n, axis=-2 if x is z else -1)
            for x in (d, e, z, active, writes, pair_c, pair_s)
        )
        c, s, pp = one, one, zero
        for i in range(n - 2, -1, -1):
            on = ons[i]
            f, b = s * es[i], c * es[i]
            # dlartg(g, f): f != 0 in the chase (e[i] is not negligible), so d > 0
            norm = jnp.sqrt(g * g + f * f)
            c1 = jnp.abs(g) / norm
            r1 = where(g >= 0, norm, -norm)
            s1 = f / r1
            es[i + 1] = where(wrs[i], r1, es[i + 1])
            g1 = ds[i + 1] - pp
            r2 = (ds[i] - g1) * s1 + 2 * c1 * b
            p1 = s1 * r2
            ds[i + 1] = where(on, g1 + p1, ds[i + 1])
            g2 = c1 * r2 - b
            c, s, pp, g = where(on, c1, c), where(on, s1, s), where(on, p1, pp), where(on, g2, g)
            # the rotation on z's columns i, i+1: the chase's (c, -s), the 2x2 block's (c, s)
            rc, rs = where(on, c1, pcs[i]), where(on, -s1, pss[i])
            zs[i], zs[i + 1] = rs * zs[i + 1] + rc * zs[i], rc * zs[i + 1] - rs * zs[i]
        d, e, z = jnp.concatenate(ds, -1), jnp.concatenate(es, -1), jnp.concatenate(zs, -2)
        at_l = ids == ell
        # after the chase: d[l] -= p, e[l] = g; a 2x2 block: its values, e[l] = 0
        d = where(at_l & chase, d - pp, where(at_l & pair, rt1, d))
        d = where((ids == ell + 1) & pair, rt2, d)
        e = where(at_l & chase, g, where(at_l & pair, zero, e))
        ell = where(pair, ell + 2, ell)
        # the block is done when l reaches its end: the next live block, or n
        done = running & (ell >= lend)
        following = _first(live & (ids > lend), jnp.full((*batch, 1), n, jnp.int32))[..., None]
        ell = where(done, following, ell)
        lend = where(done, pick(block_end, following), lend)
        return d, e, z, ell, lend, count + 1

    d, _, z, *_ = lax.while_loop(cond, body, state)
    # back to the original positions (a block's reversal is its own inverse), then sorted:
    # column k is the stored row order[perm[k]], one product with a permutation (exact)
    d, perm = _selection_sort(at(d[..., 0, :], order))
    source = at(order, perm)
    return d, mT(z) @ (ids[:, None] == source[..., None, :]).astype(dtype)


def sturm_values(d: jax.Array, e: jax.Array) -> jax.Array:
    """The eigenvalues (..., n), ascending, of the symmetric tridiagonal matrix with diagonal
    ``d`` and off-diagonal ``e``, all found at once by bisection on Sturm counts (LAPACK's
    ``dstebz`` / ``dlaebz``: the count of pivots of T - x I below 0, a pivot smaller than
    ``pivmin`` taken as -pivmin). Eigenvalue k's interval starts as Gershgorin's and halves
    a fixed number of times (the mantissa's bits and three: from the bound's width to below
    eps |T|), so the Loop has no data-dependent exit, and each step is n elementwise
    positions on (..., n) candidates: ~6n nodes, not the n x n rotations of QL's chases."""
    n = d.shape[-1]
    dtype = d.dtype
    eps, safmin = lapack_eps(dtype)
    e2 = e * e
    pivmin = safmin * jnp.maximum(jnp.max(e2, axis=-1, keepdims=True, initial=0), 1)
    zeros = jnp.zeros((*d.shape[:-1], 1), dtype)
    radius = jnp.concatenate([zeros, jnp.abs(e)], -1) + jnp.concatenate([jnp.abs(e), zeros], -1)
    low = jnp.min(d - radius, axis=-1, keepdims=True)
    high = jnp.max(d + radius, axis=-1, keepdims=True)
    # dstebz's widening of the bounds, so that rounding leaves no eigenvalue outside
    rows = jnp.sum(jnp.ones_like(d), axis=-1, keepdims=True)  # n as a number, n symbolic too
    fudge = 2 * rows * eps * jnp.maximum(jnp.abs(low), jnp.abs(high)) + 4 * pivmin
    low, high = low - fudge, high + fudge
    target = index_range(n)

    def pivot(q: jax.Array, x: jax.Array, d_i: jax.Array, e2_i: jax.Array) -> jax.Array:
        q = (d_i - x) - e2_i / q  # e2_i = 0 (q = 1) at the first row
        return where(jnp.abs(q) <= pivmin, -pivmin, q)

    def below(x: jax.Array) -> jax.Array:
        """How many eigenvalues are below each candidate in x (..., n): the rows unrolled
        for a static n, else a scan over them."""
        one = jnp.ones_like(x)
        if not jxi.is_symbolic_dim(n):
            ds, e2s = jnp.split(d, n, axis=-1), [zeros, *jnp.split(e2, n - 1, axis=-1)]
            q, negative = one, []
            for d_i, e2_i in zip(ds, e2s, strict=True):
                q = pivot(q, x, d_i, e2_i)
                negative.append(q < 0)
            return jnp.sum(jnp.stack(negative, -1), axis=-1)

        def row(carry: tuple, entries: tuple) -> tuple:
            q, count = carry
            q = pivot(q, x, *entries)
            return (q, count + (q < 0).astype(jnp.int32)), None

        e2_rows = jnp.concatenate([zeros, e2], axis=-1)
        rows_first = (jnp.moveaxis(d, -1, 0)[..., None], jnp.moveaxis(e2_rows, -1, 0)[..., None])
        (_, count), _ = lax.scan(row, (one, jnp.zeros(x.shape, jnp.int32)), rows_first)
        return count

    def halve(_: Any, bounds: tuple) -> tuple:
        lo, hi = bounds
        mid = (lo + hi) / 2
        above = below(mid) > target
        return where(above, lo, mid), where(above, mid, hi)

    steps = jnp.finfo(dtype).nmant + 3
    shape = (*d.shape[:-1], n)
    lo, hi = lax.fori_loop(
        0, steps, halve, (jnp.broadcast_to(low, shape), jnp.broadcast_to(high, shape))
    )
    values = (lo + hi) / 2
    # a NaN entry makes every value NaN (comparisons with NaN would leave the bounds)
    finite = jnp.isfinite(jnp.sum(d, axis=-1, keepdims=True) + jnp.sum(e, axis=-1, keepdims=True))
    return where(finite, values, jnp.nan)


def _selection_sort(d: jax.Array) -> tuple[jax.Array, jax.Array]:
    """steqr's selection sort: for i = 0..n-2 the first smallest of d[i:] swapped with d[i]
    (equal values keep LAPACK's order, not a stable sort's): (sorted d, the permutation)."""
    n = d.shape[-1]
    ids = index_range(n)
    perm = jnp.broadcast_to(ids, d.shape)
    for i in range(n - 1):
        k = first_argmax(where(ids >= i, -d, -jnp.inf), -1)
        hit_i, hit_k = ids == i, ids == k
        dk, pk = pick_where(d, hit_k, -1), pick_where(perm, hit_k, -1)
        d = where(hit_i, dk, where(hit_k, d[..., i : i + 1], d))
        perm = where(hit_i, pk, where(hit_k, perm[..., i : i + 1], perm))
    return d, perm


def syevd(a: jax.Array, *, lower: bool) -> tuple[jax.Array, jax.Array]:
    """(vectors, values) of the symmetric matrix in ``a``'s lower (upper) triangle as LAPACK's
    ``syevd`` computes them for a static n up to ``stedc.STEDC_LIMIT``: ``sytd2``
    (``tridiagonal``), ``steqr`` (above STEQR_LIMIT ``stedc``), ``ormtr`` (the reflectors
    applied to their vectors), so the vectors' signs are LAPACK's. ``a`` is divided by a power
    of two near its largest entry first (exact)."""
    n = a.shape[-1]
    rows = index_range(n)[:, None]
    if n == 1:
        return jnp.ones_like(a), a[..., 0]
    keep = rows >= index_range(n)[None, :] if lower else rows <= index_range(n)[None, :]
    scale = power_of_two_scale(where(keep, a, mT(a)))
    packed, d, e, taus = tridiagonal(a / scale, lower=lower)
    values, z = steqr(d, e) if n <= STEQR_LIMIT else stedc(d, e, steqr)

    def reflect(i: Index, z: jax.Array) -> jax.Array:
        # lower: reflector i is 1 at row i+1 and column i's rows below; upper: 1 at row i and
        # column i+1's rows above
        col, pivot = (i, i + 1) if lower else (i + 1, i)
        tail = rows > pivot if lower else rows < pivot
        column = (
            lax.dynamic_slice_in_dim(packed, col, 1, axis=-1)
            if not isinstance(col, int)
            else packed[..., col : col + 1]
        )
        v = where(tail, column, where(rows == pivot, 1, 0).astype(a.dtype))
        tau = (
            lax.dynamic_slice_in_dim(taus, i, 1, axis=-1)[..., None]
            if not isinstance(i, int)
            else taus[..., None, i : i + 1]
        )
        return z - (tau * v) * (mT(v) @ z)

    # Q = H_0 ... H_{n-2} (lower) or H_{n-2} ... H_0 (upper): Q z applies the last factor first
    z = iterate(n - 1, reflect, z, reverse=lower)
    return z, values * scale[..., 0, :]


def syevd_values(a: jax.Array, *, lower: bool) -> jax.Array:
    """The eigenvalues, ascending, of the symmetric matrix in ``a``'s lower (upper) triangle
    (n >= 1, symbolic too), what ``eigh`` lowers to when nothing reads its vectors
    (``jnp.linalg.eigvalsh``): ``sytd2``'s tridiagonal form (no Q formed), then its values by
    bisection (``sturm_values``, ``dstebz``'s method) where LAPACK's ``syevd`` with JOBZ = 'N'
    runs ``sterf`` (QL iterations: the same values to rounding; here one whole chase per Loop
    step was 2.5x to 7x slower, each step n dependent rotations)."""
    n = a.shape[-1]
    if not jxi.is_symbolic_dim(n) and n == 1:
        return a[..., 0]
    rows = index_range(n)[:, None]
    keep = rows >= index_range(n)[None, :] if lower else rows <= index_range(n)[None, :]
    scale = power_of_two_scale(where(keep, a, mT(a)))
    _, d, e, _ = tridiagonal(a / scale, lower=lower)
    return sturm_values(d, e) * scale[..., 0, :]
