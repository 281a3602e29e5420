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
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.lowerings.elementwise import _is_negative_zero
from jax2onnx_nn.core.registry import lowering

BITCAST_OPSET = 26  # the first opset with ONNX BitCast
_I64 = np.dtype(np.int64)


def is_float(dtype: Any) -> bool:
    return bool(jnp.issubdtype(dtype, jnp.floating))


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
    """table[e] = the smallest magnitude whose exponent field is e (0 for e = 0, inf for all ones)."""
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
    return ctx.op.Or(ctx.op.Less(x, ctx.const(0, like=x)), _is_negative_zero(ctx, x))


def float_to_bits(ctx: LoweringContext, x: ir.Value, dtype: Any) -> ir.Value:
    """The bits of float ``x`` (of ``dtype``) as the unsigned integer of its width."""
    dtype, utype = np.dtype(dtype), unsigned(dtype)
    if ctx.opset >= BITCAST_OPSET:
        return ctx.op.BitCast(x, to=ir_dtype(utype))
    op, layout, work = ctx.op, FloatLayout.of(dtype), work_dtype(dtype)
    w = x if dtype == work else op.Cast(x, to=ir_dtype(work))
    a = op.Abs(w)
    # the exponent field: the largest e with thresholds[e] <= |x|, bit by bit from the top
    thresholds = _exponent_thresholds(layout, work)
    exponent: ir.Value | None = None
    for k in reversed(range(layout.n_exp)):
        if exponent is None:
            top = ctx.const(2**k, dtype=_I64)
            exponent = op.Where(op.GreaterOrEqual(a, ctx.const(thresholds[2**k])), top, ctx.const(0, dtype=_I64))
            continue
        candidate = op.Add(exponent, ctx.const(2**k, dtype=_I64))
        reached = op.GreaterOrEqual(a, op.Gather(ctx.const(thresholds), candidate))
        exponent = op.Where(reached, candidate, exponent)
    assert exponent is not None
    # the significand (with the implicit bit) is an integer < 2**(n_mant + 1): exact in `work`
    significand = op.Div(a, op.Gather(ctx.const(_ulps(layout, work)), exponent))
    significand = op.Where(op.Less(a, ctx.const(np.inf, dtype=work)), significand, ctx.const(0, dtype=work))

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
    exponent = op.BitwiseAnd(op.BitShift(bits, u(layout.n_mant), direction="RIGHT"), u(layout.exp_all_ones))
    significand = op.Where(op.Greater(exponent, u(0)), op.BitwiseOr(mantissa, u(2**layout.n_mant)), mantissa)
    scale = op.Gather(ctx.const(_ulps(layout, dtype)), op.Cast(exponent, to=ir.DataType.INT64))
    magnitude = op.Mul(op.Cast(significand, to=ir_dtype(dtype)), scale)
    special = op.Where(op.Equal(mantissa, u(0)), ctx.const(np.inf, dtype=dtype), ctx.const(np.nan, dtype=dtype))
    magnitude = op.Where(op.Equal(exponent, u(layout.exp_all_ones)), special, magnitude)
    # times ±1, not Where(negative, Neg(m), m): onnxruntime's Where returns +0.0 where it picks
    # a -0.0 from its second input (measured, ORT 1.32), and the sign bit must stay
    sign = op.Where(op.Greater(bits, u(2 ** (8 * utype.itemsize - 1) - 1)), ctx.const(-1, dtype=dtype), ctx.const(1, dtype=dtype))
    return op.Mul(magnitude, sign)


def to_bits(ctx: LoweringContext, x: ir.Value, dtype: Any) -> ir.Value:
    """``x`` of any int or float ``dtype`` as the unsigned integer of its bits."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return float_to_bits(ctx, x, dtype)
    return x if dtype == unsigned(dtype) else ctx.op.Cast(x, to=ir_dtype(unsigned(dtype)))


def from_bits(ctx: LoweringContext, bits: ir.Value, dtype: Any) -> ir.Value:
    """The value of ``dtype`` whose bits are ``bits`` (the unsigned integer of its width)."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return bits_to_float(ctx, bits, dtype)
    return bits if dtype == unsigned(dtype) else ctx.op.Cast(bits, to=ir_dtype(dtype))  # wraps


# -- bitcast_convert_type ---------------------------------------------------------------------

@lowering("bitcast_convert_type", onnx_ops=("BitCast", "BitShift", "BitwiseAnd", "BitwiseOr", "Gather", "Div", "Mul", "Where", "Cast", "Abs", "Add", "And", "Equal", "Greater", "GreaterOrEqual", "IsNaN", "Less", "Or"))
def _bitcast_convert_type(ctx: LoweringContext, x: ir.Value, *, new_dtype: Any, **_: Any) -> ir.Value:
    source, target = onnx_aval(ctx.aval_in)[0], onnx_aval(ctx.aval_out)[0]
    if np.bool_ in (source, target):
        raise NotImplementedError(f"bitcast_convert_type from {source} to {target}: bool has no bit layout to reinterpret")
    if source.itemsize == target.itemsize:
        if ctx.opset >= BITCAST_OPSET:
            return ctx.op.BitCast(x, to=ir_dtype(target))
        return from_bits(ctx, to_bits(ctx, x, source), target)
    bits = to_bits(ctx, x, source)
    src_u, dst_u = unsigned(source), unsigned(target)
    if source.itemsize > target.itemsize:  # one wide element -> a trailing axis of narrow ones
        n = 8 * target.itemsize
        parts = [
            ctx.op.Unsqueeze(ctx.op.Cast(ctx.op.BitwiseAnd(
                ctx.op.BitShift(bits, ctx.const(i * n, dtype=src_u), direction="RIGHT"), ctx.const(2**n - 1, dtype=src_u)
            ), to=ir_dtype(dst_u)), ctx.const([-1], dtype=_I64))
            for i in range(source.itemsize // target.itemsize)
        ]
        return from_bits(ctx, ctx.op.Concat(*parts, axis=-1), target)
    # a trailing axis of narrow elements -> one wide element, little-endian like XLA
    n = 8 * source.itemsize
    wide = None
    for i in range(target.itemsize // source.itemsize):
        part = ctx.op.Cast(ctx.op.Gather(bits, ctx.const(i, dtype=_I64), axis=-1), to=ir_dtype(dst_u))
        part = ctx.op.BitShift(part, ctx.const(i * n, dtype=dst_u), direction="LEFT") if i else part
        wide = part if wide is None else ctx.op.BitwiseOr(wide, part)
    assert wide is not None
    return from_bits(ctx, wide, target)
