"""The patches of ``jax.nn``'s namespaces: one patched function per original, whatever
namespace it is reached through (``nnx.relu is jax.nn.relu``), and :func:`substitute`, which swaps a
captured original for it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from jax2onnx_nn.core.coarse import (
    Handler,
    coarse_wrapper,
)
from jax2onnx_nn.core.jax_nn.activations import ACTIVATIONS, activation_handler
from jax2onnx_nn.core.jax_nn.attention import attention_handler
from jax2onnx_nn.core.jax_nn.in_place import in_place_entry

MakeWrapper = Callable[[Any], Any]


# -- the patches ---------------------------------------------------------------------------

_PATCHED: dict[int, tuple[Any, Any]] = {}
"""id(original function) -> (original, patched), filled while an export's patches are applied."""

_MADE: dict[int, tuple[Any, Any]] = {}
"""id(original function) -> (original, patched) for every export: a patched function reads the
export's options when called, so it is made once per original (its signature read once), not
once per export (19 ``inspect.signature`` calls, ~2 ms an export)."""


def shared(handler_for: Callable[[Any], Handler]) -> MakeWrapper:
    """A ``make_wrapper`` for :func:`patch` of a function: one patched function per original
    (``coarse_wrapper(handler_for(original))``), whatever namespace it is reached through, so
    that :func:`substitute` finds it for a captured original."""

    def make(original: Any) -> Any:
        if id(original) not in _PATCHED:
            made = _MADE.get(id(original))
            if (
                made is None or made[0] is not original
            ):  # the original is held: its id is not reused
                made = _MADE[id(original)] = (
                    original,
                    coarse_wrapper(handler_for(original))(original),
                )
            _PATCHED[id(original)] = made
        return _PATCHED[id(original)][1]

    return make


def namespace_patches(namespace: Any) -> list[tuple[Any, str, MakeWrapper]]:
    """(namespace, name, make_wrapper) for each function of the table ``namespace`` holds
    (``jax.nn``, or a framework's re-export of it such as ``flax.nnx``). Made once per
    namespace: every export applies them (``make_wrapper`` looks the original up then)."""
    known = _NAMESPACE_PATCHES.get(id(namespace))
    if known is None or known[0] is not namespace:
        known = _NAMESPACE_PATCHES[id(namespace)] = (namespace, _make_namespace_patches(namespace))
    return list(known[1])


_NAMESPACE_PATCHES: dict[int, tuple[Any, list[tuple[Any, str, MakeWrapper]]]] = {}


def _make_namespace_patches(namespace: Any) -> list[tuple[Any, str, MakeWrapper]]:
    result: list[tuple[Any, str, MakeWrapper]] = []
    for name, activation in ACTIVATIONS.items():
        function = getattr(namespace, name, None)
        if callable(function) and in_place_entry(function) is None:  # (those are patched in place)
            result.append(
                (namespace, name, shared(functools.partial(activation_handler, name, activation)))
            )
    if callable(getattr(namespace, "dot_product_attention", None)):
        result.append((namespace, "dot_product_attention", shared(attention_handler)))
    return result


def substitute(value: Any) -> Any:
    """``value`` with a captured original function (also inside a ``functools.partial``)
    replaced by its patched version, while an export runs; ``value`` itself otherwise."""
    hit = _PATCHED.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    if isinstance(value, functools.partial):
        func = substitute(value.func)
        if func is not value.func:
            return functools.partial(func, *value.args, **value.keywords)
    return value


def clear_patched() -> None:
    """Forget the patched functions of an export that ends (:func:`substitute` finds none)."""
    _PATCHED.clear()
