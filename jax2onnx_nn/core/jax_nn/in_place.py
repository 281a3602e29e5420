"""Activations however they are reached: a name bound before the export holds the original
function object, which a namespace patch does not reach; a plain Python function is patched in
place, a jitted one is recognized by the body of its ``jit`` equation."""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.coarse import (
    Handler,
    coarse_wrapper,
)
from jax2onnx_nn.core.jax_nn.activations import (
    ACTIVATIONS,
    Activation,
    activation_handler,
    emit_activation,
    plain_number,
)
from jax2onnx_nn.core.jax_types import Aval
from jax2onnx_nn.core.lower import LoweringContext, recognize_calls

# -- activations however they are reached ------------------------------------------------
#
# A name bound before the export (``from jax.nn import gelu``, ``flax.linen.gelu``, an alias, a
# ``functools.partial``, a module field, a dict) holds the original function object, which a
# namespace patch does not reach. Two mechanisms that do not depend on the name:
# * a plain Python function (``gelu`` and ``softmax`` on JAX 0.10) is patched in place: for
#   the export its ``__code__`` is a trampoline to the coarse wrapper of a copy of it, so every
#   reference to the object calls the wrapper;
# * a jitted function (``jax.jit``-ed or ``custom_jvp`` around a ``jit``) leaves a ``jit``
#   equation named after it in the jaxpr; :func:`_recognize_jitted` lowers one to the op when
#   its body is, text for text, the body JAX traces for the original with some configuration.

_IN_PLACE_GLOBAL = "__jax2onnx_nn_in_place__"
_IN_PLACE: dict[int, Callable[..., Any]] = {}
"""id(function) -> its coarse wrapper; the trampolines look their wrapper up here (as a
global of the function's module, which gets this dict under ``_IN_PLACE_GLOBAL``)."""


@dataclass(frozen=True)
class _InPlace:
    function: types.FunctionType
    code: types.CodeType
    trampoline: types.CodeType


_IN_PLACE_ENTRIES: dict[int, _InPlace] = {}


def in_place_entry(function: Any) -> _InPlace | None:
    """The in-place patch made for ``function``, None before one is made."""
    entry = _IN_PLACE_ENTRIES.get(id(function))
    return entry if entry is not None and entry.function is function else None


def _make_in_place(function: types.FunctionType, handler_for: Callable[[Any], Handler]) -> _InPlace:
    """The trampoline of ``function`` (made once): its calls go to the coarse wrapper of a copy
    of the original (the copy keeps the original code, defaults and signature)."""
    copy = types.FunctionType(
        function.__code__,
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__dict__.update(function.__dict__)
    copy.__qualname__, copy.__module__, copy.__doc__ = (
        function.__qualname__,
        function.__module__,
        function.__doc__,
    )
    _IN_PLACE[id(function)] = coarse_wrapper(handler_for(copy))(copy)
    namespace: dict[str, Any] = {}
    parameters, arguments = _forwarding(function.__code__)
    exec(
        f"def {function.__name__}({parameters}):\n"
        f"    return {_IN_PLACE_GLOBAL}[{id(function)}]({arguments})\n",
        {},
        namespace,
    )
    trampoline = namespace[function.__name__].__code__.replace(
        co_qualname=function.__qualname__, co_filename=function.__code__.co_filename
    )  # (library code)
    function.__globals__.setdefault(_IN_PLACE_GLOBAL, _IN_PLACE)
    entry = _IN_PLACE_ENTRIES[id(function)] = _InPlace(function, function.__code__, trampoline)
    return entry


def _forwarding(code: types.CodeType) -> tuple[str, str]:
    """The parameter list of ``code`` and the arguments that pass each parameter on: the
    trampoline has the original's signature (its defaults stay on the function object), so
    what reads the function's code and defaults still sees them agree."""
    names = code.co_varnames
    n, n_pos, n_kw = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    params, args = list(names[:n]), list(names[:n])
    if n_pos:
        params.insert(n_pos, "/")
    i = n + n_kw
    if code.co_flags & inspect.CO_VARARGS:
        params.append(f"*{names[i]}")
        args.append(f"*{names[i]}")
        i += 1
    elif n_kw:
        params.append("*")
    params += names[n : n + n_kw]
    args += [f"{k}={k}" for k in names[n : n + n_kw]]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        params.append(f"**{names[i]}")
        args.append(f"**{names[i]}")
    return ", ".join(params), ", ".join(args)


def _in_place_patchable(function: Any) -> TypeGuard[types.FunctionType]:
    return isinstance(function, types.FunctionType) and not function.__closure__


def _in_place_entries() -> list[_InPlace]:
    """The activations of ``jax.nn`` that are plain functions, each made in place once (read
    at import, before any export patches the namespace)."""
    result = []
    for name, activation in ACTIVATIONS.items():
        function = getattr(jax.nn, name, None)
        if not _in_place_patchable(function):
            continue
        entry = in_place_entry(function)
        if entry is None:
            entry = _make_in_place(
                function, functools.partial(activation_handler, name, activation)
            )
        result.append(entry)
    return result


@contextlib.contextmanager
def _patched_in_place(entries: list[_InPlace]) -> Iterator[None]:
    done: list[_InPlace] = []
    try:
        for entry in entries:
            entry.function.__code__ = entry.trampoline
            done.append(entry)
        yield
    finally:
        for entry in done:
            entry.function.__code__ = entry.code


def patched_in_place(
    function: types.FunctionType, handler_for: Callable[[Any], Handler]
) -> contextlib.AbstractContextManager[None]:
    """While the block runs, every reference to the plain Python ``function`` (a name bound
    before the export, a module field holding it) calls the coarse wrapper of
    ``handler_for(copy of function)``: what the activations get, for an adapter's function
    (``flax.linen.dot_product_attention``)."""
    if not _in_place_patchable(function):
        return contextlib.nullcontext()
    entry = in_place_entry(function) or _make_in_place(function, handler_for)
    return _patched_in_place([entry])


_REFERENCE_TEXTS: dict[tuple[Any, ...], str | None] = {}


def _jitted_activations() -> dict[str, list[tuple[Activation, Any]]]:
    """jit name -> (activation, original) for the jitted activations of ``jax.nn``."""
    result: dict[str, list[tuple[Activation, Any]]] = {}
    for name, activation in ACTIVATIONS.items():
        original = getattr(jax.nn, name, None)
        if original is None or _in_place_patchable(original):
            continue
        jit_name = getattr(original, "__name__", name)
        if all(o is not original for _, o in result.get(jit_name, [])):
            result.setdefault(jit_name, []).append((activation, original))
    return result


def _reference_text(
    original: Any, aval: Any, values: tuple[Any, ...], static: tuple[tuple[str, Any], ...]
) -> str | None:
    """The text of the body of the ``jit`` equation JAX traces for ``original(x, *values,
    **static)`` on ``aval``; None if it traces no such equation (or fails)."""
    key = (id(original), tuple(aval.shape), str(aval.dtype), aval.weak_type, values, static)
    if key in _REFERENCE_TEXTS:
        return _REFERENCE_TEXTS[key]
    try:
        spec = jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)
        closed = jax.make_jaxpr(lambda x: original(x, *values, **dict(static)))(spec)
        text = _jit_body_text(closed.jaxpr, getattr(original, "__name__", None))
    except Exception:  # a configuration the original refuses: no match
        text = None
    _REFERENCE_TEXTS[key] = text
    return text


def _jit_body_text(jaxpr: Any, name: str | None) -> str | None:
    if len(jaxpr.eqns) != 1:
        return None
    (eqn,) = jaxpr.eqns
    if eqn.primitive.name in ("jit", "pjit") and eqn.params.get("name") == name:
        body = eqn.params["jaxpr"]
        return None if body.consts else jxi.jaxpr_text(body)
    if eqn.primitive.name == "custom_jvp_call":
        return _jit_body_text(eqn.params["call_jaxpr"].jaxpr, name)
    return None


def _configs(
    activation: Activation, ndim: int, values: list[Any]
) -> Iterator[tuple[tuple[Any, ...], tuple[tuple[str, Any], ...], dict[str, Any]]]:
    """(positional values, static keywords, the rule's config) for each configuration a
    ``jit`` equation of the activation may have been traced with: its literal operands are
    the numeric parameters in order, a static axis or flag one of its values."""
    numeric = [
        k
        for k, v in activation.config.items()
        if k not in ("axis", "where") and not isinstance(v, bool)
    ]
    flags = [k for k, v in activation.config.items() if isinstance(v, bool)]
    if len(values) > len(numeric) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
    ):
        return
    given = dict(zip(numeric, values, strict=False))
    base = {k: v for k, v in activation.config.items() if k != "where"} | given
    statics: list[dict[str, Any]] = [{}]
    if "axis" in activation.config:
        statics = [{"axis": a} for a in range(-1, -ndim - 1, -1)] if ndim else []
    for flag in flags:
        statics = [
            s | {flag: value}
            for s in statics
            for value in (activation.config[flag], not activation.config[flag])
        ]
    for static in statics:
        yield (
            tuple(values),
            tuple(sorted(static.items())),
            {k: plain_number(v) for k, v in (base | static).items()},
        )


def _recognize_jitted(ctx: LoweringContext, inputs: list[ir.Value]) -> list[ir.Value] | None:
    """A ``jit`` equation of a ``jax.nn`` activation as its one op, however the function was
    reached (see above); None (lower its body) for anything else."""
    eqn = ctx.eqn
    entries = _JITTED.get(str(eqn.params.get("name")))
    if not entries or len(eqn.outvars) != 1 or not eqn.invars or jxi.is_literal(eqn.invars[0]):
        return None
    if not all(jxi.is_literal(v) for v in eqn.invars[1:]):
        return None
    values = [
        jxi.literal_value(v).item()
        if hasattr(jxi.literal_value(v), "item")
        else jxi.literal_value(v)
        for v in eqn.invars[1:]
    ]
    aval: Aval = eqn.invars[0].aval
    out_aval: Aval = eqn.outvars[0].aval
    body = eqn.params["jaxpr"]
    if body.consts or aval.shape != out_aval.shape:
        return None
    text = jxi.jaxpr_text(body)
    for activation, original in entries:
        if np.dtype(aval.dtype) not in activation.dtypes or ctx.opset < activation.min_opset:
            continue
        for positional, static, config in _configs(activation, aval.ndim, values):
            if _reference_text(original, aval, positional, static) == text:
                return [emit_activation(ctx, activation, inputs[0], config)]
    return None


# read at import, while ``jax.nn`` holds the originals
_IN_PLACE_FUNCTIONS = _in_place_entries()
_JITTED = _jitted_activations()
recognize_calls(_recognize_jitted)


def activations_patched_in_place() -> contextlib.AbstractContextManager[None]:
    """While the block runs, every reference to an activation of ``jax.nn`` that is a plain
    Python function calls its coarse wrapper (those read at import)."""
    return _patched_in_place(_IN_PLACE_FUNCTIONS)
