"""Value-range facts: integer (and bool) tensors known to lie in ``[lo, hi]``.

JAX code normalizes indices it cannot see the range of: ``lu_solve`` turns a negative entry of
``lu``'s permutation into ``i + n`` (``lt``, ``add``, ``select_n``) before gathering with it,
and the gather rule clamps every index into bounds (ONNX wraps negatives, rejects large ones).
For indices that come from an ``iota``, an ``argmax`` or ``lu``'s permutation all of that is
dead weight. The interpreter records a fact per value (``value.meta[RANGE]``), from:

- constants (their data) and primitives whose results JAX bounds (``iota``, ``argmax``/``argmin``,
  ``lu``'s pivots and permutation, ``lu_pivots_to_permutation``);
- the primitives that only move, pick or widen entries (reshapes, slices, transposes,
  ``concatenate``, ``sort``, ``select_n``, integer ``convert_element_type``), and ``add``/``sub``.

What the facts decide: a comparison whose operands' ranges settle it is a constant
(:func:`fold`); ``select_n`` on a constant predicate is the chosen case; and the gather and
scatter rules skip the clamp of indices already in bounds (:func:`value_range`).

A bound is an int or None (unknown: a symbolic size, or no fact).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi

RANGE = "jax2onnx_nn.range"
Range = tuple[int | None, int | None]


def value_range(value: ir.Value) -> Range | None:
    """``(lo, hi)`` that every entry of ``value`` lies within, or None (nothing known)."""
    fact = value.meta.get(RANGE)
    if fact is not None:
        return fact
    tensor = value.const_value
    if tensor is None or value.producer() is not None and value.producer().op_type != "Constant":
        return None
    array = tensor.numpy()
    if array.size == 0 or array.size > 1024 or array.dtype.kind not in "biu":
        return None
    return int(array.min()), int(array.max())


def within(value: ir.Value, lo: int, hi: Any) -> tuple[bool, bool]:
    """Whether ``value`` is provably ``>= lo``, and provably ``<= hi`` (an int; a symbolic
    ``hi`` is never proven)."""
    fact = value_range(value)
    if fact is None:
        return False, False
    above = fact[0] is not None and fact[0] >= lo
    below = fact[1] is not None and not jxi.is_symbolic_dim(hi) and fact[1] <= int(hi)
    return above, below


def _last_index(n: Any) -> int | None:
    return None if jxi.is_symbolic_dim(n) else max(int(n) - 1, 0)


def _same(ranges: Sequence[Range | None], eqn: Any) -> list[Range | None]:
    return [ranges[0]] * len(eqn.outvars)


def _union(ranges: Sequence[Range | None]) -> Range | None:
    if not ranges or any(r is None for r in ranges):
        return None
    los, his = [r[0] for r in ranges], [r[1] for r in ranges]
    lo = None if None in los else min(los)
    hi = None if None in his else max(his)
    return None if lo is None and hi is None else (lo, hi)


def _add(a: Range | None, b: Range | None, sign: int) -> Range | None:
    if a is None or b is None:
        return None
    b_lo, b_hi = (b[0], b[1]) if sign > 0 else (None if b[1] is None else -b[1], None if b[0] is None else -b[0])
    lo = None if a[0] is None or b_lo is None else a[0] + b_lo
    hi = None if a[1] is None or b_hi is None else a[1] + b_hi
    return None if lo is None and hi is None else (lo, hi)


def _fits(fact: Range | None, dtype: Any) -> Range | None:
    """``fact`` if every value in it is exact in the integer ``dtype``."""
    dtype = np.dtype(dtype)
    if fact is None or dtype.kind not in "iu":
        return None
    info = np.iinfo(dtype)
    if None in fact:  # an index into a symbolic size (far below 2**31): a lower bound of 0 or more
        wide = dtype.itemsize >= 4 and fact[0] is not None and 0 <= fact[0] <= info.max and fact[1] is None
        return fact if wide else None
    return fact if info.min <= fact[0] and fact[1] <= info.max else None


# primitive -> (input ranges, eqn) -> output ranges
_RULES: dict[str, Callable[[list[Range | None], Any], list[Range | None]]] = {
    "iota": lambda r, e: [_fits((0, _last_index(e.params["shape"][e.params["dimension"]])), e.params["dtype"])],
    "argmax": lambda r, e: [(0, _last_index(e.invars[0].aval.shape[e.params["axes"][0]]))],
    "argmin": lambda r, e: [(0, _last_index(e.invars[0].aval.shape[e.params["axes"][0]]))],
    # getrf: pivots[j] and the permutation are rows of the (..., m, n) operand
    "lu": lambda r, e: [None, (0, _last_index(e.invars[0].aval.shape[-2])), (0, _last_index(e.invars[0].aval.shape[-2]))],
    "lu_pivots_to_permutation": lambda r, e: [(0, _last_index(e.params["permutation_size"]))],
    "sort": lambda r, e: list(r),
    "concatenate": lambda r, e: [_union(r)],
    "select_n": lambda r, e: [_union(r[1:])],
    "add": lambda r, e: [_add(r[0], r[1], 1)],
    "sub": lambda r, e: [_add(r[0], r[1], -1)],
    "convert_element_type": lambda r, e: [_fits(r[0], e.params["new_dtype"])],
    **{name: _same for name in (
        "broadcast_in_dim", "reshape", "squeeze", "expand_dims", "transpose", "copy", "copy_p", "slice",
        "dynamic_slice", "rev", "stop_gradient",
    )},
}

_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}


def _decided(name: str, a: Range | None, b: Range | None) -> bool | None:
    """The result of ``a <op> b`` for every pair of values in the ranges, when one."""
    if a is None or b is None or name not in _COMPARE:
        return None
    # x < y for all: hi(x) < lo(y); never: lo(x) >= hi(y) (and the mirrored forms)
    lo_a, hi_a, lo_b, hi_b = a[0], a[1], b[0], b[1]
    def less(x_hi: int | None, y_lo: int | None, strict: bool) -> bool:
        return x_hi is not None and y_lo is not None and (x_hi < y_lo if strict else x_hi <= y_lo)
    if name in ("lt", "le"):
        if less(hi_a, lo_b, name == "lt"):
            return True
        if less(hi_b, lo_a, name == "le"):
            return False
    else:
        if less(hi_b, lo_a, name == "gt"):
            return True
        if less(hi_a, lo_b, name == "ge"):
            return False
    return None


def fold(eqn: Any, inputs: Sequence[ir.Value], full: Callable[[Any, Any], ir.Value]) -> list[ir.Value] | None:
    """The equation's results when the facts about its inputs settle them: a decided
    comparison (``full(aval, value)`` makes the constant), or ``select_n`` on a predicate with
    one value (the chosen case itself); else None."""
    name = eqn.primitive.name
    if name in _COMPARE:
        result = _decided(name, value_range(inputs[0]), value_range(inputs[1]))
        if result is not None:
            out = full(eqn.outvars[0].aval, result)
            out.meta[RANGE] = (int(result), int(result))
            return [out]
    if name == "select_n":
        fact = value_range(inputs[0])
        if fact is not None and fact[0] is not None and fact[0] == fact[1] and 0 <= fact[0] < len(inputs) - 1:
            case = inputs[1 + fact[0]]
            if tuple(eqn.invars[1 + fact[0]].aval.shape) == tuple(eqn.outvars[0].aval.shape):
                return [case]
    return None


def propagate(eqn: Any, inputs: Sequence[ir.Value], outputs: Sequence[ir.Value]) -> None:
    """Record the facts the equation's results have (on values that hold none yet)."""
    rule = _RULES.get(eqn.primitive.name)
    if rule is None:
        return
    ranges = rule([value_range(v) for v in inputs], eqn)
    for value, var, fact in zip(outputs, eqn.outvars, ranges, strict=False):
        if fact is None or fact == (None, None) or RANGE in value.meta:
            continue
        if np.dtype(var.aval.dtype).kind not in "biu":
            continue
        if value.const_value is None:
            value.meta[RANGE] = fact
