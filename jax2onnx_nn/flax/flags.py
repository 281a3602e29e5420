"""Flax layers whose mode flag is a graph input (see ``core/flags.py``).

``nnx.Dropout(deterministic=...)``, ``nnx.BatchNorm(use_running_average=...)``, their Linen twins
and Linen's ``MultiHeadDotProductAttention(deterministic=...)`` branch in Python on the flag
(``nnx.MultiHeadAttention`` is not wrapped: its training-mode export drops the attention dropout
today, and an error is better than a wrong branch). While an export runs they are wrapped: a traced
flag (from ``input_params``, or computed from one) runs the layer in both modes and selects by the
flag; a Python bool runs it unchanged. The training-mode call draws its Dropout key as JAX does
(from the module's RNG stream: a constant of the graph, or a graph input when the stream was
reseeded with a key that is one) and updates the running statistics; the state the call leaves (nnx
RNG counts and batch statistics, Linen ``batch_stats``) is selected by the flag too, so that later
layers and returned state see what JAX would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from flax import linen, nnx

from jax2onnx_nn.core.flags import attribute, is_runtime, select

MakeWrapper = Callable[[Any], Any]
Call = tuple[tuple[Any, ...], dict[str, Any]]


def _flag_argument(
    name: str, position: int | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, Callable[[Any], Call]]:
    """The flag as the call gives it (None if not given) and the call's arguments with another
    value in its place. ``position``: its index among the positional arguments, if it has one."""
    if position is not None and len(args) > position:
        return args[position], lambda mode: (
            (*args[:position], mode, *args[position + 1 :]),
            kwargs,
        )
    return kwargs.get(name), lambda mode: (args, {**kwargs, name: mode})


def _no_dropout(layer: Any) -> bool:
    """A Dropout or attention of rate 0: the layer itself ignores its flag."""
    rate = getattr(layer, "rate", getattr(layer, "dropout_rate", None))
    return isinstance(rate, (int, float)) and rate == 0


def _with_nnx_state(module: nnx.Module, flag: Any, call: Callable[[bool], Any]) -> Any:
    """``call`` in both modes on an nnx module; its state after the call is the training
    call's where the flag is false, else what it was (only changed leaves get a select)."""
    before = jax.tree_util.tree_leaves(nnx.state(module))
    on_true = call(True)
    on_false = call(False)
    after, treedef = jax.tree_util.tree_flatten(nnx.state(module))
    if any(a is not b for a, b in zip(before, after, strict=True)):
        nnx.update(module, jax.tree_util.tree_unflatten(treedef, select(flag, before, after)))
    return select(flag, on_true, on_false)


def _linen_state(module: linen.Module) -> dict[tuple[str, str], Any]:
    """The module's own variables, (collection, name) -> value (submodules' are theirs)."""
    return {
        (col, k): v
        for col, values in module.variables.items()
        for k, v in values.items()
        if not isinstance(v, dict)
    }


def _with_linen_state(module: linen.Module, flag: Any, call: Callable[[bool], Any]) -> Any:
    """:func:`_with_nnx_state` for a Linen module: its variables a training call changes
    (``batch_stats``, in mutable collections only) are selected by the flag."""
    on_true = call(True)  # creates the variables on first use; never updates them
    before = _linen_state(module)
    on_false = call(False)
    for (col, k), new in _linen_state(module).items():
        old = before.get((col, k), new)
        if old is not new:
            module.put_variable(col, k, select(flag, old, new))
    return select(flag, on_true, on_false)


def _flag_wrapper(
    name: str, position: int | None, both: Callable[[Any, Any, Callable[[bool], Any]], Any]
) -> MakeWrapper:
    """The wrapper of a layer whose call takes the mode flag ``name`` or whose field holds it:
    each mode goes where the flag was (Linen refuses a flag given in both places); ``both``
    runs the two modes and selects."""

    def make(original: Any) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            given, with_mode = _flag_argument(name, position, args, kwargs)
            flag = getattr(self, name) if given is None else given
            if not is_runtime(flag) or _no_dropout(self):
                return original(self, *args, **kwargs)

            def run(mode: bool) -> Any:
                if given is not None:
                    a, k = with_mode(mode)
                    return original(self, *a, **k)
                with attribute(self, name, mode):
                    return original(self, *args, **kwargs)

            return both(self, flag, run)

        return call

    return make


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the flag wrappers; applied after the coarse-op
    patches, so that each mode's call still maps to its coarse op."""
    return [
        (nnx.Dropout, "__call__", _flag_wrapper("deterministic", None, _with_nnx_state)),
        (nnx.BatchNorm, "__call__", _flag_wrapper("use_running_average", 1, _with_nnx_state)),
        (linen.Dropout, "__call__", _flag_wrapper("deterministic", 1, _with_linen_state)),
        (linen.BatchNorm, "__call__", _flag_wrapper("use_running_average", 1, _with_linen_state)),
        (
            linen.MultiHeadDotProductAttention,
            "__call__",
            _flag_wrapper("deterministic", None, _with_linen_state),
        ),
    ]
