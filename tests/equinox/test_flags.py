"""A runtime ``inference`` flag (``input_params``) switching eqx.nn.Dropout and BatchNorm inside
one graph: each flag value computes what JAX computes (Dropout masks bit for bit, the returned
State's running statistics too)."""

from __future__ import annotations

import warnings
from typing import Any

import equinox as eqx
import jax
import pytest

from jax2onnx_nn import ConversionError, to_onnx
from tests.flags import assert_flag_switches, with_mask

KEY = jax.random.key(0)


def test_dropout_with_the_key_as_input() -> None:
    dropout = eqx.nn.Dropout(0.5)
    fn = lambda x, key, inference: with_mask(dropout(x, key=key, inference=inference))  # noqa: E731
    assert_flag_switches(fn, [("B", 8), KEY], "inference", sizes={"B": [1, 9]})


class Net(eqx.Module):
    linear: eqx.nn.Linear
    dropout: eqx.nn.Dropout
    bn: eqx.nn.BatchNorm

    def __init__(self, mode: str) -> None:
        self.linear = eqx.nn.Linear(6, 5, key=KEY)
        self.dropout = eqx.nn.Dropout(0.5)
        self.bn = eqx.nn.BatchNorm(5, axis_name="batch", mode=mode)

    def __call__(
        self, x: jax.Array, state: eqx.nn.State, *, key: jax.Array
    ) -> tuple[jax.Array, eqx.nn.State]:
        return self.bn(self.dropout(self.linear(x), key=key), state)


@pytest.mark.parametrize("mode", ["batch", pytest.param("ema", marks=pytest.mark.slow)])
def test_batch_norm_and_its_state_follow_the_flag(mode: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ema mode's deprecation note
        net, state = eqx.nn.make_with_state(Net)(mode)

    def fn(x: jax.Array, key: jax.Array, inference: Any) -> Any:
        # the flag as the modules' field, set the way eqx users switch modes
        model = eqx.nn.inference_mode(net, value=inference)
        keys = jax.random.split(key, x.shape[0])
        return jax.vmap(
            lambda xi, ki: model(xi, state, key=ki), axis_name="batch", out_axes=(0, None)
        )(x, keys)

    # batch statistics are a pmean over the vmapped axis, which JAX needs of a fixed size
    model = assert_flag_switches(fn, [(6, 6), KEY], "inference", sizes={})
    assert len(model.graph.output) == 4  # y and the state's three leaves


def test_dropout_without_a_key_names_the_line() -> None:
    dropout = eqx.nn.Dropout(0.5)
    fn = lambda x, inference: dropout(x, inference=inference)  # noqa: E731
    with pytest.raises(ConversionError, match="key=") as info:
        to_onnx(fn, [("B", 3)], input_params={"inference": True})
    assert f"{__file__}:{fn.__code__.co_firstlineno}" in str(info.value)
