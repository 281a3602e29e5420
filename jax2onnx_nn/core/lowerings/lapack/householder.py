"""Householder reflections as LAPACK writes them (``dlarfg``, ``geqrf``, ``geqp3``, the
reflectors applied and accumulated), and the power-of-two scaling of a matrix before a
factorization that squares its entries. Shared by ``qr``, ``hessenberg``, the Schur forms and
the SVD."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lowerings.lapack.steps import (
    PIVOTED_UNROLL_LIMIT,
    Index,
    at_index,
    index_range,
    iterate,
    mT,
    pick_where,
    sum_keepdims,
    unrolls,
    where,
)

# The scale a matrix is divided by before a factorization that squares its entries (Jacobi
# rotations, Householder norms): 2^k, k a multiple of SCALE_STEP, the
# largest not above max |a| (its reciprocal normal too): the scaled entries are below 2^SCALE_STEP
# and the largest at least 1, so no square overflows or underflows (float32 entries of 1e30 or
# 1e-30), and dividing by it and multiplying the values back are exact.
SCALE_STEP = 4


def power_of_two_scale(a: jax.Array) -> jax.Array:
    """The power of two (..., 1, 1) that ``a`` (..., m, n) is divided by (see SCALE_STEP), from
    a table: one comparison with ~64 (float32) or ~512 (float64) entries and one Gather. A zero
    matrix gets the smallest entry, an inf one the largest and a NaN one (no comparison holds)
    the smallest: either way the NaN or inf stays in the scaled matrix; an empty one, 1."""
    if any(not jxi.is_symbolic_dim(d) and d == 0 for d in a.shape[-2:]):
        return jnp.ones((*a.shape[:-2], 1, 1), a.dtype)
    top = jnp.finfo(a.dtype).maxexp - 2
    powers = 2.0 ** np.arange(-top, top + 1, SCALE_STEP)
    big = jnp.max(jnp.abs(a), axis=(-2, -1), keepdims=True)
    below = jnp.sum(
        (jnp.asarray(powers, a.dtype) <= big).astype(jnp.int32), axis=-1, keepdims=True
    )  # (..., 1, 1)
    # entry i of the table read is the i-th power's predecessor (its first one twice)
    return (
        jnp.asarray(np.concatenate([powers[:1], powers]), a.dtype)
        .at[below]
        .get(mode="promise_in_bounds")
    )


def upper(rows: Any, cols: Any) -> Any:
    """R's entries (on and above the diagonal) for ``scaled``'s ``keeps_scale``."""
    return rows <= cols


def scaled(
    factor: Callable[[jax.Array], tuple[jax.Array, ...]], keeps_scale: Callable[[Any, Any], Any]
) -> Callable[[jax.Array], tuple[jax.Array, ...]]:
    """``factor`` (a Householder reduction: (packed, taus)) of ``a`` divided by
    ``power_of_two_scale(a)``, the packed entries where ``keeps_scale(rows, cols)`` (R, H)
    multiplied back: the reflectors' norms square the entries, which overflow or underflow from
    ~1e19 / ~1e-19 in float32 (LAPACK's dnrm2 scales), and the reflectors and taus do not
    depend on a power of two, exactly (so the results are unchanged where nothing overflowed)."""

    def on_scaled(a: jax.Array) -> tuple[jax.Array, ...]:
        scale = power_of_two_scale(a)
        packed, *rest = factor(a / scale)
        rows, cols = index_range(packed.shape[-2])[:, None], index_range(packed.shape[-1])[None, :]
        return (where(keeps_scale(rows, cols), packed * scale, packed), *rest)

    return on_scaled


# -- qr: Householder reflections as LAPACK's geqrf / orgqr / ormqr -----------------------------
def reflector(x: jax.Array, j: Index, tail: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``dlarfg`` on the column ``x`` (..., m, 1): the Householder vector ``v`` (1 at row
    ``j``, the scaled ``tail`` rows, 0 elsewhere), ``tau``, and x[j]'s new value ``beta =
    -sign(alpha) * |(alpha, x[tail])|`` (``sign(0) = +``); a tail already zero is no reflection
    (``tau = 0``, x[j] kept)."""
    zero, one = jnp.zeros((), x.dtype), jnp.ones((), x.dtype)
    rows = index_range(x.shape[-2])[:, None]
    # j is a step's index, or one per matrix (..., 1, 1) (a QR sweep's position per matrix)
    alpha = at_index(x, j, -2) if jnp.ndim(j) == 0 else pick_where(x, rows == j, -2)  # (..., 1, 1)
    rest = where(tail, x, zero)
    # a column whose magnitudes sum below 2^low has squares near or under the float range
    # (denormals keep a few bits, or none): it is taken times 2^lift (exact), which v and tau
    # do not see, and beta divided back, as dlarfg rescales (float32 Hessenberg forms of d G d,
    # d = (1, 1e-22, ...), had taus 100% off JAX's; a real Schur sweep on a block at 1e-15 of
    # max |a|, or on the noise block of a float32 matrix of ones, lost z's orthogonality). A
    # sum, not a max: no NaN handling, and a NaN stays NaN either way.
    low, lift = _reflector_range(x.dtype)
    size = sum_keepdims(jnp.abs(rest), -2) + jnp.abs(alpha)
    factor = where(size < 2.0**low, jnp.asarray(2.0**lift, x.dtype), one)
    alpha, rest = alpha * factor, rest * factor
    xnorm = jnp.sqrt(jnp.sum(rest * rest, axis=-2, keepdims=True))
    trivial = xnorm == 0
    norm = jnp.hypot(alpha, xnorm)
    beta = where(alpha >= 0, -norm, norm)
    tau = where(trivial, zero, (beta - alpha) / beta)
    v = where(tail, rest / where(trivial, one, alpha - beta), where(rows == j, one, zero))
    return v, tau, where(trivial, alpha, beta) / factor


def _reflector_range(dtype: Any) -> tuple[int, int]:
    """(low, lift) of ``reflector`` (float32 -40 and 86, float64 -459 and 563): below 2^low,
    the squares of entries eps below the largest are not all normal; times 2^lift, the
    smallest denormal's square is normal and 2^low's is 2^(4 nmant), far from overflow."""
    info = jnp.finfo(dtype)
    return info.minexp // 2 + info.nmant, info.nmant - info.minexp // 2


def geqrf(a: jax.Array, *, unroll: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """Householder QR of ``a`` (..., m, n) packed as ``geqrf``: R on and above the diagonal,
    the reflectors' vectors (implicit 1 on the diagonal) below it, and their ``taus``.

    Each reflector is ``dlarfg``'s: ``beta = -sign(alpha) * |x|`` (``sign(0) = +``), so R's
    diagonal has LAPACK's signs and ``qr`` matches JAX's Q and R, not just their product; a
    column already zero below the diagonal gets ``tau = 0`` (no reflection)."""
    m, n = a.shape[-2], a.shape[-1]
    k = m if m is n else jxi.min_dim(m, n)
    rows, cols = index_range(m)[:, None], index_range(n)[None, :]

    def step(j: Index, carry: tuple) -> tuple:
        r, taus = carry
        x = at_index(r, j, -1)  # (..., m, 1)
        below = rows > j
        v, tau, head = reflector(x, j, below)
        r = where(cols > j, r - (tau * v) * (mT(v) @ r), r)
        r = where(cols == j, where(rows == j, head, where(below, v, x)), r)
        return r, where(index_range(k)[None, :] == j, tau, taus)

    packed, taus = iterate(k, step, (a, jnp.zeros((*a.shape[:-2], 1, k), a.dtype)), unroll=unroll)
    return packed, taus[..., 0, :]


def reflector_vectors(packed: jax.Array, k: Any) -> jax.Array:
    """The vectors (..., m, k) of the k reflectors H_j = I - tau_j v_j v_j^T that ``geqrf``
    packed: column j is v_j, 1 at row j, ``packed``'s column j below it, 0 above."""
    rows, cols = index_range(packed.shape[-2])[:, None], index_range(k)[None, :]
    one, zero = jnp.ones((), packed.dtype), jnp.zeros((), packed.dtype)
    below = packed if packed.shape[-1] is k else lax.slice_in_dim(packed, 0, k, axis=-1)
    return where(rows > cols, below, where(rows == cols, one, zero))


def apply_reflectors(
    packed: jax.Array,
    taus: jax.Array,
    c: jax.Array,
    *,
    left: bool,
    transpose: bool,
    masked: bool = True,
    unroll: bool | None = None,
) -> jax.Array:
    """``ormqr``: Q c, Q^T c, c Q or c Q^T for Q = H_0 ... H_{k-1}, the k = len(taus) reflectors
    ``packed`` (..., m, n >= k) holds below its diagonal, without forming Q (``dorm2r``: one
    reflector at a time, each a rank-1 update of ``c``). Q c and c Q^T apply H_{k-1} first,
    Q^T c and c Q apply H_0 first.

    As ``dlarf``, H_j reads and writes only the rows (left; columns: right) j.. of ``c``, and
    none for ``tau_j = 0``: an inf or NaN in ``c`` spreads where LAPACK spreads it (masks,
    not products with the zeros of v_j); ``masked=False`` leaves the masks out for a finite
    ``c`` (``householder_product``'s identity). The vectors, scaled by tau on the side the
    update needs, and the masks are made once for all steps; unrolled steps take theirs from
    one Split each."""
    m, k = packed.shape[-2], taus.shape[-1]
    v = reflector_vectors(packed, k)
    # left: H c = c - (tau v) (v^T c), step j's column and row; right: c H = c - (c v) (tau v^T)
    taus = taus[..., None, :] if left else taus[..., :, None]
    per_step = [(taus * v, -1), (mT(v), -2)] if left else [(v, -1), (taus * mT(v), -2)]
    if masked:  # column (left) or row (right) j: the lines of c that H_j reaches
        if left:
            writes, axis = index_range(m)[:, None] >= index_range(k)[None, :], -1
        else:
            writes, axis = index_range(k)[:, None] <= index_range(m)[None, :], -2
        per_step += [(writes & (taus != 0), axis), (writes, axis)]
    unroll = unrolls(k, unroll)
    pieces = [
        lax.split(x, [1] * int(k), axis=axis) if unroll and int(k) > 1 else [x]
        for x, axis in per_step
    ]

    def step(j: Index, c: jax.Array) -> jax.Array:
        if isinstance(j, int):
            column, row, *masks = (p[j] for p in pieces)
        else:
            column, row, *masks = (at_index(x, j, axis) for x, axis in per_step)
        read = where(masks[0], c, jnp.zeros((), c.dtype)) if masked else c
        update = column * (row @ read) if left else (read @ column) * row
        return where(masks[1], c - update, c) if masked else c - update

    return iterate(k, step, c, reverse=left != transpose, unroll=unroll)


def householder_product(
    packed: jax.Array, taus: jax.Array, columns: Any = None, *, unroll: bool | None = None
) -> jax.Array:
    """The first ``columns`` (default n) columns of H_0 ... H_{k-1}, H_j = I - tau_j v_j v_j^T
    with v_j read below the diagonal of ``packed`` (``orgqr``'s backward accumulation: Q
    applied to the identity's columns)."""
    m, n = packed.shape[-2], packed.shape[-1]
    columns = n if columns is None else columns
    eye = (index_range(m)[:, None] == index_range(columns)[None, :]).astype(packed.dtype)
    q = jnp.broadcast_to(eye, (*packed.shape[:-2], m, columns))
    return apply_reflectors(
        packed, taus, q, left=True, transpose=False, masked=False, unroll=unroll
    )


def geqp3(a: jax.Array, *, unroll: bool | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Householder QR with column pivoting as ``geqp3`` (unblocked ``laqp2``): (packed, the
    0-based column permutation, taus). Step j swaps in the remaining column of largest
    partial norm (the first on ties); the partial norms are downdated as LAPACK does and
    recomputed when cancellation makes the downdate inaccurate (below sqrt(eps))."""
    m, n = a.shape[-2], a.shape[-1]
    k = m if m is n else jxi.min_dim(m, n)
    rows, cols = index_range(m)[:, None], index_range(n)[None, :]
    zero, one = jnp.zeros((), a.dtype), jnp.ones((), a.dtype)
    cutoff = float(np.sqrt(np.finfo(a.dtype).eps / 2))  # sqrt(dlamch('E'))

    def norms(x: jax.Array, live: jax.Array) -> jax.Array:
        x = where(live, x, zero)
        return jnp.sqrt(jnp.sum(x * x, axis=-2, keepdims=True))

    def step(j: Index, carry: tuple) -> tuple:
        r, perm, vn1, vn2, taus = carry  # perm, vn1, vn2: (..., 1, n)
        largest = jnp.max(where(cols >= j, vn1, -one), axis=-1, keepdims=True)
        p = jnp.min(where((cols >= j) & (vn1 == largest), cols, n), axis=-1, keepdims=True)
        is_j, is_p = cols == j, cols == p

        def swap(x: jax.Array) -> jax.Array:
            return where(is_j, pick_where(x, is_p, -1), where(is_p, at_index(x, j, -1), x))

        r, perm, vn1, vn2 = swap(r), swap(perm), swap(vn1), swap(vn2)
        x = at_index(r, j, -1)
        below = rows > j
        v, tau, head = reflector(x, j, below)
        r = where(cols > j, r - (tau * v) * (mT(v) @ r), r)
        r = where(is_j, where(rows == j, head, where(below, v, x)), r)
        live = (cols > j) & (vn1 != 0)
        safe1, safe2 = where(live, vn1, one), where(live, vn2, one)
        ratio = jnp.abs(at_index(r, j, -2)) / safe1
        temp = jnp.maximum(1 - ratio * ratio, zero)
        recompute = temp * (safe1 / safe2) ** 2 <= cutoff
        fresh = norms(r, below)
        vn1 = where(live, where(recompute, fresh, vn1 * jnp.sqrt(temp)), vn1)
        vn2 = where(live & recompute, fresh, vn2)
        return r, perm, vn1, vn2, where(index_range(k)[None, :] == j, tau, taus)

    vn = norms(a, jnp.ones((), bool))
    perm = jnp.broadcast_to(cols, (*a.shape[:-2], 1, n))
    carry = (a, perm, vn, vn, jnp.zeros((*a.shape[:-2], 1, k), a.dtype))
    if unroll is None:  # a step is ~100 nodes: unrolled only where that is faster
        unroll = not jxi.is_symbolic_dim(k) and int(k) <= PIVOTED_UNROLL_LIMIT
    packed, perm, _, _, taus = iterate(k, step, carry, unroll=unroll)
    return packed, perm[..., 0, :], taus[..., 0, :]
