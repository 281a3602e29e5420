"""OpenVINO 2026.4 (CPU plugin): uint32 arithmetic computed as int32 (its CPU plugin computes
uint32 through float32), with the comparisons, shifts and remainders that differ between the two
written on 16-bit halves.

Each rewrite's docstring says what the runtime does wrong and how the rewrite avoids it; the
profile that lists them is ``openvino.py``."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement
from jax2onnx_nn.core.ir.values import constant_array
from jax2onnx_nn.core.targets.common import (
    BOOL,
    F32,
    I32,
    U32,
    Halves,
    as_int32,
    halves,
    i32,
    scaled,
)

_SAME_BITS = frozenset(
    {"Add", "Sub", "Mul", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "CumSum"}
)


_COMPARE = {
    "Less": (False, False),
    "Greater": (True, False),
    "LessOrEqual": (True, True),
    "GreaterOrEqual": (False, True),
}


_SMALL_DIVISOR = 2**15  # below: remainder by bytes in float32 (every partial value < 2**23)


@rewrite()
def uint32_as_int32(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO's CPU plugin computes uint32 arithmetic through float32 and int32 comparisons,
    Mod and shifts too (values above 2**24 lose bits: every ``jax.random`` kernel goes wrong),
    while its int32 Add, Sub, Mul, CumSum and bitwise ops wrap exactly. So uint32 values are
    computed on the same bits as int32: the wrapping ops as they are; shifts left by constant
    amounts as a multiply; comparisons, Max/Min, right shifts by constant amounts and Mod on the
    value's two 16-bit halves, which float32 holds exactly (``halves``). No op used here needs
    opset 18, so this also covers the bitwise ops' decomposition below it."""
    if node.op_type == "Where" and node.outputs[0].dtype == U32 and None not in node.inputs:
        # (its Where of uint32 goes through int32 too: 4294967295 came out as 2147483647)
        condition, a, b = node.inputs
        result = edit.op("Where", condition, as_int32(edit, a), as_int32(edit, b), dtype=I32)  # type: ignore[arg-type]
        return edit.op("Cast", result, to=U32, dtype=U32)
    if not node.inputs or node.inputs[0] is None or node.inputs[0].dtype != U32:
        return None
    op = node.op_type
    present = [v for v in node.inputs if v is not None]
    if len(present) != len(node.inputs):
        return None  # (an omitted optional input: none of the ops rewritten here has one)
    args = [as_int32(edit, v) if v.dtype == U32 else v for v in present]
    if op in _SAME_BITS:
        result = edit.op(op, *args, dtype=I32)
    elif op in _COMPARE or op == "Equal":
        x, y = (halves(edit, a) for a in args)
        if op == "Equal":
            return _equal(edit, x, y)
        swap, negate = _COMPARE[op]
        less = _less(edit, y, x) if swap else _less(edit, x, y)
        return edit.op("Not", less, dtype=BOOL) if negate else less
    elif op in ("Max", "Min") and len(args) == 2:
        x_less = _less(edit, halves(edit, args[0]), halves(edit, args[1]))
        first, second = (args[1], args[0]) if op == "Max" else (args[0], args[1])
        result = edit.op("Where", x_less, first, second, dtype=I32)
    elif op == "BitShift":
        constant = constant_array(node.inputs[1])
        # (a run-time amount: its clipped value indexes tables; OpenVINO's own BitShift of them
        # goes through float32 and makes a scalar rank 1, which a loop state cannot take)
        amount = (
            np.clip(constant.astype(np.int64), 0, _MAX_SHIFT)
            if constant is not None
            else _shift_index(edit, args[1])
        )
        if node.attributes["direction"].as_string() == "LEFT":
            result = edit.op("Mul", args[0], _per_amount(edit, _LEFT_FACTORS, amount), dtype=I32)
        else:
            result = _shift_right(edit, halves(edit, args[0]), amount)
    elif op == "Mod":  # (fmod or not: the same for unsigned values)
        result = _remainder(edit, args[0], args[1], constant_array(node.inputs[1]))
    else:
        return None
    return edit.op("Cast", result, to=U32, dtype=U32)


def _less(edit: Editor, x: Halves, y: Halves) -> ir.Value:
    """Unsigned ``x < y``: the high halves decide, else the low ones."""
    high_less = edit.op("Less", x[0], y[0], dtype=BOOL)
    high_equal = edit.op("Equal", x[0], y[0], dtype=BOOL)
    low_less = edit.op("Less", x[1], y[1], dtype=BOOL)
    return edit.op("Or", high_less, edit.op("And", high_equal, low_less, dtype=BOOL), dtype=BOOL)


def _equal(edit: Editor, x: Halves, y: Halves) -> ir.Value:
    both = [edit.op("Equal", a, b, dtype=BOOL) for a, b in zip(x, y, strict=True)]
    return edit.op("And", *both, dtype=BOOL)


_MAX_SHIFT = 48  # (any amount from 32 on gives 0; 48 also empties the high half's scale)


_AMOUNTS = np.arange(_MAX_SHIFT + 1)


# per shift amount: the left shift's int32 factor, and the right shift's high-half float scale and
# int32 factor (``_shift_right``) and low-half float scale
_LEFT_FACTORS = (
    np.where(_AMOUNTS < 32, np.left_shift(1, np.clip(_AMOUNTS, 0, 31)), 0)
    .astype(np.uint32)
    .view(np.int32)
)


_HIGH_SCALES = np.where(_AMOUNTS >= 16, np.ldexp(1.0, 16 - _AMOUNTS), 1.0).astype(np.float32)


_HIGH_FACTORS = np.where(_AMOUNTS < 16, np.left_shift(1, np.clip(16 - _AMOUNTS, 0, 16)), 1).astype(
    np.int32
)


_LOW_SCALES = np.ldexp(1.0, -_AMOUNTS).astype(np.float32)


def _shift_index(edit: Editor, amount: ir.Value) -> ir.Value:
    """Run-time shift amounts (int32 bits of uint32) as indices into the tables: clipped to
    ``_MAX_SHIFT``, those at or above 2**31 (negative as int32) too."""
    clipped = edit.op("Min", amount, np.int32(_MAX_SHIFT), dtype=I32)
    return edit.op(
        "Where",
        edit.op("Less", amount, np.int32(0), dtype=BOOL),
        np.int32(_MAX_SHIFT),
        clipped,
        dtype=I32,
    )


def _per_amount(
    edit: Editor, table: np.ndarray, amount: np.ndarray | ir.Value
) -> np.ndarray | ir.Value:
    """``table`` at each shift amount: constant amounts index it here, run-time ones by a Gather."""
    if isinstance(amount, np.ndarray):
        return table[amount]
    return edit.op("Gather", table, amount, axis=0, dtype=ir.DataType.from_numpy(table.dtype))


def _shift_right(edit: Editor, x: Halves, amount: np.ndarray | ir.Value) -> ir.Value:
    """Logical right shift by amounts in ``[0, _MAX_SHIFT]`` (constants, or run-time indices;
    any shape, broadcast): the high half scaled by 2**(16 - s) (a float scale and Floor for
    s >= 16, an int32 multiply below, which wraps into the top bits) plus the low half's
    ``floor(low / 2**s)``; the two never overlap. Amounts of 32 and more give 0."""
    high_scale = _per_amount(edit, _HIGH_SCALES, amount)
    high = edit.op(
        "Mul",
        i32(edit, edit.op("Floor", edit.op("Mul", x[0], high_scale, dtype=F32), dtype=F32)),
        _per_amount(edit, _HIGH_FACTORS, amount),
        dtype=I32,
    )
    low = i32(
        edit,
        edit.op(
            "Floor",
            edit.op("Mul", x[1], _per_amount(edit, _LOW_SCALES, amount), dtype=F32),
            dtype=F32,
        ),
    )
    return edit.op("Add", high, low, dtype=I32)


def _fmod_small(edit: Editor, t: ir.Value, c: ir.Value) -> ir.Value:
    """``t mod c`` for float32 integers ``0 <= t < 2**23``, ``c <= 2**15`` (every step exact; the
    corrections guard a Div that is not correctly rounded)."""
    r = edit.op(
        "Sub",
        t,
        edit.op("Mul", c, edit.op("Floor", edit.op("Div", t, c, dtype=F32), dtype=F32), dtype=F32),
        dtype=F32,
    )
    r = edit.op(
        "Where",
        edit.op("Less", r, np.float32(0), dtype=BOOL),
        edit.op("Add", r, c, dtype=F32),
        r,
        dtype=F32,
    )
    return edit.op(
        "Where", edit.op("Less", r, c, dtype=BOOL), r, edit.op("Sub", r, c, dtype=F32), dtype=F32
    )


def _remainder(edit: Editor, x: ir.Value, y: ir.Value, constant: np.ndarray | None) -> ir.Value:
    """Unsigned ``x mod y`` on int32 bits (``x`` where ``y`` is 0, as in JAX).

    A divisor up to 2**15: long division by bytes in float32. A larger one: the quotient is
    below 2**17, so float32's estimate is within one; one less than it (at least 0) leaves a
    remainder in [0, 3y) with no wrap, which two conditional subtractions bring below y.
    A constant divisor takes one of the two ways; a runtime one computes both and selects."""
    xh, xl = halves(edit, x)
    if constant is None:
        yh, yl = halves(edit, y)
    else:
        bits = constant.astype(np.uint32)
        yh, yl = (edit.const((bits >> s & 0xFFFF).astype(np.float32)) for s in (16, 0))
    yf = edit.op("Add", scaled(edit, yh, 2.0**16), yl, dtype=F32)
    small = large = None
    if constant is None or np.any(constant <= _SMALL_DIVISOR):
        r: ir.Value | None = None
        for half in (xh, xl):
            top = edit.op("Floor", scaled(edit, half, 1 / 256), dtype=F32)
            for digit in (top, edit.op("Sub", half, scaled(edit, top, 256.0), dtype=F32)):
                r = _fmod_small(
                    edit,
                    digit
                    if r is None
                    else edit.op("Add", scaled(edit, r, 256.0), digit, dtype=F32),
                    yl,
                )
        small = i32(edit, r) if r is not None else None  # (four digits: r is set)
    if constant is None or np.any(constant > _SMALL_DIVISOR):
        xf = edit.op("Add", scaled(edit, xh, 2.0**16), xl, dtype=F32)
        estimate = edit.op("Floor", edit.op("Div", xf, yf, dtype=F32), dtype=F32)
        quotient = i32(
            edit,
            edit.op(
                "Max", edit.op("Sub", estimate, np.float32(1), dtype=F32), np.float32(0), dtype=F32
            ),
        )
        large = edit.op("Sub", x, edit.op("Mul", quotient, y, dtype=I32), dtype=I32)
        for _ in range(2):
            below = _less(edit, halves(edit, large), (yh, yl))
            large = edit.op("Where", below, large, edit.op("Sub", large, y, dtype=I32), dtype=I32)
    if small is None or large is None:
        result = small if large is None else large
    else:
        is_small = edit.op("LessOrEqual", yf, np.float32(_SMALL_DIVISOR), dtype=BOOL)
        result = edit.op("Where", is_small, small, large, dtype=I32)
    assert result is not None
    if constant is not None and np.all(constant != 0):
        return result
    zero = edit.op(
        "And", *(edit.op("Equal", h, np.float32(0), dtype=BOOL) for h in (yh, yl)), dtype=BOOL
    )
    return edit.op("Where", zero, x, result, dtype=I32)


@rewrite("Mod")
def uint32_bits(node: ir.Node, edit: Editor) -> Replacement:
    """``(x >> s) mod 2``, how the bitwise ops below opset 18 read bit ``s`` of uint32 ``x``, is
    the sign of ``x << (31 - s)``: an int32 multiply and a comparison with 0, both exact on
    OpenVINO (and ~20 ops fewer per bit than the shift and the remainder on 16-bit halves)."""
    if node.inputs[0] is None or node.inputs[0].dtype != U32:
        return None
    divisor = constant_array(node.inputs[1])
    shift = node.inputs[0].producer()
    if divisor is None or not np.all(divisor == 2) or shift is None or shift.op_type != "BitShift":
        return None
    amount = constant_array(shift.inputs[1])
    if (
        amount is None
        or shift.attributes["direction"].as_string() != "RIGHT"
        or np.any((amount < 0) | (amount > 31))
    ):
        return None
    factor = np.left_shift(1, 31 - amount.astype(np.int64)).astype(np.uint32).view(np.int32)
    shifted = shift.inputs[0]
    if shifted is None:
        return None
    top = edit.op("Mul", as_int32(edit, shifted), factor, dtype=I32)
    edit.replace(edit.op("Cast", edit.op("Less", top, np.int32(0), dtype=BOOL), to=U32, dtype=U32))
    if not shift.outputs[0].uses() and shift.graph is not None:
        shift.graph.remove(shift, safe=True)
    return True
