"""lax.linalg ``qr``, ``geqrf``, ``householder_product`` (orgqr), ``ormqr`` and ``geqp3``: the
rules over the reflectors of ``householder.py`` (blocked for a large square ``qr``)."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.lowerings.lapack import steps
from jax2onnx_nn.core.lowerings.lapack.householder import (
    apply_reflectors,
    geqp3,
    geqrf,
    householder_product,
    power_of_two_scale,
    scaled,
    upper,
)
from jax2onnx_nn.core.lowerings.lapack.steps import (
    index_range,
    lower_as_jax,
    mT,
    refuse_half_precision,
    rows_of_blocks,
    sum_keepdims,
    where,
)
from jax2onnx_nn.core.registry import lowering
from jax2onnx_nn.core.value_range import value_range


def qr(
    a: jax.Array, *, full_matrices: bool, pivoting: bool = False, unroll: bool | None = None
) -> tuple[jax.Array, ...]:
    """(q, r) with q (..., m, m) and r (..., m, n) when ``full_matrices``, else (m, k), (k, n);
    with ``pivoting`` also the column permutation p (a[..., p] = q r), zeros when a is empty
    (as JAX). Without pivoting, a static size up to ``UNROLL_LIMIT`` runs on shrinking
    blocks (``_qr_unrolled``), a larger static square one blocked (``_qr_blocked``);
    otherwise ``geqrf`` and ``householder_product``."""
    m, n = a.shape[-2], a.shape[-1]
    k = m if m is n else jxi.min_dim(m, n)
    static = not any(jxi.is_symbolic_dim(d) for d in a.shape[-2:])
    if (
        not pivoting
        and unroll is not False
        and static
        and 0 < k
        and max(m, n) <= steps.UNROLL_LIMIT
    ):
        return _qr_unrolled(a, full_matrices=full_matrices)
    if not pivoting and unroll is not False and static and m == n and n > steps.UNROLL_LIMIT:
        return _qr_blocked(a)
    if pivoting:
        packed, perm, taus = geqp3(a, unroll=unroll)
        if not jxi.is_symbolic_dim(k) and k == 0:
            perm = jnp.zeros_like(perm)
    else:
        packed, taus = geqrf(a, unroll=unroll)
    r = where(index_range(m)[:, None] <= index_range(n)[None, :], packed, jnp.zeros((), a.dtype))
    columns, r = (m, r) if full_matrices else (k, r[..., :k, :])
    q = householder_product(packed, taus, columns, unroll=unroll)
    return (q, r, perm) if pivoting else (q, r)


def _reflect(block: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One Householder step on ``block`` (..., r, c), r >= 2: ``dlarfg``'s reflector of its
    first column (v = [1; w], as ``reflector``) applied to it. Returns (R's row (..., 1, c),
    w (..., r-1, 1), tau (..., 1, 1), the trailing block (..., r-1, c-1))."""
    x = block[..., :, :1]
    alpha, tail = x[..., :1, :], x[..., 1:, :]
    squares = x * x
    trivial = sum_keepdims(squares[..., 1:, :], -2) == 0
    norm = jnp.sqrt(sum_keepdims(squares, -2))
    beta = where(alpha >= 0, -norm, norm)
    tau = where(trivial, jnp.zeros((), x.dtype), (beta - alpha) / beta)
    w = tail / where(trivial, jnp.ones((), x.dtype), alpha - beta)
    head = where(trivial, alpha, beta)
    if block.shape[-1] == 1:
        return head, w, tau, block[..., 1:, 1:]
    top, bottom = block[..., :1, 1:], block[..., 1:, 1:]
    scaled = tau * (top + mT(w) @ bottom)  # tau v^T (the block's other columns)
    return jnp.concatenate([head, top - scaled], axis=-1), w, tau, bottom - w * scaled


def _qr_blocked(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``qr`` of a square ``a`` of static size n > BLOCK: a Loop over blocks of b columns, each
    trip b unrolled ``_reflect`` steps on the trailing block (padded back with zero rows and
    columns, which reflect to nothing) and the same reflectors applied to Q from the right
    (Q <- Q H_j, forward), Q's columns rotated so the trip's first column comes first (the
    columns done sit where the reflectors are 0). ``a`` is padded with zeros to a multiple of
    b: its factors are [[Q, 0], [0, I]] and [[R, 0], [0, 0]]. A NaN input makes all of Q NaN
    (LAPACK's Q keeps some entries; so did none of the per-column Loop's), R as LAPACK's."""
    n = int(a.shape[-1])
    blocks = -(-n // steps.BLOCK)
    b = -(-n // blocks)
    size = blocks * b
    batch = [(0, 0, 0)] * (a.ndim - 2)
    zero = jnp.zeros((), a.dtype)
    a = lax.pad(a, zero, [*batch, (0, size - n, 0), (0, size - n, 0)])

    def trip(carry: tuple, _: Any) -> tuple:
        block, q = carry
        rows = []
        for i in range(b):
            row, w, tau, block = _reflect(block)
            rows.append(lax.pad(row, zero, [*batch, (0, 0, 0), (0, i, 0)]))
            first, rest = q[..., :, i : i + 1], q[..., :, i + 1 :]
            t = tau * (first + rest @ w)  # tau Q[:, i:] v
            q = jnp.concatenate(
                [*([q[..., :, :i]] if i else []), first - t, rest - t * mT(w)], axis=-1
            )
        block = lax.pad(block, zero, [*batch, (0, b, 0), (0, b, 0)])
        return (block, jnp.concatenate([q[..., :, b:], q[..., :, :b]], axis=-1)), jnp.concatenate(
            rows, axis=-2
        )

    eye = jnp.broadcast_to(jnp.eye(size, dtype=a.dtype), a.shape)
    stacked: jax.Array
    (_, q), stacked = lax.scan(trip, (a, eye), length=blocks)  # (blocks, ..., b, size)
    rows = jnp.moveaxis(stacked, 0, -3).reshape((*a.shape[:-2], size, size, 1))
    # row j holds R[j, j:]: shift it right by j (one Gather), zero left of the diagonal
    ids = np.arange(size)
    r = rows_of_blocks(rows, (ids[None, :] - ids[:, None]) % size).reshape(a.shape)
    r = where(index_range(size)[:, None] <= index_range(size)[None, :], r, zero)
    return q[..., :n, :n], r[..., :n, :n]


def _qr_unrolled(a: jax.Array, *, full_matrices: bool) -> tuple[jax.Array, jax.Array]:
    """``qr`` of a small static ``a`` (..., m, n) on shrinking blocks, no masks: step j
    reflects the trailing block a[j:, j:] (``dlarfg``'s reflector, as ``reflector``) and
    leaves R's row j; Q is accumulated backward on the growing block Q[j:, j:] (``orgqr``).
    The reflector v = [1; w] is never formed: v^T X = X's first row + w^T X's other rows."""
    m, n = int(a.shape[-2]), int(a.shape[-1])
    k = min(m, n)
    batch = [(0, 0, 0)] * (a.ndim - 2)
    zero = jnp.zeros((), a.dtype)
    block, rows, reflectors = a, [], []
    for _ in range(k):
        if block.shape[-2] == 1:  # no tail: no reflection (tau = 0), as dlarfg on one entry
            rows.append(block)
            break
        row, w, tau, block = _reflect(block)
        rows.append(row)
        reflectors.append((w, tau))
    # R: row j starts at column j
    r = jnp.concatenate(
        [lax.pad(row, zero, [*batch, (0, 0, 0), (j, 0, 0)]) for j, row in enumerate(rows)], axis=-2
    )
    if full_matrices and m > k:
        r = lax.pad(r, zero, [*batch, (0, m - k, 0), (0, 0, 0)])
    columns = m if full_matrices else k
    # Q[j:, j:] = H_j diag(1, Q[j+1:, j+1:]), from the identity below the last reflector
    q = None
    if columns > len(reflectors):
        size = m - len(reflectors)
        eye = np.eye(size, columns - len(reflectors))
        q = jnp.broadcast_to(jnp.asarray(eye, a.dtype), (*a.shape[:-2], *eye.shape))
    for w, tau in reversed(reflectors):
        if q is None:
            top, bottom = 1 - tau, -tau * w
        else:
            scaled = tau * (mT(w) @ q)  # tau v^T diag(1, q), its columns past the first
            top = jnp.concatenate([1 - tau, -scaled], axis=-1)
            bottom = jnp.concatenate([-tau * w, q - w * scaled], axis=-1)
        q = jnp.concatenate([top, bottom], axis=-2)
    assert q is not None  # k > 0: a reflector, or the identity below none
    return q, r


@lowering(
    "geqrf",
    onnx_ops=(
        "Slice",
        "MatMul",
        "Mul",
        "Sub",
        "Div",
        "Sqrt",
        "Where",
        "Loop",
        "Abs",
        "Add",
        "Cast",
        "Equal",
        "Expand",
        "Gather",
        "Greater",
        "GreaterOrEqual",
        "IsNaN",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Neg",
        "Or",
        "Range",
        "ReduceMax",
        "ReduceSum",
        "Scan",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
)
def _geqrf(ctx: LoweringContext, a: ir.Value, **params: Any) -> list[ir.Value]:
    del params
    refuse_half_precision(ctx, "geqrf", "jnp.linalg.qr(a.astype(jnp.float32))")
    return lower_as_jax(ctx, scaled(geqrf, upper), [a])


@lowering(
    "householder_product",
    onnx_ops=(
        "Split",
        "Slice",
        "MatMul",
        "Mul",
        "Sub",
        "Where",
        "Loop",
        "Cast",
        "Equal",
        "Expand",
        "Greater",
        "Transpose",
        "Unsqueeze",
        "Add",
        "Less",
        "Max",
        "Min",
        "Range",
        "Reshape",
        "Scan",
        "Squeeze",
    ),
)
def _householder_product(
    ctx: LoweringContext, a: ir.Value, taus: ir.Value, **params: Any
) -> list[ir.Value]:
    del params
    refuse_half_precision(ctx, "householder_product", "jnp.linalg.qr(a.astype(jnp.float32))")
    return lower_as_jax(ctx, householder_product, [a, taus])


@lowering(
    "ormqr",
    onnx_ops=(
        "Split",
        "MatMul",
        "Mul",
        "Sub",
        "Where",
        "Transpose",
        "Loop",
        "Slice",
        "Add",
        "And",
        "Cast",
        "Equal",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Not",
        "Range",
        "Scan",
        "Squeeze",
        "Unsqueeze",
    ),
)
def _ormqr(
    ctx: LoweringContext, a: ir.Value, taus: ir.Value, c: ir.Value, *, left: bool, transpose: bool
) -> list[ir.Value]:
    refuse_half_precision(
        ctx,
        "ormqr",
        "lax.linalg.ormqr(a.astype(jnp.float32), taus.astype(jnp.float32), c.astype(jnp.float32))",
    )
    m, n = ctx.avals_in[0].shape[-2:]
    k = ctx.avals_in[1].shape[-1]
    static = not any(jxi.is_symbolic_dim(d) for d in (m, n, k))
    if static and k > min(m, n):  # LAPACK refuses k > m; JAX's CPU ormqr reads past a for k > n
        raise ConversionError(
            f"ormqr at {ctx.source_line or '<unknown location>'} got {k} taus for a {m}x{n} matrix "
            "of reflectors: "
            f"there are at most min(m, n) = {min(m, n)} (JAX's CPU ormqr fails or reads past a). "
            f"Pass taus[..., :{min(m, n)}], as geqrf returns them"
        )
    fn = functools.partial(apply_reflectors, left=left, transpose=transpose)
    return lower_as_jax(
        ctx, fn, [a, taus, c], cache_key=("ormqr", left, transpose, steps.UNROLL_LIMIT)
    )


@lowering(
    "geqp3",
    onnx_ops=(
        "Slice",
        "MatMul",
        "Mul",
        "Sub",
        "Div",
        "Sqrt",
        "Abs",
        "Where",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "Loop",
        "Scan",
        "Add",
        "And",
        "Cast",
        "Concat",
        "ConstantOfShape",
        "Equal",
        "Expand",
        "Gather",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "IsNaN",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Neg",
        "Not",
        "Or",
        "Range",
        "Reshape",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
)
def _geqp3(ctx: LoweringContext, a: ir.Value, jpvt: ir.Value, *, use_magma: Any) -> list[ir.Value]:
    del use_magma  # a GPU choice
    refuse_half_precision(ctx, "geqp3", "jax.scipy.linalg.qr(a.astype(jnp.float32), pivoting=True)")
    n = ctx.avals_in[0].shape[-1]
    empty = not jxi.is_symbolic_dim(n) and n == 0
    if not empty and value_range(jpvt) != (0, 0):
        raise ConversionError(
            f"geqp3 at {ctx.source_line or '<unknown location>'} got a jpvt not known to be all "
            "zero: LAPACK's "
            "leading columns (jpvt[j] != 0: column j moved to the front, not pivoted) are not "
            "supported. "
            "Pass zeros (every column free), as jax.scipy.linalg.qr(pivoting=True) and qr_multiply "
            "do"
        )

    def fn(a: jax.Array, jpvt: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        packed, perm, taus = scaled(geqp3, upper)(a)  # entries of 1e20 as qr's
        # 1-based as LAPACK's; no step (min(m, n) = 0) leaves jpvt as it came
        k = taus.shape[-1]
        stepped = jxi.is_symbolic_dim(k) or k > 0
        return packed, (perm + 1).astype(jpvt.dtype) if stepped else jpvt, taus

    return lower_as_jax(ctx, fn, [a, jpvt])


@lowering(
    "qr",
    onnx_ops=(
        "Split",
        "Slice",
        "MatMul",
        "Transpose",
        "Mul",
        "Add",
        "Sub",
        "Neg",
        "Div",
        "Sqrt",
        "Abs",
        "Max",
        "GreaterOrEqual",
        "Equal",
        "Where",
        "ReduceSum",
        "Concat",
        "Pad",
        "Expand",
        "Reshape",
        "Gather",
        "Scan",
        "Loop",
        "And",
        "Cast",
        "ConstantOfShape",
        "CumSum",
        "Greater",
        "IsNaN",
        "Less",
        "LessOrEqual",
        "Min",
        "Not",
        "Or",
        "Range",
        "ReduceMax",
        "ReduceMin",
        "Squeeze",
        "Unsqueeze",
        "Xor",
        "Identity",
    ),
)
def _qr(
    ctx: LoweringContext, a: ir.Value, *, full_matrices: bool, pivoting: bool = False, **params: Any
) -> list[ir.Value]:
    del params  # use_magma: a GPU choice
    refuse_half_precision(ctx, "qr", "jnp.linalg.qr(a.astype(jnp.float32))")

    def scaled_qr(a: jax.Array) -> tuple[jax.Array, ...]:
        scale = power_of_two_scale(a)
        q, r, *perm = qr(a / scale, full_matrices=full_matrices, pivoting=pivoting)
        return (q, r * scale, *perm)

    return lower_as_jax(ctx, scaled_qr, [a])
