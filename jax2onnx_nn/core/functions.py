"""ONNX functions: calls of a decorated class or function become calls of a FunctionProto.

While an export runs, each call of an ``@onnx_function`` callable binds the call primitive
``onnx_function_call``, whose ``body`` param is the call traced to a jaxpr. The arrays the
call closes over (its weights) are hoisted out of the body and passed as operands, so they
stay initializers of the main graph. Lowering emits one ``FunctionProto`` per distinct
(callable, body, operand types) and a call node per use: two ``MLPBlock``s with different
weights share one function. Function bodies are self-contained: their constants are
Constant nodes, and symbolic dims are read from the function's own inputs (or passed in).
Outside exports a decorated callable runs unchanged.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import jax
import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.calls import trace_call
from jax2onnx_nn.core.graph import GraphBuilder, set_type
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.passes.remove_unused import remove_unused_nodes
from jax2onnx_nn.core.registry import lowering
from jax2onnx_nn.core.session import active_options
from jax2onnx_nn.core.symbolic import DimEvaluator

DOMAIN = "jax2onnx_nn"
PRIMITIVE = "onnx_function_call"
# A function call lowers its body whatever the operand shapes, so under vmap it is re-bound on
# the batched operands (one function over the batch) rather than inlined.
jxi.rebind_under_vmap(PRIMITIVE)

T = TypeVar("T")


def onnx_function(target: T | None = None, *, name: str | None = None) -> Any:
    """Export each call of a module class or a function as a call of an ONNX function.

    Args:
        target: a class (its ``__call__`` is wrapped) or a function.
        name: the function's name in the ONNX model (default: the class / function name).

    Returns:
        The class (modified in place) or a wrapped function. Outside an export both behave
        exactly as before.

    Example::

        @onnx_function
        class MLPBlock(nnx.Module):
            ...

        model = to_onnx(MyModel(...), [("B", 256)])   # one FunctionProto, a call per block
    """
    if target is None:
        return functools.partial(onnx_function, name=name)
    if isinstance(target, type):
        target.__call__ = function_method(target.__call__, name or target.__name__, key=target)  # type: ignore[method-assign]
        return target
    if not callable(target):
        raise TypeError(f"@onnx_function needs a class or a function, got {type(target).__name__}")
    fn_name = name or getattr(target, "__name__", "function")

    @functools.wraps(target)  # type: ignore[arg-type]
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if active_options() is None:
            return target(*args, **kwargs)  # type: ignore[operator]
        return call_function(target, args, kwargs, name=fn_name, key=target)  # type: ignore[arg-type]

    return wrapper


def function_method(
    original: Callable[..., Any], name: str, *, key: Hashable
) -> Callable[..., Any]:
    """``original`` (a method) made to bind a function call for each call during exports."""

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if active_options() is None:
            return original(self, *args, **kwargs)
        return call_function(original, (self, *args), kwargs, name=name, key=key)

    call.__onnx_function__ = True  # type: ignore[attr-defined]
    return call


def call_function(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    name: str,
    key: Hashable,
) -> Any:
    """``fn(*args, **kwargs)`` as one ONNX function call (when lowered).

    A call whose body cannot be traced on its own (a module updating its state in training
    mode) runs inline instead; a genuine error is raised again by that call.
    """
    try:
        arrays, body, operands, out_tree, n_consts = trace_call(fn, args, kwargs)
    except Exception:
        return fn(*args, **kwargs)
    names = _argument_names(fn, args, kwargs, arrays)
    outs = jxi.body_primitive(PRIMITIVE).bind(
        *operands, body=body, name=name, key=key, num_consts=n_consts, input_names=names
    )
    return jax.tree_util.tree_unflatten(out_tree, outs)


def _argument_names(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], arrays: list[Any]
) -> tuple[str, ...]:
    """Names for the array arguments: the parameter name where an array is a whole argument."""
    by_id: dict[int, str] = {}
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        for param, value in bound.arguments.items():
            by_id.setdefault(id(value), param)
    except (TypeError, ValueError):
        pass
    return tuple(by_id.get(id(a), f"input_{i}") for i, a in enumerate(arrays))


# -- lowering -------------------------------------------------------------------------------


@dataclass
class _Emitted:
    function: ir.Function
    passed_dims: list[str]  # dim variables the body could not read from its inputs


class _FunctionDims(DimEvaluator):
    """Dims of a function body: read from its inputs, else passed in as extra inputs."""

    def __init__(self, builder: GraphBuilder) -> None:
        super().__init__(builder)
        self.passed: list[str] = []

    def _var(self, name: str) -> ir.Value:
        if name in self._cache or name in self._sources:
            return super()._var(name)
        value = self.builder.add_input(f"dim_{name}", np.int64, [1])
        self._cache[name] = value
        self.passed.append(name)
        return value


@lowering(
    PRIMITIVE, onnx_ops=("Identity",)
)  # and the function call node; Identity: outputs passed through
def _function_call(
    ctx: LoweringContext,
    *operands: ir.Value,
    body: Any,
    name: str,
    key: Hashable,
    num_consts: int,
    input_names: Sequence[str] = (),
    vmap_levels: Sequence[tuple[bool, ...]] = (),
) -> list[ir.Value]:
    # (under jax.vmap) which operands carry each vmap's leading dim: the body is the batched
    # one, which the function is emitted from, so its operands' dims are its own
    del vmap_levels
    functions: dict[Any, _Emitted] = ctx.lowerer.functions
    avals = ctx.avals_in
    dedup = (key, jxi.jaxpr_text(body), tuple(str(a) for a in avals))
    emitted = functions.get(dedup)
    if emitted is None:
        emitted = _emit_function(
            ctx, body, _unique_name(name, functions), operands, num_consts, input_names
        )
        functions[dedup] = emitted
    ctx.builder.opset_imports[DOMAIN] = 1
    order = [*operands[num_consts:], *operands[:num_consts]]
    dims = [ctx.lowerer.dims.var(v) for v in emitted.passed_dims]
    return ctx.builder.add_node(
        emitted.function.name, [*order, *dims], {}, num_outputs=len(ctx.avals_out), domain=DOMAIN
    )


def _unique_name(name: str, functions: dict[Any, _Emitted]) -> str:
    taken = {e.function.name for e in functions.values()}
    candidate, n = name, 1
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    return candidate


def _emit_function(
    ctx: LoweringContext,
    body: Any,
    name: str,
    operands: Sequence[ir.Value],
    num_consts: int,
    input_names: Sequence[str],
) -> _Emitted:
    lowerer = ctx.lowerer
    fb = ctx.builder.child(name, isolated=True)
    fb.scope = []
    fb.names = type(ctx.builder.names)()  # a function is a namespace of its own
    avals = ctx.avals_in
    weight_names = _relative_names([operands[i].name or "" for i in range(num_consts)])
    names = [*weight_names, *input_names]
    dims = _FunctionDims(fb)
    values: list[ir.Value | None] = [None] * len(operands)
    for i in [*range(num_consts, len(operands)), *range(num_consts)]:
        dtype, shape = onnx_aval(avals[i])
        values[i] = fb.add_input(names[i] if i < len(names) else f"input_{i}", dtype, shape)
        dims.add_source(values[i], shape)
    outer_dims, lowerer.dims = lowerer.dims, dims
    try:
        outs = lowerer.lower_jaxpr(body, [v for v in values if v is not None], fb)
    finally:
        lowerer.dims = outer_dims
    fb.outputs.extend(_distinct_outputs(fb, outs, ctx.avals_out))
    # (and the domains of other ops the body's rules wrote: onnxruntime's contrib ops)
    opsets = {**fb.opset_imports, "": ctx.opset, DOMAIN: 1}
    graph = ir.Graph(fb.inputs, fb.outputs, nodes=fb.nodes, opset_imports=opsets, name=name)
    _cleanup_body(graph)
    return _Emitted(ir.Function(DOMAIN, name, graph=graph, attributes=[]), dims.passed)


def _cleanup_body(graph: ir.Graph) -> None:
    """Common subexpressions and dead nodes of a body (the model passes see the main graph);
    :func:`~jax2onnx_nn.core.passes.remove_unused.remove_unused_nodes` also drops what only the
    bodies of a removed Loop/Scan/If in it read."""
    model = ir.Model(graph, ir_version=10)
    common.CommonSubexpressionEliminationPass()(model)
    remove_unused_nodes(model)


def _distinct_outputs(fb: GraphBuilder, outs: list[ir.Value], avals: list[Any]) -> list[ir.Value]:
    """Function outputs must be values computed by the body, each once."""
    inputs = {id(v) for v in fb.inputs}
    body_nodes = {id(n) for n in fb.nodes}
    seen: set[int] = set()
    result = []
    for value, aval in zip(outs, avals, strict=True):
        producer = value.producer()
        if (
            producer is None
            or id(producer) not in body_nodes
            or id(value) in inputs
            or id(value) in seen
        ):
            value = fb.op.Identity(value)
            set_type(value, *onnx_aval(aval))
        seen.add(id(value))
        result.append(value)
    return result


def _relative_names(names: list[str]) -> list[str]:
    """Weight names inside a function: the callers' names without their common module path."""
    parts = [n.split(".") for n in names if n]
    if not parts:
        return [n or f"weight_{i}" for i, n in enumerate(names)]
    common = 0
    shortest = min(len(p) for p in parts) - 1
    while common < shortest and all(p[common] == parts[0][common] for p in parts):
        common += 1
    return [".".join(n.split(".")[common:]) if n else f"weight_{i}" for i, n in enumerate(names)]


__all__ = ["DOMAIN", "PRIMITIVE", "call_function", "function_method", "onnx_function"]
