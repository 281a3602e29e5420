"""Reductions, scans and sorts: reduce_*, argmax/argmin, cum*, sort, top_k, reduce.

onnxruntime's ReduceMax/ArgMax skip NaNs where JAX propagates them, its integer ReduceSum and
ReduceProd go through float64 (inexact past 2**53, saturating where JAX wraps), its TopK
orders NaNs arbitrarily, and ONNX has no scan but CumSum. The rules below add the few nodes
that give JAX's answers: NaN handling, identities of empty reductions, exact integer folds,
stable order with ties, and log-step scans.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.kernels import compute_dtype
from jax2onnx_nn.core.lower import LoweringContext, is_float, onnx_aval
from jax2onnx_nn.core.registry import lowering, register

_I64 = np.dtype(np.int64)
_U8 = np.dtype(np.uint8)
_F64 = np.dtype(np.float64)
_I64_MIN = np.iinfo(np.int64).min
_I64_MAX = np.iinfo(np.int64).max
# the dtype an order key is reduced in, where not the operand's own
_KEY_DTYPES: dict[np.dtype, np.dtype] = {np.dtype(np.uint64): _I64, np.dtype(np.bool_): _U8}


def _dtype(aval: Any) -> np.dtype:
    return onnx_aval(aval)[0]


def _order_key(ctx: LoweringContext, x: ir.Value, dtype: np.dtype) -> ir.Value:
    """``x`` in a type onnxruntime compares in the same order (its uint64 kernels are missing,
    and widening uint64 to int64 would put values >= 2**63 first: flip the top bit instead, by
    a wrapping add of 2**63, which any opset has)."""
    if dtype == np.uint64:
        return ctx.op.Add(ctx.cast(x, _I64), ctx.ints(_I64_MIN))
    if dtype == np.bool_:
        return ctx.cast(x, _U8)
    return x


def _from_order_key(ctx: LoweringContext, key: ir.Value, dtype: np.dtype) -> ir.Value:
    if dtype == np.uint64:
        return ctx.cast(ctx.op.Add(key, ctx.ints(_I64_MIN)), dtype)
    if dtype == np.bool_:
        return ctx.cast(key, dtype)
    return key


# -- reduce_sum / prod / max / min ------------------------------------------------------------


def _reduce_arith(
    op_type: str,
    ctx: LoweringContext,
    x: ir.Value,
    *,
    axes: tuple[int, ...],
    out_sharding: object = None,
) -> ir.Value:
    del out_sharding  # (reduce_sum's) where the result lives on a mesh: one device here
    if not axes:
        return x
    dtype, shape = onnx_aval(ctx.aval_in)
    if is_float(dtype):
        return ctx.reduce(op_type, x, axes)
    # onnxruntime sums and multiplies integers in float64: inexact past 2**53 and saturating
    # where JAX wraps. Exact folds are used unless float64 provably holds every partial sum.
    count = [shape[a] for a in axes]
    if op_type == "ReduceSum" and not any(map(jxi.is_symbolic_dim, count)):
        if math.prod(count) << (8 * dtype.itemsize) < 2**53:
            wide = x if dtype == _I64 else ctx.cast(x, _I64)
            return ctx.cast(ctx.reduce(op_type, wide, axes), dtype)
    return _integer_fold(ctx, x, dtype, shape, axes, product=op_type == "ReduceProd")


def _integer_fold(
    ctx: LoweringContext,
    x: ir.Value,
    dtype: np.dtype,
    shape: tuple[Any, ...],
    axes: Sequence[int],
    *,
    product: bool,
) -> ir.Value:
    """Exact, wrapping sum or product over ``axes``: per axis, append the identity, take the
    running sum (CumSum) or product (a scan of Mul) and keep the last element."""
    shape_now = list(shape)
    last = ctx.ints(-1)
    for axis in sorted(axes, reverse=True):
        pads = np.zeros(2 * len(shape_now), dtype=_I64)
        pads[len(shape_now) + axis] = 1
        x = ctx.op.Pad(x, ctx.const(pads), ctx.const(int(product), dtype=dtype))
        shape_now[axis] = shape_now[axis] + 1
        if product:
            x = _scan_values(ctx, x, "cumprod", dtype, tuple(shape_now), axis, reverse=False)
        else:
            x = ctx.op.CumSum(x, ctx.ints(axis))
        x = ctx.op.Gather(x, last, axis=axis)
        del shape_now[axis]
    return x


def _reduce_extremum(
    op_type: str,
    ctx: LoweringContext,
    x: ir.Value,
    *,
    axes: tuple[int, ...],
    out_sharding: object = None,
) -> ir.Value:
    del out_sharding  # (JAX 0.12) where the result lives on a mesh: one device here
    if not axes:
        return x
    dtype = _dtype(ctx.aval_in)
    key = _order_key(ctx, x, dtype)
    key_dtype = _KEY_DTYPES.get(dtype, dtype)
    wide = compute_dtype(op_type, key_dtype)
    if wide is None:
        raise NotImplementedError(f"{op_type} of {dtype}: no onnxruntime kernel keeps its values")
    if np.issubdtype(key_dtype, np.integer) and wide != key_dtype:
        # the wide type's empty-set identity (e.g. int32 min) must become the narrow one's
        info = np.iinfo(key_dtype)
        r = ctx.reduce(op_type, ctx.cast(key, wide), axes)
        r = ctx.op.Clip(r, ctx.const(info.min, dtype=wide), ctx.const(info.max, dtype=wide))
        r = ctx.cast(r, key_dtype)
    else:
        r = ctx.reduce(op_type, key, axes)
    r = _from_order_key(ctx, r, dtype)
    if is_float(dtype):
        r = ctx.op.Where(ctx.any(ctx.op.IsNaN(x), axes), ctx.const(np.nan, dtype=dtype), r)
    return r


REDUCE = {  # rule, ONNX op, the ops of its special cases (integer and NaN handling, ...)
    "reduce_sum": (_reduce_arith, "ReduceSum", ("Cast", "CumSum", "Gather", "Pad")),
    "reduce_prod": (
        _reduce_arith,
        "ReduceProd",
        ("Add", "CumProd", "Gather", "Less", "Loop", "Mul", "Neg", "Pad", "Slice", "Squeeze"),
    ),
    "reduce_max": (_reduce_extremum, "ReduceMax", ("Add", "Cast", "Clip", "IsNaN", "Where")),
    "reduce_min": (
        _reduce_extremum,
        "ReduceMin",
        ("Add", "Cast", "Clip", "IsNaN", "ReduceMax", "Where"),
    ),
}
for _prim, (_rule, _op, _more) in REDUCE.items():
    register(_prim, partial(_rule, _op), onnx_ops=(_op, *_more))


# -- reduce_and / or / xor: bool and bitwise ---------------------------------------------------


def _reduce_bits(
    op_type: str, ctx: LoweringContext, x: ir.Value, *, axes: tuple[int, ...]
) -> ir.Value:
    """Fold each bit plane (a trailing axis of 0/1 uint8) with min (and), max (or) or sum (xor),
    then put the bits back together. Bools are a single plane."""
    if not axes:
        return x
    dtype = _dtype(ctx.aval_in)
    if dtype == np.bool_:
        planes = ctx.cast(x, _U8)
    else:
        unsigned = np.dtype(f"uint{8 * dtype.itemsize}")
        shifts = ctx.const(np.arange(8 * dtype.itemsize, dtype=unsigned))
        bits = ctx.op.BitShift(
            ctx.op.Unsqueeze(ctx.cast(x, unsigned), ctx.ints([-1])), shifts, direction="RIGHT"
        )
        planes = ctx.cast(
            ctx.op.Mod(bits, ctx.const(2, dtype=unsigned)), _U8
        )  # Mod, not BitwiseAnd: opset 17 has it
    # bit 0 is the answer: empty uint8 ReduceMin gives 255 and xor is the parity of the sum
    folded = ctx.op.Mod(ctx.reduce(op_type, planes, axes), ctx.const(2, dtype=_U8))
    if dtype == np.bool_:
        return ctx.cast(folded, dtype)
    # the planes times their bit values, summed: MatMul is exact on int64 (ReduceSum is not)
    weights = ctx.const(
        (np.uint64(1) << np.arange(8 * dtype.itemsize, dtype=np.uint64)).astype(_I64)
    )
    return ctx.cast(ctx.op.MatMul(ctx.cast(folded, _I64), weights), dtype)


BITWISE = {"reduce_and": "ReduceMin", "reduce_or": "ReduceMax", "reduce_xor": "ReduceSum"}
for _prim, _op in BITWISE.items():
    register(
        _prim,
        partial(_reduce_bits, _op),
        onnx_ops=(_op, "BitShift", "Mod", "MatMul", "Cast", "Unsqueeze"),
    )


# -- argmax / argmin ---------------------------------------------------------------------------


def _arg(
    op_type: str,
    ctx: LoweringContext,
    x: ir.Value,
    *,
    axes: tuple[int, ...],
    index_dtype: object = None,
) -> ir.Value:
    del index_dtype  # the output aval's dtype, which the result is cast to
    (axis,) = axes
    dtype = _dtype(ctx.aval_in)
    r = getattr(ctx.op, op_type)(
        _order_key(ctx, x, dtype), axis=axis, keepdims=0, select_last_index=0
    )
    if is_float(dtype):
        # onnxruntime skips NaNs; in JAX the first NaN is both the max and the min
        nan = ctx.cast(ctx.op.IsNaN(x), _U8)
        r = ctx.op.Where(
            ctx.any(nan, [axis]), ctx.op.ArgMax(nan, axis=axis, keepdims=0, select_last_index=0), r
        )
    out = _dtype(ctx.aval_out)
    return r if out == _I64 else ctx.cast(r, out)


register(
    "argmax",
    partial(_arg, "ArgMax"),
    onnx_ops=("ArgMax", "IsNaN", "Where", "Add", "Cast", "ReduceMax"),
)
register(
    "argmin",
    partial(_arg, "ArgMin"),
    onnx_ops=("ArgMin", "IsNaN", "Where", "Add", "ArgMax", "Cast", "ReduceMax"),
)


# -- cumulative reductions ---------------------------------------------------------------------


@lowering("cumsum", onnx_ops=("CumSum",))
def _cumsum(ctx: LoweringContext, x: ir.Value, *, axis: int, reverse: bool) -> ir.Value:
    return ctx.op.CumSum(x, ctx.ints(axis), reverse=int(reverse))


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if is_float(dtype) else np.iinfo(dtype).min


def _highest(dtype: np.dtype) -> Any:
    return np.inf if is_float(dtype) else np.iinfo(dtype).max


# prim -> (JAX combine function, identity of the combine for a dtype)
SCANS: dict[str, tuple[Callable[..., Any], Callable[[np.dtype], Any]]] = {
    "cumprod": (jax.lax.mul, lambda dtype: 1),
    "cummax": (jax.lax.max, _lowest),
    "cummin": (jax.lax.min, _highest),
    "cumlogsumexp": (jnp.logaddexp, lambda dtype: -np.inf),
}


def _combiner(
    ctx: LoweringContext, fn: Callable[..., Any], spec: jax.ShapeDtypeStruct
) -> Callable[[LoweringContext, ir.Value, ir.Value], ir.Value]:
    """``fn`` traced at ``spec`` and lowered by our own rules, into any context's graph."""
    closed = jax.make_jaxpr(fn)(spec, spec)
    return lambda c, x, y: c.lower_sub(closed, [x, y])[0]


def _shifted(
    ctx: LoweringContext,
    x: ir.Value,
    step: int | ir.Value,
    axis: int,
    rank: int,
    reverse: bool,
    fill: ir.Value,
) -> ir.Value:
    """``x`` moved by ``step`` along ``axis`` (towards the end, or the start if reverse), the
    vacated places holding ``fill``; ``step`` is an int or an int64 [1] tensor."""
    onehot = np.zeros(2 * rank, dtype=_I64)
    onehot[axis + (rank if reverse else 0)] = 1
    if isinstance(step, int):
        pads, neg_step = ctx.ints(onehot * step), -step
    else:
        pads, neg_step = ctx.op.Mul(ctx.ints(onehot), step), ctx.op.Neg(step)
    padded = ctx.op.Pad(x, pads, fill)
    if reverse:
        return ctx.slice(padded, [axis], [step], [_I64_MAX])
    return ctx.slice(padded, [axis], [0], [neg_step])


def _cumulative(
    prim: str, ctx: LoweringContext, x: ir.Value, *, axis: int, reverse: bool
) -> ir.Value:
    dtype, shape = onnx_aval(ctx.aval_in)
    if prim == "cumlogsumexp" and not is_float(dtype):
        raise NotImplementedError(f"cumlogsumexp of {dtype}")
    return _scan_values(ctx, x, prim, dtype, shape, axis, reverse=reverse)


def _scan_values(
    ctx: LoweringContext,
    x: ir.Value,
    prim: str,
    dtype: np.dtype,
    shape: tuple[Any, ...],
    axis: int,
    *,
    reverse: bool,
) -> ir.Value:
    """Hillis-Steele scan: log2(n) steps of ``y = combine(y, shift(y, 2**k))`` (exact: the
    shifted-in values are the combine's identity). A symbolic length runs the steps in a Loop.
    From opset 26 a product is one ONNX ``CumProd`` (see :func:`_uses_cumprod`)."""
    if prim == "cumprod" and _uses_cumprod(ctx, dtype):
        return ctx.op.CumProd(x, ctx.ints(axis), reverse=int(reverse))
    fn, identity = SCANS[prim]
    combine = _combiner(ctx, fn, jax.ShapeDtypeStruct(shape, dtype))
    fill = ctx.const(identity(dtype), dtype=dtype)
    rank, n = len(shape), shape[axis]

    def step(c: LoweringContext, y: ir.Value, s: int | ir.Value) -> ir.Value:
        return combine(c, y, _shifted(c, y, s, axis, rank, reverse, fill))

    if not jxi.is_symbolic_dim(n):
        s = 1
        while s < n:
            x = step(ctx, x, s)
            s *= 2
        return x
    return _doubling_loop(ctx, x, dtype, shape, ctx.dim(n), step)


CUMPROD_OPSET = 26


def _uses_cumprod(ctx: LoweringContext, dtype: np.dtype) -> bool:
    """ONNX ``CumProd`` (opset 26) multiplies in order, one rounding per step as XLA does;
    integers of 8 and 16 bits are widened to 32 by the builder (a wrapping product keeps its
    low bits). 16-bit floats keep the scan: widened they would be rounded once, not per step."""
    return ctx.opset >= CUMPROD_OPSET and not (is_float(dtype) and dtype.itemsize == 2)


def _doubling_loop(
    ctx: LoweringContext,
    x: ir.Value,
    dtype: np.dtype,
    shape: tuple[Any, ...],
    n: ir.Value,
    step: Callable[..., ir.Value],
) -> ir.Value:
    """A Loop running ``y = step(body, y, s)`` for s = 1, 2, 4, ... while s < n."""
    body = ctx.body("scan_body")
    graph = body.builder
    graph.add_input("iteration", _I64, [])
    graph.add_input("cond_in", np.bool_, [])
    y = graph.add_input("y", dtype, shape)
    s = graph.add_input("step", _I64, [1])
    s_next = body.op.Add(s, s)
    graph.outputs = [body.op.Squeeze(body.op.Less(s_next, n)), step(body, y, s), s_next]
    one = ctx.ints([1])
    cond = ctx.op.Squeeze(ctx.op.Less(one, n))
    return ctx.op.Loop(None, cond, x, one, body=graph.build_graph(), _outputs=2)[0]


_SCAN_OPS = ("Pad", "Slice", "Loop", "Add", "Less", "Mul", "Neg", "Squeeze")
_COMBINER_OPS = {  # the ops of each combiner (SCANS), lowered by our rules
    "cumprod": ("CumProd",),
    "cummax": ("Max",),
    "cummin": ("Min",),
    "cumlogsumexp": (
        "Abs",
        "Div",
        "Equal",
        "Exp",
        "IsInf",
        "Log",
        "Max",
        "Not",
        "Or",
        "Sub",
        "Where",
        "Xor",
    ),
}
for _prim in SCANS:
    register(_prim, partial(_cumulative, _prim), onnx_ops=(*_COMBINER_OPS[_prim], *_SCAN_OPS))


# -- sort / top_k --------------------------------------------------------------------------------


def _sort_keys(
    ctx: LoweringContext, x: ir.Value, dtype: np.dtype, *, signed_zero: bool
) -> list[ir.Value]:
    """Keys, most significant first, whose lexicographic order (by TopK) is JAX's order of ``x``:
    NaN above +inf, and -0 below +0 when ``signed_zero`` (top_k) else equal to it (sort)."""
    if not is_float(dtype):
        return [_order_key(ctx, x, dtype)]
    nan = ctx.op.IsNaN(x)
    inf = ctx.const(np.inf, dtype=_F64)
    if dtype != _F64:
        # a narrower float is finite in float64: +inf becomes the largest finite float64 and
        # NaN becomes +inf, -0 a number between the negatives and +0, so one key suffices
        key = ctx.op.Where(
            ctx.op.IsInf(x, detect_negative=0),
            ctx.const(np.finfo(_F64).max, dtype=_F64),
            ctx.cast(x, _F64),
        )
        key = ctx.op.Where(nan, inf, key)
        if signed_zero:
            key = ctx.op.Where(
                _is_signed_zero(ctx, x, negative=True), ctx.const(-1e-300, dtype=_F64), key
            )
        return [key]
    tie = ctx.op.Or(nan, _is_signed_zero(ctx, x, negative=False)) if signed_zero else nan
    return [ctx.op.Where(nan, inf, x), ctx.cast(tie, _U8)]


def _is_signed_zero(ctx: LoweringContext, x: ir.Value, *, negative: bool) -> ir.Value:
    zero = ctx.const(0, like=x)
    sign = ctx.op.Less if negative else ctx.op.Greater
    return ctx.op.And(ctx.op.Equal(x, zero), sign(ctx.op.Reciprocal(x), zero))


def _lex_order(
    ctx: LoweringContext,
    keys: list[ir.Value],
    axis: int,
    n: ir.Value,
    k: ir.Value,
    *,
    largest: bool,
) -> ir.Value:
    """int64 indices of the first ``k`` along ``axis`` in lexicographic order of ``keys``, ties by
    lower index: one stable TopK pass per key, least significant first (onnxruntime's TopK
    breaks ties by lower index, which makes each pass stable)."""
    order: ir.Value | None = None
    for i, key in enumerate(reversed(keys)):
        if order is not None:
            key = ctx.op.GatherElements(key, order, axis=axis)
        count = k if i == len(keys) - 1 else n
        _, idx = ctx.op.TopK(key, count, axis=axis, largest=int(largest), sorted=1, _outputs=2)
        order = idx if order is None else ctx.op.GatherElements(order, idx, axis=axis)
    assert order is not None
    return order


@lowering("sort", onnx_ops=("TopK", "GatherElements", "Add", "Cast", "IsInf", "IsNaN", "Where"))
def _sort(
    ctx: LoweringContext,
    *operands: ir.Value,
    dimension: int,
    num_keys: int = 1,
    is_stable: bool = False,
) -> list[ir.Value]:
    del is_stable  # this order is stable, and a stable order is a valid unstable one
    n = ctx.aval_in.shape[dimension]
    if not jxi.is_symbolic_dim(n) and n <= 1:
        return list(operands)
    keys = [
        key
        for value, aval in zip(operands[:num_keys], ctx.avals_in, strict=False)
        for key in _sort_keys(ctx, value, _dtype(aval), signed_zero=False)
    ]
    order = _lex_order(ctx, keys, dimension, ctx.dim(n), ctx.dim(n), largest=False)
    return [ctx.op.GatherElements(v, order, axis=dimension) for v in operands]


@lowering(
    "top_k",
    onnx_ops=(
        "TopK",
        "GatherElements",
        "Add",
        "And",
        "Cast",
        "Equal",
        "Greater",
        "IsInf",
        "IsNaN",
        "Less",
        "Or",
        "Reciprocal",
        "Where",
    ),
)
def _top_k(
    ctx: LoweringContext, x: ir.Value, *, k: int, axis: int = -1, is_stable: bool = False
) -> list[ir.Value]:
    del is_stable  # (JAX 0.12) ONNX TopK breaks ties by the lower index: stable either way
    # XLA's top_k uses the total order of floats: -0 < +0 and NaN above +inf
    shape = ctx.aval_in.shape
    axis %= len(shape)
    keys = _sort_keys(ctx, x, _dtype(ctx.aval_in), signed_zero=True)
    order = _lex_order(ctx, keys, axis, ctx.dim(shape[axis]), ctx.ints([k]), largest=True)
    index_dtype = _dtype(ctx.avals_out[1])
    indices = order if index_dtype == _I64 else ctx.cast(order, index_dtype)
    return [ctx.op.GatherElements(x, order, axis=axis), indices]


@lowering("approx_top_k", onnx_ops=("TopK", "GatherElements", "Cast", "IsInf", "IsNaN", "Where"))
def _approx_top_k(
    ctx: LoweringContext, x: ir.Value, *, reduction_dimension: int, is_max_k: bool, **params: object
) -> list[ir.Value]:
    """approx_max_k / approx_min_k as JAX computes them off TPU: a stable sort by plain `>`
    (`<`), so -0 and +0 tie and ties keep the lower index, sliced to the output's size (k, or
    the larger size ``aggregate_to_topk=False`` asks for). NaN has no place in that order
    (XLA's result then depends on its sort; docs/limitations.md)."""
    del (
        params
    )  # k, recall_target, reduction_input_size_override, aggregate_to_topk: size of the output
    axis = reduction_dimension % len(ctx.aval_in.shape)
    keys = _sort_keys(ctx, x, _dtype(ctx.aval_in), signed_zero=False)
    count = ctx.dim(ctx.avals_out[0].shape[axis])
    order = _lex_order(ctx, keys, axis, ctx.dim(ctx.aval_in.shape[axis]), count, largest=is_max_k)
    return [ctx.op.GatherElements(x, order, axis=axis), ctx.cast(order, _dtype(ctx.avals_out[1]))]


# -- reduce with a custom computation ------------------------------------------------------------


@lowering("reduce", onnx_ops=("Slice", "Concat", "Squeeze", "Expand"))
def _reduce_custom(
    ctx: LoweringContext,
    *args: ir.Value,
    jaxpr: Any,
    dimensions: tuple[int, ...],
    computation: object = None,
) -> list[ir.Value]:
    """A pairwise tree: halve each reduced axis, combining elements 2i and 2i+1 by the
    computation (traced elementwise at the half's shape), so every partial result covers a
    contiguous run and an associative computation gives XLA's sequential answer even when it is
    not commutative; the init values are combined once, first. Reduced dims must be static."""
    del computation  # XLA's form of ``jaxpr``, which is what is traced here
    k = len(args) // 2
    xs, inits = list(args[:k]), list(args[k:])
    dtypes = [a.dtype for a in ctx.avals_in[:k]]
    shape = list(ctx.avals_in[0].shape)
    out_shape = [d for i, d in enumerate(shape) if i not in dimensions]
    if any(jxi.is_symbolic_dim(shape[a]) for a in dimensions):
        raise NotImplementedError("reduce with a custom computation over a symbolic dim")
    if any(shape[a] == 0 for a in dimensions):
        return [ctx.op.Expand(init, ctx.shape_tensor(out_shape)) for init in inits]
    if all(shape[a] == 1 for a in dimensions):  # XLA turns this into a reshape, ignoring the init
        return [ctx.op.Squeeze(x, ctx.ints(dimensions)) if dimensions else x for x in xs]
    body = jax.extend.core.jaxpr_as_fun(jxi.as_closed(jaxpr))

    def combine(lhs: list[ir.Value], rhs: list[ir.Value], at: Sequence[Any]) -> list[ir.Value]:
        fn = body
        for _ in at:
            fn = jax.vmap(fn)
        specs = [jax.ShapeDtypeStruct(tuple(at), d) for d in dtypes] * 2
        return ctx.lower_sub(jax.make_jaxpr(fn)(*specs), [*lhs, *rhs])

    def part(x: ir.Value, axis: int, start: int, stop: int, step: int = 1) -> ir.Value:
        return ctx.slice(x, [axis], [start], [stop], [step])

    for axis in sorted(dimensions, reverse=True):
        n = int(shape[axis])
        while n > 1:
            half = n // 2
            shape[axis] = half
            pairs = combine(
                [part(x, axis, 0, 2 * half, 2) for x in xs],
                [part(x, axis, 1, 2 * half, 2) for x in xs],
                shape,
            )
            xs = (
                pairs
                if n % 2 == 0
                else [
                    ctx.op.Concat(p, part(x, axis, n - 1, n), axis=axis)
                    for p, x in zip(pairs, xs, strict=True)
                ]
            )
            n = shape[axis] = half + n % 2
        xs = [ctx.op.Squeeze(x, ctx.ints([axis])) for x in xs]
        del shape[axis]
    return combine(
        [ctx.op.Expand(init, ctx.shape_tensor(out_shape)) for init in inits], xs, out_shape
    )
