"""Bit-level ops: bitcasts between floats and integers, and what JAX builds on them.

ONNX has ``BitCast`` only from opset 26. Below it the bit pattern of a float is computed from
its value, exactly: the biased exponent by a binary search over a table of powers of two, the
significand by dividing by the exponent's unit in the last place (a power of two, so exact),
the sign from ``x < 0`` or ``1 / x == -inf`` (negative zero). The way back multiplies the
significand by that power of two. Every float16/bfloat16 value is exact in float32, so those
formats are computed in float32 with their own field widths.

What arithmetic cannot see is a NaN's sign and payload: below opset 26 every NaN has the bits
of the canonical quiet NaN (``0x7FC00000`` for float32), and integer -> float gives that NaN.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import ir_dtype
from jax2onnx_nn.core.lower import LoweringContext, is_float, onnx_aval
from jax2onnx_nn.core.registry import lowering

BITCAST_OPSET = 26  # the first opset with ONNX BitCast
_I64 = np.dtype(np.int64)


def unsigned(dtype: Any) -> np.dtype:
    """The unsigned integer type of ``dtype``'s width."""
    return np.dtype(f"uint{8 * np.dtype(dtype).itemsize}")


@dataclass(frozen=True)
class FloatLayout:
    """The fields of a binary float format: a sign bit, ``n_exp`` exponent bits, ``n_mant``
    mantissa bits (IEEE layout: the exponent field all ones is inf/NaN, zero is subnormal)."""

    n_exp: int
    n_mant: int

    @classmethod
    def of(cls, dtype: Any) -> FloatLayout:
        finfo = jnp.finfo(dtype)
        return cls(int(finfo.nexp), int(finfo.nmant))

    @property
    def bias(self) -> int:
        return 2 ** (self.n_exp - 1) - 1

    @property
    def exp_all_ones(self) -> int:
        return 2**self.n_exp - 1


def work_dtype(dtype: Any) -> np.dtype:
    """The type float bits are computed in: float32 for 16-bit floats (which it holds exactly)."""
    return np.dtype(np.float64) if np.dtype(dtype).itemsize == 8 else np.dtype(np.float32)


@functools.cache
def _exponent_thresholds(layout: FloatLayout, work: np.dtype) -> np.ndarray:
    """table[e] = the smallest magnitude whose exponent field is e (0 for e = 0, inf for all
    ones)."""
    e = np.arange(1, layout.exp_all_ones)
    return np.concatenate([[0.0], np.ldexp(1.0, e - layout.bias), [np.inf]]).astype(work)


@functools.cache
def _ulps(layout: FloatLayout, work: np.dtype) -> np.ndarray:
    """table[e] = the value of one unit in the last place for exponent field e."""
    e = np.maximum(np.arange(layout.exp_all_ones + 1), 1)
    return np.ldexp(1.0, e - layout.bias - layout.n_mant).astype(work)


def _canonical_nan_bits(dtype: Any) -> int:
    return int(np.asarray(np.nan, dtype=dtype).view(unsigned(dtype)))


def negative(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    """Whether ``x`` has its sign bit set, NaNs aside: ``x < 0`` or ``x`` is -0.0."""
    return ctx.op.Or(ctx.op.Less(x, ctx.const(0, like=x)), ctx.is_negative_zero(x))


def float_to_bits(ctx: LoweringContext, x: ir.Value, dtype: Any) -> ir.Value:
    """The bits of float ``x`` (of ``dtype``) as the unsigned integer of its width."""
    dtype, utype = np.dtype(dtype), unsigned(dtype)
    if ctx.opset >= BITCAST_OPSET:
        return ctx.op.BitCast(x, to=ir_dtype(utype))
    op, layout, work = ctx.op, FloatLayout.of(dtype), work_dtype(dtype)
    w = ctx.cast(x, work)
    a = op.Abs(w)
    # the exponent field: the largest e with thresholds[e] <= |x|, bit by bit from the top
    thresholds = _exponent_thresholds(layout, work)
    exponent: ir.Value | None = None
    for k in reversed(range(layout.n_exp)):
        if exponent is None:
            top = ctx.const(2**k, dtype=_I64)
            exponent = op.Where(
                op.GreaterOrEqual(a, ctx.const(thresholds[2**k])), top, ctx.const(0, dtype=_I64)
            )
            continue
        candidate = op.Add(exponent, ctx.const(2**k, dtype=_I64))
        reached = op.GreaterOrEqual(a, op.Gather(ctx.const(thresholds), candidate))
        exponent = op.Where(reached, candidate, exponent)
    assert exponent is not None
    # the significand (with the implicit bit) is an integer < 2**(n_mant + 1): exact in `work`
    significand = op.Div(a, op.Gather(ctx.const(_ulps(layout, work)), exponent))
    significand = op.Where(
        op.Less(a, ctx.const(np.inf, dtype=work)), significand, ctx.const(0, dtype=work)
    )

    def u(value: int) -> ir.Value:
        return ctx.const(value, dtype=utype)

    mantissa = op.BitwiseAnd(op.Cast(significand, to=ir_dtype(utype)), u(2**layout.n_mant - 1))
    field = op.BitShift(op.Cast(exponent, to=ir_dtype(utype)), u(layout.n_mant), direction="LEFT")
    sign = op.Mul(op.Cast(negative(ctx, w), to=ir_dtype(utype)), u(1 << (8 * utype.itemsize - 1)))
    nan = op.Mul(op.Cast(op.IsNaN(w), to=ir_dtype(utype)), u(_canonical_nan_bits(dtype)))
    return op.BitwiseOr(op.BitwiseOr(field, mantissa), op.BitwiseOr(sign, nan))


def bits_to_float(ctx: LoweringContext, bits: ir.Value, dtype: Any) -> ir.Value:
    """The float of ``dtype`` whose bits are ``bits`` (the unsigned integer of its width)."""
    dtype, utype = np.dtype(dtype), unsigned(dtype)
    if ctx.opset >= BITCAST_OPSET:
        return ctx.op.BitCast(bits, to=ir_dtype(dtype))
    op, layout = ctx.op, FloatLayout.of(dtype)

    def u(value: int) -> ir.Value:
        return ctx.const(value, dtype=utype)

    mantissa = op.BitwiseAnd(bits, u(2**layout.n_mant - 1))
    exponent = op.BitwiseAnd(
        op.BitShift(bits, u(layout.n_mant), direction="RIGHT"), u(layout.exp_all_ones)
    )
    significand = op.Where(
        op.Greater(exponent, u(0)), op.BitwiseOr(mantissa, u(2**layout.n_mant)), mantissa
    )
    scale = op.Gather(ctx.const(_ulps(layout, dtype)), op.Cast(exponent, to=ir.DataType.INT64))
    magnitude = op.Mul(op.Cast(significand, to=ir_dtype(dtype)), scale)
    special = op.Where(
        op.Equal(mantissa, u(0)), ctx.const(np.inf, dtype=dtype), ctx.const(np.nan, dtype=dtype)
    )
    magnitude = op.Where(op.Equal(exponent, u(layout.exp_all_ones)), special, magnitude)
    # times ±1, not Where(negative, Neg(m), m): onnxruntime's Where returns +0.0 where it picks
    # a -0.0 from its second input (measured, ORT 1.32), and the sign bit must stay
    sign = op.Where(
        op.Greater(bits, u(2 ** (8 * utype.itemsize - 1) - 1)),
        ctx.const(-1, dtype=dtype),
        ctx.const(1, dtype=dtype),
    )
    return op.Mul(magnitude, sign)


def to_bits(ctx: LoweringContext, x: ir.Value, dtype: Any) -> ir.Value:
    """``x`` of any int or float ``dtype`` as the unsigned integer of its bits."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return float_to_bits(ctx, x, dtype)
    return ctx.cast(x, unsigned(dtype))


def from_bits(ctx: LoweringContext, bits: ir.Value, dtype: Any) -> ir.Value:
    """The value of ``dtype`` whose bits are ``bits`` (the unsigned integer of its width)."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return bits_to_float(ctx, bits, dtype)
    return ctx.cast(bits, dtype)  # wraps


# -- bitcast_convert_type ---------------------------------------------------------------------

# the ONNX ops of float_to_bits and bits_to_float
_BIT_OPS = (
    "BitCast",
    "Abs",
    "GreaterOrEqual",
    "Gather",
    "Where",
    "Add",
    "Div",
    "Less",
    "Cast",
    "BitwiseAnd",
    "BitShift",
    "BitwiseOr",
    "Mul",
    "Equal",
    "And",
    "Or",
    "IsNaN",
    "Greater",
)


@lowering("bitcast_convert_type", onnx_ops=(*_BIT_OPS, "Concat", "Unsqueeze"))
def _bitcast_convert_type(ctx: LoweringContext, x: ir.Value, *, new_dtype: Any) -> ir.Value:
    source, target = onnx_aval(ctx.aval_in)[0], onnx_aval(ctx.aval_out)[0]
    if np.bool_ in (source, target):
        raise NotImplementedError(
            f"bitcast_convert_type from {source} to {target}: bool has no bit layout to reinterpret"
        )
    if source.itemsize == target.itemsize:
        if ctx.opset >= BITCAST_OPSET:
            return ctx.op.BitCast(x, to=ir_dtype(target))
        return from_bits(ctx, to_bits(ctx, x, source), target)
    bits = to_bits(ctx, x, source)
    src_u, dst_u = unsigned(source), unsigned(target)
    if source.itemsize > target.itemsize:  # one wide element -> a trailing axis of narrow ones
        n = 8 * target.itemsize
        parts = [
            ctx.op.Unsqueeze(
                ctx.op.Cast(
                    ctx.op.BitwiseAnd(
                        ctx.op.BitShift(bits, ctx.const(i * n, dtype=src_u), direction="RIGHT"),
                        ctx.const(2**n - 1, dtype=src_u),
                    ),
                    to=ir_dtype(dst_u),
                ),
                ctx.const([-1], dtype=_I64),
            )
            for i in range(source.itemsize // target.itemsize)
        ]
        return from_bits(ctx, ctx.op.Concat(*parts, axis=-1), target)
    # a trailing axis of narrow elements -> one wide element, little-endian like XLA
    n = 8 * source.itemsize
    wide = None
    for i in range(target.itemsize // source.itemsize):
        part = ctx.op.Cast(
            ctx.op.Gather(bits, ctx.const(i, dtype=_I64), axis=-1), to=ir_dtype(dst_u)
        )
        part = ctx.op.BitShift(part, ctx.const(i * n, dtype=dst_u), direction="LEFT") if i else part
        wide = part if wide is None else ctx.op.BitwiseOr(wide, part)
    assert wide is not None
    return from_bits(ctx, wide, target)


# -- reduce_precision -------------------------------------------------------------------------

# (source, target format) pairs where one ONNX Cast rounds exactly as XLA does (a single
# round-to-nearest-even, overflow to inf); XLA then flushes the target's subnormals to zero
_NATIVE_TARGETS = {
    (np.dtype(np.float32), (5, 10)): ir.DataType.FLOAT16,
    (np.dtype(np.float32), (8, 7)): ir.DataType.BFLOAT16,
    (np.dtype(np.float64), (8, 23)): ir.DataType.FLOAT,
}


@lowering("reduce_precision", onnx_ops=(*_BIT_OPS, "LessOrEqual"))
def _reduce_precision(
    ctx: LoweringContext, x: ir.Value, *, exponent_bits: int, mantissa_bits: int
) -> ir.Value:
    """XLA's ReducePrecision: round the mantissa to ``mantissa_bits`` (to nearest, ties to
    even), then values whose exponent is above the reduced range become ±inf and values below
    its smallest normal become ±0 (XLA keeps no subnormals of the reduced format); NaN stays."""
    dtype = onnx_aval(ctx.aval_in)[0]
    layout = FloatLayout.of(dtype)
    if exponent_bits >= layout.n_exp and mantissa_bits >= layout.n_mant:
        return x
    op = ctx.op
    native = _NATIVE_TARGETS.get((dtype, (exponent_bits, mantissa_bits)))
    if native is not None:
        rounded = op.Cast(op.Cast(x, to=native), to=ir_dtype(dtype))
        if exponent_bits == layout.n_exp:
            return rounded
        smallest_normal = 2.0 ** (2 - 2 ** (exponent_bits - 1))
        flush = op.Where(
            op.Less(op.Abs(rounded), ctx.const(smallest_normal, dtype=dtype)),
            ctx.const(0, dtype=dtype),
            ctx.const(1, dtype=dtype),
        )
        return op.Mul(rounded, flush)  # times 0 keeps the sign of a flushed value
    utype = unsigned(dtype)

    def u(value: int) -> ir.Value:
        return ctx.const(value, dtype=utype)

    bits = float_to_bits(ctx, x, dtype)
    if mantissa_bits < layout.n_mant:
        shift = layout.n_mant - mantissa_bits
        last_kept = op.BitwiseAnd(op.BitShift(bits, u(shift), direction="RIGHT"), u(1))
        bits = op.Add(bits, op.Add(last_kept, u((1 << (shift - 1)) - 1)))
        bits = op.BitwiseAnd(bits, u(~((1 << shift) - 1) & (2 ** (8 * utype.itemsize) - 1)))
    if exponent_bits < layout.n_exp:
        exp_mask = layout.exp_all_ones << layout.n_mant
        reduced_bias = 2 ** (exponent_bits - 1) - 1
        exponent = op.BitwiseAnd(bits, u(exp_mask))
        sign = op.BitwiseAnd(bits, u(1 << (8 * utype.itemsize - 1)))
        overflow = op.Greater(exponent, u((layout.bias + reduced_bias) << layout.n_mant))
        underflow = op.LessOrEqual(exponent, u((layout.bias - reduced_bias) << layout.n_mant))
        bits = op.Where(overflow, op.BitwiseOr(sign, u(exp_mask)), op.Where(underflow, sign, bits))
    # neither rounding nor the exponent range may turn a NaN into inf
    return op.Where(op.IsNaN(x), x, bits_to_float(ctx, bits, dtype))


# -- nextafter: exact by arithmetic (no bitcast needed) -----------------------------------------


def _nextafter_constants(dtype: np.dtype) -> dict[str, float]:
    """Per precision (float32, float64): the step factor c (|x| * c lies strictly between half an
    ulp and 1.5 ulp of |x|, so |x| +- |x| * c rounds to the next float), the smallest subnormal,
    below which (times two) the grid is uniform, and the scale that lifts small normals to where |x|
    * c is still normal."""
    info = jnp.finfo(dtype)
    p = int(info.nmant) + 1
    return {
        "c": 2.0**-p * (1 + 2.0 ** (1 - p)),
        "tiny": float(info.smallest_subnormal),
        "uniform": 2.0 * float(info.smallest_normal),
        "direct": 2.0 ** (int(info.minexp) + p + 8),
        "scale": 2.0 ** (2 * p + 16),
        "max": float(info.max),
    }


@lowering("nextafter", onnx_ops=(*_BIT_OPS, "Sub", "Max", "Neg", "IsInf"))
def _nextafter(ctx: LoweringContext, x: ir.Value, y: ir.Value) -> ir.Value:
    dtype = onnx_aval(ctx.aval_out)[0]
    if dtype.itemsize == 2:
        return _nextafter_by_bits(ctx, x, y, dtype)
    k = {
        name: ctx.const(np.asarray(v, dtype=dtype))
        for name, v in _nextafter_constants(dtype).items()
    }
    zero, one = ctx.const(np.asarray(0, dtype=dtype)), ctx.const(np.asarray(1, dtype=dtype))
    op = ctx.op
    a = op.Abs(x)
    # onnxruntime's NoopElimination reads a float64 constant as float32 and drops "+ 5e-324"
    # (0.0f) as a no-op, so the smallest subnormal is made at run time (0 * |x| + tiny)
    tiny = op.Max(op.Mul(a, zero), k["tiny"])
    # |x| stepped away from zero (up) and toward zero (down), in three ranges of |x|
    step = op.Mul(a, k["c"])
    scaled = op.Mul(a, k["scale"])
    scaled_step = op.Mul(scaled, k["c"])
    small = op.Less(a, k["direct"])
    uniform = op.Less(a, k["uniform"])

    def stepped(sign: str) -> ir.Value:
        direct = getattr(op, sign)(a, step)
        lifted = op.Div(getattr(op, sign)(scaled, scaled_step), k["scale"])
        return op.Where(uniform, getattr(op, sign)(a, tiny), op.Where(small, lifted, direct))

    negative, rising, equal = op.Less(x, zero), op.Less(x, y), op.Equal(x, y)
    magnitude = op.Where(op.Equal(negative, rising), stepped("Sub"), stepped("Add"))
    magnitude = op.Where(op.IsInf(x), k["max"], magnitude)
    result = op.Where(negative, op.Neg(magnitude), magnitude)
    result = op.Where(op.Equal(x, zero), op.Where(rising, tiny, op.Neg(tiny)), result)
    result = op.Where(equal, y, result)
    # onnxruntime's Where drops the sign of -0.0: a zero result gets the sign of y (x == y)
    # or of x (a step to zero) by a multiplication
    signbit = {v.name: op.Less(op.Div(one, v), zero) for v in (x, y)}
    negative_zero = op.And(
        op.Equal(result, zero), op.Where(equal, signbit[y.name], signbit[x.name])
    )
    result = op.Mul(result, op.Where(negative_zero, op.Neg(one), one))
    nan = op.Or(op.IsNaN(x), op.IsNaN(y))
    return op.Where(nan, ctx.const(np.asarray(np.nan, dtype=dtype)), result)


def _nextafter_by_bits(ctx: LoweringContext, x: ir.Value, y: ir.Value, dtype: np.dtype) -> ir.Value:
    """float16/bfloat16: one step of the bit pattern. (Stepping in float32 and rounding by a
    Cast is not safe: onnxruntime removes a float32 -> float16 Cast that feeds an op it runs
    in float32, such as float16 Sub, and the unrounded value flows on.)"""
    op, utype = ctx.op, unsigned(dtype)
    work = work_dtype(dtype)
    xw, yw = op.Cast(x, to=ir_dtype(work)), op.Cast(y, to=ir_dtype(work))
    bx, by = float_to_bits(ctx, x, dtype), float_to_bits(ctx, y, dtype)
    one = ctx.const(1, dtype=utype)
    zero = ctx.const(0, dtype=work)
    away = op.Equal(op.Less(xw, yw), op.Greater(xw, zero))  # the magnitude grows
    bits = op.Where(away, op.Add(bx, one), op.Sub(bx, one))
    smallest = op.BitwiseOr(
        op.Mul(op.Cast(negative(ctx, yw), to=ir_dtype(utype)), ctx.const(1 << 15, dtype=utype)), one
    )
    bits = op.Where(op.Equal(xw, zero), smallest, bits)
    bits = op.Where(op.Equal(xw, yw), by, bits)
    nan = op.Or(op.IsNaN(xw), op.IsNaN(yw))
    bits = op.Where(nan, ctx.const(_canonical_nan_bits(dtype), dtype=utype), bits)
    return bits_to_float(ctx, bits, dtype)


# -- integer bit counts -------------------------------------------------------------------------


@lowering("population_count", onnx_ops=("BitShift", "BitwiseAnd", "Add", "Sub", "Mul", "Cast"))
def _population_count(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    """The SWAR count: bits summed in pairs, nibbles, bytes; a multiply adds up the bytes."""
    dtype = onnx_aval(ctx.aval_in)[0]
    utype, width, op = unsigned(dtype), 8 * dtype.itemsize, ctx.op

    def u(byte: int) -> ir.Value:  # a byte repeated over the width
        return ctx.const(int.from_bytes(bytes([byte]) * dtype.itemsize, "little"), dtype=utype)

    def shr(v: ir.Value, n: int) -> ir.Value:
        return op.BitShift(v, ctx.const(n, dtype=utype), direction="RIGHT")

    v = to_bits(ctx, x, dtype)
    v = op.Sub(v, op.BitwiseAnd(shr(v, 1), u(0x55)))
    v = op.Add(op.BitwiseAnd(v, u(0x33)), op.BitwiseAnd(shr(v, 2), u(0x33)))
    v = op.BitwiseAnd(op.Add(v, shr(v, 4)), u(0x0F))
    if width > 8:
        v = shr(op.Mul(v, u(0x01)), width - 8)  # wrapping multiply: the top byte sums all bytes
    return from_bits(ctx, v, dtype)


@lowering("clz", onnx_ops=("BitShift", "Equal", "Cast", "Mul", "Add"))
def _clz(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    """Leading zeros by halving: if the top s bits are zero, count s and shift them out."""
    dtype = onnx_aval(ctx.aval_in)[0]
    utype, width, op = unsigned(dtype), 8 * dtype.itemsize, ctx.op

    def u(value: int) -> ir.Value:
        return ctx.const(value, dtype=utype)

    v = to_bits(ctx, x, dtype)
    count: ir.Value | None = None
    s = width // 2
    while s:
        top_zero = op.Cast(
            op.Equal(op.BitShift(v, u(width - s), direction="RIGHT"), u(0)), to=ir_dtype(utype)
        )
        shift = op.Mul(top_zero, u(s))
        count = shift if count is None else op.Add(count, shift)
        v = op.BitShift(v, shift, direction="LEFT")
        s //= 2
    assert count is not None
    count = op.Add(count, op.Cast(op.Equal(v, u(0)), to=ir_dtype(utype)))  # x == 0: all `width`
    return from_bits(ctx, count, dtype)


# -- total-order comparisons ------------------------------------------------------------------
# XLA's total order of floats: -NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN. A NaN's sign
# is invisible below opset 26, so every NaN ranks as +NaN (JAX's searchsorted and sort
# canonicalize NaNs to +NaN before comparing, so they agree). Integers compare as usual.


def _total_lt(ctx: LoweringContext, x: ir.Value, y: ir.Value) -> ir.Value:
    op = ctx.op
    if not is_float(onnx_aval(ctx.aval_in)[0]):
        return op.Less(x, y)
    zeros = op.And(op.Equal(x, y), ctx.is_negative_zero(x))
    below = op.Or(op.Less(x, y), op.And(zeros, op.Not(ctx.is_negative_zero(y))))
    return op.And(op.Not(op.IsNaN(x)), op.Or(op.IsNaN(y), below))


def _total_eq(ctx: LoweringContext, x: ir.Value, y: ir.Value) -> ir.Value:
    op = ctx.op
    if not is_float(onnx_aval(ctx.aval_in)[0]):
        return op.Equal(x, y)
    same_sign = op.Equal(ctx.is_negative_zero(x), ctx.is_negative_zero(y))
    return op.Or(op.And(op.Equal(x, y), same_sign), op.And(op.IsNaN(x), op.IsNaN(y)))


_TOTAL_ORDER_OPS = ("Less", "Equal", "And", "Or", "Not", "IsNaN", "Div")


@lowering("lt_to", onnx_ops=_TOTAL_ORDER_OPS)
def _lt_to(ctx: LoweringContext, x: ir.Value, y: ir.Value) -> ir.Value:
    return _total_lt(ctx, x, y)


@lowering("le_to", onnx_ops=(*_TOTAL_ORDER_OPS, "LessOrEqual"))
def _le_to(ctx: LoweringContext, x: ir.Value, y: ir.Value) -> ir.Value:
    if not is_float(onnx_aval(ctx.aval_in)[0]):
        return ctx.op.LessOrEqual(x, y)
    return ctx.op.Or(_total_lt(ctx, x, y), _total_eq(ctx, x, y))


@lowering("eq_to", onnx_ops=_TOTAL_ORDER_OPS)
def _eq_to(ctx: LoweringContext, x: ir.Value, y: ir.Value) -> ir.Value:
    return _total_eq(ctx, x, y)
