"""Balancing before the eigenproblem: LAPACK's ``gebal`` (isolating eigenvalues by permutation,
scaling rows and columns by powers of two) and ``gebak``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx_nn.core.lowerings.lapack.steps import (
    at_index,
    exact_cast,
    index_range,
    mT,
    take_rows,
    where,
)

# -- balancing: gebal, gebak ------------------------------------------------------------------
# geev balances before its Hessenberg reduction (gebal, job 'B'): a permutation that moves
# rows and columns isolating an eigenvalue to the bottom and the top, so that the matrix is
# block upper triangular with its isolated eigenvalues on the diagonal outside rows ilo..ihi
# (the reflectors and QR sweeps leave them exact: a triangular matrix's values are its
# diagonal); then powers of two on rows and columns ilo..ihi that bring each row's norm near
# its column's (exact: D G D^-1 with D from 1e-4 to 1e3 gave values 84% off in float32).
# FACTOR: a scaling is kept only when it shrinks the row's and column's norms by 5%.
BALANCE_FACTOR = 0.95
# Balancing sweeps at most (LAPACK's has no bound; each kept scaling shrinks the norms by 5%,
# and a scaling reaches its power of two in one step: the badly scaled matrices of the tests
# took at most 4 sweeps).
BALANCE_SWEEPS = 32


def isolate(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """gebal's permutation of ``a`` (..., n, n): (perm, its inverse, ilo, ihi), ``a[perm][:, perm]``
    zero below its diagonal in columns < ilo and rows > ihi; as LAPACK 3.12's search (JAX's CPU eig
    orders triangular matrices' values so): rows with no off-diagonal nonzero among the rows and
    columns still searched, found scanning down, each swapped with the last of those (the scan going
    on above it, passes repeated while one swaps), then columns likewise upward, each swapped with
    the first. One swap or one pass's end per loop step, for the whole batch (each matrix at its own
    state): a dense matrix takes two steps, a triangular one ~n."""
    n = a.shape[-1]
    ids = index_range(n)
    batch = a.shape[:-2]
    nonzero = (jnp.real(a) != 0) | (jnp.imag(a) != 0) if jnp.iscomplexobj(a) else a != 0
    pattern = where(nonzero & (ids[:, None] != ids[None, :]), 1, 0).astype(
        jnp.real(a).dtype
    )  # off-diagonal
    finite = jnp.all(jnp.isfinite(a), axis=(-2, -1))
    scalar = lambda v: jnp.full(batch, v, jnp.int32)  # noqa: E731
    pick = lambda v, i: jnp.sum(where(ids == i[..., None], v, 0), axis=-1, dtype=jnp.int32)  # noqa: E731  v[..., i]

    def step(state: tuple) -> tuple:
        perm, pos, k, hi, cursor, swapped, phase, it = state
        rows = phase == 0
        searched = ((pos >= k[..., None]) & (pos <= hi[..., None])).astype(
            pattern.dtype
        )  # by original index
        row_hits = (pattern @ searched[..., None])[
            ..., 0
        ]  # off-diagonal nonzeros among searched columns
        col_hits = (searched[..., None, :] @ pattern)[..., 0, :]
        free = where(rows[..., None], row_hits, col_hits) == 0
        window = where(
            rows[..., None],
            (pos >= k[..., None]) & (pos <= cursor[..., None]),
            (pos >= cursor[..., None]) & (pos <= hi[..., None]),
        )
        # the row search takes the last such position, the column search the first
        key = where(rows[..., None], pos, n - 1 - pos)
        best = jnp.max(where(free & window & (phase < 2)[..., None], key, -1), axis=-1)
        found = best >= 0
        at = where(rows, best, n - 1 - best)
        to = where(rows, hi, k)
        moved, other = pick(perm, at), pick(perm, to)
        perm_new = where(
            ids == at[..., None],
            other[..., None],
            where(ids == to[..., None], moved[..., None], perm),
        )
        pos_new = where(
            ids == moved[..., None],
            to[..., None],
            where(ids == other[..., None], at[..., None], pos),
        )
        last = found & rows & (hi == 0)  # everything isolated: LAPACK stops here (ilo = ihi = 0)
        perm, pos = where(found[..., None], perm_new, perm), where(found[..., None], pos_new, pos)
        hi = where(found & rows & ~last, hi - 1, hi)
        k = where(found & ~rows, k + 1, k)
        restart = ~found & swapped  # a pass that swapped ends: another pass
        cursor = where(
            found, where(rows, at - 1, at + 1), where(restart, where(rows, hi, k), cursor)
        )
        phase = where(
            last, 2, where(~found & ~swapped, phase + 1, phase)
        )  # a pass without a swap ends the search
        cursor = where(~found & ~swapped & rows, k, cursor)  # the column search starts at k
        swapped = found
        return perm, pos, k, hi, cursor, swapped, jnp.minimum(phase, 2), it + 1

    # a matrix with inf or NaN is not permuted (its values are NaN anyway); nor one without a
    # row or column free of off-diagonal nonzeros (each pass would find none: no loop step)
    free = jnp.any(jnp.sum(pattern, axis=-1) == 0, axis=-1) | jnp.any(
        jnp.sum(pattern, axis=-2) == 0, axis=-1
    )
    init = (
        jnp.broadcast_to(ids, (*batch, n)),
        jnp.broadcast_to(ids, (*batch, n)),
        scalar(0),
        scalar(n - 1),
        scalar(n - 1),
        jnp.zeros(batch, bool),
        where(finite & free, 0, 2).astype(jnp.int32),
        jnp.zeros((), jnp.int32),
    )
    perm, pos, k, hi, *_ = lax.while_loop(
        lambda s: jnp.any(s[6] < 2) & (s[7] < 4 * n + 4), step, init
    )
    return perm, pos, k, hi


def scaling_bound(dtype: Any) -> int:
    """-log2 of LAPACK's sfmin1 (float32: 103, float64: 970): each of balancing's scalings is a
    power of two below 2^bound and above 2^-bound."""
    info = jnp.finfo(dtype)
    return -(int(np.log2(float(info.tiny))) + info.nmant)


def _norm(x: jax.Array) -> jax.Array:
    """The 2-norm along the last axis of magnitudes ``x`` without overflow or underflow of the
    squares that matter (as nrm2): their sum s times the norm of x / s (a sum, not nrm2's
    largest entry: ReduceMax's NaN handling is 4 more nodes per norm in a loop step)."""
    total = jnp.sum(x, axis=-1)
    safe = where(total == 0, 1, total)
    return total * jnp.sqrt(jnp.sum((x / safe[..., None]) ** 2, axis=-1))


def _magnitude(x: jax.Array) -> jax.Array:
    if not jnp.iscomplexobj(x):
        return jnp.abs(x)
    re, im = jnp.abs(jnp.real(x)), jnp.abs(jnp.imag(x))
    big = jnp.maximum(re, im)
    safe = where(big == 0, 1, big)
    return big * jnp.sqrt((re / safe) ** 2 + (im / safe) ** 2)


def _scale(b: jax.Array, ilo: jax.Array, ihi: jax.Array) -> tuple[jax.Array, jax.Array]:
    """gebal's scaling of the permuted ``b``: (D^-1 b D, d), d (..., n) powers of two, 1
    outside rows ilo..ihi. Gauss-Seidel sweeps over the rows i of the block as LAPACK's: f = 2^e
    with r / 2 <= c f^2 < 2 r (c, r the 2-norms of column and row i over the block: LAPACK's
    two doubling loops in closed form, e from logarithms and corrected by exact comparisons),
    kept when c f + r / f < 0.95 (c + r) and row i's product of scalings stays within LAPACK's
    [sfmin1, 1 / sfmin1]; one row per loop step, the sweeps repeated while one scaling is kept.
    LAPACK's bounds on each doubling against over- and underflow of the row's and column's
    largest entries are left out: ``b`` comes divided by a power of two near its largest entry
    (see eig), and a kept scaling shrinks that row's and column's norms (8 nodes less per step)."""
    n = b.shape[-1]
    ids = index_range(n)
    real = jnp.real(b).dtype
    bound = scaling_bound(real)
    top = bound + 1
    powers = jnp.asarray(2.0 ** np.arange(-top, top + 1), real)  # 2^e at e + top: exact
    power = lambda e: powers.at[exact_cast(e + top, jnp.int32)].get(mode="promise_in_bounds")  # noqa: E731  2^e, |e| <= top
    block = (ids >= ilo[..., None]) & (ids <= ihi[..., None])  # (..., n)
    to_log2 = float(1 / np.log(2.0))  # a Python float: weakly typed, float32 stays float32

    def scaling(
        c: jax.Array, r: jax.Array, inside: jax.Array, exponent: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(e, f, keep) of rows with column and row norms c, r whose scalings so far are
        2^exponent."""
        inside = inside & (c > 0) & (r > 0) & jnp.isfinite(c + r)
        c, r = where(inside, c, 1), where(inside, r, 1)
        e = jnp.minimum(jnp.maximum(jnp.floor((jnp.log(r / c) * to_log2 + 1) / 2), -bound), bound)
        f = power(e)
        product = c * f * f  # the logarithm's rounding: one step up or down
        e = where(product < r / 2, e + 1, where(product >= 2 * r, e - 1, e))
        f = power(e)
        total = exponent + e  # LAPACK's bound on the product of a row's scalings
        keep = (
            inside & (c * f + r / f < BALANCE_FACTOR * (c + r)) & (total > -bound) & (total < bound)
        )
        return e, where(keep, f, 1), keep

    def step(state: tuple) -> tuple:
        b, exponents, kept, done, t = state
        i = t % n
        hit = ids == i
        c = _norm(where(block, _magnitude(at_index(b, i, -1)[..., 0]), 0))
        r = _norm(where(block, _magnitude(at_index(b, i, -2)[..., 0, :]), 0))
        e, f, keep = scaling(
            c, r, (i >= ilo) & (i <= ihi) & ~done, jnp.sum(where(hit, exponents, 0), axis=-1)
        )
        b = (
            b
            * where(hit[:, None], 1 / f[..., None, None], 1)
            * where(hit[None, :], f[..., None, None], 1)
        )
        exponents = where(hit & keep[..., None], exponents + e[..., None], exponents)
        kept = kept | keep
        sweep_end = i == n - 1
        return b, exponents, kept & ~sweep_end, done | (sweep_end & ~kept), t + 1

    # a sweep that keeps no scaling sees the same matrix at every row: whether the first one
    # keeps any is one test of all rows at once, and a batch of matrices that need no scaling
    # (dense ones of similar row and column norms, most of them) takes no loop step
    magnitude = where(block[..., :, None] & block[..., None, :], _magnitude(b), 0)
    _, _, keep = scaling(
        _norm(mT(magnitude)), _norm(magnitude), block, jnp.zeros(block.shape, real)
    )
    batch = b.shape[:-2]
    init = (
        b,
        jnp.zeros((*batch, n), real),
        jnp.zeros(batch, bool),
        (ihi <= ilo) | ~jnp.any(keep, axis=-1),
        jnp.zeros((), jnp.int32),
    )
    b, exponents, *_ = lax.while_loop(
        lambda s: jnp.any(~s[3]) & (s[4] < BALANCE_SWEEPS * n), step, init
    )
    return b, power(exponents)


def balance(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(b, inverse, d): b = D^-1 P^T a P D as ``gebal`` with job 'B' (see isolate, _scale),
    b's row i a's row perm[i] scaled, ``inverse`` perm's inverse, D = diag(d) powers of two."""
    perm, inverse, ilo, ihi = isolate(a)
    b, d = _scale(permuted(a, perm), ilo, ihi)
    return b, inverse, d


def permuted(a: jax.Array, perm: jax.Array) -> jax.Array:
    """a[..., perm, :][..., :, perm]: two GatherElements (on each part of a complex ``a``)."""
    if jnp.iscomplexobj(a):
        return lax.complex(permuted(jnp.real(a), perm), permuted(jnp.imag(a), perm))
    return mT(take_rows(mT(take_rows(a, perm[..., :, None])), perm[..., :, None]))


def back_rows(z: jax.Array, inverse: jax.Array, d: jax.Array | None = None) -> jax.Array:
    """``gebak``: P (d * z), z's row i scaled by d[i] (unless ``d`` is None: gees permutes
    only) and moved to row perm[i] (row r read from row inverse[r])."""
    zd = z if d is None else z * d[..., :, None]
    if jnp.iscomplexobj(zd):
        return lax.complex(
            take_rows(jnp.real(zd), inverse[..., :, None]),
            take_rows(jnp.imag(zd), inverse[..., :, None]),
        )
    return take_rows(zd, inverse[..., :, None])
