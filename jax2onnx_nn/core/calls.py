"""A call traced over its array arguments: what coarse ops and ONNX functions bind."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.memo import BoundedMemo
from jax2onnx_nn.core.session import active_options, export_memo


def is_array(x: Any) -> bool:
    """True for JAX/numpy arrays and tracers (call arguments that become operands)."""
    return isinstance(x, (jax.Array, np.ndarray))


def _is_container(x: Any) -> bool:
    return isinstance(x, (list, tuple, dict)) or x is None


def split_arrays(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[Any], Callable[[list[Any]], tuple[tuple[Any, ...], dict[str, Any]]]]:
    """The array arguments of a call (through lists, tuples, dicts) and a function that puts
    other arrays in their places. Anything else (modules, flags, ...) stays as it is."""
    leaves, treedef = jax.tree_util.tree_flatten(
        (args, kwargs), is_leaf=lambda x: not _is_container(x)
    )
    positions = [i for i, leaf in enumerate(leaves) if is_array(leaf)]

    def rebuild(arrays: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        filled = list(leaves)
        for i, a in zip(positions, arrays, strict=True):
            filled[i] = a
        new_args, new_kwargs = jax.tree_util.tree_unflatten(treedef, filled)
        return tuple(new_args), dict(new_kwargs)

    return [leaves[i] for i in positions], rebuild


@dataclass(frozen=True)
class _Trace:
    """A cached trace: the body, where each of its consts sits among the call's pytree leaves."""

    body: Any
    const_leaves: tuple[int, ...]
    out_tree: Any


_TRACES: BoundedMemo[_Trace] = BoundedMemo(512)


def _frozen(value: Any) -> Hashable:
    """``value`` as a hashable value: mappings as sorted items, dataclasses (the target
    profile) as their fields, lists as tuples; anything else as it is."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value), *(_frozen(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _call_key(original: Callable[..., Any], leaves: list[Any], treedef: Any) -> Hashable | None:
    """What a call's trace depends on: the callable, the structure of its arguments (modules
    flattened: their static fields are in the treedef), the avals of every array leaf
    (weights included), the other leaves' values, JAX's trace context and the export's
    options. None when any part is not hashable."""
    parts: list[tuple[Any, ...]] = []
    for leaf in leaves:
        if is_array(leaf):
            aval = getattr(leaf, "aval", None)
            parts.append(
                (
                    "a",
                    leaf.shape,
                    leaf.dtype,
                    getattr(aval, "weak_type", getattr(leaf, "weak_type", False)),
                )
            )
        else:
            parts.append(("v", type(leaf), leaf))
    try:
        memo = export_memo()
        if "frozen_options" not in memo:  # the options are the same for every call of an export
            memo["frozen_options"] = _frozen(active_options())
        key = (original, treedef, tuple(parts), jxi.trace_context(), memo["frozen_options"])
        hash(key)
    except Exception:  # an unhashable static value: this call is traced each time
        return None
    return key


def _const_positions(consts: list[Any], leaves: list[Any]) -> tuple[int, ...] | None:
    """The leaf index of each const (matched by identity), or None when a const is not exactly
    one leaf (an array made while tracing, or one array in two places): such a trace is not
    reusable for another call with other leaves."""
    where: dict[int, list[int]] = {}
    for i, leaf in enumerate(leaves):
        if is_array(leaf):
            where.setdefault(id(leaf), []).append(i)
    positions = []
    for const in consts:
        found = where.get(id(const), [])
        if len(found) != 1:
            return None
        positions.append(found[0])
    return tuple(positions)


def trace_call(
    original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[Any], Any, list[Any], Any, int]:
    """Trace ``original(*args, **kwargs)`` over its array arguments.

    Returns (array arguments, body, operands, output treedef, number of consts): the body is a
    ClosedJaxpr taking the closed-over arrays (weights) first and the array arguments after;
    ``operands`` are those values in that order.

    Traces are cached, as ``jax.jit`` caches its own: a call of the same callable on arguments
    of the same structure and avals (equal layers of a model, the same model exported again)
    reuses the body and binds its own weights, found at the same places among the leaves of
    its arguments (modules flattened as pytrees). A trace whose consts are not all such leaves
    is not reused. As with ``jax.jit``, a change of Python state the callable reads other than
    through its arguments (a global) is not seen by a cached trace.
    """
    arrays, rebuild = split_arrays(args, kwargs)
    try:
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    except Exception:
        leaves, treedef, key = [], None, None
    else:
        key = _call_key(original, leaves, treedef)
    cached = _TRACES.get(key)
    if cached is not None:
        consts = [leaves[i] for i in cached.const_leaves]
        return arrays, cached.body, [*consts, *arrays], cached.out_tree, len(consts)

    def run(*xs: Any) -> Any:
        a, k = rebuild(list(xs))
        return original(*a, **k)

    closed, out_shape = jax.make_jaxpr(run, return_shape=True)(*arrays)
    body, consts = jxi.hoist_consts(closed)
    out_tree = jax.tree_util.tree_structure(out_shape)
    positions = _const_positions(consts, leaves) if key is not None else None
    if positions is not None:
        _TRACES.put(key, _Trace(body, positions, out_tree))
    return arrays, body, [*consts, *arrays], out_tree, len(consts)


def clear_trace_cache() -> None:
    """Forget every cached call trace (the next export traces each call again)."""
    _TRACES.clear()
    jxi.clear_batched_bodies()


__all__ = ["clear_trace_cache", "is_array", "split_arrays", "trace_call"]
