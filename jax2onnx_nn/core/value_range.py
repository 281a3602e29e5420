"""Value-range facts: integer (and bool) tensors known to lie in ``[lo, hi]``.

JAX code normalizes indices it cannot see the range of: ``lu_solve`` turns a negative entry of
``lu``'s permutation into ``i + n`` (``lt``, ``add``, ``select_n``) before gathering with it,
and the gather rule clamps every index into bounds (ONNX wraps negatives, rejects large ones).
For indices that come from an ``iota``, an ``argmax`` or ``lu``'s permutation all of that is
dead weight. The interpreter records a fact per value (``value.meta[RANGE]``), from:

- constants (their data), bools (0 or 1), and primitives whose results JAX bounds (``iota``,
  ``argmax``/``argmin``, ``lu``'s pivots and permutation, ``lu_pivots_to_permutation``);
- the primitives that only move, pick or widen entries (reshapes, slices, transposes,
  ``concatenate``, ``sort``, ``select_n``, integer ``convert_element_type``), ``add``/``sub``,
  ``max``/``min``, ``rem`` of non-negative numbers, an integer ``reduce_sum`` (a count), the
  comparisons and ``and``/``or``/``not`` of bools.

What the facts decide: an integer or bool result of one value (a comparison they settle,
``x & False``) is a constant, ``x != False``, ``x == True``, ``x & True`` and ``x | False`` are
``x`` (:func:`fold`), ``select_n`` on a constant predicate is the chosen case, and the gather and
scatter rules skip the clamp of indices already in bounds (:func:`within`). slogdet's sign
(a count of swaps and negative pivots, mod 2) and lu_solve's gather by lu's permutation lose
their normalizations this way.

A bound is an int or None (unknown: a symbolic size, or no fact).

A second fact, ``value.meta[DIM]``, says an integer tensor holds one symbolic dim in every
entry (``dim_as_value``, through integer casts, reshapes and broadcasts, ``add``/``sub`` of such
values and constants): a decoder's ``cache_index`` is ``P`` (the past's length), which the
``dynamic_update_slice`` rule compares with the operand's shape to skip its clamp, or to
write the new keys into a padded buffer as a Concat (:func:`dim_value`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.jax_types import Aval, Dim, Eqn, aval

RANGE = "jax2onnx_nn.range"
DIM = "jax2onnx_nn.dim"
Range: TypeAlias = tuple[int | None, int | None]
# the ranges of an equation's results from those of its inputs
RangeRule: TypeAlias = Callable[[list[Range | None], Eqn], list[Range | None]]


def value_range(value: ir.Value) -> Range | None:
    """``(lo, hi)`` that every entry of ``value`` lies within, or None (nothing known)."""
    fact = value.meta.get(RANGE)
    if fact is not None:
        return fact
    tensor = value.const_value
    if tensor is None and value.dtype == ir.DataType.BOOL:
        return 0, 1
    producer = value.producer()
    if tensor is None or producer is not None and producer.op_type != "Constant":
        return None
    array = tensor.numpy()
    if array.size == 0 or array.size > 1024 or array.dtype.kind not in "biu":
        return None
    return int(array.min()), int(array.max())


def within(value: ir.Value, lo: int, hi: Dim) -> tuple[bool, bool]:
    """Whether ``value`` is provably ``>= lo``, and provably ``<= hi`` (an int; a symbolic
    ``hi`` is never proven)."""
    fact = value_range(value)
    if fact is None:
        return False, False
    above = fact[0] is not None and fact[0] >= lo
    below = fact[1] is not None and not jxi.is_symbolic_dim(hi) and fact[1] <= int(hi)
    return above, below


def _last_index(n: Dim) -> int | None:
    return None if jxi.is_symbolic_dim(n) else max(int(n) - 1, 0)


def _same(ranges: Sequence[Range | None], eqn: Eqn) -> list[Range | None]:
    return [ranges[0]] * len(eqn.outvars)


def _known(ranges: Sequence[Range | None]) -> list[Range] | None:
    """``ranges`` when each is known (not None), else None."""
    known = [r for r in ranges if r is not None]
    return known if len(known) == len(ranges) else None


def _bounded(ranges: Sequence[Range | None]) -> list[tuple[int, int]] | None:
    """``ranges`` when each is known with both bounds, else None."""
    bounded = [(lo, hi) for lo, hi in _known(ranges) or [] if lo is not None and hi is not None]
    return bounded if len(bounded) == len(ranges) else None


def _union(ranges: Sequence[Range | None]) -> Range | None:
    known = _known(ranges)
    if not known:
        return None
    los = [lo for lo, _ in known if lo is not None]
    his = [hi for _, hi in known if hi is not None]
    lo = min(los) if len(los) == len(known) else None
    hi = max(his) if len(his) == len(known) else None
    return None if lo is None and hi is None else (lo, hi)


def _add(a: Range | None, b: Range | None, sign: int) -> Range | None:
    if a is None or b is None:
        return None
    b_lo, b_hi = (
        (b[0], b[1])
        if sign > 0
        else (None if b[1] is None else -b[1], None if b[0] is None else -b[0])
    )
    lo = None if a[0] is None or b_lo is None else a[0] + b_lo
    hi = None if a[1] is None or b_hi is None else a[1] + b_hi
    return None if lo is None and hi is None else (lo, hi)


def _kind(dtype: Any) -> str:
    """NumPy's kind letter of a dtype; "" for JAX's extended dtypes (PRNG keys)."""
    try:
        return np.dtype(dtype).kind
    except TypeError:
        return ""


def _pick(choose: Callable[[int, int], int], a: int | None, b: int | None) -> int | None:
    """``max``/``min`` of two bounds; unknown (None) when either is."""
    if a is None or b is None:
        return None
    return choose(a, b)


def _fits(fact: Range | None, dtype: Any) -> Range | None:
    """``fact`` if every value in it is exact in the integer ``dtype``."""
    if fact is None or _kind(dtype) not in ("i", "u"):
        return None
    dtype = np.dtype(dtype)
    info = np.iinfo(dtype)
    lo, hi = fact
    if lo is None or hi is None:  # an index into a symbolic size (far below 2**31): >= 0
        wide = dtype.itemsize >= 4 and lo is not None and 0 <= lo <= info.max and hi is None
        return fact if wide else None
    return fact if info.min <= lo and hi <= info.max else None


def _reduce_sum(r: list[Range | None], eqn: Eqn) -> list[Range | None]:
    shape = aval(eqn.invars[0]).shape
    dims = [shape[a] for a in eqn.params["axes"]]
    bounds = _bounded(r[:1])
    if bounds is None or any(jxi.is_symbolic_dim(d) for d in dims):
        return [None]
    ((lo, hi),) = bounds
    count = int(np.prod(dims, dtype=np.int64))
    return [_fits((count * lo, count * hi), aval(eqn.outvars[0]).dtype)]


def _rem(r: list[Range | None], eqn: Eqn) -> list[Range | None]:
    """x % y with x >= 0 and y > 0 (C remainder: the sign of x) is in [0, min(x, y - 1)]."""
    known = _known(r)
    if known is None:
        return [None]
    (x_lo, x_hi), (y_lo, y_hi) = known
    if x_lo is None or x_lo < 0 or y_lo is None or y_lo <= 0:
        return [None]
    highs = [h for h in (x_hi, None if y_hi is None else y_hi - 1) if h is not None]
    return [(0, min(highs) if highs else None)]


def _logical(op: str) -> RangeRule:
    """and / or / not on bools, as 0/1 ranges."""

    def rule(r: list[Range | None], eqn: Eqn) -> list[Range | None]:
        bounds = _bounded(r)
        if any(_kind(aval(v).dtype) != "b" for v in eqn.invars) or bounds is None:
            return [None]
        if op == "not":
            ((lo, hi),) = bounds
            return [(1 - hi, 1 - lo)]
        pick = min if op == "and" else max
        (a_lo, a_hi), (b_lo, b_hi) = bounds
        return [(pick(a_lo, b_lo), pick(a_hi, b_hi))]

    return rule


def _compare(name: str) -> RangeRule:
    def rule(r: list[Range | None], eqn: Eqn) -> list[Range | None]:
        result = _decided(name, r[0], r[1])
        return [(0, 1) if result is None else (int(result), int(result))]

    return rule


def _extreme(choose: Callable[[int, int], int]) -> RangeRule:
    """max / min: the bound-wise max / min of the two ranges."""

    def rule(r: list[Range | None], eqn: Eqn) -> list[Range | None]:
        known = _known(r)
        if known is None:
            return [None]
        (a_lo, a_hi), (b_lo, b_hi) = known
        return [(_pick(choose, a_lo, b_lo), _pick(choose, a_hi, b_hi))]

    return rule


# primitive -> (input ranges, eqn) -> output ranges
_RULES: dict[str, RangeRule] = {
    "iota": lambda r, e: [
        _fits((0, _last_index(e.params["shape"][e.params["dimension"]])), e.params["dtype"])
    ],
    "argmax": lambda r, e: [(0, _last_index(aval(e.invars[0]).shape[e.params["axes"][0]]))],
    "argmin": lambda r, e: [(0, _last_index(aval(e.invars[0]).shape[e.params["axes"][0]]))],
    # getrf: pivots[j] and the permutation are rows of the (..., m, n) operand
    "lu": lambda r, e: [
        None,
        (0, _last_index(aval(e.invars[0]).shape[-2])),
        (0, _last_index(aval(e.invars[0]).shape[-2])),
    ],
    "lu_pivots_to_permutation": lambda r, e: [(0, _last_index(e.params["permutation_size"]))],
    "sort": lambda r, e: list(r),
    "concatenate": lambda r, e: [_union(r)],
    "select_n": lambda r, e: [_union(r[1:])],
    # a size, 0 at run time at least (JAX assumes symbolic dims >= 1; a past length is 0)
    "dim_as_value": lambda r, e: [
        _fits(
            (0, None) if jxi.is_symbolic_dim(e.params["dim"]) else (int(e.params["dim"]),) * 2,
            aval(e.outvars[0]).dtype,
        )
    ],
    "add": lambda r, e: [_add(r[0], r[1], 1)],
    "sub": lambda r, e: [_add(r[0], r[1], -1)],
    "convert_element_type": lambda r, e: [_fits(r[0], e.params["new_dtype"])],
    "reduce_sum": _reduce_sum,
    "rem": _rem,
    "max": _extreme(max),
    "min": _extreme(min),
    **{name: _logical(name) for name in ("and", "or", "not")},
    **{name: _compare(name) for name in ("lt", "le", "gt", "ge", "eq", "ne")},
    **{
        name: _same
        for name in (
            "broadcast_in_dim",
            "reshape",
            "squeeze",
            "expand_dims",
            "transpose",
            "copy",
            "copy_p",
            "slice",
            "dynamic_slice",
            "rev",
            "stop_gradient",
        )
    },
}


def _decided(name: str, a: Range | None, b: Range | None) -> bool | None:
    """The result of ``a <op> b`` for every pair of values in the ranges, when one."""
    if a is None or b is None:
        return None
    # x < y for all: hi(x) < lo(y); never: lo(x) >= hi(y) (and the mirrored forms)
    lo_a, hi_a, lo_b, hi_b = a[0], a[1], b[0], b[1]

    def less(x_hi: int | None, y_lo: int | None, strict: bool) -> bool:
        return x_hi is not None and y_lo is not None and (x_hi < y_lo if strict else x_hi <= y_lo)

    if name in ("eq", "ne"):
        if less(hi_a, lo_b, True) or less(hi_b, lo_a, True):  # disjoint
            return name == "ne"
        if None not in (lo_a, hi_a) and lo_a == hi_a == lo_b == hi_b:
            return name == "eq"
        return None
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


# x itself for x != False, x == True, x & True, x | False (x bool): the value that keeps x
_NEUTRAL = {"ne": 0, "eq": 1, "and": 1, "or": 0}


def facts(eqn: Eqn, inputs: Sequence[ir.Value]) -> list[Range | None] | None:
    """The ranges of the equation's results from those of its inputs (its rule, run once per
    equation for ``fold`` and ``propagate``); None where no rule applies or no result is an
    integer or bool."""
    rule = _RULES.get(eqn.primitive.name)
    if rule is None or not any(_kind(aval(v).dtype) in ("b", "i", "u") for v in eqn.outvars):
        return None
    return rule([value_range(v) for v in inputs], eqn)


def fold(
    eqn: Eqn,
    inputs: Sequence[ir.Value],
    ranges: list[Range | None] | None,
    full: Callable[[Aval, int], ir.Value],
) -> list[ir.Value] | None:
    """The equation's results when the facts about its inputs settle them: an integer or bool
    result of one value (a decided comparison, ``x & False``; ``full(aval, value)`` makes the
    constant), a bool operand a neutral one does not change, or the case ``select_n`` picks
    on a predicate of one value; else None. ``ranges`` is ``facts(eqn, inputs)``."""
    if len(eqn.outvars) != 1:
        return None
    name = eqn.primitive.name
    out_aval = aval(eqn.outvars[0])
    if ranges is not None:
        (fact,) = ranges
        if fact is not None and fact[0] is not None and fact[0] == fact[1]:
            out = full(out_aval, fact[0])
            out.meta[RANGE] = fact
            return [out]
    if name in _NEUTRAL and all(_kind(aval(v).dtype) == "b" for v in eqn.invars):
        for keep, other in ((0, 1), (1, 0)):
            if value_range(inputs[other]) == (_NEUTRAL[name],) * 2 and _same_shape(
                aval(eqn.invars[keep]), out_aval
            ):
                return [inputs[keep]]
    if name == "select_n":
        fact = value_range(inputs[0])
        if (
            fact is not None
            and fact[0] is not None
            and fact[0] == fact[1]
            and 0 <= fact[0] < len(inputs) - 1
        ):
            if _same_shape(aval(eqn.invars[1 + fact[0]]), out_aval):
                return [inputs[1 + fact[0]]]
    return None


def _same_shape(a: Aval, b: Aval) -> bool:
    return tuple(a.shape) == tuple(b.shape)


def propagate(eqn: Eqn, outputs: Sequence[ir.Value], ranges: list[Range | None] | None) -> None:
    """Record ``ranges`` (``facts(eqn, inputs)``) on the equation's results that hold none yet."""
    if ranges is None:
        return
    for value, var, fact in zip(outputs, eqn.outvars, ranges, strict=False):
        if fact is None or fact == (None, None) or RANGE in value.meta:
            continue
        if _kind(aval(var).dtype) not in ("b", "i", "u"):
            continue
        if value.const_value is None:
            value.meta[RANGE] = fact


def dim_value(value: ir.Value) -> Dim | None:
    """The dim (an int or a symbolic dim) every entry of the integer ``value`` equals, or None
    (no fact): from ``value.meta[DIM]``, or a constant's single value."""
    fact = value.meta.get(DIM)
    if fact is not None:
        return fact  # type: ignore[no-any-return]
    tensor = value.const_value
    if tensor is None or value.dtype is None or not value.dtype.is_integer():
        return None
    array = tensor.numpy()
    if array.size == 0 or array.size > 1024 or (array != array.flat[0]).any():
        return None
    return int(array.flat[0])


# primitives whose integer result is its (first) integer operand's dim in every entry
_DIM_KEEPING = frozenset(
    "convert_element_type reshape squeeze expand_dims broadcast_in_dim copy copy_p".split()
)


def propagate_dims(eqn: Eqn, inputs: Sequence[ir.Value], outputs: Sequence[ir.Value]) -> None:
    """Record ``value.meta[DIM]`` on the equation's result where it holds one dim (see the
    module docstring): ``dim_as_value``'s, kept by integer casts and the ops that move or
    repeat entries, added and subtracted."""
    if len(outputs) != 1 or _kind(aval(eqn.outvars[0]).dtype) not in ("i", "u"):
        return
    (out,) = outputs
    if DIM in out.meta or out.const_value is not None:
        return
    name = eqn.primitive.name
    dims = [dim_value(v) for v in inputs]
    fact: Dim | None = None
    if name == "dim_as_value":
        fact = eqn.params["dim"]
    elif name in _DIM_KEEPING and dims and _kind(aval(eqn.invars[0]).dtype) in ("i", "u"):
        fact = dims[0]
    elif name in ("add", "sub") and len(dims) == 2:
        a, b = dims
        if a is not None and b is not None:
            fact = a + b if name == "add" else a - b
    if fact is not None:
        out.meta[DIM] = fact
