"""core/flags.py: a layer that branches on its flag in Python exports both modes, selected by
the flag at run time; a Python bool keeps the one mode."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from jax2onnx_nn.core.flags import attribute, both_modes, is_runtime
from tests.flags import assert_flag_switches


@dataclasses.dataclass(frozen=True)
class Layer:
    """Stands for a framework layer: a Python branch on a flag (argument or field)."""

    train: Any = None

    def __call__(self, x: jax.Array, train: Any = None) -> tuple[jax.Array, jax.Array]:
        mode = self.train if train is None else train
        return (x * 2.0, x.sum()) if mode else (x - 1.0, x.max())


def wrapped(layer: Layer, x: jax.Array, train: Any = None) -> Any:
    """What an adapter's wrapper does: both modes for a runtime flag, else the call itself."""
    flag = layer.train if train is None else train
    if not is_runtime(flag):
        return layer(x, train)
    if train is not None:
        return both_modes(flag, lambda mode: layer(x, mode))

    def field(mode: bool) -> Any:
        with attribute(layer, "train", mode):
            return layer(x)

    return both_modes(flag, field)


@pytest.mark.parametrize("as_field", [False, True])
def test_both_modes_follow_the_flag(as_field: bool) -> None:
    fn = (
        (lambda x, train: wrapped(Layer(train), x))
        if as_field
        else (lambda x, train: wrapped(Layer(), x, train))
    )
    assert_flag_switches(fn, [("B", 3)], "train")


def test_python_bools_and_concrete_arrays_are_not_runtime_flags() -> None:
    assert not is_runtime(True) and not is_runtime(jnp.asarray(False))
    seen: list[bool] = []
    jax.make_jaxpr(lambda t: seen.append(is_runtime(t)) or t)(True)
    assert seen == [True]


def test_attribute_is_restored_on_a_frozen_dataclass() -> None:
    layer = Layer(train=True)
    with pytest.raises(RuntimeError), attribute(layer, "train", False):
        assert layer.train is False
        raise RuntimeError
    assert layer.train is True
