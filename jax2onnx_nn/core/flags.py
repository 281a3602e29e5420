"""Layer flags that arrive as graph inputs (``input_params={"deterministic": True}``).

A layer that branches in Python on a mode flag (Dropout's ``deterministic``, BatchNorm's
``use_running_average``) cannot take a traced flag. The adapters wrap such layers: when the
flag is traced, the layer is called once per mode with a Python bool and the results (outputs
and the state the call leaves behind) are selected by the flag, so one ONNX graph holds both
modes and each computes JAX's own numbers. With a Python bool the layer runs unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

T = TypeVar("T")


def is_runtime(flag: Any) -> bool:
    """True when ``flag`` is only known at run time (a traced graph input or a value computed
    from one), False for Python bools and concrete arrays."""
    return isinstance(flag, jax.core.Tracer)


def select(flag: Any, on_true: T, on_false: T) -> T:
    """``on_true`` where ``flag`` holds, else ``on_false``, leaf by leaf over equal pytrees (a
    leaf both modes share, such as an input Dropout passes through, stays as it is)."""
    return jax.tree_util.tree_map(
        lambda a, b: a if a is b else jnp.where(flag, a, b), on_true, on_false
    )


def both_modes(flag: Any, call: Callable[[bool], T]) -> T:
    """``call(True)`` and ``call(False)`` selected by ``flag``. ``True`` runs first, so that the
    state a training-mode call updates (running statistics, RNG counts) is read before."""
    return select(flag, call(True), call(False))


@contextlib.contextmanager
def attribute(obj: Any, name: str, value: Any) -> Iterator[None]:
    """``obj.name`` is ``value`` inside the block, also on frozen dataclasses (a layer whose
    flag is a constructor field: ``nn.Dropout(rate, deterministic=flag)``)."""
    old = getattr(obj, name)
    object.__setattr__(obj, name, value)
    try:
        yield
    finally:
        object.__setattr__(obj, name, old)


__all__ = ["attribute", "both_modes", "is_runtime", "select"]
