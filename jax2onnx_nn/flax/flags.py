"""Flax layers whose mode flag is a graph input (see ``core/flags.py``).

``nnx.Dropout(deterministic=...)``, ``nnx.BatchNorm(use_running_average=...)`` and their Linen
twins branch in Python on the flag. While an export runs they are wrapped: a traced flag (from
``input_params``, or computed from one) runs the layer in both modes and selects by the flag;
a Python bool runs it unchanged. The training-mode call draws its Dropout key from the
module's RNG stream as JAX does (a constant of the graph, or a graph input when the stream was
reseeded with a key that is one) and updates the running statistics; the state the call leaves
(RNG counts, ``batch_stats``) is selected by the flag too, so later layers see what JAX would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from flax import linen, nnx

from jax2onnx_nn.core.flags import attribute, is_runtime, select

MakeWrapper = Callable[[Any], Any]


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _with_nnx_state(module: nnx.Module, flag: Any, call: Callable[[bool], Any]) -> Any:
    """``call`` in both modes on an nnx module; its state after the call is the training
    call's where the flag is false, else what it was (only changed leaves get a select)."""
    before = jax.tree_util.tree_leaves(nnx.state(module))
    on_true = call(True)
    on_false = call(False)
    after, treedef = jax.tree_util.tree_flatten(nnx.state(module))
    if any(a is not b for a, b in zip(before, after, strict=True)):
        merged = [b if a is b else select(flag, a, b) for a, b in zip(before, after, strict=True)]
        nnx.update(module, jax.tree_util.tree_unflatten(treedef, merged))
    return select(flag, on_true, on_false)


def _nnx_dropout(original: Any) -> Any:
    def call(self: nnx.Dropout, inputs: Any, *, deterministic: Any = None, rngs: Any = None) -> Any:
        flag = _first(deterministic, self.deterministic)
        if not is_runtime(flag) or self.rate == 0.0:
            return original(self, inputs, deterministic=deterministic, rngs=rngs)
        return _with_nnx_state(self, flag, lambda mode: original(self, inputs, deterministic=mode, rngs=rngs))

    return call


def _nnx_batch_norm(original: Any) -> Any:
    def call(self: nnx.BatchNorm, x: Any, use_running_average: Any = None, *, mask: Any = None) -> Any:
        flag = _first(use_running_average, self.use_running_average)
        if not is_runtime(flag):
            return original(self, x, use_running_average, mask=mask)
        return _with_nnx_state(self, flag, lambda mode: original(self, x, mode, mask=mask))

    return call


def _linen_modes(module: linen.Module, name: str, given: Any, call: Callable[[Any], Any]) -> Callable[[bool], Any]:
    """``call(flag_argument)`` in one mode: the flag passed as the call's argument when it came
    from there, else set as the module's field (Linen refuses a flag given in both places)."""

    def run(mode: bool) -> Any:
        if given is not None:
            return call(mode)
        with attribute(module, name, mode):
            return call(None)

    return run


def _linen_dropout(original: Any) -> Any:
    def call(self: linen.Dropout, inputs: Any, deterministic: Any = None, rng: Any = None) -> Any:
        flag = _first(deterministic, self.deterministic)
        if not is_runtime(flag) or self.rate == 0.0:
            return original(self, inputs, deterministic, rng)
        run = _linen_modes(self, "deterministic", deterministic, lambda mode: original(self, inputs, mode, rng))
        return select(flag, run(True), run(False))

    return call


def _linen_batch_norm(original: Any) -> Any:
    def call(self: linen.BatchNorm, x: Any, use_running_average: Any = None, *, mask: Any = None) -> Any:
        flag = _first(use_running_average, self.use_running_average)
        if not is_runtime(flag):
            return original(self, x, use_running_average, mask=mask)
        run = _linen_modes(self, "use_running_average", use_running_average, lambda mode: original(self, x, mode, mask=mask))
        on_true = run(True)  # creates batch_stats on first use; never updates them
        stats = {k: self.get_variable("batch_stats", k) for k in ("mean", "var")}
        on_false = run(False)
        if self.is_mutable_collection("batch_stats") and not self.is_initializing():
            for k, old in stats.items():
                self.put_variable("batch_stats", k, select(flag, old, self.get_variable("batch_stats", k)))
        return select(flag, on_true, on_false)

    return call


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the flag wrappers; applied after the coarse-op
    patches, so that each mode's call still maps to its coarse op."""
    return [
        (nnx.Dropout, "__call__", _nnx_dropout),
        (nnx.BatchNorm, "__call__", _nnx_batch_norm),
        (linen.Dropout, "__call__", _linen_dropout),
        (linen.BatchNorm, "__call__", _linen_batch_norm),
    ]
