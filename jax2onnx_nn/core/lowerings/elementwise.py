"""Elementwise primitives: tables of lax primitive -> ONNX op, plus the few that need a formula.

Operands of lax binary ops already share a dtype and (up to scalars) a shape, and ONNX
broadcasts multidirectionally, so most rules are one node. Types without an onnxruntime
kernel are widened by the builder (core/kernels.py), not here.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.kernels import supports
from jax2onnx_nn.core.lower import LoweringContext, is_float, onnx_aval
from jax2onnx_nn.core.registry import lowering, register

UNARY = {
    "exp": "Exp",
    "log": "Log",
    "tanh": "Tanh",
    "abs": "Abs",
    "neg": "Neg",
    "sqrt": "Sqrt",
    "sin": "Sin",
    "cos": "Cos",
    "floor": "Floor",
    "ceil": "Ceil",
    "sign": "Sign",
    "logistic": "Sigmoid",
}
BINARY = {
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "max": "Max",
    "min": "Min",
    "eq": "Equal",
    "lt": "Less",
    "le": "LessOrEqual",
    "gt": "Greater",
    "ge": "GreaterOrEqual",
    "add_any": "Add",
}
# f16/f32-only ONNX ops; float64 computes through the formula beside each (see _f64_formula).
FLOAT32_ONLY = {
    "tan": "Tan",
    "asin": "Asin",
    "acos": "Acos",
    "atan": "Atan",
    "sinh": "Sinh",
    "cosh": "Cosh",
    "asinh": "Asinh",
    "acosh": "Acosh",
    "atanh": "Atanh",
    "erf": "Erf",
}


# A table rule serves primitives with different params: it names their union (exp, log, tanh,
# sin, ... carry XLA's ``accuracy`` hint; neg, floor, ... carry none; mul carries out_dtype).
def _unary(op_type: str, ctx: LoweringContext, x: ir.Value, *, accuracy: object = None) -> ir.Value:
    del accuracy  # XLA's speed/accuracy hint: an ONNX op has no such knob
    return getattr(ctx.op, op_type)(x)


def _binary(
    op_type: str, ctx: LoweringContext, x: ir.Value, y: ir.Value, *, out_dtype: object = None
) -> ir.Value:
    del out_dtype  # the result's dtype: the output aval's, stamped by the interpreter
    return getattr(ctx.op, op_type)(x, y)


for _prim, _op in UNARY.items():
    register(_prim, partial(_unary, _op), onnx_ops=(_op,))
for _prim, _op in BINARY.items():
    register(_prim, partial(_binary, _op), onnx_ops=(_op,))


def _is_bool(aval: object) -> bool:
    return onnx_aval(aval)[0] == np.bool_


# -- float ops onnxruntime has only in f16/f32 ------------------------------------------------


def _float32_only(
    op_type: str, prim: str, ctx: LoweringContext, x: ir.Value, *, accuracy: object = None
) -> ir.Value:
    del accuracy  # (tan's) XLA's speed/accuracy hint: an ONNX op has no such knob
    dtype = onnx_aval(ctx.aval_in)[0]
    if dtype != np.float64 or supports(op_type, dtype):
        return getattr(ctx.op, op_type)(x)
    return _F64_FORMULAS[prim](ctx, x)


def _one(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    return ctx.const(1, like=x)


def _f64_tan(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    return ctx.op.Div(ctx.op.Sin(x), ctx.op.Cos(x))


def _f64_sinh(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    # (expm1(x) - expm1(-x)) / 2 keeps relative accuracy near 0
    return ctx.op.Mul(
        ctx.op.Sub(_expm1(ctx, x), _expm1(ctx, ctx.op.Neg(x))), ctx.const(0.5, like=x)
    )


def _f64_cosh(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    half = ctx.const(0.5, like=x)
    return ctx.op.Add(ctx.op.Mul(ctx.op.Exp(x), half), ctx.op.Mul(ctx.op.Exp(ctx.op.Neg(x)), half))


def _f64_asinh(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    # sign(x) * log1p(|x| + x^2 / (1 + sqrt(1 + x^2))); large |x|: log(|x|) + log(2)
    a = ctx.op.Abs(x)
    one = _one(ctx, x)
    x2 = ctx.op.Mul(a, a)
    small = ctx.log1p(
        ctx.op.Add(a, ctx.op.Div(x2, ctx.op.Add(one, ctx.op.Sqrt(ctx.op.Add(one, x2)))))
    )
    large = ctx.op.Add(ctx.op.Log(a), ctx.const(np.log(2.0), like=x))
    r = ctx.op.Where(ctx.op.Greater(a, ctx.const(1e150, like=x)), large, small)
    return ctx.op.Mul(ctx.op.Sign(x), r)


def _f64_acosh(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    # log(x + sqrt(x^2 - 1)) = log1p((x - 1) + sqrt((x - 1) * (x + 1)))
    one = _one(ctx, x)
    xm1 = ctx.op.Sub(x, one)
    small = ctx.log1p(ctx.op.Add(xm1, ctx.op.Sqrt(ctx.op.Mul(xm1, ctx.op.Add(x, one)))))
    large = ctx.op.Add(ctx.op.Log(x), ctx.const(np.log(2.0), like=x))
    return ctx.op.Where(ctx.op.Greater(x, ctx.const(1e150, like=x)), large, small)


def _f64_atanh(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    # 0.5 * log1p(2x / (1 - x))
    one = _one(ctx, x)
    two_x = ctx.op.Add(x, x)
    return ctx.op.Mul(ctx.const(0.5, like=x), ctx.log1p(ctx.op.Div(two_x, ctx.op.Sub(one, x))))


def _f64_atan(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    # float32 Atan as a seed, then two Newton steps on f(y) = sin(y) - x cos(y) in float64
    y = ctx.cast(ctx.op.Atan(ctx.cast(x, np.float32)), np.float64)
    finite = ctx.op.Not(ctx.op.IsInf(x))
    for _ in range(2):
        s, c = ctx.op.Sin(y), ctx.op.Cos(y)
        step = ctx.op.Div(ctx.op.Sub(s, ctx.op.Mul(x, c)), ctx.op.Add(c, ctx.op.Mul(x, s)))
        y = ctx.op.Where(finite, ctx.op.Sub(y, step), y)
    return ctx.op.Where(finite, y, ctx.op.Mul(ctx.op.Sign(x), ctx.const(np.pi / 2, like=x)))


def _f64_asin(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    # asin(x) = 2 atan(x / (1 + sqrt(1 - x^2)))
    one = _one(ctx, x)
    d = ctx.op.Add(one, ctx.op.Sqrt(ctx.op.Sub(one, ctx.op.Mul(x, x))))
    return ctx.op.Mul(ctx.const(2.0, like=x), _f64_atan(ctx, ctx.op.Div(x, d)))


def _f64_acos(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    # acos(x) = 2 atan(sqrt(1 - x^2) / (1 + x)), with acos(-1) = pi
    one = _one(ctx, x)
    t = ctx.op.Div(ctx.op.Sqrt(ctx.op.Sub(one, ctx.op.Mul(x, x))), ctx.op.Add(one, x))
    r = ctx.op.Mul(ctx.const(2.0, like=x), _f64_atan(ctx, t))
    return ctx.op.Where(ctx.op.Equal(x, ctx.op.Neg(one)), ctx.const(np.pi, like=x), r)


def _f64_erf(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    return _erf64(ctx, x)


_F64_FORMULAS = {
    "tan": _f64_tan,
    "sinh": _f64_sinh,
    "cosh": _f64_cosh,
    "asinh": _f64_asinh,
    "acosh": _f64_acosh,
    "atanh": _f64_atanh,
    "atan": _f64_atan,
    "asin": _f64_asin,
    "acos": _f64_acos,
    "erf": _f64_erf,
}
# the ops of the float64 formulas (and of the float16 path), beside the float32 op itself
_F64_ONNX_OPS = {
    "tan": ("Cos", "Div", "Sin"),
    "sinh": ("Div", "Equal", "Exp", "IsInf", "Log", "Mul", "Neg", "Sub", "Where"),
    "cosh": ("Add", "Exp", "Mul", "Neg"),
    "asinh": (
        "Abs",
        "Add",
        "Div",
        "Equal",
        "Greater",
        "IsInf",
        "Log",
        "Mul",
        "Or",
        "Sign",
        "Sqrt",
        "Sub",
        "Where",
    ),
    "acosh": (
        "Add",
        "Div",
        "Equal",
        "Greater",
        "IsInf",
        "Log",
        "Mul",
        "Or",
        "Sqrt",
        "Sub",
        "Where",
    ),
    "atanh": ("Add", "Div", "Equal", "IsInf", "Log", "Mul", "Or", "Sub", "Where"),
    "atan": ("Add", "Cast", "Cos", "Div", "IsInf", "Mul", "Not", "Sign", "Sin", "Sub", "Where"),
    "asin": (
        "Add",
        "Atan",
        "Cast",
        "Cos",
        "Div",
        "IsInf",
        "Mul",
        "Not",
        "Sign",
        "Sin",
        "Sqrt",
        "Sub",
        "Where",
    ),
    "acos": (
        "Add",
        "Atan",
        "Cast",
        "Cos",
        "Div",
        "Equal",
        "IsInf",
        "Mul",
        "Neg",
        "Not",
        "Sign",
        "Sin",
        "Sqrt",
        "Sub",
        "Where",
    ),
    "erf": (
        "Abs",
        "Add",
        "Div",
        "Exp",
        "IsNaN",
        "Less",
        "Max",
        "Min",
        "Mul",
        "Neg",
        "Sign",
        "Sub",
        "Where",
    ),
}
for _prim, _op in FLOAT32_ONLY.items():
    register(
        _prim, partial(_float32_only, _op, _prim), onnx_ops=(_op, *_F64_ONNX_OPS.get(_prim, ()))
    )


# -- accurate formulas ----------------------------------------------------------------------


def _expm1(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    # Kahan: (u - 1) * x / log(u) with u = exp(x) is accurate where exp(x) - 1 cancels.
    u = ctx.op.Exp(x)
    one = _one(ctx, x)
    um1 = ctx.op.Sub(u, one)
    r = ctx.op.Mul(um1, ctx.op.Div(x, ctx.op.Log(u)))  # x / log(u) ~ 1: no overflow
    r = ctx.op.Where(ctx.op.Equal(u, one), x, r)
    r = ctx.op.Where(ctx.op.Equal(um1, ctx.op.Neg(one)), ctx.op.Neg(one), r)
    return ctx.op.Where(ctx.op.IsInf(u), u, r)


@lowering("expm1", onnx_ops=("Exp", "Log", "Where", "Div", "Equal", "IsInf", "Mul", "Neg", "Sub"))
def _expm1_rule(ctx: LoweringContext, x: ir.Value, *, accuracy: object = None) -> ir.Value:
    del accuracy  # XLA's speed/accuracy hint: an ONNX op has no such knob (computed in full)
    return _expm1(ctx, x)


@lowering("log1p", onnx_ops=("Log", "Where", "Add", "Div", "Equal", "IsInf", "Mul", "Or", "Sub"))
def _log1p_rule(ctx: LoweringContext, x: ir.Value, *, accuracy: object = None) -> ir.Value:
    del accuracy  # XLA's speed/accuracy hint: an ONNX op has no such knob (computed in full)
    return ctx.log1p(x)


@lowering("exp2", onnx_ops=("Pow",))
def _exp2(ctx: LoweringContext, x: ir.Value, *, accuracy: object = None) -> ir.Value:
    del accuracy  # XLA's speed/accuracy hint: an ONNX op has no such knob (computed in full)
    return ctx.op.Pow(ctx.const(2.0, like=x), x)


@lowering("log2", onnx_ops=("Log", "Mul"))
def _log2(ctx: LoweringContext, x: ir.Value, *, accuracy: object = None) -> ir.Value:
    """A primitive of its own on newer JAX, lowered there as log(x) * (1 / ln 2) in x's type."""
    del accuracy  # XLA's speed/accuracy hint: an ONNX op has no such knob (computed in full)
    return ctx.op.Mul(ctx.op.Log(x), ctx.const(1.4426950408889634, like=x))


@lowering("square", onnx_ops=("Mul",))
def _square(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    return ctx.op.Mul(x, x)


@lowering("one_minus_square", onnx_ops=("Mul", "Sub"))
def _one_minus_square(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    return ctx.op.Sub(_one(ctx, x), ctx.op.Mul(x, x))  # tanh's derivative in JAX >= 0.12


@lowering("rsqrt", onnx_ops=("Sqrt", "Div"))
def _rsqrt(ctx: LoweringContext, x: ir.Value, *, accuracy: object = None) -> ir.Value:
    del accuracy  # XLA's speed/accuracy hint: an ONNX op has no such knob (computed in full)
    return ctx.op.Div(_one(ctx, x), ctx.op.Sqrt(x))


@lowering(
    "cbrt",
    onnx_ops=("Pow", "Sign", "Abs", "And", "Div", "Greater", "IsInf", "Mul", "Not", "Sub", "Where"),
)
def _cbrt(ctx: LoweringContext, x: ir.Value, *, accuracy: object = None) -> ir.Value:
    del accuracy  # XLA's speed/accuracy hint: an ONNX op has no such knob (computed in full)
    # Pow gives a seed; one Newton step y -= (y^3 - |x|) / (3 y^2) makes it correctly rounded-ish
    a = ctx.op.Abs(x)
    y = ctx.op.Pow(a, ctx.const(1.0 / 3.0, like=x))
    y2 = ctx.op.Mul(y, y)
    step = ctx.op.Div(ctx.op.Sub(ctx.op.Mul(y2, y), a), ctx.op.Mul(ctx.const(3.0, like=x), y2))
    refined = ctx.op.Sub(y, step)
    ok = ctx.op.And(ctx.op.Greater(y, ctx.const(0, like=x)), ctx.op.Not(ctx.op.IsInf(y)))
    return ctx.op.Mul(ctx.op.Sign(x), ctx.op.Where(ok, refined, y))


@lowering("is_finite", onnx_ops=("IsNaN", "IsInf", "Or", "Not"))
def _is_finite(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    return ctx.op.Not(ctx.op.Or(ctx.op.IsNaN(x), ctx.op.IsInf(x)))


@lowering(
    "round",
    onnx_ops=(
        "Round",
        "Floor",
        "Abs",
        "Add",
        "Cast",
        "GreaterOrEqual",
        "IsInf",
        "Mul",
        "Sign",
        "Sub",
        "Where",
    ),
)
def _round(ctx: LoweringContext, x: ir.Value, *, rounding_method: int = 0) -> ir.Value:
    if int(rounding_method) == 1:  # TO_NEAREST_EVEN
        return ctx.op.Round(x)
    # AWAY_FROM_ZERO: floor(|x|) + (frac >= 0.5), exact (no x + 0.5 rounding error)
    a = ctx.op.Abs(x)
    t = ctx.op.Floor(a)
    up = ctx.op.GreaterOrEqual(ctx.op.Sub(a, t), ctx.const(0.5, like=x))
    r = ctx.op.Add(t, ctx.op.Cast(up, to=x.dtype))
    return ctx.op.Mul(ctx.op.Sign(x), ctx.op.Where(ctx.op.IsInf(a), a, r))


@lowering("div", onnx_ops=("Div",))
def _div(ctx: LoweringContext, x: ir.Value, y: ir.Value) -> ir.Value:
    return ctx.op.Div(x, y)  # integer Div truncates toward zero, like lax.div


@lowering("rem", onnx_ops=("Mod",))
def _rem(ctx: LoweringContext, x: ir.Value, y: ir.Value) -> ir.Value:
    return ctx.op.Mod(x, y, fmod=1)  # C fmod: the sign of the dividend, like lax.rem


@lowering("pow", onnx_ops=("Pow",))
def _pow(ctx: LoweringContext, x: ir.Value, y: ir.Value) -> ir.Value:
    return ctx.op.Pow(x, y)


@lowering("integer_pow", onnx_ops=("Mul", "Div", "Expand", "Shape"))
def _integer_pow(ctx: LoweringContext, x: ir.Value, *, y: int) -> ir.Value:
    # Repeated squaring, like XLA: exact for integers, and the same rounding as JAX for floats.
    if y == 0:
        return ctx.op.Expand(ctx.const(1, like=x), ctx.op.Shape(x))
    result: ir.Value | None = None
    base, n = x, abs(y)
    while n:
        if n & 1:
            result = base if result is None else ctx.op.Mul(result, base)
        n >>= 1
        if n:
            base = ctx.op.Mul(base, base)
    assert result is not None
    return ctx.op.Div(ctx.const(1, like=x), result) if y < 0 else result


@lowering(
    "atan2",
    onnx_ops=(
        "Atan",
        "Div",
        "Where",
        "Abs",
        "Add",
        "And",
        "Cast",
        "Cos",
        "Equal",
        "Greater",
        "IsInf",
        "Less",
        "Mul",
        "Not",
        "Or",
        "Sign",
        "Sin",
        "Sub",
    ),
)
def _atan2(ctx: LoweringContext, y: ir.Value, x: ir.Value) -> ir.Value:
    # atan2(y, x) = sign(y) * atan2(|y|, x), signed zeros and infinities as C atan2. The sign
    # is applied by a product after the quadrant selection: onnxruntime's Where returns +0 for
    # a selected -0 (microsoft/onnxruntime#32191), so no -0 may pass through a Where.
    dtype = onnx_aval(ctx.aval_in)[0]
    atan = _f64_atan if dtype == np.float64 else (lambda c, v: c.op.Atan(v))
    pi = ctx.const(np.pi, like=x)
    zero = ctx.const(0, like=x)
    abs_y = ctx.op.Abs(y)
    both_inf = ctx.op.And(ctx.op.IsInf(x), ctx.op.IsInf(y))
    ratio = ctx.op.Div(abs_y, x)
    # with both infinite, use |ratio| = 1 so the quadrant fix-up gives pi/4, 3pi/4
    ratio = ctx.op.Where(both_inf, ctx.op.Sign(x), ratio)
    base = atan(ctx, ratio)
    neg_x = ctx.op.Or(ctx.op.Less(x, zero), ctx.is_negative_zero(x))
    angle = ctx.op.Where(neg_x, ctx.op.Add(base, pi), base)
    # x == 0 and y == 0: atan2(0, +0) = 0 and atan2(0, -0) = pi
    both_zero = ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Equal(y, zero))
    angle = ctx.op.Where(both_zero, ctx.op.Where(neg_x, pi, zero), angle)
    # x == 0, y a nonzero number: pi/2 (a NaN y stays NaN, so not Not(y == 0))
    x_zero = ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Greater(abs_y, zero))
    angle = ctx.op.Where(x_zero, ctx.const(np.pi / 2, like=x), angle)
    return ctx.op.Mul(_copysign_one(ctx, y), angle)


def _copysign_one(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    negative = ctx.op.Or(ctx.op.Less(x, ctx.const(0, like=x)), ctx.is_negative_zero(x))
    return ctx.op.Where(negative, ctx.const(-1, like=x), _one(ctx, x))


# -- logical / bitwise ----------------------------------------------------------------------


def _logical(bool_op: str, int_op: str, ctx: LoweringContext, *xs: ir.Value) -> ir.Value:
    op = bool_op if _is_bool(ctx.aval_in) else int_op
    return getattr(ctx.op, op)(*xs)


for _prim, (_b, _i) in {
    "and": ("And", "BitwiseAnd"),
    "or": ("Or", "BitwiseOr"),
    "xor": ("Xor", "BitwiseXor"),
    "not": ("Not", "BitwiseNot"),
}.items():
    register(_prim, partial(_logical, _b, _i), onnx_ops=(_b, _i))


@lowering("ne", onnx_ops=("Equal", "Not"))
def _ne(ctx: LoweringContext, x: ir.Value, y: ir.Value) -> ir.Value:
    return ctx.op.Not(ctx.op.Equal(x, y))


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bit_shift(
    ctx: LoweringContext, x: ir.Value, s: ir.Value, direction: str, arithmetic: bool
) -> ir.Value:
    """Shifts on the unsigned view of x; shift counts >= the bit width give 0 (or the sign)."""
    dtype = onnx_aval(ctx.aval_in)[0]
    bits = dtype.itemsize * 8
    udtype = np.dtype(_UNSIGNED[dtype.itemsize])
    negative = None
    if arithmetic:  # the top bit is the sign, for unsigned types too (XLA semantics)
        if dtype.kind == "i":
            negative = ctx.op.Less(x, ctx.const(0, like=x))
        else:
            negative = ctx.op.GreaterOrEqual(x, ctx.const(1 << (bits - 1), like=x))
    source = ctx.op.Where(negative, ctx.op.BitwiseNot(x), x) if negative is not None else x
    ux, us = ctx.cast(source, udtype), ctx.cast(s, udtype)
    # out of range counts (negative counts become huge when viewed unsigned)
    in_range = ctx.op.Less(us, ctx.const(bits, dtype=udtype))
    safe = ctx.op.Where(in_range, us, ctx.const(0, dtype=udtype))
    shifted = ctx.op.BitShift(ux, safe, direction=direction)
    shifted = ctx.op.Where(in_range, shifted, ctx.const(0, dtype=udtype))
    result = ctx.cast(shifted, dtype)
    if negative is not None:
        result = ctx.op.Where(negative, ctx.op.BitwiseNot(result), result)
    return result


@lowering("shift_left", onnx_ops=("BitShift", "Cast", "Less", "Where"))
def _shift_left(ctx: LoweringContext, x: ir.Value, s: ir.Value) -> ir.Value:
    return _bit_shift(ctx, x, s, "LEFT", arithmetic=False)


@lowering("shift_right_logical", onnx_ops=("BitShift", "Cast", "Less", "Where"))
def _shift_right_logical(ctx: LoweringContext, x: ir.Value, s: ir.Value) -> ir.Value:
    return _bit_shift(ctx, x, s, "RIGHT", arithmetic=False)


@lowering(
    "shift_right_arithmetic",
    onnx_ops=("BitShift", "BitwiseNot", "Cast", "GreaterOrEqual", "Less", "Where"),
)
def _shift_right_arithmetic(ctx: LoweringContext, x: ir.Value, s: ir.Value) -> ir.Value:
    return _bit_shift(ctx, x, s, "RIGHT", arithmetic=True)


# -- selection, clamping, conversion --------------------------------------------------------


@lowering("select_n", onnx_ops=("Where", "Equal", "Mul", "Xor"))
def _select_n(ctx: LoweringContext, which: ir.Value, *cases: ir.Value) -> ir.Value:
    if len(cases) == 1:
        return ctx.op.Identity(cases[0])
    if _is_bool(ctx.avals_in[0]):
        return _where(ctx, which, cases[1], cases[0])
    # an integer selector: a chain of Wheres, last case first
    result = cases[-1]
    for i in range(len(cases) - 2, -1, -1):
        result = _where(
            ctx, ctx.op.Equal(which, ctx.const(i, like=ctx.avals_in[0])), cases[i], result
        )
    return result


def _where(ctx: LoweringContext, which: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
    """``Where(which, x, y)`` that keeps every -0.0. onnxruntime's Where (1.32, every float
    type and shape, measured) gives +0.0 for a -0.0 picked from ``x`` but keeps one picked
    from ``y``, so an operand that may be -0.0 goes to the ``y`` slot, under the negated
    selector; when both may, ``Where(not which, 1, x) * Where(which, 1, y)``, exact as a
    product with 1 is (NaN and infinities included). The negation is ``Xor(which, true)``,
    never ``Not``: onnxruntime rewrites ``Where(Not(c), a, b)`` to ``Where(c, b, a)``, which
    would swap the slots back; for the same reason a ``Not`` selector is taken apart here."""
    producer = which.producer()
    if producer is not None and producer.op_type == "Not" and producer.inputs[0] is not None:
        which, x, y = producer.inputs[0], y, x
    x_signed, y_signed = _may_be_negative_zero(x), _may_be_negative_zero(y)
    if not x_signed:
        return ctx.op.Where(which, x, y)
    negated = ctx.op.Xor(which, ctx.const(True))
    if not y_signed:
        return ctx.op.Where(negated, y, x)
    one = _one(ctx, x)
    return ctx.op.Mul(ctx.op.Where(negated, one, x), ctx.op.Where(which, one, y))


_SAME_VALUES = frozenset(
    ["Expand", "Reshape", "Unsqueeze", "Squeeze", "Identity", "Transpose", "Flatten"]
)


def _may_be_negative_zero(value: ir.Value) -> bool:
    """False when ``value`` is provably never -0.0: not a float, a constant without one, an Abs."""
    if value.dtype is None or not value.dtype.is_floating_point():
        return False
    while (
        value.const_value is None
        and (producer := value.producer()) is not None
        and producer.op_type in _SAME_VALUES
        and producer.inputs[0] is not None
    ):
        value = producer.inputs[0]
    if value.const_value is not None:
        array = value.const_value.numpy()
        return bool(np.any((array == 0) & np.signbit(array)))
    producer = value.producer()
    return producer is None or producer.op_type != "Abs"


@lowering("clamp", onnx_ops=("Max", "Min"))
def _clamp(ctx: LoweringContext, lo: ir.Value, x: ir.Value, hi: ir.Value) -> ir.Value:
    return ctx.op.Min(ctx.op.Max(x, lo), hi)


@lowering(
    "convert_element_type",
    onnx_ops=("Cast", "Equal", "GreaterOrEqual", "IsNaN", "Max", "Min", "Not", "Where"),
)
def _convert_element_type(
    ctx: LoweringContext,
    x: ir.Value,
    *,
    new_dtype: object,
    sharding: object = None,
    weak_type: bool = False,
) -> ir.Value:
    # weak typing is JAX's promotion rule while tracing: the output aval's dtype is the type;
    # a sharding places the value on devices, which a single ONNX graph does not
    del sharding, weak_type
    src, dst = onnx_aval(ctx.aval_in)[0], onnx_aval(ctx.aval_out)[0]
    if src == dst:
        return x
    if dst == np.bool_:  # JAX: x != 0 (NaN is true); ONNX Cast to bool agrees, but be explicit
        return ctx.op.Not(ctx.op.Equal(x, ctx.const(0, like=x)))
    if is_float(src):
        if np.issubdtype(dst, np.integer):
            return _float_to_int(ctx, x, src, dst)
    return ctx.cast(x, dst)


def _float_to_int(ctx: LoweringContext, x: ir.Value, src: np.dtype, dst: np.dtype) -> ir.Value:
    # JAX truncates toward zero, saturates out-of-range values and maps NaN to 0; ONNX leaves
    # those undefined, so clamp first (in a float type wide enough to hold the int limits).
    info = np.iinfo(dst)
    work = ctx.cast(x, np.float32) if src.itemsize < 4 else x
    wdtype = np.float32 if src.itemsize <= 4 else np.float64
    lo = np.asarray(info.min, dtype=wdtype)
    hi = np.asarray(info.max, dtype=wdtype)
    if int(hi) > info.max:  # the float nearest to max rounds up: step below it
        hi = np.nextafter(hi, np.asarray(0, dtype=wdtype))
    clamped = ctx.op.Min(ctx.op.Max(work, ctx.const(lo)), ctx.const(hi))
    clamped = ctx.op.Where(ctx.op.IsNaN(work), ctx.const(0, dtype=wdtype), clamped)
    result = ctx.cast(clamped, dst)
    if int(hi) < info.max:  # values at or above the float limit saturate to the int max
        above = ctx.op.GreaterOrEqual(work, ctx.const(np.asarray(info.max, dtype=wdtype)))
        result = ctx.op.Where(above, ctx.const(info.max, dtype=dst), result)
    return result


def _passthrough(
    ctx: LoweringContext,
    *xs: ir.Value,
    devices: object = None,
    srcs: object = None,
    copy_semantics: object = None,
    name: object = None,
    sharding: object = None,
    layout: object = None,
    context_mesh: object = None,
    unconstrained_dims: object = None,
    axes: object = None,
    dst_sharding: object = None,
    concrete_mesh: object = None,
    reduction_order: object = None,
) -> ir.Value | list[ir.Value]:
    """The operands as they are: the union of the params of the primitives below, on JAX 0.10
    and 0.12, each about where a value lives or what it is called, not what it is."""
    del devices, srcs, copy_semantics  # device_put: one device here, a copy is the value
    del name  # name (checkpoint_name): a remat policy's label
    del sharding, layout, context_mesh, unconstrained_dims  # sharding_constraint: placement
    del axes  # pvary: the mesh axes a value varies along (shard_map bodies are stacked)
    del dst_sharding, concrete_mesh, reduction_order  # reshard / mesh_cast: placement
    return xs[0] if len(xs) == 1 else list(xs)


# primitives that do nothing to values once exported (gradients, sharding, placement, names):
# complex values pass through as their (real, imag) pairs (jnp.linalg.solve's stop_gradient)
for _prim in (
    "stop_gradient",
    "optimization_barrier",
    "copy",
    "copy_p",
    "sharding_constraint",
    "device_put",
    "name",
    "pvary",
    "mesh_cast",
    "reshard",
):
    register(_prim, _passthrough, onnx_ops=(), complex_pairs=True)


def _erf64(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    """erf in float64: a Taylor series for |x| < 2.5, a continued fraction for erfc beyond."""
    a = ctx.op.Abs(x)
    small_x = ctx.op.Min(a, ctx.const(2.5, like=x))
    # series: 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
    x2 = ctx.op.Mul(small_x, small_x)
    term = small_x
    total = small_x
    for n in range(1, 60):
        term = ctx.op.Mul(term, ctx.op.Mul(x2, ctx.const(-1.0 / n, like=x)))
        total = ctx.op.Add(total, ctx.op.Mul(term, ctx.const(1.0 / (2 * n + 1), like=x)))
    series = ctx.op.Mul(total, ctx.const(2.0 / np.sqrt(np.pi), like=x))
    # erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...)))), x >= 2.5
    big_x = ctx.op.Max(a, ctx.const(2.5, like=x))
    frac = big_x
    for k in range(60, 0, -1):
        frac = ctx.op.Add(big_x, ctx.op.Div(ctx.const(k / 2.0, like=x), frac))
    erfc = ctx.op.Div(
        ctx.op.Exp(ctx.op.Neg(ctx.op.Mul(big_x, big_x))),
        ctx.op.Mul(frac, ctx.const(np.sqrt(np.pi), like=x)),
    )
    tail = ctx.op.Sub(_one(ctx, x), erfc)
    r = ctx.op.Where(ctx.op.Less(a, ctx.const(2.5, like=x)), series, tail)
    r = ctx.op.Where(ctx.op.IsNaN(x), x, r)
    return ctx.op.Mul(ctx.op.Sign(x), r)


@lowering(
    "erf_inv",
    onnx_ops=(
        "Log",
        "Sqrt",
        "Where",
        "Abs",
        "Add",
        "Div",
        "Equal",
        "Exp",
        "IsInf",
        "IsNaN",
        "Less",
        "Max",
        "Min",
        "Mul",
        "Neg",
        "Sign",
        "Sub",
    ),
)
def _erf_inv(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    """Giles' single-precision approximation (as XLA uses), refined by Newton in float64."""
    dtype = onnx_aval(ctx.aval_in)[0]
    one = _one(ctx, x)
    w = ctx.op.Neg(ctx.op.Log(ctx.op.Mul(ctx.op.Sub(one, x), ctx.op.Add(one, x))))
    central = [
        2.81022636e-08,
        3.43273939e-07,
        -3.5233877e-06,
        -4.39150654e-06,
        0.00021858087,
        -0.00125372503,
        -0.00417768164,
        0.246640727,
        1.50140941,
    ]
    tail = [
        -0.000200214257,
        0.000100950558,
        0.00134934322,
        -0.00367342844,
        0.00573950773,
        -0.0076224613,
        0.00943887047,
        1.00167406,
        2.83297682,
    ]

    def horner(coeffs: list[float], t: ir.Value) -> ir.Value:
        p = ctx.const(coeffs[0], like=x)
        for c in coeffs[1:]:
            p = ctx.op.Add(ctx.op.Mul(p, t), ctx.const(c, like=x))
        return p

    lt5 = ctx.op.Less(w, ctx.const(5.0, like=x))
    p_c = horner(central, ctx.op.Sub(w, ctx.const(2.5, like=x)))
    p_t = horner(tail, ctx.op.Sub(ctx.op.Sqrt(w), ctx.const(3.0, like=x)))
    y = ctx.op.Mul(ctx.op.Where(lt5, p_c, p_t), x)
    if dtype == np.float64:
        for _ in range(3):
            err = ctx.op.Sub(_erf64(ctx, y), x)
            deriv = ctx.op.Mul(
                ctx.const(2.0 / np.sqrt(np.pi), like=x), ctx.op.Exp(ctx.op.Neg(ctx.op.Mul(y, y)))
            )
            step = ctx.op.Div(err, deriv)
            y = ctx.op.Where(ctx.op.IsInf(y), y, ctx.op.Sub(y, step))
    inf = ctx.const(np.inf, like=x)
    y = ctx.op.Where(ctx.op.Equal(ctx.op.Abs(x), one), ctx.op.Mul(x, inf), y)
    return y
