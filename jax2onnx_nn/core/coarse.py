"""Coarse ops: a framework call as one ONNX op, its traced body as the fallback.

:func:`coarse_wrapper` makes a patched callable bind a custom primitive for each call its
handler accepts: the operands are the call's arrays and the arrays it reads (weights), the
``body`` param is the original call traced to a jaxpr, so JAX numerics are untouched. A rule
registered with :func:`coarse_lowering` emits the coarse ONNX op; when it returns
:data:`NotApplicable` the body is lowered instead. A handler returns :data:`NotApplicable`
for any call it does not model, and that call runs the original. The rows of the support
table of modules (:func:`module_rows`) are declared here too.

Example (an adapter's declaration of one coarse op)::

    def linear_handler(module, x, *args, **kwargs):
        if args or kwargs:
            return NotApplicable
        return CoarseCall("nnx_linear", inputs={"x": x}, weights={"kernel": module.kernel[...]})

    @coarse_lowering("nnx_linear", onnx_ops=("MatMul",))
    def _linear(ctx, ops):
        return ctx.op.MatMul(ops["x"], ops["kernel"])
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core import precision
from jax2onnx_nn.core.calls import trace_call
from jax2onnx_nn.core.registry import register
from jax2onnx_nn.core.session import active_options, add_session_patch


class _NotApplicableType:
    _instance: _NotApplicableType | None = None

    def __new__(cls) -> _NotApplicableType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NotApplicable"

    def __bool__(self) -> bool:
        return False


NotApplicable = _NotApplicableType()
"""Returned by a coarse-op handler or rule for a case it does not model (never raise)."""


@dataclass
class CoarseCall:
    """A handler's description of one call it models.

    ``inputs``: role -> an array argument of the call (matched by identity).
    ``weights``: role -> an array the call reads (matched by identity among the arrays the
    traced call closes over); None for an absent optional weight.
    ``params``: static config the lowering rule needs (hashable values).
    ``call_kwargs``: keyword arguments that replace the call's own when its body is traced
    (an accelerator-only switch, ``implementation="cudnn"``, by the portable one).
    """

    primitive: str
    inputs: Mapping[str, Any] = field(default_factory=dict)
    weights: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Hashable] = field(default_factory=dict)
    call_kwargs: Mapping[str, Any] = field(default_factory=dict)


Handler = Callable[..., "CoarseCall | _NotApplicableType"]


def _index_by_identity(values: list[Any], target: Any) -> int | None:
    return next((i for i, v in enumerate(values) if v is target), None)


def bind_coarse(
    call: CoarseCall, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Bind ``call.primitive`` for ``original(*args, **kwargs)``; NotApplicable if a role's
    array cannot be found among the call's arrays."""
    arrays, body, operands, out_tree, n_consts = trace_call(original, args, kwargs)
    roles = []
    for role, value in call.inputs.items():
        i = _index_by_identity(arrays, value)
        if i is None:
            return NotApplicable
        roles.append((role, n_consts + i))
    for role, value in call.weights.items():
        if value is None:
            continue
        i = _index_by_identity(operands[:n_consts], value)
        if i is None:
            return NotApplicable
        roles.append((role, i))
    params = tuple(sorted(call.params.items()))
    outs = jxi.body_primitive(call.primitive).bind(
        *operands, body=body, roles=tuple(roles), config=params
    )
    return jax.tree_util.tree_unflatten(out_tree, outs)


def coarse_wrapper(handler: Handler) -> Callable[[Any], Any]:
    """A ``make_wrapper`` for :func:`patch`: calls the handler accepts bind its primitive."""

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if active_options() is None:
                return original(*args, **kwargs)
            try:
                spec = handler(*args, **kwargs)
            except Exception:  # a handler that cannot model a call must not break it
                spec = NotApplicable
            if isinstance(spec, CoarseCall):
                kwargs = {**kwargs, **spec.call_kwargs}
                result = bind_coarse(spec, original, args, kwargs)
                if result is not NotApplicable:
                    return result
            return original(*args, **kwargs)

        return call

    return make


class Operands(Mapping[str, ir.Value]):
    """The operands of a coarse op by role, with their JAX avals (``ops.aval("x")``)."""

    def __init__(self, values: dict[str, ir.Value], avals: dict[str, Any]) -> None:
        self._values = values
        self._avals = avals

    def __getitem__(self, role: str) -> ir.Value:
        return self._values[role]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def aval(self, role: str) -> Any:
        return self._avals[role]


@dataclass(frozen=True)
class ModuleRow:
    """One row of the support table of modules: what a user calls and what it becomes."""

    target: str  # "nnx.Linear", "eqx.nn.Conv2d", "jax.nn.gelu"
    onnx_ops: str
    min_opset: int
    primitive: str | None  # the coarse primitive, None for a module that adds no node of its own


_MODULE_ROWS: dict[str, ModuleRow] = {}


def module_rows() -> list[ModuleRow]:
    """The modules and functions the imported adapters map, in declaration order."""
    return list(_MODULE_ROWS.values())


def describe_module(target: str, what: str) -> None:
    """A module without a coarse op of its own (``eqx.nn.Dropout``: no node in inference,
    ``nnx.Sequential``: its layers), for the support table."""
    _MODULE_ROWS[target] = ModuleRow(target, what, 1, None)


def also_covers(primitive: str, target: str) -> None:
    """Another module whose calls bind ``primitive`` (registered, with ``covers``, before):
    a second framework's layer of the same arithmetic (``linen.Dense`` binds ``nnx_linear``),
    for the support table."""
    row = next(r for r in _MODULE_ROWS.values() if r.primitive == primitive)
    _MODULE_ROWS[target] = ModuleRow(target, row.onnx_ops, row.min_opset, primitive)


def coarse_lowering(
    primitive: str,
    *,
    onnx_ops: tuple[str, ...] = (),
    min_opset: int = 1,
    covers: tuple[str, ...] = (),
) -> Callable[[Any], Any]:
    """Register ``rule(ctx, ops: Operands, **config)`` for a coarse primitive.

    The rule returns the op's output value(s) or :data:`NotApplicable`, in which case the body (the
    traced original call) is lowered in its place. Below ``min_opset`` the interpreter does not call
    the rule and lowers the body too. ``covers`` names the modules and functions whose calls bind
    the primitive (``"nnx.Linear"``), for the support table."""
    for target in covers:
        _MODULE_ROWS[target] = ModuleRow(target, ", ".join(onnx_ops), min_opset, primitive)

    def decorate(rule: Any) -> Any:
        def lower(
            ctx: Any,
            *operands: ir.Value,
            body: Any,
            roles: tuple[tuple[str, int], ...],
            config: tuple[tuple[str, Any], ...] = (),
            vmap_levels: tuple[tuple[bool, ...], ...] = (),
        ) -> Any:
            # (under jax.vmap) the rules that model the batch dims read it from ctx.eqn.params
            del vmap_levels
            avals = ctx.avals_in
            wide = precision.widening_for([*avals, *ctx.avals_out], onnx_ops)
            if wide is None:
                ops = Operands({r: operands[i] for r, i in roles}, {r: avals[i] for r, i in roles})
                result = rule(ctx, ops, **dict(config))
            else:  # bfloat16 / float16 without kernels: the op in float32, one Cast in and out
                # precision="float32" keeps float32 weights as they are (the float answer)
                low = (
                    None
                    if ctx.lowerer.config.precision == "float32"
                    else precision.call_dtype(ctx.avals_out)
                )
                values = {
                    r: precision.widen_operand(ctx, operands[i], avals[i], low) for r, i in roles
                }
                wide_ctx = precision.widened_context(ctx)
                wide_avals = wide_ctx.avals_in
                result = rule(
                    wide_ctx, Operands(values, {r: wide_avals[i] for r, i in roles}), **dict(config)
                )
                if result is not NotApplicable:
                    result = precision.narrow_results(ctx, result, ctx.avals_out)
            if result is NotApplicable:
                return ctx.lower_sub(body, list(operands))
            return result

        # (+ Cast: bfloat16 / float16 calls compute in float32 between Casts, core/precision.py)
        register(
            primitive,
            lower,
            onnx_ops=tuple(dict.fromkeys((*onnx_ops, "Cast"))),
            min_opset=min_opset,
        )
        return rule

    return decorate


def map_calls(owner: Any, name: str = "__call__") -> Callable[[Handler], Handler]:
    """Decorator: while an export runs, calls of ``owner.name`` (a class's method, or a
    function of a module namespace) go through the decorated handler, which returns a
    :class:`CoarseCall` (bind that coarse primitive) or :data:`NotApplicable` (run the original,
    lowered op by op). Pair it with a :func:`coarse_lowering` rule for the primitive.

    Example: a user module as one ONNX op::

        @map_calls(ScaledTanh)
        def _scaled_tanh_call(module, x):
            return CoarseCall("scaled_tanh", inputs={"x": x}, weights={"scale": module.scale})

        @coarse_lowering("scaled_tanh", onnx_ops=("Tanh", "Mul"), covers=("ScaledTanh",))
        def _scaled_tanh(ctx, ops):
            return ctx.op.Mul(ctx.op.Tanh(ops["x"]), ops["scale"])
    """

    def decorate(handler: Handler) -> Handler:
        add_session_patch(owner, name, coarse_wrapper(handler))
        return handler

    return decorate


__all__ = [
    "CoarseCall",
    "Handler",
    "ModuleRow",
    "NotApplicable",
    "Operands",
    "also_covers",
    "bind_coarse",
    "coarse_lowering",
    "coarse_wrapper",
    "describe_module",
    "map_calls",
    "module_rows",
]
