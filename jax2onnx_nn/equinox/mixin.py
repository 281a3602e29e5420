"""``export_onnx`` for Equinox modules, and ``OnnxExportable``: ``model.export_onnx(inputs)``."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np
import onnx

from jax2onnx_nn.core.api import to_onnx
from jax2onnx_nn.core.config import checked_options
from jax2onnx_nn.equinox.modules import submodules


@checked_options(to_onnx)
def export_onnx(
    module: eqx.Module,
    inputs: Sequence[Any],
    path: str | os.PathLike[str] | None = None,
    *,
    batch: bool | str = False,
    state: eqx.nn.State | None = None,
    **to_onnx_options: Any,
) -> onnx.ModelProto | str:
    """Export an Equinox module to ONNX (in inference mode unless ``training=True``).

    Args:
        module: the module (or a bound method of one); it is not changed: the export runs on
            a copy made with ``eqx.nn.inference_mode``.
        inputs: one input spec per positional argument of the call, for ONE example when
            ``batch`` is set (e.g. ``[(784,)]``); see :func:`jax2onnx_nn.to_onnx`.
        path: write the model to this file (weights streamed, never copied) and return the
            path instead of the ModelProto; ``onnx.load(path)`` reads it back.
        batch: export ``jax.vmap(module)``: every input gets a leading batch dim, symbolic
            and named ``"B"`` (or the given name), and the graph computes the whole batch at
            once (one Gemm per Linear, not a loop). Keyword inputs (``input_params``) and the
            state are shared by the batch.
        state: an ``eqx.nn.State`` (from ``eqx.nn.make_with_state``) passed as the last
            positional argument; its arrays become weights and the new state returned by the
            module is dropped (in inference mode it is the same state).
        **to_onnx_options: any option of :func:`jax2onnx_nn.to_onnx` (``opset``,
            ``auto_functions``, ``training``, ``input_names``, ...).

    Returns:
        The ``onnx.ModelProto``; with ``path``, the path written (a ``str``).

    Raises:
        TypeError: ``module`` is not an eqx.Module.
        ConversionError, SpecError: as :func:`jax2onnx_nn.to_onnx`.

    Example::

        model = eqx.nn.MLP(784, 10, 64, 2, key=jax.random.key(0))
        export_onnx(model, [(784,)], "mlp.onnx", batch=True)   # input ("B", 784)
    """
    if not isinstance(module, eqx.Module):
        raise TypeError(f"export_onnx needs an eqx.Module, got {type(module).__name__}")
    fn: Callable[..., Any] = module  # type: ignore[assignment]  # an eqx.Module is callable
    if state is not None:
        fn = _with_state(module, state)
    if batch:
        name = batch if isinstance(batch, str) else "B"
        double = bool(to_onnx_options.get("enable_double_precision", False))
        fn = _vmapped(fn, module, _axis_name(module))
        inputs = [batched_spec(spec, name, double) for spec in inputs]
    return to_onnx(fn, inputs, path=path, **to_onnx_options)


class OnnxExportable:
    """Mixin for eqx.Modules: ``model.export_onnx(inputs, path=None, **options)``.

    Example::

        class MLP(eqx.Module, OnnxExportable):
            ...

        onnx_model = MLP(key=jax.random.key(0)).export_onnx([(784,)], batch=True)
    """

    def export_onnx(
        self,
        inputs: Sequence[Any],
        path: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> onnx.ModelProto | str:
        """Export this module; see :func:`jax2onnx_nn.equinox.export_onnx`."""
        return export_onnx(self, inputs, path, **options)  # type: ignore[arg-type]


def _named_like(fn: Callable[..., Any], module: Any) -> Callable[..., Any]:
    """``fn`` with the module's call signature and class name (graph and input names)."""
    try:
        fn.__signature__ = inspect.signature(module)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    fn.__name__ = type(getattr(module, "__self__", module)).__name__
    return fn


def _with_state(module: Any, state: eqx.nn.State) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        out, _ = module(*args, state, **kwargs)
        return out

    return _named_like(run, module)


def _vmapped(fn: Callable[..., Any], module: Any, axis_name: Hashable | None) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        return jax.vmap(functools.partial(fn, **kwargs), axis_name=axis_name)(*args)

    return _named_like(run, module)


def _axis_name(module: Any) -> Hashable | None:
    """The batch axis name BatchNorm layers reduce over in training mode (when they agree)."""
    names = {m.axis_name for _, m in submodules(module) if isinstance(m, eqx.nn.BatchNorm)}
    if len(names) == 1:
        (name,) = names
        if isinstance(name, Hashable) and not isinstance(name, tuple):
            return name
    return None


def _is_shape(spec: Any) -> bool:
    return isinstance(spec, tuple) and all(isinstance(d, (int, np.integer, str)) for d in spec)


def _is_leaf(spec: Any) -> bool:
    if isinstance(spec, (jax.ShapeDtypeStruct, bool, int, float, np.integer)) or hasattr(
        spec, "dtype"
    ):
        return True
    return _is_shape(spec) or (
        isinstance(spec, tuple) and len(spec) == 2 and _is_shape(spec[0]) and not _is_shape(spec[1])
    )


def batched_spec(spec: Any, name: str, double: bool = False) -> Any:
    """An input spec for one example -> the spec of a batch of them (leading dim ``name``)."""

    def batch(leaf: Any) -> Any:
        if isinstance(leaf, bool):
            return ((name,), np.bool_)
        if isinstance(leaf, (int, np.integer)):
            return ((name,), np.int64 if double else np.int32)
        if isinstance(leaf, float):
            return (name,)
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            return ((name, *leaf.shape), leaf.dtype)
        if _is_shape(leaf):
            return (name, *leaf)
        shape, dtype = leaf
        return ((name, *shape), dtype)

    return jax.tree_util.tree_map(batch, spec, is_leaf=_is_leaf)


__all__ = ["OnnxExportable", "batched_spec", "export_onnx"]
