"""lax.linalg ``eig`` and ``schur``: balanced, reduced to Schur form (real: ``schur.py``, as
geev; complex: ``complex_schur.py``), eigenvectors by back substitution on it (``trevc``)
and normalized as LAPACK does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import onnx_ir as ir
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.lowerings.lapack.balance import (
    back_rows,
    balance,
    isolate,
    permuted,
    scaling_bound,
)
from jax2onnx_nn.core.lowerings.lapack.complex_gees import GEES_LIMIT, complex_gees
from jax2onnx_nn.core.lowerings.lapack.complex_schur import Parts, complex_schur
from jax2onnx_nn.core.lowerings.lapack.householder import power_of_two_scale
from jax2onnx_nn.core.lowerings.lapack.schur import real_schur
from jax2onnx_nn.core.lowerings.lapack.steps import (
    Index,
    at_index,
    index_range,
    lower_as_jax,
    mT,
    refuse_half_precision,
    warn_free_signs,
    where,
)
from jax2onnx_nn.core.lowerings.lapack.trevc import real_eig, schur_blocks
from jax2onnx_nn.core.registry import lowering


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
    growth = 2.0 ** ((info.maxexp - scaling_bound(tr.dtype)) // 2)

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
    ``right``] of a square real or complex ``a``, complex: a real ``a`` by geev's own path
    (real Schur form, ``trevc``), a complex one from its complex Schur form."""
    dtype = jnp.result_type(a.dtype, jnp.complex64)
    n = a.shape[-1]
    # a divided by a power of two (exactly, as svd's) so that no square in the rotations leaves
    # the float range: float32 entries of 1e20 gave NaN values, of 1e-30 values half their size
    scale = power_of_two_scale(jnp.abs(a))
    # balanced as geev (see BALANCE_FACTOR): isolated values stay exact, scaled rows accurate
    b, inverse, d = balance(a / scale) if n > 1 else (a / scale, None, None)
    if n > 0 and not jnp.iscomplexobj(a):
        # geev's own path (dhseqr, dtrevc3 on both sides, gebak, its normalisation): JAX's
        # values in JAX's order and its vectors, signs and phases included
        rt, rz = real_schur(b)
        wr, wi, _, _ = schur_blocks(rt)
        values = lax.complex(wr[..., 0, :], wi[..., 0, :]) * scale[..., 0]
        return [values, *real_eig(rt, rz, inverse, d, left=left, right=right)]
    # a complex matrix up to GEES_LIMIT as geev (zgehrd, zlahqr): JAX's values in JAX's order
    lapack = jnp.iscomplexobj(a) and n <= GEES_LIMIT
    t, z = (complex_gees if lapack else complex_schur)(b, vectors=left or right)
    ids = index_range(n)
    values = jnp.sum(jnp.where(ids[:, None] == ids[None, :], t, 0), axis=-1) * scale[..., 0]
    out = [values]
    if n == 0:  # no vectors (the substitution's loop cannot even be traced on 0x0)
        return [*out, *[jnp.zeros(a.shape, dtype)] * (left + right)]
    if not (left or right):
        return out
    assert z is not None  # complex_schur made the vectors
    if left:  # right vectors of t^H, reversed into upper triangular form; D^-1 back (gebak)
        flip = lambda m: jnp.flip(m, axis=(-2, -1))  # noqa: E731
        y = triangular_eigenvectors(flip(jnp.conj(mT(t))))
        out.append(
            _normalized(
                back_rows(z, inverse, 1 / d) if d is not None and inverse is not None else z,
                (flip(y[0]), flip(y[1])),
            )
        )
    if right:
        out.append(
            _normalized(
                back_rows(z, inverse, d) if d is not None and inverse is not None else z,
                triangular_eigenvectors(t),
            )
        )
    return out


def _static_size(ctx: LoweringContext, what: str) -> None:
    if jxi.is_symbolic_dim(ctx.aval_in.shape[-1]):
        raise ConversionError(
            f"{what} of a matrix with a symbolic size at {ctx.source_line or '<unknown location>'} "
            "is not supported; "
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
    "If",
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
        "Split",
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
    n = ctx.aval_in.shape[-1]
    if jxi.is_complex_dtype(ctx.aval_in.dtype) and n > GEES_LIMIT and any(ctx.used_outputs[1:]):
        warn_free_signs(
            ctx,
            "eig",
            f"above {GEES_LIMIT}x{GEES_LIMIT} a complex matrix's vectors come from Givens sweeps "
            f"(zgeev's path is followed up to {GEES_LIMIT}x{GEES_LIMIT})",
            "the values are JAX's, in the order they converge in, not JAX's",
        )
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
        "ConstantOfShape",
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
            f"schur(sort_eig_vals=True) at {ctx.source_line or '<unknown location>'} is not "
            "supported: JAX itself does not "
            "implement the sort of LAPACK's gees; sort the eigenvalues of the result instead"
        )
    schur: Callable[[jax.Array], tuple[jax.Array, jax.Array | None]] = real_schur
    if jxi.is_complex_dtype(ctx.aval_in.dtype):  # zgees up to GEES_LIMIT, else Givens sweeps
        schur = complex_gees if ctx.aval_in.shape[-1] <= GEES_LIMIT else complex_schur
        if schur is complex_schur and compute_schur_vectors and ctx.used_outputs[1]:
            warn_free_signs(
                ctx,
                "schur",
                f"above {GEES_LIMIT}x{GEES_LIMIT} a complex matrix's Schur vectors come from "
                f"Givens sweeps (zgees's path is followed up to {GEES_LIMIT}x{GEES_LIMIT})",
                "T's diagonal holds JAX's values in the order they converge in",
            )

    def fn(a: jax.Array) -> tuple[jax.Array, ...]:
        # a divided by a power of two first, as eig's (float32 1e20 or 1e-30: NaN without)
        scale = power_of_two_scale(jnp.abs(a))
        a = a / scale
        # gees permutes as eig's balancing (gebal job 'P', no scaling): isolated values exact,
        # a triangular matrix's t itself permuted and z a permutation, as JAX's
        perm, inverse, *_ = isolate(a) if a.shape[-1] > 1 else (None, None)
        t, z = schur(a if perm is None else permuted(a, perm))
        assert z is not None  # the vectors, made by either form
        z = z if perm is None or inverse is None else back_rows(z, inverse)
        t = t * scale
        return (t, z) if compute_schur_vectors else (t,)

    return lower_as_jax(ctx, fn, [a])
