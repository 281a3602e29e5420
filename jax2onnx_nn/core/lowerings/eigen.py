"""lax.linalg reductions to condensed form and the non-symmetric eigenproblem: ``hessenberg``,
``tridiagonal``.

Same machinery as ``decompositions.py``: JAX code on the equation's avals, one step per
column (unrolled for small static sizes, an ONNX ``Loop`` otherwise), with LAPACK's
reflectors (``dlarfg``, shared with ``geqrf``), so the packed results match JAX's CPU results
(``gehrd``, ``sytrd``) entry by entry, not only up to signs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.lowerings.decompositions import (
    Index,
    at_index,
    exact_cast,
    householder_product,
    index_range,
    iterate,
    lower_as_jax,
    mT,
    pick_where,
    power_of_two_scale,
    reflector,
    refuse_half_precision,
    scaled,
    take_rows,
    where,
)
from jax2onnx_nn.core.registry import lowering

REDUCTION_OPS = ("Slice", "MatMul", "Mul", "Sub", "Div", "Sqrt", "Where", "Loop")


# -- hessenberg: gehrd -------------------------------------------------------------------------
def hessenberg(a: jax.Array, *, unroll: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """``a`` (..., n, n) = Q H Q^T as ``gehrd``: H on and above the first subdiagonal, the
    reflectors' vectors below it (reflector j acts on rows j+1..), and their n-1 ``taus``
    (the last one 0); ``unroll`` as ``iterate``'s."""
    n = a.shape[-1]
    rows, cols = index_range(n)[:, None], index_range(n)[None, :]

    def step(j: Index, carry: tuple) -> tuple:
        h, taus = carry
        x = at_index(h, j, -1)
        below = rows > j + 1
        v, tau, head = reflector(x, j + 1, below)
        h = h - (h @ v) * (tau * mT(v))  # from the right: columns j+1..
        h = where(cols > j, h - (tau * v) * (mT(v) @ h), h)  # from the left: rows j+1..
        h = where(cols == j, where(rows == j + 1, head, where(below, v, x)), h)
        return h, where(index_range(n - 1)[None, :] == j, tau, taus)

    taus = jnp.zeros((*a.shape[:-2], 1, n - 1), a.dtype)
    h, taus = iterate(n - 2, step, (a, taus), unroll=unroll)
    return h, taus[..., 0, :]


@lowering(
    "hessenberg",
    onnx_ops=(
        *REDUCTION_OPS,
        "LessOrEqual",
        "Abs",
        "Add",
        "Cast",
        "Concat",
        "ConstantOfShape",
        "CumSum",
        "Equal",
        "Expand",
        "Gather",
        "Greater",
        "GreaterOrEqual",
        "IsNaN",
        "Less",
        "Max",
        "Min",
        "Neg",
        "Or",
        "Pad",
        "Range",
        "ReduceMax",
        "ReduceSum",
        "Reshape",
        "Scan",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
)
def _hessenberg(ctx: LoweringContext, a: ir.Value) -> list[ir.Value]:
    refuse_half_precision(ctx, "hessenberg", "jax.scipy.linalg.hessenberg(a.astype(jnp.float32))")
    return lower_as_jax(ctx, scaled(hessenberg, lambda rows, cols: rows <= cols + 1), [a])


# -- tridiagonal: sytrd ------------------------------------------------------------------------
def tridiagonal(a: jax.Array, *, lower: bool) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The symmetric matrix in ``a``'s lower (upper) triangle = Q T Q^T as ``sytd2``: (packed,
    d, e, taus). ``lower`` reduces columns 0..n-2 top down (reflector i acts on rows i+1..),
    upper columns n-1..1 bottom up (reflector i on rows ..i); the packed matrix holds d and e
    in place and the vectors beyond them, the other triangle as given."""
    n = a.shape[-1]
    rows, cols = index_range(n)[:, None], index_range(n)[None, :]
    keep = rows >= cols if lower else rows <= cols
    sym = where(keep, a, mT(a))

    def step(i: Index, carry: tuple) -> tuple:
        s, packed, taus = carry
        # lower: column i, pivot row i+1, tail below; upper: column i+1, pivot row i, tail above
        col, pivot = (i, i + 1) if lower else (i + 1, i)
        x = at_index(s, col, -1)
        tail = rows > pivot if lower else rows < pivot
        v, tau, beta = reflector(x, pivot, tail)
        # s <- H s H as sytd2: w = tau s v - (tau^2 / 2) (v^T s v) v; s - v w^T - w v^T
        p = tau * (s @ v)
        w = p - (tau / 2) * (mT(p) @ v) * v
        s = s - v * mT(w) - w * mT(v)
        packed = where(cols == col, where(rows == pivot, beta, where(tail, v, packed)), packed)
        return s, packed, where(index_range(n - 1)[None, :] == i, tau, taus)

    taus = jnp.zeros((*a.shape[:-2], 1, n - 1), a.dtype)
    s, packed, taus = iterate(n - 1, step, (sym, a, taus), reverse=not lower)
    eye = rows == cols
    d = jnp.sum(where(eye, s, jnp.zeros((), a.dtype)), axis=-1)
    packed = where(eye, s, packed)
    e = jnp.sum(
        where(rows == cols + (1 if lower else -1), packed, jnp.zeros((), a.dtype)), axis=-2
    )  # per column
    e = lax.slice_in_dim(e, 0, n - 1, axis=-1) if lower else lax.slice_in_dim(e, 1, n, axis=-1)
    return packed, d, e, taus[..., 0, :]


@lowering(
    "tridiagonal",
    onnx_ops=(
        *REDUCTION_OPS,
        "ReduceSum",
        "Abs",
        "Add",
        "Cast",
        "Concat",
        "Equal",
        "Expand",
        "Greater",
        "GreaterOrEqual",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Neg",
        "Or",
        "Range",
        "Reshape",
        "Scan",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
)
def _tridiagonal(ctx: LoweringContext, a: ir.Value, *, lower: bool) -> list[ir.Value]:
    refuse_half_precision(ctx, "tridiagonal", "lax.linalg.tridiagonal(a.astype(jnp.float32))")
    return lower_as_jax(ctx, lambda a: tridiagonal(a, lower=lower), [a])


# -- the complex Schur form: Hessenberg reduction + shifted QR (Givens rotations) --------------
# Sweeps of the single-shift QR algorithm, per row of the matrix: with Wilkinson shifts each
# eigenvalue converges in 2-3 sweeps (LAPACK's zlahqr allows 30); the spare sweeps cost
# nothing in accuracy (a deflated matrix is left as it is), and the loop stops at the first
# sweep that finds the whole batch deflated. 4 per row converged every one of
# 200 Gaussian matrices at n = 5 and 16 in float64 (3 per row missed 9 at n = 16). zlahqr's
# exceptional shifts, applied every k-th sweep without its stagnation count, made it worse;
# with it (STALLED_SWEEPS sweeps without a deflation at the block's bottom) they only change
# the matrices on which the Wilkinson shift stalls (a cyclic permutation's is 0).
# Measured no faster (float32 batch 8, onnxruntime CPU time): two bulges chased in one step
# two rows apart (the trailing 2x2's two eigenvalues as shifts, rows and columns of both
# rotations as one 4-row and one 4-column slice): 26 -> 22 sweeps at 16x16 but as many
# chase steps (263), 99 -> 141 nodes per step, eigvals 16x16 23 -> 38 ms; slices without
# negative-index wrapping (allow_negative_indices=False): 99 -> 93 nodes per step, same time.
QR_SWEEPS_PER_ROW = 4
STALLED_SWEEPS = 10  # sweeps without a deflation at the active block's bottom: an exceptional shift
QR_SWEEPS_EXTRA = 8
# A sweep's chase steps run in windows of this many steps on the block of rows and columns
# they touch (steps k0..k0+W-1 rotate rows and columns k0..k0+W and read column k0-1: a
# block of W+3), the rotations gathered in a unitary W+3 matrix that updates the rest of
# those rows and columns (and z) once per window: a step then writes a (W+3)^2 block, not
# the whole matrix twice (float32 batch 8, onnxruntime CPU time: eig 64x64 -25%, eigvals
# -10..25%). Measured no faster: windows of 8 (same), 32 (slower); the window's steps
# unrolled with static rows (80 nodes per step instead of 107, but 670 / 1290 more nodes at
# W = 8 / 16); w and u stacked so a rotation's columns are one product. What is left is the
# number of steps: at 64x64, 1.4 (symmetric) to 2.6 (Gaussian) sweeps per row, ~3300 / ~5800
# steps of ~100 small nodes each; fewer sweeps (multishift, aggressive early deflation) is
# the next lever.
CHASE_WINDOW = 16

# The iteration works on (real, imag) parts as real arrays: a rotation is then a few dozen
# real nodes (two 4x4 MatMuls, see _rotate), where complex jnp code on pairs adds the inf/NaN
# cases of complex division and abs to each one (~1200 nodes per rotation).
Parts = tuple[jax.Array, jax.Array]


def _cmul(a: Parts, b: Parts) -> Parts:
    return a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]


def _rotate(
    hz: tuple[jax.Array, ...], k: Index, x: Parts, y: Parts, active: jax.Array, col: Index
) -> tuple[jax.Array, ...]:
    """The similarity G h G^H (and z G^H) with the complex Givens rotation G on rows k, k+1
    that maps (x, y) to (r, 0): c = |x| / r, s = sign(x) conj(y) / r; identity where not
    ``active`` or r = 0. When (x, y) is column ``col`` of those rows, h[k+1, col] is set to an
    exact 0: rounding left there would leak into deflated entries through later rotations.

    ``hz`` is (h,) or (h, z) as real numbers, each (..., n, 2, n) (rows, real and imaginary
    part, columns), and ``k`` the same for the whole batch: the two rows of h are one slice
    (..., 4, n) that G's real 4x4 form multiplies, the two columns of h (and z) one slice
    (..., n, 4) multiplied by G^H's, each written back as one slice (a masked write of the
    whole matrix per row, and the rotation as complex products of the parts, were 4x slower;
    every write copies the matrix, so z is left out when no vectors are asked for)."""
    dtype = hz[0].dtype
    zero, one = jnp.zeros((), dtype), jnp.ones((), dtype)
    ax = jnp.sqrt(x[0] * x[0] + x[1] * x[1])
    r = jnp.sqrt(ax * ax + y[0] * y[0] + y[1] * y[1])
    rotates = active & (r != 0)
    inv_r = 1 / where(rotates, r, one)
    has_x = ax != 0
    inv_ax = 1 / where(has_x, ax, one)
    pr, pi = where(has_x, x[0] * inv_ax, one), where(has_x, x[1] * inv_ax, zero)
    c = where(rotates, ax * inv_r, one)
    sr, si = (
        where(rotates, (pr * y[0] + pi * y[1]) * inv_r, zero),
        where(rotates, (pi * y[0] - pr * y[1]) * inv_r, zero),
    )
    o = jnp.zeros_like(c)

    def matrix(*entries: jax.Array) -> jax.Array:  # 16 entries (..., 1, 1), row by row: one Concat
        return jnp.reshape(jnp.concatenate(entries, axis=-1), (*c.shape[:-2], 4, 4))

    # rows (t, b) -> (c t + s b, c b - conj(s) t); the slice's rows are t.re, t.im, b.re, b.im
    left = matrix(c, o, sr, -si, o, c, si, sr, -sr, -si, c, o, si, -sr, o, c)
    # columns (l, r) -> (c l + conj(s) r, c r - s l); the slice's columns are l.re, r.re, l.im, r.im
    right = matrix(c, -sr, o, -si, sr, c, -si, o, o, si, c, -sr, si, o, sr, c)
    h = hz[0]
    n = h.shape[-1]
    batch = h.shape[:-3]
    two_rows = jnp.reshape(lax.dynamic_slice_in_dim(h, k, 2, axis=-3), (*batch, 4, n))
    rotated = left @ two_rows
    annihilated = active & (index_range(4)[:, None] >= 2) & (index_range(n)[None, :] == col)
    rotated = where(annihilated, zero, rotated)
    h = lax.dynamic_update_slice_in_dim(h, jnp.reshape(rotated, (*batch, 2, 2, n)), k, axis=-3)

    def columns(m: jax.Array) -> jax.Array:
        two_cols = jnp.reshape(lax.dynamic_slice_in_dim(m, k, 2, axis=-1), (*batch, n, 4))
        return lax.dynamic_update_slice_in_dim(
            m, jnp.reshape(two_cols @ right, (*batch, n, 2, 2)), k, axis=-1
        )

    return tuple(columns(m) for m in (h, *hz[1:]))


def _entries(hz: tuple[jax.Array, ...], row: Index, col: Index) -> tuple[Parts, Parts]:
    """h[..., row, col] and h[..., row + 1, col] as parts (..., 1, 1) of ``hz`` (see _rotate),
    for indices the whole batch shares: two slices."""
    e = lax.dynamic_slice_in_dim(
        lax.dynamic_slice_in_dim(hz[0], row, 2, axis=-3), col, 1, axis=-1
    )  # (..., 2, 2, 1)
    return (e[..., 0, 0:1, :], e[..., 0, 1:2, :]), (e[..., 1, 0:1, :], e[..., 1, 1:2, :])


def _apply_window(
    hz: tuple[jax.Array, ...], w: jax.Array, u: jax.Array, r0: Any
) -> tuple[jax.Array, ...]:
    """``hz`` (see _rotate) after the rotations gathered in the unitary ``u`` (..., m, 2, m)
    on its rows and columns r0..r0+m-1, whose block of h they made ``w``: h's rows of the
    block times u^H, its columns (and z's) times u, then the block itself written as ``w``
    (the products' rounding would undo the exact zeros the rotations left in it)."""
    h = hz[0]
    n, m = h.shape[-1], w.shape[-1]
    batch = h.shape[:-3]

    # a complex p + i q as the real [[p, q], [-q, p]]: of u's parts, it multiplies x's parts laid
    # out as [re | im] columns by u; of their transposes, it multiplies [re; im] rows by u^H
    def real_form(p, q):
        return jnp.concatenate(
            [jnp.concatenate([p, q], axis=-1), jnp.concatenate([-q, p], axis=-1)], axis=-2
        )

    real_u = real_form(u[..., 0, :], u[..., 1, :])

    def columns(x: jax.Array) -> jax.Array:  # x[:, block] @ u
        slab = jnp.reshape(lax.dynamic_slice_in_dim(x, r0, m, axis=-1), (*batch, n, 2 * m))
        return lax.dynamic_update_slice_in_dim(
            x, jnp.reshape(slab @ real_u, (*batch, n, 2, m)), r0, axis=-1
        )

    slab = jnp.reshape(
        jnp.swapaxes(lax.dynamic_slice_in_dim(h, r0, m, axis=-3), -3, -2), (*batch, 2 * m, n)
    )
    rows = jnp.swapaxes(
        jnp.reshape(real_form(mT(u[..., 0, :]), mT(u[..., 1, :])) @ slab, (*batch, 2, m, n)), -3, -2
    )
    h = columns(lax.dynamic_update_slice_in_dim(h, rows, r0, axis=-3))
    origin = jnp.zeros((), jnp.asarray(r0).dtype)
    h = lax.dynamic_update_slice(h, w, (*[origin] * len(batch), r0, origin, r0))
    return (h, *(columns(x) for x in hz[1:]))


def _diagonals(h: jax.Array) -> tuple[Parts, Parts, Parts]:
    """The diagonal, subdiagonal (h[i, i-1] at i, 0 at 0) and superdiagonal (h[i, i+1] at i,
    0 at n-1) of h (..., n, 2, n) (see _rotate), n >= 2, as (real, imag) parts (..., n): h read as one
    line of 2 n^2 entries, where h[i, p, j] is entry 2 n i + n p + j, so each one is a slice
    with stride 2 n + 1."""
    n = h.shape[-1]
    line = jnp.reshape(h, (*h.shape[:-3], 2 * n * n))
    stride = 2 * n + 1

    def along(first: int, count: int) -> jax.Array:
        return lax.slice_in_dim(
            line, first, first + stride * (count - 1) + 1, stride=stride, axis=-1
        )

    pad = lambda x, before: jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(1, 0) if before else (0, 1)])  # noqa: E731
    diag = along(0, n), along(n, n)
    sub = pad(along(2 * n, n - 1), True), pad(along(3 * n, n - 1), True)
    sup = pad(along(1, n - 1), False), pad(along(n + 1, n - 1), False)
    return diag, sub, sup


def _csqrt(z: Parts) -> Parts:
    """A square root of z (either one: the shift below picks its sign), from |z| without
    overflow: t = sqrt((|re| + |z|) / 2) is the larger part, im / (2 t) the other."""
    x, y = z
    big = jnp.maximum(jnp.abs(x), jnp.abs(y))
    safe = where(big == 0, jnp.ones((), x.dtype), big)
    modulus = big * jnp.sqrt((x / safe) ** 2 + (y / safe) ** 2)
    t = jnp.sqrt((jnp.abs(x) + modulus) / 2)
    other = y / (2 * where(t == 0, jnp.ones((), x.dtype), t))
    negative = x < 0
    return where(negative, jnp.abs(other), t), where(negative, where(y < 0, -t, t), other)


def _cdiv(p: Parts, d: Parts) -> Parts:
    """p / d for d != 0, scaled by max(|d.re|, |d.im|) against overflow."""
    scale = jnp.maximum(jnp.abs(d[0]), jnp.abs(d[1]))
    dr, di = d[0] / scale, d[1] / scale
    den = (dr * dr + di * di) * scale
    return (p[0] * dr + p[1] * di) / den, (p[1] * dr - p[0] * di) / den


def _wilkinson_shift(a11: Parts, a12: Parts, a21: Parts, a22: Parts) -> Parts:
    """The eigenvalue of [[a11, a12], [a21, a22]] nearer a22, in the cancellation-free form
    a22 - a12 a21 / (half + root), the root's sign chosen so that |half + root| is largest;
    on (real, imag) parts (complex jnp code adds hundreds of nodes of inf/NaN cases)."""
    half = (a11[0] - a22[0]) / 2, (a11[1] - a22[1]) / 2
    product = _cmul(a12, a21)
    root = _csqrt(
        (half[0] * half[0] - half[1] * half[1] + product[0], 2 * half[0] * half[1] + product[1])
    )
    flip = half[0] * root[0] + half[1] * root[1] < 0  # Re(conj(half) root) < 0
    root = where(flip, -root[0], root[0]), where(flip, -root[1], root[1])
    denom = half[0] + root[0], half[1] + root[1]
    nonzero = (denom[0] != 0) | (denom[1] != 0)
    one = jnp.ones((), half[0].dtype)
    q = _cdiv(product, (where(nonzero, denom[0], one), denom[1]))
    return where(nonzero, a22[0] - q[0], a22[0]), where(nonzero, a22[1] - q[1], a22[1])


def _grid(a: jax.Array) -> tuple[int, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(n, ids, rows, cols, eye) of a Schur form of ``a`` (..., n, n): the size, its indices as
    a vector, column and row, and the identity per matrix (z of a 0x0 or 1x1 matrix)."""
    n = int(a.shape[-1])
    ids = index_range(n)
    rows, cols = ids[:, None], ids[None, :]
    return n, ids, rows, cols, jnp.broadcast_to((rows == cols).astype(a.dtype), a.shape)


def complex_schur(a: jax.Array, *, vectors: bool = True) -> tuple[jax.Array, jax.Array | None]:
    """(t, z) complex with a = z t z^H (z None unless ``vectors``), t upper triangular and z unitary, for a real or complex
    ``a`` (..., n, n) of static size: Hessenberg form (Householder for a real matrix, Givens
    rotations for a complex one), then implicit single-shift QR sweeps (Wilkinson shift from
    the active block's trailing 2x2) with deflation where a subdiagonal entry falls below
    eps * (|h[l, l]| + |h[l-1, l-1]|), LAPACK's ``zlahqr`` test."""
    n, ids, rows, cols, eye = _grid(a)
    if n < 2:
        dtype = jnp.result_type(a.dtype, jnp.complex64)
        return a.astype(dtype), eye.astype(dtype)
    real_dtype = jnp.real(a).dtype
    zero = jnp.zeros((), real_dtype)
    h_parts = lambda hz: (hz[0][..., 0, :], hz[0][..., 1, :])  # noqa: E731
    parts = lambda m: jnp.stack([jnp.real(m), jnp.imag(m)], axis=-2)  # noqa: E731  (..., n, 2, n)
    if not jxi.is_complex_dtype(a.dtype) and n > 2:
        # a real matrix: Householder's Hessenberg form (gehrd, orghr), n - 2 reflectors in
        # place of n^2 / 2 rotations (64x64: 20 ms instead of ~250 ms in onnxruntime); two
        # Loops at any size (unrolled: 800 more nodes at 16x16, measured no faster)
        h, q = _hessenberg_q(a, unroll=False)
        hz = (parts(h), parts(q)) if vectors else (parts(h),)
    else:
        # Hessenberg form: zero h[i, j] (i > j + 1) against h[i-1, j], bottom up per column
        hz = (parts(a), parts(eye)) if vectors else (parts(a),)
        pairs = np.array(
            [(i, j) for j in range(n - 2) for i in range(n - 1, j + 1, -1)], np.int32
        ).reshape(-1, 2)
        table = jnp.asarray(pairs)

        def reduce(t: Any, hz: jax.Array) -> jax.Array:
            i, j = table[t, 0], table[t, 1]
            x, y = _entries(hz, i - 1, j)
            # an entry already 0 leaves its rows as they are: c = |x| (1 / |x|) can round off 1,
            # which would scale an isolated row's diagonal entry (see BALANCE_FACTOR)
            return _rotate(hz, i - 1, x, y, (y[0] != 0) | (y[1] != 0), j)

        if len(pairs):
            hz = lax.fori_loop(0, len(pairs), reduce, hz)
    eps = float(jnp.finfo(real_dtype).eps)
    sub_pos = rows == cols + 1
    size = min(CHASE_WINDOW + 3, n)
    u_eye = parts(_grid(jnp.zeros((*a.shape[:-2], size, size), a.dtype))[-1])

    def sweep(carry: tuple) -> tuple:
        hz, count, _, last_hi, stalled = carry
        # the diagonal, sub- and superdiagonal as (real, imag) parts (..., n) (sub[0] and
        # sup[n-1] are 0): strided slices of h read as one line, not masked sums of h
        d, sub_h, sup_h = _diagonals(hz[0])
        modulus = lambda p: jnp.sqrt(p[0] * p[0] + p[1] * p[1])  # noqa: E731
        diag, sub = modulus(d), modulus(sub_h)  # sub[l] = |h[l, l-1]|
        prev = jnp.concatenate([diag[..., :1], diag[..., :-1]], axis=-1)
        small = (sub <= eps * (diag + prev)) | (ids == 0)
        hz = (where((sub_pos & small[..., :, None])[..., :, None, :], zero, hz[0]), *hz[1:])
        hi = jnp.max(where(small, 0, ids), axis=-1)[..., None, None]  # last unreduced row
        lo = jnp.max(where(small & (ids <= hi[..., 0]), ids, 0), axis=-1)[..., None, None]
        live = hi > 0
        hi1 = jnp.maximum(hi - 1, 0)

        # the block's trailing 2x2 (its subdiagonal entry is not small: unchanged above)
        def at(line, i):
            return tuple(
                jnp.sum(where(ids == i[..., 0], p, zero), axis=-1, keepdims=True)[..., None]
                for p in line
            )

        entries = [at(d, hi1), at(sup_h, hi1), at(sub_h, hi), at(d, hi)]
        shift = _wilkinson_shift(*entries)
        # zlahqr's exceptional shift after STALLED_SWEEPS sweeps without a deflation at the
        # block's bottom: h[hi, hi] + 3/4 |Re h[hi, hi-1]| (the Wilkinson shift of a cyclic
        # permutation is 0, on which QR leaves it as it is: its values came out 0)
        stalled = where(hi == last_hi, stalled + 1, 0)
        exceptional = (stalled > 0) & (stalled % STALLED_SWEEPS == 0)
        shift = (
            where(exceptional, entries[3][0] + 0.75 * jnp.abs(entries[2][0]), shift[0]),
            where(exceptional, entries[3][1], shift[1]),
        )

        def chase(k: Any, r0: Any, wz: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
            # step k of the sweep on the window wz = (w, u) whose row and column 0 is r0
            first = k == lo
            kl = k - r0
            km1 = jnp.maximum(kl - 1, 0)
            # columns k-1 and k of rows k, k+1 as (..., 4, 2) (re, im of row k, then of k+1):
            # one slice of the two rows _rotate reads too (the same nodes, merged)
            w = wz[0]
            two_rows = jnp.reshape(
                lax.dynamic_slice_in_dim(w, kl, 2, axis=-3), (*w.shape[:-3], 4, w.shape[-1])
            )
            pair = lax.dynamic_slice_in_dim(two_rows, km1, 2, axis=-1)
            at_k = where(kl == km1, pair[..., 0:1], pair[..., 1:2])  # k = 0: the slice starts at k
            picked = where(
                first, at_k, pair[..., 0:1]
            )  # the shifted column k first, then the bulge's
            x = tuple(
                picked[..., i : i + 1, :] - where(first, sh, zero) for i, sh in enumerate(shift)
            )
            y = picked[..., 2:3, :], picked[..., 3:4, :]
            return _rotate(wz, kl, x, y, live & (k >= lo) & (k < hi), where(first, -1, km1))

        def window(i: Any, hz: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
            # CHASE_WINDOW steps on the block of rows and columns r0..r0+m-1 around them, the
            # rotations gathered in u; then the block's rows and columns outside it (and z's
            # columns) updated by one product each (see CHASE_WINDOW)
            k0 = start + i * CHASE_WINDOW
            r0 = jnp.clip(k0 - 1, 0, n - size)
            block = lax.dynamic_slice_in_dim(
                lax.dynamic_slice_in_dim(hz[0], r0, size, axis=-3), r0, size, axis=-1
            )
            w, u = lax.fori_loop(
                k0,
                jnp.minimum(k0 + CHASE_WINDOW, stop),
                lambda k, wz: chase(k, r0, wz),
                (block, u_eye),
            )
            return _apply_window(hz, w, u, r0)

        # only the rows some matrix of the batch still chases: from the lowest active block's
        # top to the highest block's bottom (deflation shrinks the blocks sweep by sweep)
        start = jnp.min(where(live, lo, n - 1)).astype(jnp.int32)
        stop = jnp.max(where(live, hi, 0)).astype(jnp.int32)
        if size == n:  # one window holds the matrix: the steps rotate h (and z) themselves
            hz = lax.fori_loop(start, stop, lambda k, hz: chase(k, 0, hz), hz)
        else:
            windows = (jnp.maximum(stop - start, 0) + CHASE_WINDOW - 1) // CHASE_WINDOW
            hz = lax.fori_loop(0, windows, window, hz)
        return hz, count + 1, jnp.any(live), hi.astype(jnp.int32), stalled.astype(jnp.int32)

    # until a sweep finds every matrix of the batch deflated (the sweeps after it would
    # change nothing), at most the fixed budget
    limit = QR_SWEEPS_PER_ROW * n + QR_SWEEPS_EXTRA
    no_row = jnp.full((*a.shape[:-2], 1, 1), -1, jnp.int32)
    init = (hz, jnp.zeros((), jnp.int32), jnp.ones((), bool), no_row, jnp.zeros_like(no_row))
    hz = lax.while_loop(lambda c: c[2] & (c[1] < limit), sweep, init)[0]
    t = lax.complex(*(where(rows > cols, zero, p) for p in h_parts(hz)))
    return t, lax.complex(hz[1][..., 0, :], hz[1][..., 1, :]) if vectors else None


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


def _hessenberg_q(a: jax.Array, *, unroll: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """(h, q) with a = q h q^T, h upper Hessenberg (zeros below its subdiagonal): ``gehrd``
    and ``orghr`` (q's first row and column are e_0, the reflectors act on rows 1..)."""
    n = a.shape[-1]
    ids = index_range(n)
    packed, taus = hessenberg(a, unroll=unroll)
    h = where(ids[:, None] > ids[None, :] + 1, jnp.zeros((), a.dtype), packed)
    inner = householder_product(
        packed[..., 1:, :-1], taus[..., :-1], unroll=unroll
    )  # (..., n-1, n-1)
    pad = [(0, 0)] * (a.ndim - 2) + [(1, 0), (1, 0)]
    corner = ((ids[:, None] == 0) & (ids[None, :] == 0)).astype(a.dtype)
    return h, jnp.pad(inner, pad) + corner


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
    n, ids, rows, cols, eye = _grid(a)
    if n < 2:
        return a, eye
    zero = jnp.zeros((), a.dtype)
    h, z = _hessenberg_q(a) if n > 2 else (a, eye)
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


def _isolate(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """gebal's permutation of ``a`` (..., n, n): (perm, its inverse, ilo, ihi), ``a[perm][:, perm]`` zero
    below its diagonal in columns < ilo and rows > ihi; as LAPACK 3.12's search (JAX's CPU
    eig orders triangular matrices' values so): rows with no off-diagonal nonzero among the
    rows and columns still searched, found scanning down, each swapped with the last of those
    (the scan going on above it, passes repeated while one swaps), then columns likewise
    upward, each swapped with the first. One swap or one pass's end per loop step, for the
    whole batch (each matrix at its own state): a dense matrix takes two steps, a triangular
    one ~n."""
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


def _scaling_bound(dtype: Any) -> int:
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
    bound = _scaling_bound(real)
    top = bound + 1
    powers = jnp.asarray(2.0 ** np.arange(-top, top + 1), real)  # 2^e at e + top: exact
    power = lambda e: powers.at[exact_cast(e + top, jnp.int32)].get(mode="promise_in_bounds")  # noqa: E731  2^e, |e| <= top
    block = (ids >= ilo[..., None]) & (ids <= ihi[..., None])  # (..., n)
    to_log2 = float(1 / np.log(2.0))  # a Python float: weakly typed, float32 stays float32

    def scaling(
        c: jax.Array, r: jax.Array, inside: jax.Array, exponent: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(e, f, keep) of rows with column and row norms c, r whose scalings so far are 2^exponent."""
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
    """(b, inverse, d): b = D^-1 P^T a P D as ``gebal`` with job 'B' (see _isolate, _scale),
    b's row i a's row perm[i] scaled, ``inverse`` perm's inverse, D = diag(d) powers of two."""
    perm, inverse, ilo, ihi = _isolate(a)
    b, d = _scale(_permuted(a, perm), ilo, ihi)
    return b, inverse, d


def _permuted(a: jax.Array, perm: jax.Array) -> jax.Array:
    """a[..., perm, :][..., :, perm]: two GatherElements (on each part of a complex ``a``)."""
    if jnp.iscomplexobj(a):
        return lax.complex(_permuted(jnp.real(a), perm), _permuted(jnp.imag(a), perm))
    return mT(take_rows(mT(take_rows(a, perm[..., :, None])), perm[..., :, None]))


def _back_rows(z: jax.Array, inverse: jax.Array, d: jax.Array | None = None) -> jax.Array:
    """``gebak``: P (d * z), z's row i scaled by d[i] (unless ``d`` is None: gees permutes
    only) and moved to row perm[i] (row r read from row inverse[r])."""
    zd = z if d is None else z * d[..., :, None]
    if jnp.iscomplexobj(zd):
        return lax.complex(
            take_rows(jnp.real(zd), inverse[..., :, None]),
            take_rows(jnp.imag(zd), inverse[..., :, None]),
        )
    return take_rows(zd, inverse[..., :, None])


# -- eigenvectors of the Schur form ------------------------------------------------------------
def triangular_eigenvectors(t: jax.Array) -> Parts:
    """Columns x_k with t x_k = t_kk x_k, x_kk = 1, for an upper triangular complex ``t``, as
    (real, imag) parts: back substitution as LAPACK's ``trevc``, a divisor smaller than
    eps |t_kk| raised to it, each column scaled down where an entry would pass a bound (as
    trevc's scaled solves, ``latrs``). On parts, each division is a few real nodes (a complex
    one adds its inf/NaN cases: hundreds per step)."""
    n = t.shape[-1]
    ids = index_range(n)
    rows, cols = ids[:, None], ids[None, :]
    tr, ti = jnp.real(t), jnp.imag(t)
    zero, one = jnp.zeros((), tr.dtype), jnp.ones((), tr.dtype)
    dr, di = (
        jnp.sum(where(rows == cols, p, zero), axis=-2, keepdims=True) for p in (tr, ti)
    )  # (..., 1, n)
    info = jnp.finfo(tr.dtype)
    eps, tiny = float(info.eps), float(info.tiny)
    smin = jnp.maximum(eps * jnp.hypot(dr, di), tiny)
    # entries stay below 2^((maxexp - bound) / 2) (float32 4096): gebak's scalings (below
    # 2^bound) times the vectors and their sums stay finite. Equal diagonal entries (a Jordan
    # block; a zero row and a zero column, which balancing isolates as exact zeros) divide by
    # smin at each row: (1 / smin)^k overflowed, and the vectors came out NaN or 0.
    growth = 2.0 ** ((info.maxexp - _scaling_bound(tr.dtype)) // 2)

    def step(i: Index, x: Parts) -> Parts:
        xr, xi = x
        row_r, row_i = (where(cols > i, at_index(p, i, -2), zero) for p in (tr, ti))
        num_r, num_i = -(row_r @ xr - row_i @ xi), -(row_r @ xi + row_i @ xr)  # -(t[i, i+1:] x)
        er, ei = at_index(dr, i, -1) - dr, at_index(di, i, -1) - di  # t_ii - t_kk per column k
        scale = jnp.maximum(jnp.abs(er), jnp.abs(ei))
        safe = where(scale == 0, one, scale)
        small = scale * jnp.sqrt((er / safe) ** 2 + (ei / safe) ** 2) < smin
        er, ei, scale = where(small, smin, er), where(small, zero, ei), where(small, smin, scale)
        # |num / e| <= sqrt(2) max(|num_r|, |num_i|) / scale: a column whose new entry would
        # pass growth is scaled by growth scale / that first (a vector's scale is free)
        reach = jnp.maximum(jnp.abs(num_r), jnp.abs(num_i))
        bar = growth * scale
        shrink = where(reach > bar, bar / where(reach == 0, one, reach), one)
        num_r, num_i, xr, xi = num_r * shrink, num_i * shrink, xr * shrink, xi * shrink
        er, ei = er / scale, ei / scale  # num / e = num conj(e') / (|e'|^2 scale), e' = e / scale
        q = (er * er + ei * ei) * scale
        new_r, new_i = (num_r * er + num_i * ei) / q, (num_i * er - num_r * ei) / q
        new_r, new_i = (
            where(cols > i, new_r, where(cols == i, one, zero)),
            where(cols > i, new_i, zero),
        )
        return where(rows == i, new_r, xr), where(rows == i, new_i, xi)

    eye = jnp.broadcast_to((rows == cols).astype(tr.dtype), tr.shape)
    return lax.fori_loop(
        0, n, lambda r, x: step(n - 1 - r, x), (eye, jnp.zeros_like(eye))
    )  # a Loop: the steps are large


def _normalized(z: jax.Array, x: Parts) -> jax.Array:
    """The columns of z x scaled to norm 1 with their largest-magnitude entry (the first of
    equals) real positive, from x's parts: the phase and the scale are real products. Each
    column is divided by a power of two near its largest entry first (exact), so no square
    overflows or underflows (gebak's scalings reach 2^bound: float32 2^103)."""
    zr, zi = jnp.real(z), jnp.imag(z)
    vr, vi = zr @ x[0] - zi @ x[1], zr @ x[1] + zi @ x[0]
    size = mT(jnp.maximum(jnp.abs(vr), jnp.abs(vi)))[
        ..., None
    ]  # (..., n, m, 1): a matrix per column
    column_scale = mT(power_of_two_scale(size)[..., 0])  # (..., 1, n)
    vr, vi = vr / column_scale, vi / column_scale
    mag2 = vr * vr + vi * vi
    norm = jnp.sqrt(jnp.sum(mag2, axis=-2, keepdims=True))
    big = jnp.argmax(mag2, axis=-2, keepdims=True)
    lr, li = jnp.take_along_axis(vr, big, axis=-2), jnp.take_along_axis(vi, big, axis=-2)
    size = jnp.hypot(lr, li)
    has = size != 0
    inv = 1 / (where(has, size, 1) * where(norm != 0, norm, 1))
    pr, pi = where(has, lr, 1) * inv, where(has, -li, 0) * inv  # conj(lead) / (|lead| norm)
    return lax.complex(vr * pr - vi * pi, vr * pi + vi * pr)


def eig(a: jax.Array, *, left: bool, right: bool) -> list[jax.Array]:
    """[values, left vectors (u^H a = w u^H) if ``left``, right vectors (a v = w v) if
    ``right``] of a square real or complex ``a``, complex, from its complex Schur form."""
    dtype = jnp.result_type(a.dtype, jnp.complex64)
    n = a.shape[-1]
    # a divided by a power of two (exactly, as svd's) so that no square in the rotations leaves
    # the float range: float32 entries of 1e20 gave NaN values, of 1e-30 values half their size
    scale = power_of_two_scale(jnp.abs(a))
    # balanced as geev (see BALANCE_FACTOR): isolated values stay exact, scaled rows accurate
    b, inverse, d = balance(a / scale) if n > 1 else (a / scale, None, None)
    t, z = complex_schur(b, vectors=left or right)
    ids = index_range(n)
    values = jnp.sum(jnp.where(ids[:, None] == ids[None, :], t, 0), axis=-1) * scale[..., 0]
    out = [values]
    if n == 0:  # no vectors (the substitution's loop cannot even be traced on 0x0)
        return [*out, *[jnp.zeros(a.shape, dtype)] * (left + right)]
    if left:  # right vectors of t^H, reversed into upper triangular form; D^-1 back (gebak)
        flip = lambda m: jnp.flip(m, axis=(-2, -1))  # noqa: E731
        y = triangular_eigenvectors(flip(jnp.conj(mT(t))))
        out.append(
            _normalized(z if d is None else _back_rows(z, inverse, 1 / d), (flip(y[0]), flip(y[1])))
        )
    if right:
        out.append(
            _normalized(z if d is None else _back_rows(z, inverse, d), triangular_eigenvectors(t))
        )
    return out


def _static_size(ctx: LoweringContext, what: str) -> None:
    if jxi.is_symbolic_dim(ctx.aval_in.shape[-1]):
        raise ConversionError(
            f"{what} of a matrix with a symbolic size at {ctx.source_line or '<unknown location>'} is not supported; "
            "give the matrix a static size"
        )


EIG_OPS = (
    "Slice",
    "MatMul",
    "Mul",
    "Add",
    "Sub",
    "Div",
    "Sqrt",
    "Abs",
    "Where",
    "ReduceSum",
    "ReduceMax",
    "ArgMax",
    "Loop",
)


@lowering(
    "eig",
    onnx_ops=(
        *EIG_OPS,
        "Sign",
        "And",
        "Cast",
        "Concat",
        "ConstantOfShape",
        "CumSum",
        "Equal",
        "Expand",
        "Floor",
        "Gather",
        "GatherElements",
        "GatherND",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "IsInf",
        "IsNaN",
        "Less",
        "LessOrEqual",
        "Log",
        "Max",
        "Min",
        "Mod",
        "Neg",
        "Not",
        "Or",
        "Pad",
        "Range",
        "ReduceMin",
        "Reshape",
        "Scan",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
    complex_pairs=True,
)
def _eig(
    ctx: LoweringContext,
    a: ir.Value,
    *,
    compute_left_eigenvectors: bool,
    compute_right_eigenvectors: bool,
    **params: Any,
) -> list[ir.Value]:
    del params  # implementation, enable_eigvec_derivs: choices of JAX's backends and derivatives
    refuse_half_precision(ctx, "eig", "jnp.linalg.eig(a.astype(jnp.float32))")
    _static_size(ctx, "eig")
    fn = lambda a: eig(a, left=compute_left_eigenvectors, right=compute_right_eigenvectors)  # noqa: E731
    return lower_as_jax(ctx, fn, [a])


@lowering(
    "schur",
    onnx_ops=(
        *EIG_OPS,
        "Split",
        "Gather",
        "GatherElements",
        "Pad",
        "Concat",
        "Mod",
        "And",
        "Cast",
        "CumSum",
        "Equal",
        "Expand",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "IsInf",
        "IsNaN",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Neg",
        "Not",
        "Or",
        "Range",
        "ReduceMin",
        "Reshape",
        "Scan",
        "Sign",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
    complex_pairs=True,
)
def _schur(
    ctx: LoweringContext,
    a: ir.Value,
    *,
    compute_schur_vectors: bool,
    sort_eig_vals: bool,
    select_callable: Any,
) -> list[ir.Value]:
    del select_callable  # JAX's CPU lowering ignores it too (and documents it as unused)
    refuse_half_precision(ctx, "schur", "jax.scipy.linalg.schur(a.astype(jnp.float32))")
    _static_size(ctx, "schur")
    if sort_eig_vals:  # JAX's CPU lowering refuses it: NotImplementedError
        raise ConversionError(
            f"schur(sort_eig_vals=True) at {ctx.source_line or '<unknown location>'} is not supported: JAX itself does not "
            "implement the sort of LAPACK's gees; sort the eigenvalues of the result instead"
        )
    schur = complex_schur if jxi.is_complex_dtype(ctx.aval_in.dtype) else real_schur

    def fn(a: jax.Array) -> tuple[jax.Array, ...]:
        # a divided by a power of two first, as eig's (float32 1e20 or 1e-30: NaN without)
        scale = power_of_two_scale(jnp.abs(a))
        a = a / scale
        # gees permutes as eig's balancing (gebal job 'P', no scaling): isolated values exact,
        # a triangular matrix's t itself permuted and z a permutation, as JAX's
        perm, inverse, *_ = _isolate(a) if a.shape[-1] > 1 else (None, None)
        t, z = schur(a if perm is None else _permuted(a, perm))
        z = z if perm is None else _back_rows(z, inverse)
        t = t * scale
        return (t, z) if compute_schur_vectors else (t,)

    return lower_as_jax(ctx, fn, [a])
