"""The Keras side of an export session (see ``core/patching.py``): the Keras models and layers
the exported callable reaches (``lambda *xs: model(*xs, training=False)``, a global, a dict of
models; ``core/reach.py``) give their weights' initializer names, from each variable's path
(``sequential/dense/kernel`` -> ``dense.kernel``, the top-level model's own name left out)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras

from jax2onnx_nn.core import reach
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.patching import Prepared
from jax2onnx_nn.keras import (  # noqa: F401 (coarse ops)
    coarse,
    coarse_layers,
    coarse_rnn,
    quant,
)


def _is_layer(value: Any) -> bool:
    return isinstance(value, keras.layers.Layer)


def _holds(value: Any) -> bool:
    return reach.containers_hold(value, _is_layer)


def _layers(value: Any) -> Iterator[Any]:
    if _is_layer(value):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _layers(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _layers(v)


def variable_names(layers: list[Any]) -> dict[int, str]:
    """id(array) -> dotted variable path, for every variable of the layers (first wins)."""
    names: dict[int, str] = {}
    several = len(layers) > 1
    for layer in layers:
        for variable in layer.variables:
            parts = variable.path.split("/")
            if not several and len(parts) > 1 and parts[0] == layer.name:
                parts = parts[1:]  # the exported model's own name says nothing
            names.setdefault(id(variable.value), ".".join(parts))
    return names


def in_mode(layer: Any, training: bool) -> Any:
    """``layer`` called with ``training=`` (as Keras's own export calls a model: a model given
    to ``to_onnx`` itself runs in inference mode even where its ``call`` defaults to training)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return layer(*args, training=training, **kwargs)

    return call


@contextlib.contextmanager
def export_session(prepared: Prepared, options: ExportConfig) -> Iterator[Prepared]:
    # nothing is patched; a layer reached inside a function takes the training= it is given
    fn = in_mode(prepared.fn, options.training) if _is_layer(prepared.fn) else prepared.fn
    _, roots = reach.retarget(prepared.fn, _holds, lambda value: value)
    layers = list({id(layer): layer for root in roots.values() for layer in _layers(root)}.values())
    if not layers:
        yield Prepared(fn, prepared.const_names)
        return
    yield Prepared(fn, {**variable_names(layers), **prepared.const_names})
