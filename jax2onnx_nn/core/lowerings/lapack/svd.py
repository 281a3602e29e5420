"""lax.linalg ``svd`` and ``eigh``: parallel-order Jacobi, exported as ONNX arithmetic.

Both are one-sided Jacobi iterations (``_orthogonal_columns``), written once here as *rounds*: a
round rotates the n/2 disjoint pairs of lines (k, n/2 + k) all at once (elementwise on the two
halves, O(n^2) per round, no matmul), then reseats the lines as a round-robin tournament does (one
Concat of slices), so that n - 1 rounds (one sweep) meet every pair once. The lines are rows (a
column of the matrix is rotated as a row of its transpose): each half and each reseated piece is
then one contiguous block, 1.2x faster at 64x64 than rotating columns. A round is the same graph
every time, so a sweep is a short unrolled chain (n up to ``UNROLL_LIMIT``) or one ONNX ``Loop``
over the rounds, and the sweeps are one ``Loop`` that stops when the matrix has converged (at most
``MAX_SWEEPS``). svd carries the rows as the two halves (1.1x at 64x64: no slicing into halves each
round). Grouping several rounds per Loop iteration measured no faster, nor did keeping svd's matrix
and V^T as two tensors; the rotations' arithmetic, not the Loop, is the cost at 64x64.

- ``svd`` is one-sided Jacobi (Hestenes): the columns of ``a`` (m >= n; ``a^T`` otherwise) are
  rotated until they are mutually orthogonal, ``a V = B`` (as rows of ``[a^T, V^T]`` up to
  ``UNROLL_LIMIT`` columns; above it V is ``a^T U / s`` orthonormalized, see ``_svd_tall``). The
  singular values are B's column norms (of ``a`` divided by a power of two, exactly, so that no
  square leaves the float range; the norms multiplied back), high relative accuracy included (no
  ``a^T a`` is formed), sorted descending as LAPACK's; in float32, where the norms' rounding
  accumulates, they are computed again from B's directions (values only) or, above ``WIDEN_ABOVE``
  columns, from U and V. ``U`` is the Householder QR of the sorted ``B`` with R's signs moved into
  Q: its columns are ``B``'s over their norms, and for zero singular values (rank-deficient input)
  and ``full_matrices`` it completes an orthonormal basis, where ``B / s`` would be NaN.
- ``eigh`` is one-sided Jacobi on the symmetric matrix (scaled by a power of two, as svd's) shifted
  positive definite, ``b = a + 2 max(min(|a|_F, max row sum of |a|), 1) I``: b's singular vectors
  are its eigenvectors, a's, so the columns of ``b V`` over their norms are V, and no V is carried
  (two-sided Jacobi, rotating a's rows, then its transpose's, and V^T's, measured 1.7x (64x64) to 2x
  (16x16) slower). The values are the Rayleigh quotients ``v^T a v`` (accurate to rounding of
  ``|a|``, not of the shift), ascending as LAPACK's. A large float32 matrix is rotated in
  float32 and refined by a second Jacobi on ``V^T a V`` (``eigh``'s ``refine``); a small one (up
  to ``WIDEN_ABOVE``) is rotated in float64: the shifted matrix's columns in float32 left its
  vectors up to ~40x further from LAPACK's than JAX's float32 syevd where two eigenvalues are
  close (2e-4 at 16x16, gap 1.6e-3 of |a|; float64 rotations: 3e-8).

An ``eigh`` whose vectors nothing reads (``eigvalsh``, ``eigh(a)[0]``: ``ctx.used_outputs``) of
a real matrix is not Jacobi at any size: ``syevd.syevd_values``, the tridiagonal form's values
by bisection. Nor is an ``eigh`` of a static size 2..512 (``stedc.STEDC_LIMIT``): it is
``syevd.py``, LAPACK's own path (``steqr`` up to 25 rows, ``stedc.py``'s divide and conquer
above), so its vectors carry JAX's signs; likewise an ``svd`` with vectors whose static sides
are both at least 2, the shorter at most 128 (``gesdd.GESDD_LIMIT``: ``bdsqr`` up to 25,
``bdsdc.py``'s divide and conquer above), is ``gesdd.py`` (Jacobi stays for
``svdvals``, a 1xN row or Nx1 column, a larger short side and symbolic sizes). Signs of the
Jacobi vectors are free (JAX's follow LAPACK's path, docs/linear-algebra.md): ``svd`` gives
``U[:, k] = (a @ Vh[k]) / s[k]`` (a 1xN row: gesdd's sign, ``_one_row_signs``) and a larger
``eigh`` the sign Jacobi's rotations leave. An odd size is padded with one zero column (and
row), which no rotation touches (its pair's inner product is exactly 0); a sweep's reseating
returns every line to its seat, so the padding is line n when the sweeps stop, and is dropped
before sorting.

A symbolic matrix size (``("N", "N")``, ``("B", "N", "N")``) runs the same rounds: the rounds
of a sweep are a ``Loop`` over ``size - 1``, the reseating is one ``Gather`` by an index
vector computed once (slices of unknown size cannot be written), the padding is
``2 * ((n + 1) // 2) - n`` columns, and float32 is rotated in float64 (n may be large). An
svd must know which side is longer: ``("N", 1)`` or ``("N", "N")`` do, ``("N", 4)`` is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.lowerings.lapack import gesdd, stedc, steps, syevd
from jax2onnx_nn.core.lowerings.lapack.householder import power_of_two_scale
from jax2onnx_nn.core.lowerings.lapack.qr import qr
from jax2onnx_nn.core.lowerings.lapack.steps import (
    index_range,
    lower_as_jax,
    refuse_half_precision,
    warn_free_signs,
    where,
)
from jax2onnx_nn.core.registry import lowering

# Jacobi converges quadratically: random Gaussian 64x64 matrices converge in 7-9 sweeps in
# float64; the cap only bounds the loop for inputs that never converge (NaN, inf).
MAX_SWEEPS = 16
# Every rotation rounds: in float32 a 64x64 matrix's column norms come out ~1e-6 of the largest off
# (~500 rotations per column), so above this size (of the rotated side) a float32 eigh is refined
# (eigh's refine; up to it, rotated in float64) and an svd with vectors takes its values from U and
# V (_values_from_vectors); a float32 svdvals of any static size takes them from the rotated
# columns' directions (_values_from_columns); a symbolic size is rotated in float64 and the results
# rounded to float32. A tall or wide svd whose short side is at most this is rotated in float32 as
# the square one is: a column meets as few rotations.
WIDEN_ABOVE = 16


def reseat(even: jax.Array, odd: jax.Array, axis: int = -1) -> jax.Array:
    """The next round's lines (rows or columns along ``axis``) from this round's pairs:
    ``even[k]`` and ``odd[k]`` are pair k; the result holds the next pairs as lines (k, h + k),
    h = n/2.

    Round-robin: players on a circle of n seats, seat 0 fixed, the others move one seat
    each round, seat i meets seat n-1-i; seat k < h is line k, seat n-1-k line h + k.
    So every pair of lines meets once in n - 1 rounds, and the reordering is one Concat of
    slices (a Gather costs onnxruntime ten times more); for a symbolic h it is that Gather,
    the slices' sizes being unknown."""
    h = even.shape[axis]
    if jxi.is_symbolic_dim(h):
        return jnp.take(jnp.concatenate([even, odd], axis=axis), _reseat_order(h), axis=axis)
    if h == 1:
        return jnp.concatenate([even, odd], axis=axis)
    cut = lambda x, lo, hi: lax.slice_in_dim(x, lo, hi, axis=axis)  # noqa: E731
    parts = [
        cut(even, 0, 1),
        cut(odd, 0, 1),
        cut(even, 1, h - 1),
        cut(odd, 1, h),
        cut(even, h - 1, h),
    ]
    return jnp.concatenate([p for p in parts if p.shape[axis]], axis=axis)


def _reseat_order(h: Any) -> jax.Array:
    """``reseat`` as indices into ``[even, odd]`` (2h lines): the Concat's parts in order."""
    seat = index_range(2 * h)
    half = jnp.asarray(h, jnp.int32)
    order = jnp.where(seat >= half, seat + 1, seat - 1)  # even[1 : h-1], then odd[1:]
    order = jnp.where(seat == 2 * half - 1, half - 1, order)  # even[h-1], last
    order = jnp.where(seat == 1, half, order)  # odd[0] (for h = 1 also the last seat)
    return jnp.where(seat == 0, 0, order)


def _rotate_rows(x: jax.Array, c: jax.Array, s: jax.Array) -> jax.Array:
    """Rows (k, h + k) of ``x`` (..., 2h, r) <- (c x_k - s x_h+k, s x_k + c x_h+k), for
    ``c``, ``s`` (..., h, 1), then reseated for the next round. Rows, not columns: each half
    and each piece of the reseating is one contiguous block per matrix, and a per-row factor
    broadcasts along the contiguous axis (columns measured 1.9x slower at 64x64)."""
    h = x.shape[-2] // 2
    even, odd = x[..., :h, :], x[..., h:, :]
    return reseat(c * even - s * odd, s * even + c * odd, axis=-2)


def _reseat_halves(even: jax.Array, odd: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``reseat`` along the rows, kept as the next round's two halves (a carry of halves
    saves the copy that slicing one array into them takes each round)."""
    h = even.shape[-2]
    if jxi.is_symbolic_dim(h):
        rows = reseat(even, odd, axis=-2)
        return rows[..., :h, :], rows[..., h:, :]
    if h == 1:
        return even, odd
    return (
        jnp.concatenate([even[..., :1, :], odd[..., :1, :], even[..., 1 : h - 1, :]], axis=-2),
        jnp.concatenate([odd[..., 1:, :], even[..., h - 1 :, :]], axis=-2),
    )


def _rotation(app: jax.Array, aqq: jax.Array, apq: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(c, s) of the Jacobi rotation that diagonalizes [[app, apq], [apq, aqq]]: the smaller
    angle, t = tan = sign(tau) / (|tau| + sqrt(1 + tau^2)), tau = (aqq - app) / (2 apq)."""
    one = jnp.ones((), app.dtype)
    rotates = apq != 0
    tau = (aqq - app) / (2 * where(rotates, apq, one))
    t = where(tau >= 0, one, -one) / (jnp.abs(tau) + jnp.sqrt(1 + tau * tau))
    t = where(rotates, t, jnp.zeros((), app.dtype))
    c = lax.rsqrt(1 + t * t)
    return c, c * t


def _sweeps(n: int, round_fn: Any, converged: Any, carry: tuple) -> tuple:
    """Sweeps of ``n - 1`` rounds each until ``converged(carry)`` or ``MAX_SWEEPS``."""

    def sweep(carry: tuple) -> tuple:
        if not jxi.is_symbolic_dim(n) and n <= steps.UNROLL_LIMIT:
            for _ in range(n - 1):
                carry = round_fn(carry)
            return carry
        return lax.fori_loop(0, n - 1, lambda _, c: round_fn(c), carry)

    def body(state: tuple) -> tuple:
        count, _, carry = state
        carry = sweep(carry)
        return count + 1, jnp.logical_not(converged(carry)), carry

    def cond(state: tuple) -> jax.Array:
        count, going, _ = state
        return jnp.logical_and(count < MAX_SWEEPS, going)

    return lax.while_loop(cond, body, (jnp.int32(0), jnp.bool_(True), carry))[2]


def _strided(flat: jax.Array, start: Any, step: Any, count: Any, axis: int = -1) -> jax.Array:
    """``flat[start::step][:count]`` along ``axis``: a strided Slice, or a Gather of ``count``
    entries when a size is symbolic (a slice's bounds must then be computed, its stride not)."""
    if any(jxi.is_symbolic_dim(d) for d in (start, step, count)):
        return jnp.take(
            flat,
            index_range(count) * jnp.asarray(step, jnp.int32) + jnp.asarray(start, jnp.int32),
            axis=axis,
        )
    axis = axis % flat.ndim
    return lax.slice_in_dim(flat, start, start + step * (count - 1) + 1, stride=step, axis=axis)


def _diagonal(a: jax.Array) -> jax.Array:
    """The diagonal of (..., n, n) as one Gather of the flattened matrix."""
    n = a.shape[-1]
    flat = jnp.reshape(a, (*a.shape[:-2], n * n))
    if jxi.is_symbolic_dim(n):
        return _strided(flat, 0, n + 1, n)
    return jnp.take(flat, jnp.asarray(np.arange(n) * (n + 1), jnp.int32), axis=-1)


def _number(d: Any, dtype: Any) -> Any:
    """A size as a factor: the int itself, or a symbolic dim's run-time value."""
    return jnp.asarray(d, dtype) if jxi.is_symbolic_dim(d) else d


def _pad_even(a: jax.Array, *, rows: bool) -> jax.Array:
    """``a`` with a zero column (and row) appended when its size is odd (for a symbolic n,
    up to the size ``2 * ((n + 1) // 2)``, whose halves JAX's shape algebra knows equal)."""
    n = a.shape[-1]
    if jxi.is_symbolic_dim(n):
        extra = 2 * ((n + 1) // 2) - n
        a = jnp.concatenate([a, jnp.zeros((*a.shape[:-1], extra), a.dtype)], axis=-1)
        if rows:
            a = jnp.concatenate(
                [a, jnp.zeros((*a.shape[:-2], extra, a.shape[-1]), a.dtype)], axis=-2
            )
        return a
    if n % 2 == 0:
        return a
    pad = [(0, 0)] * (a.ndim - 2) + [(0, 1 if rows else 0), (0, 1)]
    return jnp.pad(a, pad)


def _lower_jacobi(
    ctx: LoweringContext,
    fn: Any,
    a: ir.Value,
    cache_key: tuple,
    *,
    narrow: bool = False,
    widen_small: bool = False,
) -> list[ir.Value]:
    """Lower ``fn`` (svd or eigh on the equation's matrix), in float64 for a large float32 one
    (and for a symbolic size, which may be large) unless ``narrow``; a small one too if
    ``widen_small``."""
    dtype = np.dtype(ctx.aval_in.dtype)
    dims = ctx.aval_in.shape[-2:]
    small = (
        not any(jxi.is_symbolic_dim(d) for d in dims) and max(int(d) for d in dims) <= WIDEN_ABOVE
    )
    if dtype != np.float32 or (small and not widen_small) or narrow:
        return lower_as_jax(ctx, fn, [a], cache_key=cache_key)

    def widened(x: jax.Array) -> tuple[jax.Array, ...]:
        return tuple(o.astype(dtype) for o in fn(x.astype(jnp.float64)))

    with jxi.x64(True):
        return lower_as_jax(ctx, widened, [a], cache_key=(*cache_key, "in float64"))


def _tall(ctx: LoweringContext) -> bool:
    """Whether svd's matrix (..., m, n) has m >= n, which decides whether its columns or its
    rows are rotated: a symbolic size must make that provable (("N", "N"), ("N", 1),
    ("2*N", "N")), else the export is refused."""
    m, n = ctx.aval_in.shape[-2:]
    try:
        return bool(m >= n)
    except jax.errors.InconclusiveDimensionOperation:
        try:
            if bool(n >= m):
                return False
        except jax.errors.InconclusiveDimensionOperation:
            pass
    raise ConversionError(
        f"svd of a ({m}, {n}) matrix at {ctx.source_line or '<unknown location>'} is not "
        "supported: "
        f"whether {m} >= {n} decides which side is rotated and cannot be proven; give one of the "
        "dims a static size, "
        "or the same name to both (a square matrix)"
    )


def _whole_range(ctx: LoweringContext, name: str, subset_by_index: Any, size: Any) -> None:
    """Refuse a ``subset_by_index`` other than the whole ``(0, size)``, as JAX's CPU (and GPU)
    lowering does: only its TPU path computes a subset, so no CPU result exists to match."""
    if subset_by_index is None or tuple(subset_by_index) == (0, size):
        return
    lo, hi = subset_by_index
    raise ConversionError(
        f"{name}(subset_by_index={tuple(subset_by_index)}) at "
        f"{ctx.source_line or '<unknown location>'} is not supported: "
        f"JAX's CPU and GPU {name} refuse it too (only TPU computes a subset); compute them all "
        "and slice "
        f"[..., {lo}:{hi}] (the "
        f"{'eigenvalues ascend' if name == 'eigh' else 'singular values descend'})"
    )


# -- svd: one-sided Jacobi ----------------------------------------------------------------------
def _orthogonal_columns(a: jax.Array, *, with_v: bool) -> jax.Array:
    """One-sided Jacobi on ``a`` (..., m, n), m >= n >= 1: its columns rotated until they are
    mutually orthogonal, B = a V, as (..., m, size), with V (..., size, size) below them when
    ``with_v``; size is n padded to even, the padding (if any) being column n."""
    m = a.shape[-2]
    dtype = a.dtype
    eps = jnp.finfo(dtype).eps
    # the columns of a as rows (see _rotate_rows), V^T to their right: rotating the rows of
    # [a^T, V^T] rotates both
    work = jnp.swapaxes(_pad_even(a, rows=False), -1, -2)
    size = work.shape[-2]
    half = size // 2
    if with_v:
        eye = jnp.eye(size, dtype=dtype)
        work = jnp.concatenate([work, jnp.broadcast_to(eye, (*a.shape[:-2], size, size))], axis=-1)
    columns = (lambda w: w[..., :m]) if with_v else (lambda w: w)

    def round_fn(carry: tuple) -> tuple:
        w_even, w_odd = carry  # the pairs' rows, (k, h + k) as row k of each
        even, odd = columns(w_even), columns(w_odd)
        alpha = jnp.sum(even * even, axis=-1, keepdims=True)
        beta = jnp.sum(odd * odd, axis=-1, keepdims=True)
        gamma = jnp.sum(even * odd, axis=-1, keepdims=True)
        c, s = _rotation(alpha, beta, gamma)
        return _reseat_halves(c * w_even - s * w_odd, s * w_even + c * w_odd)

    def converged(carry: tuple) -> jax.Array:
        x = columns(jnp.concatenate(carry, axis=-2))
        gram = x @ jnp.swapaxes(x, -1, -2)
        d = _diagonal(gram)
        scale = jnp.sqrt(d[..., :, None] * d[..., None, :])
        off = jnp.abs(gram) > (_number(m, dtype) * eps) * scale
        off = where(jnp.eye(size, dtype=bool), False, off)
        return jnp.logical_not(jnp.any(off))

    work = jnp.concatenate(
        _sweeps(size, round_fn, converged, (work[..., :half, :], work[..., half:, :])), axis=-2
    )
    # [B; V]: the columns again; a sweep's reseating ends where it began, so the padding
    # column (if any) is column n again
    return jnp.swapaxes(work, -1, -2)


def _orthonormalized(x: jax.Array, *, full_matrices: bool, unroll: bool | None) -> jax.Array:
    """Q of the Householder QR of ``x`` (..., m, n) with R's signs moved into it: the columns
    of ``x`` over their norms where they are orthogonal, an orthonormal completion where they
    are zero (and beyond n for ``full_matrices``)."""
    n = x.shape[-1]
    q, r = qr(x, full_matrices=full_matrices, unroll=unroll)
    one = jnp.ones((), x.dtype)
    sign = where(_diagonal(r[..., :n, :n]) < 0, -one, one)
    return (
        q
        * jnp.concatenate([sign, jnp.ones((*x.shape[:-2], q.shape[-1] - n), x.dtype)], axis=-1)[
            ..., None, :
        ]
    )


def _svd_tall(a: jax.Array, *, compute_uv: bool, full_matrices: bool) -> tuple[jax.Array, ...]:
    """(s, U, V) of ``a`` (..., m, n) with m >= n, n >= 1; U (m, m or n), V (n, n) as columns.

    Up to ``UNROLL_LIMIT`` columns (and for a symbolic n) V is carried through the rotations;
    above it, computed from U: a V = U S, so V = a^T U / s, orthonormalized as U is (a small
    singular value's column comes out to its accuracy in LAPACK's, eps |a| / gap, the gap
    below s_k; one under eps s_max is noise, replaced by the completion). Carrying V doubles
    the rotated rows; the two blocked QRs cost less at 64x64 (float32 batch 8: 155 -> 109 ms
    in onnxruntime), but the per-column QR Loops more at 4x4 and 16x16 (1.2 -> 1.7 ms,
    9 -> 10 ms), where the unrolled QRs would double the graph for the same time."""
    m, n = a.shape[-2], a.shape[-1]
    dtype = a.dtype
    scale = power_of_two_scale(a)
    a = a / scale
    carry_v = compute_uv and (jxi.is_symbolic_dim(n) or n <= steps.UNROLL_LIMIT)
    work = _orthogonal_columns(a, with_v=carry_v)
    b = work[..., :m, :n]
    norms = jnp.sqrt(jnp.sum(b * b, axis=-2))
    if not compute_uv:
        if (
            dtype == jnp.float32 and not jxi.is_symbolic_dim(n) and n > 1
        ):  # (one column: its norm is exact)
            norms = _values_from_columns(a, b, norms)
        return (-jnp.sort(-norms, axis=-1) * scale[..., 0],)
    order_desc = jnp.argsort(-norms, axis=-1)
    s = jnp.take_along_axis(norms, order_desc, axis=-1)
    b = jnp.take_along_axis(
        b, jnp.broadcast_to(order_desc[..., None, :], (*a.shape[:-2], m, n)), axis=-1
    )
    # B's columns over their norms (the same Q): a column of a value far below the largest
    # (1e-22 of it in float32) has squares under the float range, on which the Householder
    # steps lose U's orthogonality (0.15 for columns scaled 1e-20..1e20, 8x8); one whose norm is
    # 0 there is zero (its U column: the completion)
    unit = where(s > 0, 1 / where(s > 0, s, jnp.ones((), dtype)), jnp.zeros((), dtype))
    u = _orthonormalized(
        b * unit[..., None, :], full_matrices=full_matrices, unroll=None if not carry_v else False
    )  # a Loop: 6 nodes, not ~60 n
    if carry_v:
        v = jnp.take_along_axis(
            work[..., m : m + n, :n],
            jnp.broadcast_to(order_desc[..., None, :], (*a.shape[:-2], n, n)),
            axis=-1,
        )
    else:
        signal = s > jnp.finfo(dtype).eps * s[..., :1]
        inv_s = where(signal, 1 / where(signal, s, jnp.ones((), dtype)), jnp.zeros((), dtype))
        v = _orthonormalized(
            (jnp.swapaxes(a, -1, -2) @ u[..., :n]) * inv_s[..., None, :],
            full_matrices=False,
            unroll=None,
        )
        if dtype == jnp.float32:
            s, u, v = _values_from_vectors(a, u, v)
    return s * scale[..., 0], u, v


def _values_from_columns(a: jax.Array, b: jax.Array, norms: jax.Array) -> jax.Array:
    """The singular values as ``|a^T b_k| / |b_k|``, ``b_k`` the rotated columns (a left
    singular vector each, times its value): float32 rotations leave the column norms ~1e-6
    (of the largest) off at 64x64, rounding accumulated over ~500 rotations per column, while
    their directions are as close to the singular vectors, and this quotient's error is
    second order in theirs (a Rayleigh quotient of ``a a^T``); its error is relative to the
    largest value (as LAPACK's gesdd's), not to each. Gaussian, float32 batch 8, against
    float64 LAPACK (linalg_bench --accuracy), of the largest value: 64x64 1.4e-7, where
    rotating in float64 gave 2.9e-8 (and JAX's float32 gesdd ~5e-7) in 0.64x the onnxruntime
    time and 48 nodes instead of 52; 16x16 1.1e-6 -> 8.6e-8, 8x8 4.9e-7 -> 1.4e-7, 64x8
    5.4e-7 -> 1.6e-7 (the column norms -> this), for 7 nodes more and the same time.

    The smaller of this and the column norm is taken: a value below ~eps^(2/3) of the largest
    has a column whose direction is mostly rounding (eps |a| against its own small norm), and
    ``a^T`` magnifies the part along the large values' vectors, up to the largest value itself
    (rank 1 of ones, 17x17: a second value of 17 instead of 0; columns scaled 1e-20..1e20:
    errors of 10-50% of the largest); the quotient over-estimates there, the norm does not."""
    at_b = jnp.swapaxes(a, -1, -2) @ b
    quotient = jnp.sqrt(jnp.sum(at_b * at_b, axis=-2)) / where(
        norms > 0, norms, jnp.ones((), a.dtype)
    )
    return jnp.minimum(quotient, norms)


def _values_from_vectors(
    a: jax.Array, u: jax.Array, v: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(s, U, V) with s = |u_k^T a v_k|, sorted descending, u_k's sign made s's: float32
    rotations leave the column norms ~5e-6 (of the largest) off at 64x64, rounding
    accumulated over ~500 rotations per column, while U and V (from a QR each) are ~6e-7
    from orthonormal and the bilinear form's error is second order in theirs: values
    5.1e-6 -> 1.9e-7, U s Vh 5.2e-6 -> 1.1e-6 (64x64 Gaussian, float32 batch 8, against
    float64 LAPACK), where rotating in float64 took 1.5x the time."""
    n = v.shape[-1]
    d = jnp.sum(u[..., :n] * (a @ v), axis=-2)
    one = jnp.ones((), a.dtype)
    u_n = u[..., :n] * where(d < 0, -one, one)[..., None, :]
    s = jnp.abs(d)
    order = jnp.argsort(-s, axis=-1)
    pick = lambda x: jnp.take_along_axis(x, jnp.broadcast_to(order[..., None, :], x.shape), axis=-1)  # noqa: E731
    return (
        jnp.take_along_axis(s, order, axis=-1),
        jnp.concatenate([pick(u_n), u[..., n:]], axis=-1),
        pick(v),
    )


def svd(
    a: jax.Array, *, full_matrices: bool, compute_uv: bool, tall: bool | None = None
) -> tuple[jax.Array, ...]:
    """``lax.linalg.svd``: (s,) or (s, u, vh), s descending; u (..., m, m or k), vh (k or n, n);
    ``tall``: whether m >= n (given for symbolic sizes)."""
    m, n = a.shape[-2], a.shape[-1]
    tall = m >= n if tall is None else tall
    k = n if tall else m
    batch = a.shape[:-2]
    if not jxi.is_symbolic_dim(k) and k == 0:
        s = jnp.zeros((*batch, 0), a.dtype)
        if not compute_uv:
            return (s,)
        u = jnp.broadcast_to(
            jnp.eye(m, m if full_matrices else 0, dtype=a.dtype),
            (*batch, m, m if full_matrices else 0),
        )
        vh = jnp.broadcast_to(
            jnp.eye(n if full_matrices else 0, n, dtype=a.dtype),
            (*batch, n if full_matrices else 0, n),
        )
        return s, u, vh
    if tall:
        result = _svd_tall(a, compute_uv=compute_uv, full_matrices=full_matrices)
        return result if not compute_uv else (result[0], result[1], jnp.swapaxes(result[2], -1, -2))
    result = _svd_tall(jnp.swapaxes(a, -1, -2), compute_uv=compute_uv, full_matrices=full_matrices)
    if not compute_uv:
        return result
    s, u, vh = result[0], result[2], jnp.swapaxes(result[1], -1, -2)
    if not jxi.is_symbolic_dim(m) and m == 1:
        u, vh = _one_row_signs(a, u, vh)
    return s, u, vh


def _one_row_signs(a: jax.Array, u: jax.Array, vh: jax.Array) -> tuple[jax.Array, jax.Array]:
    """u and vh of a row ``a`` (..., 1, n) with gesdd's signs: its LQ (``dgelqf``: one
    ``dlarfg`` on the row, beta = -sign(a_0) |a|, or a_0 itself when the rest is zero) leaves
    the 1x1 bidiagonal beta, and ``dbdsdc`` puts its sign on u (u = sign(beta)), so vh's
    first row is a / beta; vh's other rows are the reflector's, as ours."""
    head = a[..., :1, :1]
    rest = jnp.sum(jnp.abs(a[..., :, 1:]), axis=-1, keepdims=True) != 0
    one = jnp.ones((), a.dtype)
    sign = where(rest, where(head >= 0, -one, one), where(head >= 0, one, -one))  # sign(beta)
    first = index_range(vh.shape[-2])[:, None] == 0
    return u * sign, where(first, vh * sign, vh)


@lowering(
    "svd",
    onnx_ops=(
        "Slice",
        "Mul",
        "Sub",
        "Add",
        "Div",
        "Sqrt",
        "ReduceSum",
        "Concat",
        "Gather",
        "Where",
        "Loop",
        "TopK",
        "GatherElements",
        "MatMul",
        "Abs",
        "And",
        "Cast",
        "ConstantOfShape",
        "CumSum",
        "Equal",
        "Expand",
        "GatherND",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "If",
        "IsInf",
        "IsNaN",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Mod",
        "Neg",
        "Not",
        "Or",
        "Pad",
        "Range",
        "ReduceMax",
        "ReduceMin",
        "Reshape",
        "Scan",
        "Split",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
)
def _svd(
    ctx: LoweringContext,
    a: ir.Value,
    *,
    full_matrices: bool,
    compute_uv: bool,
    subset_by_index: Any = None,
    **params: Any,
) -> Sequence[ir.Value | None]:
    algorithm = params.pop("algorithm", None)
    del params  # a backend choice of GPU solvers that CPU ignores
    m, n = ctx.aval_in.shape[-2:]
    refuse_half_precision(ctx, "svd", "jnp.linalg.svd(a.astype(jnp.float32))")
    tall = _tall(ctx)
    _whole_range(ctx, "svd", subset_by_index, n if tall else m)
    if compute_uv and not (ctx.used_outputs[1] or ctx.used_outputs[2]):
        # nothing reads U or V^T (``jnp.linalg.svd(a)[1]``): the values alone
        fn = partial(svd, full_matrices=full_matrices, compute_uv=False, tall=tall)
        narrow = not jxi.is_symbolic_dim(n if tall else m)
        (values,) = _lower_jacobi(ctx, fn, a, ("svd", False, False), narrow=narrow)
        return [values, None, None]
    if compute_uv and _follows_gesdd(ctx, algorithm):
        # LAPACK's own path (gebrd, bdsqr, ormbr): the vectors carry gesdd's signs
        return lower_as_jax(
            ctx,
            partial(gesdd.gesdd, full_matrices=full_matrices),
            [a],
            cache_key=("gesdd", full_matrices),
        )
    fn = partial(svd, full_matrices=full_matrices, compute_uv=compute_uv, tall=tall)
    short = n if tall else m
    # float32 rotations for a static short side: up to WIDEN_ABOVE a column meets few rotations
    # (64x8 as accurate as 8x8); above it the values come from U and V (with vectors) or from
    # the rotated columns' directions (without), see _svd_tall
    narrow = not jxi.is_symbolic_dim(short)
    if compute_uv and (jxi.is_symbolic_dim(short) or short >= 2):
        why = _why_jacobi(ctx, "gesdd", "shorter side", gesdd.GESDD_LIMIT, algorithm)
        warn_free_signs(ctx, "svd", why)
    return _lower_jacobi(
        ctx, fn, a, ("svd", full_matrices and compute_uv, compute_uv), narrow=narrow
    )


def _why_jacobi(ctx: LoweringContext, routine: str, side: str, limit: int, algorithm: Any) -> str:
    """Why a rule whose vectors something reads took one-sided Jacobi, not ``routine``'s."""
    if getattr(algorithm, "name", "DEFAULT") not in ("DEFAULT", "DIVIDE_AND_CONQUER"):
        return f"algorithm={algorithm.name} (LAPACK's gesvd) is computed by one-sided Jacobi"
    symbolic = any(jxi.is_symbolic_dim(d) for d in ctx.aval_in.shape[-2:])
    what = "a symbolic size" if symbolic else f"a {side} above {limit}"
    return (
        f"{what} is computed by one-sided Jacobi ({routine}'s path: a static {side} 2 to {limit})"
    )


def _follows_gesdd(ctx: LoweringContext, algorithm: Any) -> bool:
    """Whether ``svd`` with vectors is lowered as ``gesdd.py`` (LAPACK's path, JAX's signs):
    static sides both at least 2, the shorter up to gesdd.GESDD_LIMIT, a real matrix, and the
    algorithm JAX's CPU runs as gesdd (default or divide and conquer; QR is gesvd there)."""
    dims = ctx.aval_in.shape[-2:]
    if any(jxi.is_symbolic_dim(d) for d in dims) or jxi.is_complex_dtype(ctx.aval_in.dtype):
        return False
    if algorithm is not None and getattr(algorithm, "name", "") not in (
        "DEFAULT",
        "DIVIDE_AND_CONQUER",
    ):
        return False
    return min(int(d) for d in dims) >= 2 and min(int(d) for d in dims) <= gesdd.GESDD_LIMIT


# -- eigh: one-sided Jacobi -----------------------------------------------------------------------
def _shifted_jacobi(a: jax.Array) -> jax.Array:
    """The eigenvectors (columns, unsorted) of the symmetric ``a`` (..., n, n), n even or not,
    entries of at most 2^SCALE_STEP: one-sided Jacobi on b = a + shift I, shifted positive
    definite (shift >= 2 |a|_2, so b's eigenvalues are at least |a|_2): its singular vectors
    are its eigenvectors, which are a's; one-sided Jacobi makes b's columns orthogonal,
    b V = V diag(lambda + shift), whose columns over their norms are V itself (no V to carry,
    no transposed matrix to rotate). The shift is twice a bound of |a|_2, the smaller of |a|_F
    and the largest row sum of |a| (Gershgorin's, tight for a nearly diagonal matrix): the
    rotations' rounding is relative to it."""
    n = a.shape[-1]
    frobenius = jnp.sqrt(jnp.sum(a * a, axis=(-2, -1), keepdims=True))
    rows = jnp.max(jnp.sum(jnp.abs(a), axis=-1, keepdims=True), axis=-2, keepdims=True)
    shift = 2 * jnp.maximum(jnp.minimum(frobenius, rows), 1)
    w = _orthogonal_columns(a + shift * jnp.eye(n, dtype=a.dtype), with_v=False)[..., :n]
    return w / jnp.sqrt(jnp.sum(w * w, axis=-2, keepdims=True))


def eigh(a: jax.Array, *, lower: bool, refine: bool = False) -> tuple[jax.Array, jax.Array]:
    """(vectors, values) of the symmetric matrix in ``a``'s lower (or upper) triangle, values
    ascending as LAPACK's ``syevd`` gives them, vectors as columns (signs are free).

    ``refine``: for float32 rotations of a large matrix, whose rounding accumulates (64x64
    Gaussian: V w V^T 1.7e-5 of max |a| off): Jacobi again on V^T a V, nearly diagonal (its
    Gershgorin shift small, two or three sweeps), V times its vectors, one Newton-Schulz
    step. Through onnxruntime, float32 64x64, against float64 LAPACK: values 3e-7, V w V^T
    1e-6 on Gaussian matrices, up to 5.4e-6 on two clusters of 32 eigenvalues 1e-6 apart;
    V^T V 4e-7 from I; float64 rotations (without refine) reach 4e-8 / 5e-7 at 1.4x the time."""
    n = a.shape[-1]
    rows = index_range(n) if jxi.is_symbolic_dim(n) else np.arange(n)
    keep = rows[:, None] >= rows[None, :] if lower else rows[:, None] <= rows[None, :]
    a = where(jnp.asarray(keep), a, jnp.swapaxes(a, -1, -2))
    if not jxi.is_symbolic_dim(n) and n <= 1:
        return jnp.ones_like(a), jnp.sum(a, axis=-1)
    # scaled exactly by a power of two as LAPACK's syev scales: b's squares neither overflow
    # nor underflow (float32 entries of 1e30 or 1e-30)
    big = power_of_two_scale(a)
    a = a / big
    vectors = _shifted_jacobi(a)
    if refine:
        c = jnp.swapaxes(vectors, -1, -2) @ a @ vectors
        vectors = vectors @ _shifted_jacobi((c + jnp.swapaxes(c, -1, -2)) / 2)
        # one Newton-Schulz step, V (3 I - V^T V) / 2: orthonormal to rounding again
        vectors = 1.5 * vectors - 0.5 * (vectors @ (jnp.swapaxes(vectors, -1, -2) @ vectors))
    # the values as Rayleigh quotients v^T a v: accurate to rounding of |a| (not of the shift)
    values = jnp.sum(vectors * (a @ vectors), axis=-2) * big[..., 0]
    ascending = jnp.argsort(values, axis=-1)
    values = jnp.take_along_axis(values, ascending, axis=-1)
    vectors = jnp.take_along_axis(
        vectors, jnp.broadcast_to(ascending[..., None, :], (*a.shape[:-2], n, n)), axis=-1
    )
    return vectors, values


@lowering(
    "eigh",
    onnx_ops=(
        "Slice",
        "Mul",
        "Sub",
        "Add",
        "Div",
        "Sqrt",
        "Abs",
        "Max",
        "ReduceMax",
        "ReduceProd",
        "ReduceSum",
        "MatMul",
        "Concat",
        "Gather",
        "Where",
        "Loop",
        "TopK",
        "GatherElements",
        "And",
        "ArgMax",
        "Or",
        "Split",
        "Xor",
        "Cast",
        "ConstantOfShape",
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
        "Min",
        "Mod",
        "Neg",
        "Not",
        "Pad",
        "Range",
        "ReduceMin",
        "Reshape",
        "Scan",
        "Shape",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
    ),
)
def _eigh(
    ctx: LoweringContext,
    a: ir.Value,
    *,
    lower: bool,
    sort_eigenvalues: bool,
    subset_by_index: Any = None,
    **params: Any,
) -> Sequence[ir.Value | None]:
    del (
        params,
        sort_eigenvalues,
    )  # algorithm: a backend choice; unsorted LAPACK values are ascending too
    refuse_half_precision(ctx, "eigh", "jnp.linalg.eigh(a.astype(jnp.float32))")
    _whole_range(ctx, "eigh", subset_by_index, ctx.aval_in.shape[-1])
    n = ctx.aval_in.shape[-1]
    real = not jxi.is_complex_dtype(ctx.aval_in.dtype)
    if not ctx.used_outputs[0] and (jxi.is_symbolic_dim(n) or n >= 2) and real:
        # nothing reads the vectors (eigvalsh): syevd's values-only path (sytd2, then
        # bisection), at any size
        values = lower_as_jax(
            ctx, partial(syevd.syevd_values, lower=lower), [a], cache_key=("syevd_values", lower)
        )
        return [None, *values]
    if not jxi.is_symbolic_dim(n) and 2 <= n <= stedc.STEDC_LIMIT and real:
        # LAPACK's own path (sytd2, steqr or stedc, ormtr): the vectors carry syevd's signs
        return lower_as_jax(ctx, partial(syevd.syevd, lower=lower), [a], cache_key=("syevd", lower))
    # a large float32 matrix: float32 rotations refined (eigh's refine) where the static size
    # allows; a small one rotated in float64 (vectors of close eigenvalues, module docstring):
    # 16x16 batch of 8 ~1.5x the CPU time, 4x4 about the same, +9 to +13 nodes
    refine = (
        np.dtype(ctx.aval_in.dtype) == np.float32 and not jxi.is_symbolic_dim(n) and n > WIDEN_ABOVE
    )
    if ctx.used_outputs[0] and (jxi.is_symbolic_dim(n) or n >= 2):
        warn_free_signs(ctx, "eigh", _why_jacobi(ctx, "syevd", "size", stedc.STEDC_LIMIT, None))
    return _lower_jacobi(
        ctx,
        partial(eigh, lower=lower, refine=refine),
        a,
        ("eigh", lower),
        narrow=refine,
        widen_small=True,
    )
