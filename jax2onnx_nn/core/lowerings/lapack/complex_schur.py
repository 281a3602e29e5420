"""The complex Schur form: Hessenberg reduction + shifted QR with Givens rotations (``zhseqr``),
chased in windows above ``CHASE_WINDOW`` rows."""

from __future__ import annotations

from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lowerings.lapack.hessenberg import hessenberg_q
from jax2onnx_nn.core.lowerings.lapack.steps import Index, index_range, mT, where

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


def cmul(a: Parts, b: Parts) -> Parts:
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
    """The diagonal, subdiagonal (h[i, i-1] at i, 0 at 0) and superdiagonal (h[i, i+1] at i, 0 at
    n-1) of h (..., n, 2, n) (see _rotate), n >= 2, as (real, imag) parts (..., n): h read as one
    line of 2 n^2 entries, where h[i, p, j] is entry 2 n i + n p + j, so each one is a slice with
    stride 2 n + 1."""
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
    product = cmul(a12, a21)
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


def schur_grid(a: jax.Array) -> tuple[int, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(n, ids, rows, cols, eye) of a Schur form of ``a`` (..., n, n): the size, its indices as
    a vector, column and row, and the identity per matrix (z of a 0x0 or 1x1 matrix)."""
    n = int(a.shape[-1])
    ids = index_range(n)
    rows, cols = ids[:, None], ids[None, :]
    return n, ids, rows, cols, jnp.broadcast_to((rows == cols).astype(a.dtype), a.shape)


def complex_schur(a: jax.Array, *, vectors: bool = True) -> tuple[jax.Array, jax.Array | None]:
    """(t, z) complex with a = z t z^H (z None unless ``vectors``), t upper triangular and z
    unitary, for a real or complex ``a`` (..., n, n) of static size: Hessenberg form (Householder
    for a real matrix, Givens rotations for a complex one), then implicit single-shift QR sweeps
    (Wilkinson shift from the active block's trailing 2x2) with deflation where a subdiagonal entry
    falls below eps * (|h[l, l]| + |h[l-1, l-1]|), LAPACK's ``zlahqr`` test."""
    n, ids, rows, cols, eye = schur_grid(a)
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
        h, q = hessenberg_q(a, unroll=False)
        hz: tuple[jax.Array, ...] = (parts(h), parts(q)) if vectors else (parts(h),)
    else:
        # Hessenberg form: zero h[i, j] (i > j + 1) against h[i-1, j], bottom up per column
        hz = (parts(a), parts(eye)) if vectors else (parts(a),)
        pairs = np.array(
            [(i, j) for j in range(n - 2) for i in range(n - 1, j + 1, -1)], np.int32
        ).reshape(-1, 2)
        table = jnp.asarray(pairs)

        def reduce(t: Any, hz: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
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
    u_eye = parts(schur_grid(jnp.zeros((*a.shape[:-2], size, size), a.dtype))[-1])

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
            x = cast(
                Parts,
                tuple(
                    picked[..., i : i + 1, :] - where(first, sh, zero) for i, sh in enumerate(shift)
                ),
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
