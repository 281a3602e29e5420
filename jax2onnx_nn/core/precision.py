"""Low-precision floats (bfloat16, float16): coarse ops computed in float32 where the target
has no kernel for them.

onnxruntime's CPU provider has almost no bfloat16 kernels (and computes float16 through its
own Casts), so the builder widens every elementwise node it writes for such a dtype to float32
with a Cast in and a Cast out (``core/kernels.py``). For a coarse op (a layer or ``jax.nn``
function as one ONNX op) that is the wrong grain: the op's rule refused the dtype and its
traced body, spelled out op by op, became a Cast pair per op. Here the whole coarse op is
widened instead: its low-precision operands become float32 once (a weight becomes a float32
initializer, no node), the rule runs as for float32 (it sees float32 avals), and each result
is rounded back to the dtype JAX gives by one Cast. Between two coarse ops the value is
rounded, as in JAX; inside one it is rounded once where JAX may round after each of its
sub-ops (``docs/precision.md`` gives the measured differences: about one ulp of the dtype).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import ml_dtypes
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.ir.values import dtype_of
from jax2onnx_nn.core.ir.walk import graphs
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval

LOW_FLOATS = frozenset({np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)})
"""The 16-bit floats that a coarse op computes in float32 where the target lacks kernels."""

_F32 = np.dtype(np.float32)


def is_low_float(dtype: Any) -> bool:
    """bfloat16 or float16."""
    try:
        return np.dtype(dtype) in LOW_FLOATS
    except TypeError:
        return False


def _low_dtypes(avals: Sequence[Any]) -> set[np.dtype]:
    return {np.dtype(a.dtype) for a in avals if hasattr(a, "dtype") and is_low_float(a.dtype)}


def widening_for(avals: Sequence[Any], onnx_ops: Sequence[str]) -> np.dtype | None:
    """float32 when a coarse op over ``avals`` reads or makes a low-precision float that one of
    its ONNX ops has no kernel for on the running export's target; None otherwise (also for a
    target whose kernels take the dtype: the rule then sees the dtype as it is)."""
    low = _low_dtypes(avals)
    if not low:
        return None
    ops = [op for op in onnx_ops if op in kernels.table()] or ["MatMul"]
    if all(kernels.supports(op, dtype) for op in ops for dtype in low):
        return None
    return _F32


def _widened_aval(aval: Any) -> Any:
    if hasattr(aval, "dtype") and is_low_float(aval.dtype):
        return jax.ShapeDtypeStruct(tuple(aval.shape), _F32)
    return aval


class WidenedContext(LoweringContext):
    """A rule's context in which every bfloat16 / float16 aval reads as float32."""

    @property
    def avals_in(self) -> list[Any]:
        return [_widened_aval(v.aval) for v in self.eqn.invars]

    @property
    def avals_out(self) -> list[Any]:
        return [_widened_aval(v.aval) for v in self.eqn.outvars]

    @property
    def aval_in(self) -> Any:
        return _widened_aval(self.eqn.invars[0].aval)

    @property
    def aval_out(self) -> Any:
        return _widened_aval(self.eqn.outvars[0].aval)

    def within(self, builder: Any) -> LoweringContext:
        return WidenedContext(self.lowerer, self.eqn, builder)


def widened_context(ctx: LoweringContext) -> WidenedContext:
    """``ctx`` with its low-precision avals read as float32."""
    return WidenedContext(ctx.lowerer, ctx.eqn, ctx.builder)


def widen_operand(
    ctx: LoweringContext, value: ir.Value, aval: Any, call_dtype: np.dtype | None
) -> ir.Value:
    """An operand of a widened coarse op in float32.

    A weight (an initializer) becomes a float32 initializer, no node; a float32 weight of a
    low-precision call is rounded to the call's dtype first, as the rule would cast it (Flax's
    ``param_dtype=float32`` under ``dtype=bfloat16`` promotes the weight to bfloat16). Any other
    low-precision value is one Cast.
    """
    dtype = np.dtype(aval.dtype) if hasattr(aval, "dtype") else None
    weight = value.const_value is not None and value.producer() is None
    if dtype is None or not (
        is_low_float(dtype) or (weight and dtype == _F32 and call_dtype is not None)
    ):
        return value
    if not weight:
        return ctx.cast(value, _F32)
    low = call_dtype if call_dtype is not None and not is_low_float(dtype) else dtype
    return ctx.derived_weight(
        value,
        ("float32 via", low.name),
        lambda a: np.asarray(a).astype(low).astype(np.float32),
        lambda v: ctx.cast(ctx.cast(v, low), _F32),
    )


def call_dtype(avals_out: Sequence[Any]) -> np.dtype | None:
    """The low-precision dtype a coarse op's results have (None: none of them is low)."""
    low = _low_dtypes(avals_out)
    return next(iter(low)) if len(low) == 1 else None


def narrow_results(ctx: LoweringContext, results: Any, avals_out: Sequence[Any]) -> Any:
    """A widened rule's float32 results rounded back to the dtypes JAX gives (one Cast each)."""
    single = isinstance(results, ir.Value)
    values = [results] if single else list(results)
    narrowed = [
        ctx.cast(v, onnx_aval(aval)[0]) if is_low_float(onnx_aval(aval)[0]) else v
        for v, aval in zip(values, avals_out, strict=True)
    ]
    return narrowed[0] if single else narrowed


# -- the precision policy (``to_onnx(..., precision=...)``) ----------------------------------

POLICIES = ("as-traced", "float32", "float16")
IO_DTYPES = ("model", "float32")

_F32_T, _F16_T, _BF16_T = ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16
# Under "float16", the ops JAX accumulates in float32 (reductions, softmax, norm statistics)
# compute in float32 between a Cast in and a Cast out; their weights stay float32.
ACCUMULATING = frozenset(
    {
        "ReduceSum",
        "ReduceMean",
        "ReduceSumSquare",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceProd",
        "CumSum",
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "BatchNormalization",
        "GroupNormalization",
        "InstanceNormalization",
        "RMSNormalization",
    }
)


def _converted(policy: str) -> dict[ir.DataType, ir.DataType]:
    if policy == "float32":
        return {_BF16_T: _F32_T, _F16_T: _F32_T}
    if policy == "float16":
        return {_BF16_T: _F16_T, _F32_T: _F16_T}
    return {}


def apply_precision(
    model: ir.Model,
    policy: str,
    io_dtype: str | None,
    float32_io: frozenset[ir.DataType] = frozenset(),
) -> None:
    """Rewrite a lowered model to ``policy``: ``"float32"`` computes every bfloat16 / float16
    value in float32 (weights upcast once, exactly); ``"float16"`` computes bfloat16 and float32
    values in float16, except the :data:`ACCUMULATING` ops, which compute in float32.
    ``io_dtype`` is the graph's boundary: ``"model"`` keeps the dtypes the traced program takes
    and gives (a Cast at the boundary), ``"float32"`` makes every low-precision or converted
    float input and output float32; None: float32 under ``"float32"``, else the model's.
    ``float32_io``: the types whose inputs and outputs are float32 whatever ``io_dtype`` says
    (those the target cannot feed or read, :func:`float32_boundary`).

    A float16 weight that overflows (a finite value beyond 65504) is clipped to 65504, with a
    warning naming it. Runs before the clean-up, which drops the Casts this leaves identical.
    """
    converted = _converted(policy)
    io = io_dtype or ("float32" if policy == "float32" else "model")
    graph = model.graph
    boundary_in = [v.dtype for v in graph.inputs]
    boundary_out = [v.dtype for v in graph.outputs]
    if converted:
        keep_f32 = _accumulating_weights(model) if policy == "float16" else set()
        for g in graphs(model):
            _convert_graph(g, converted, keep_f32)
        if policy == "float16":
            for g in graphs(model):
                _accumulate_in_float32(g)
    for value, was in zip(list(graph.inputs), boundary_in, strict=True):
        want = _boundary_dtype(was, io, float32_io)
        if want is not None and value.dtype != want:
            _cast_input(graph, value, want)
    for i, was in enumerate(boundary_out):
        want = _boundary_dtype(was, io, float32_io)
        if want is not None and graph.outputs[i].dtype != want:
            _cast_output(graph, i, want)
    model.metadata_props["jax2onnx_nn.precision"] = policy


def _boundary_dtype(
    was: ir.DataType | None, io: str, float32_io: frozenset[ir.DataType]
) -> ir.DataType | None:
    if was is None or was not in (_F32_T, _F16_T, _BF16_T):
        return None
    return _F32_T if io == "float32" or was in float32_io else was


def float32_boundary(
    model: ir.Model, lacks_io_dtypes: Mapping[str, str], target: str, io_dtype: str | None
) -> frozenset[ir.DataType]:
    """The types of the graph's inputs and outputs that the target cannot feed or read (its
    profile's ``lacks_io_dtypes``: onnxruntime-web has no JavaScript array for bfloat16): they
    become float32 at the boundary, one Cast each, the graph inside unchanged.

    Raises:
        ConversionError: ``io_dtype="model"`` asks to keep such an input or output; it names
            them and the fix. Nothing is written.
    """
    if not lacks_io_dtypes:
        return frozenset()
    graph = model.graph
    found: dict[str, list[str]] = {}
    for value in [*graph.inputs, *graph.outputs]:
        name = value.dtype.name.lower() if value.dtype is not None else None
        if name is not None and name in lacks_io_dtypes:
            found.setdefault(name, []).append(value.name or "?")
    if found and io_dtype == "model":
        lines = [
            f"target {target} cannot feed or read {', '.join(sorted(found))} inputs and "
            "outputs, and io_dtype='model' keeps them; nothing was exported:"
        ]
        for dtype, names in sorted(found.items()):
            lines.append(f"  {dtype}: {', '.join(names)} ({lacks_io_dtypes[dtype]})")
        lines.append("  Leave io_dtype unset (they become float32) or pass io_dtype='float32'.")
        raise ConversionError("\n".join(lines))
    return frozenset(ir.DataType[name.upper()] for name in found)


def _accumulating_weights(model: ir.Model) -> set[int]:
    """The initializers only float32-accumulating ops read (they stay float32 under float16)."""
    keep = set()
    for value in model.graph.initializers.values():
        uses = [node for node, _ in value.uses()]
        if uses and all(node.op_type in ACCUMULATING for node in uses):
            keep.add(id(value))
    return keep


def _convert_graph(
    graph: Any, converted: dict[ir.DataType, ir.DataType], keep_f32: set[int]
) -> None:
    values: list[ir.Value] = list(graph.inputs)
    if isinstance(graph, ir.Graph):
        values += list(graph.initializers.values())
    for node in graph:
        values += list(node.outputs)
        _convert_attributes(node, converted)
    for value in values:
        dtype = value.dtype
        if dtype is None:
            continue
        target = (
            _F32_T if id(value) in keep_f32 and dtype in (_BF16_T, _F32_T) else converted.get(dtype)
        )
        if target is None or target == dtype:
            continue
        if value.const_value is not None:
            value.const_value = _converted_tensor(value.const_value, target, value.name)
        _retype(value, target)


def _retype(value: ir.Value, dtype: ir.DataType) -> None:
    """``value`` of type ``dtype``, on a type object of its own: passes that copy a value (the
    inliner's copies of a function body) share the type object, and ``value.dtype = ...``
    would retype every copy (a second block's Softmax then lost its Cast back to float16)."""
    value.type = ir.TensorType(dtype)


def _convert_attributes(node: ir.Node, converted: dict[ir.DataType, ir.DataType]) -> None:
    for name, attr in list(node.attributes.items()):
        if attr.type == ir.AttributeType.INT and (name in ("to", "dtype")):
            target = (
                converted.get(ir.DataType(attr.value))
                if attr.value in set(map(int, ir.DataType))
                else None
            )
            if target is not None:
                node.attributes[name] = ir.AttrInt64(name, int(target))
        elif attr.type == ir.AttributeType.TENSOR and attr.value.dtype in converted:
            tensor = _converted_tensor(attr.value, converted[attr.value.dtype], node.name)
            node.attributes[name] = ir.AttrTensor(name, tensor)


def _converted_tensor(tensor: Any, target: ir.DataType, name: str | None) -> ir.Tensor:
    """``tensor``'s values in ``target``: upcasts are exact; a float16 value beyond its range
    is clipped to 65504 (a warning names a weight of more than one element)."""
    array = np.asarray(tensor.numpy()).astype(np.float32)
    if target == _F16_T:
        limit = float(np.finfo(np.float16).max)
        finite = np.isfinite(array)
        over = finite & (np.abs(array) > limit)
        if over.any():
            if array.size > 1:
                import warnings

                warnings.warn(
                    f"precision='float16': weight {name!r} has {int(over.sum())} values beyond "
                    "float16's range (max |value| "
                    f"{float(np.abs(array[finite]).max()):.4g} > 65504); they are clipped to "
                    "+-65504. Export with precision='float32' to keep them.",
                    UserWarning,
                    stacklevel=2,
                )
            array = np.where(over, np.sign(array) * limit, array)
        return ir.Tensor(array.astype(np.float16), name=name)
    return ir.Tensor(array, name=name)


def _accumulate_in_float32(graph: Any) -> None:
    for node in list(graph):
        if node.op_type not in ACCUMULATING or node.domain != "":
            continue
        widened = False
        for i, value in enumerate(node.inputs):
            if value is not None and value.dtype == _F16_T:
                widened = True
                cast = ir.Node(
                    "", "Cast", [value], [ir.AttrInt64("to", int(_F32_T))], num_outputs=1
                )
                cast.outputs[0].dtype = _F32_T
                cast.outputs[0].shape = value.shape
                graph.insert_before(node, cast)
                node.replace_input_with(i, cast.outputs[0])
        for out in node.outputs:
            # an untyped output (a value an inlined function body made) has its inputs' type
            if not (out.dtype == _F16_T or (out.dtype is None and widened)):
                continue
            _retype(out, _F32_T)
            readers = list(out.uses())
            cast = ir.Node("", "Cast", [out], [ir.AttrInt64("to", int(_F16_T))], num_outputs=1)
            result = cast.outputs[0]
            result.dtype, result.shape = _F16_T, out.shape
            graph.insert_after(node, cast)
            for user, index in readers:
                user.replace_input_with(index, result)
            _swap_graph_output(graph, out, result)


def _swap_graph_output(graph: Any, old: ir.Value, new: ir.Value) -> None:
    for i, value in enumerate(graph.outputs):
        if value is old:
            name = old.name
            old.name = f"{name}/float32"
            new.name = name
            graph.outputs[i] = new


def _cast_input(graph: ir.Graph, value: ir.Value, want: ir.DataType) -> None:
    """The graph input ``value`` takes ``want``; one Cast gives its readers the type they had."""
    had = dtype_of(value)
    readers = list(value.uses())
    cast = ir.Node("", "Cast", [value], [ir.AttrInt64("to", int(had))], num_outputs=1)
    result = cast.outputs[0]
    result.dtype, result.shape = had, value.shape
    for user, index in readers:
        user.replace_input_with(index, result)
    if len(graph):
        graph.insert_before(graph.node(0), cast)
    else:
        graph.append(cast)
    _retype(value, want)
    graph.outputs[:] = [result if v is value else v for v in graph.outputs]


def _cast_output(graph: ir.Graph, i: int, want: ir.DataType) -> None:
    """The graph output ``i`` as ``want``, through one Cast."""
    value = graph.outputs[i]
    cast = ir.Node("", "Cast", [value], [ir.AttrInt64("to", int(want))], num_outputs=1)
    result = cast.outputs[0]
    result.dtype, result.shape = want, value.shape
    graph.append(cast)
    name = value.name
    value.name = f"{name}/{dtype_of(value).name.lower()}"
    result.name = name
    graph.outputs[i] = result


def check_target_dtypes(model: ir.Model, lacks_dtypes: Mapping[str, str], target: str) -> None:
    """Raise a ConversionError naming the tensors of a type the target cannot hold (its
    profile's ``lacks_dtypes``) and what to export instead; nothing is written."""
    if not lacks_dtypes:
        return
    found: dict[str, list[str]] = {}
    boundary = {id(v) for v in [*model.graph.inputs, *model.graph.outputs]}
    inside = False
    for graph in graphs(model):
        values: list[Any] = list(graph.inputs) + [o for node in graph for o in node.outputs]
        if isinstance(graph, ir.Graph):
            values += list(graph.initializers.values())
        for value in values:
            name = value.dtype.name.lower() if value.dtype is not None else None
            if name is not None and name in lacks_dtypes:
                found.setdefault(name, []).append(value.name or "?")
                inside = inside or id(value) not in boundary
    if found:
        lines = [
            f"target {target} cannot hold {', '.join(sorted(found))} tensors; nothing was exported:"
        ]
        for dtype, names in sorted(found.items()):
            lines.append(
                f"  {dtype}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} "
                f"({len(names)} values)"
            )
            lines.append(f"    ({lacks_dtypes[dtype]})")
        if not inside:
            lines.append(
                "  Only the graph's inputs and outputs hold them: io_dtype='float32' (CLI: "
                "--io-dtype float32) makes them float32."
            )
        raise ConversionError("\n".join(lines))


__all__ = [
    "ACCUMULATING",
    "check_target_dtypes",
    "float32_boundary",
    "IO_DTYPES",
    "LOW_FLOATS",
    "POLICIES",
    "apply_precision",
    "WidenedContext",
    "call_dtype",
    "is_low_float",
    "narrow_results",
    "widen_operand",
    "widened_context",
    "widening_for",
]
