"""Equinox layers whose ``inference`` flag is a graph input (see ``core/flags.py``).

``eqx.nn.Dropout`` and ``eqx.nn.BatchNorm`` branch in Python on ``inference`` (the call's
argument or the field ``eqx.nn.inference_mode`` sets). While an export runs they are wrapped:
a traced flag runs the layer in both modes and selects by the flag, the returned ``State``
leaf by leaf too (so a graph that returns the state returns JAX's running statistics for
either flag); a Python bool runs the layer unchanged. Dropout's training mode needs the
``key=`` JAX needs; a key that is a graph input gives a fresh mask per run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax

from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.flags import both_modes, is_runtime
from jax2onnx_nn.core.trace_errors import calling_user_frame

MakeWrapper = Callable[[Any], Any]


def _dropout(original: Any) -> Any:
    def call(
        self: eqx.nn.Dropout,
        x: Any,
        *,
        key: Any = None,
        inference: Any = None,
        deterministic: Any = None,
    ) -> Any:
        flag = next((v for v in (deterministic, inference, self.inference) if v is not None), None)
        if not is_runtime(flag) or (isinstance(self.p, (int, float)) and self.p == 0):
            return original(self, x, key=key, inference=inference, deterministic=deterministic)
        if key is None:
            raise ConversionError(
                "eqx.nn.Dropout gets a runtime inference flag but no key: its training mode (the "
                "flag false) draws a mask, as in JAX it needs key=...; pass key=jax.random.key(0) "
                "for one fixed mask, or take the key as an input of the exported function for a "
                f"mask per run\n  at {calling_user_frame()}"
            )
        return both_modes(flag, lambda mode: original(self, x, key=key, inference=mode))

    return call


def _batch_norm(original: Any) -> Any:
    def call(
        self: eqx.nn.BatchNorm, x: Any, state: Any, *, key: Any = None, inference: Any = None
    ) -> Any:
        flag = self.inference if inference is None else inference
        if not is_runtime(flag):
            return original(self, x, state, key=key, inference=inference)
        # each mode gets a State of its own: a training call's state.set retires the one it was
        # given
        return both_modes(
            flag, lambda mode: original(self, x, _copy(state), key=key, inference=mode)
        )

    return call


def _copy(state: Any) -> Any:
    return jax.tree_util.tree_map(lambda leaf: leaf, state)


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the flag wrappers; applied after the coarse-op
    patches, so that each mode's call still maps to its coarse op."""
    return [
        (eqx.nn.Dropout, "__call__", _dropout),
        (eqx.nn.BatchNorm, "__call__", _batch_norm),
    ]
