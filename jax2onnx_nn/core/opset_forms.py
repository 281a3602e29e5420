"""How an op is written at the export's opset: every per-opset form in one place.

Lowering rules write each op in its newest form (``ReduceMax`` with its axes as an input,
``Reshape`` with ``allowzero``, ``Shape`` with ``start``/``end``, ``BitwiseAnd``, ``ScatterND``
with a reduction). When the export's opset is older than that form, the builder
(``GraphBuilder.add_node``) writes what this module gives instead: the older form of the same
op, or an exact decomposition into ops the opset has. So rules stay opset-free, and a form is
written once.

Ops that are whole layers (``LayerNormalization``, ``Gelu``, ``GroupNormalization``, ...) are
not decomposed here: their rules carry ``min_opset`` and below it the traced JAX body is lowered
instead, which is JAX's numerics by construction.

Element types follow the opset too: ``Add`` on int8 is valid only from opset 14, for example.
:func:`missing_types` lists what an opset's schemas lack compared with the newest one, and the
builder widens those inputs as it does for types onnxruntime has no kernel for
(core/kernels.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

# The builder (core.graph.GraphBuilder) calls this module, so it is not imported here, not even
# for type checking (tests/test_imports.py: no import cycle).
GraphBuilder = Any

Write = Callable[
    [GraphBuilder, str, list[Any], dict[str, Any], int], list[ir.Value]
]  # (b, op, inputs, attrs, outputs)
_INT_MAX = np.iinfo(np.int64).max
_REDUCE_AXES_INPUT = (
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceMean",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
)


@dataclass(frozen=True)
class Form:
    """``op`` as rules write it needs opset ``since``; below it (when ``applies``), ``write``."""

    op: str
    since: int
    write: Write
    applies: Callable[[list[Any], dict[str, Any]], bool] = lambda inputs, attrs: True


def older_form(op_type: str, opset: int, inputs: list[Any], attrs: dict[str, Any]) -> Write | None:
    """How to write ``op_type`` at ``opset`` when its form as given is newer; None: as given."""
    for form in FORMS.get(op_type, ()):  # the newest form first
        if opset < form.since and form.applies(inputs, attrs):
            return form.write
    if op_type in _REDUCE_AXES_INPUT and opset >= 18 and "axes" in attrs:
        return _axes_as_input
    return None


# -- helpers --------------------------------------------------------------------------------


def _i64(b: GraphBuilder, values: Sequence[int]) -> ir.Value:
    return b.const(np.asarray(values, dtype=np.int64))


def _constant(value: ir.Value | None, what: str) -> np.ndarray:
    tensor = None if value is None else value.const_value
    if tensor is None:
        raise NotImplementedError(
            f"{what} must be a constant below the opset where it became an input"
        )
    return np.asarray(tensor.numpy())


def _dtype(value: ir.Value, op: str) -> np.dtype:
    if value.dtype is None:
        raise NotImplementedError(f"the older form of {op} needs its input's element type")
    return np.dtype(value.dtype.numpy())


def _node(
    b: GraphBuilder, op: str, inputs: Sequence[Any], attrs: dict[str, Any], n: int = 1
) -> list[ir.Value]:
    return b.add_node(op, inputs, attrs, num_outputs=n)


# -- attribute vs input -----------------------------------------------------------------------


def _axes_as_attribute(
    b: GraphBuilder, op: str, inputs: list[Any], attrs: dict[str, Any], n: int
) -> list[ir.Value]:
    """ReduceMax & co. take ``axes`` as an attribute before opset 18."""
    axes = _constant(inputs[1], f"the axes of {op}")
    return _node(b, op, inputs[:1], {**attrs, "axes": [int(a) for a in axes.reshape(-1)]}, n)


def _axes_as_input(
    b: GraphBuilder, op: str, inputs: list[Any], attrs: dict[str, Any], n: int
) -> list[ir.Value]:
    """... and as an input from opset 18."""
    rest = {k: v for k, v in attrs.items() if k != "axes"}
    return _node(b, op, [inputs[0], _i64(b, attrs["axes"])], rest, n)


def _reshape_allowzero(
    b: GraphBuilder, op: str, inputs: list[Any], attrs: dict[str, Any], n: int
) -> list[ir.Value]:
    """``allowzero=1`` (opset 14): a 0 in the shape is a size-0 dim, not "copy the input dim".

    A constant shape without a 0 means the same either way; with a 0 the result has no
    elements (nor has the input): zeros of that shape. A computed shape may hold a 0 at run
    time: the input's elements, padded with as many zeros as the shape with its 0s raised to 1
    holds, reshaped to that shape and sliced to the real one (no copy-the-input-dim involved).
    """
    x, shape = inputs
    attrs = {k: v for k, v in attrs.items() if k != "allowzero"}
    if shape.const_value is not None:
        dims = _constant(shape, "the shape")
        if 0 not in dims:
            return _node(b, "Reshape", [x, shape], attrs)
        zero = ir.tensor(np.zeros(1, _dtype(x, "Reshape")))
        return _node(b, "ConstantOfShape", [shape], {"value": zero})
    ones = b.op.Max(shape, _i64(b, [1]))
    count = b.op.ReduceProd(ones, keepdims=1)
    padding = b.op.ConstantOfShape(count, value=ir.tensor(np.zeros(1, _dtype(x, "Reshape"))))
    flat = b.op.Concat(b.op.Reshape(x, _i64(b, [-1])), padding, axis=0)
    first = b.op.Slice(flat, _i64(b, [0]), count)
    return [b.op.Slice(b.op.Reshape(first, ones), b.op.Sub(shape, shape), shape)]


def _without_reduction(
    b: GraphBuilder, op: str, inputs: list[Any], attrs: dict[str, Any], n: int
) -> list[ir.Value]:
    """``reduction="none"`` is the only form before the attribute (opset 16)."""
    return _node(b, op, inputs, {k: v for k, v in attrs.items() if k != "reduction"}, n)


def _shape_slice(
    b: GraphBuilder, op: str, inputs: list[Any], attrs: dict[str, Any], n: int
) -> list[ir.Value]:
    """``Shape(start=, end=)`` (opset 15): a Slice of the whole shape."""
    start, end = attrs.get("start", 0), attrs.get("end")
    whole = b.op.Shape(inputs[0])
    return [b.op.Slice(whole, _i64(b, [start]), _i64(b, [_INT_MAX if end is None else end]))]


# -- ops the opset lacks ----------------------------------------------------------------------


def _hard_swish(
    b: GraphBuilder, op: str, inputs: list[Any], attrs: dict[str, Any], n: int
) -> list[ir.Value]:
    """HardSwish (opset 14) is x * HardSigmoid(x) with alpha 1/6, beta 1/2 (its definition)."""
    x = inputs[0]
    return [b.op.Mul(x, b.op.HardSigmoid(x, alpha=1 / 6, beta=0.5))]


def _int_relu(
    b: GraphBuilder, op: str, inputs: list[Any], attrs: dict[str, Any], n: int
) -> list[ir.Value]:
    """Relu on integers (opset 14) is Max with 0."""
    x = inputs[0]
    return [b.op.Max(x, b.const(np.zeros((), _dtype(x, "Relu"))))]


def _is_int(inputs: list[Any], attrs: dict[str, Any]) -> bool:
    dtype = inputs[0].dtype
    return dtype is not None and np.dtype(dtype.numpy()).kind in "iu"


def _bitwise(
    b: GraphBuilder, op: str, inputs: list[Any], attrs: dict[str, Any], n: int
) -> list[ir.Value]:
    """Bitwise ops (opset 18) in modular arithmetic on the unsigned type of the same width.

    ``a & b`` is the sum of ``2**k * bit_k(a) * bit_k(b)`` (bits by BitShift, opset 11; summed by
    CumSum); ``a | b = a + b - (a & b)`` and ``a ^ b = a + b - 2 (a & b)`` hold modulo ``2**n``;
    ``~a = (2**n - 1) - a``. Casts between a signed type and its unsigned twin keep the bits."""
    dtype = _dtype(inputs[0], op)
    unsigned = np.dtype(f"uint{dtype.itemsize * 8}")
    to_u = [
        v if dtype == unsigned else b.op.Cast(v, to=ir.DataType.from_numpy(unsigned))
        for v in inputs
    ]
    if op == "BitwiseNot":
        out = b.op.Sub(b.const(np.array(np.iinfo(unsigned).max, unsigned)), to_u[0])
    else:
        width = dtype.itemsize * 8
        shifts = b.const(np.arange(width, dtype=unsigned))
        two = b.const(np.array(2, unsigned))

        def bits(v: ir.Value) -> ir.Value:
            return b.op.Mod(
                b.op.BitShift(b.op.Unsqueeze(v, _i64(b, [-1])), shifts, direction="RIGHT"), two
            )

        weights = b.const(
            (np.ones(width, unsigned) << np.arange(width, dtype=unsigned)).astype(unsigned)
        )
        # the sum over bits is CumSum's last element: onnxruntime's integer ReduceSum goes
        # through float64 (inexact past 2**53), CumSum wraps exactly
        terms = b.op.Mul(b.op.Mul(bits(to_u[0]), bits(to_u[1])), weights)
        running = b.op.CumSum(terms, b.const(np.array(-1, np.int64)))
        both = b.op.Squeeze(
            b.op.Slice(running, _i64(b, [-1]), _i64(b, [_INT_MAX]), _i64(b, [-1])), _i64(b, [-1])
        )
        total = b.op.Add(to_u[0], to_u[1])
        if op == "BitwiseAnd":
            out = both
        elif op == "BitwiseOr":
            out = b.op.Sub(total, both)
        else:
            out = b.op.Sub(total, b.op.Mul(both, two))
    return [out if dtype == unsigned else b.op.Cast(out, to=ir.DataType.from_numpy(dtype))]


_COMBINE = {"add": "Add", "mul": "Mul", "max": "Max", "min": "Min"}


def _scatter_loop(
    b: GraphBuilder, op: str, inputs: list[Any], attrs: dict[str, Any], n: int
) -> list[ir.Value]:
    """ScatterND with a reduction (add/mul from opset 16, max/min from 18) as a Loop that
    applies one update row at a time: read the row's cell, combine, write it back. Repeated
    indices combine in order, as in JAX."""
    data, indices, updates = inputs
    combine = _COMBINE[attrs["reduction"]]
    index_shape = b.op.Shape(indices)
    depth = b.op.Slice(index_shape, _i64(b, [-1]), _i64(b, [_INT_MAX]))
    rows = b.op.Reshape(indices, b.op.Concat(_i64(b, [-1]), depth, axis=0))
    row_shape = b.op.Slice(b.op.Shape(data), depth, _i64(b, [_INT_MAX]))
    values = b.op.Reshape(updates, b.op.Concat(_i64(b, [-1]), row_shape, axis=0))
    count = b.op.Squeeze(b.op.Slice(b.op.Shape(rows), _i64(b, [0]), _i64(b, [1])), _i64(b, [0]))

    body = b.body("scatter_rows")  # what ctx.body gives a rule
    step = body.add_input("step", np.int64, [])
    cond = body.add_input("cond", np.bool_, [])
    acc = body.add_input("acc", data.dtype.numpy(), None)
    first = _i64(body, [0])
    where = body.op.Unsqueeze(body.op.Gather(rows, step, axis=0), first)
    value = body.op.Unsqueeze(body.op.Gather(values, step, axis=0), first)
    combined = body.add_node(combine, [body.op.GatherND(acc, where), value], {})[0]
    for out in (body.op.Identity(cond), body.op.ScatterND(acc, where, combined)):
        body.outputs.append(out)
    body.outputs[0].type = ir.TensorType(ir.DataType.BOOL)
    body.outputs[1].type = ir.TensorType(data.dtype)
    out = b.add_node("Loop", [count, None, data], {"body": body.build_graph()})[0]
    out.type = ir.TensorType(data.dtype)
    return [out]


def _reduction_since(inputs: list[Any], attrs: dict[str, Any]) -> int:
    return {None: 1, "none": 1, "add": 16, "mul": 16}.get(attrs.get("reduction"), 18)


def _scatter_form(since: int) -> Form:
    return Form(
        "ScatterND",
        since,
        _scatter_loop,
        lambda inputs, attrs: _reduction_since(inputs, attrs) == since,
    )


FORMS: Mapping[str, tuple[Form, ...]] = {
    **{
        op: (
            Form(
                op,
                18,
                _axes_as_attribute,
                lambda inputs, attrs: len(inputs) > 1 and inputs[1] is not None,
            ),
        )
        for op in _REDUCE_AXES_INPUT
    },
    "Reshape": (
        Form("Reshape", 14, _reshape_allowzero, lambda inputs, attrs: bool(attrs.get("allowzero"))),
    ),
    "Shape": (
        Form(
            "Shape",
            15,
            _shape_slice,
            lambda inputs, attrs: attrs.get("start") is not None or attrs.get("end") is not None,
        ),
    ),
    "HardSwish": (Form("HardSwish", 14, _hard_swish),),
    "Relu": (Form("Relu", 14, _int_relu, _is_int),),
    **{
        op: (Form(op, 18, _bitwise),)
        for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")
    },
    "ScatterND": (
        _scatter_form(18),
        _scatter_form(16),
        Form("ScatterND", 16, _without_reduction, lambda inputs, attrs: "reduction" in attrs),
    ),
}


# -- element types ----------------------------------------------------------------------------

_TYPE_NAMES = {
    f"tensor({n})": n
    for n in (
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "double",
        "bool",
        "bfloat16",
    )
}
_TYPE_NAMES["tensor(float)"] = "float32"
_TYPE_NAMES["tensor(double)"] = "float64"


@functools.cache  # an onnx schema look-up costs ~23 us, and exports ask for the same ones
def schema(op: str, opset: int) -> onnx.defs.OpSchema | None:
    """The default domain's schema of ``op`` at ``opset``; None where it does not define ``op``."""
    try:
        return onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None


def _schema_types(op: str, opset: int) -> frozenset[str] | None:
    found = schema(op, opset)
    if found is None:
        return None
    return frozenset(
        _TYPE_NAMES[t]
        for c in found.type_constraints
        for t in c.allowed_type_strs
        if t in _TYPE_NAMES
    )


@functools.cache
def missing_types(opset: int, ops: tuple[str, ...]) -> dict[str, frozenset[np.dtype]]:
    """``{op: element types}`` that ``op``'s schema at ``opset`` lacks and its newest has
    (``Add`` on int8 before 14): inputs of these types are widened by the builder."""
    newest = onnx.defs.onnx_opset_version()
    missing = {}
    for op in ops:
        now, then = _schema_types(op, newest), _schema_types(op, opset)
        if now is not None and then is not None and now - then:
            missing[op] = frozenset(_dtype_of(name) for name in now - then)
    return missing


def _dtype_of(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def has_op(op: str, opset: int) -> bool:
    """Whether the default domain defines ``op`` at ``opset``."""
    return schema(op, opset) is not None


__all__ = ["FORMS", "Form", "has_op", "missing_types", "older_form", "schema"]
