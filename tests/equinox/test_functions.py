"""ONNX functions for Equinox modules: ``auto_functions=True`` and ``@onnx_function`` give one
FunctionProto per distinct class / config / input types, weights passed in, vmapped too."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import pytest

from jax2onnx_nn.equinox import export_onnx, onnx_function
from tests.equinox.helpers import (
    all_ops,
    assert_module_matches,
    initializer_names,
    node_names,
    node_ops,
)

KEY = jax.random.key(0)


class Block(eqx.Module):
    linear: eqx.nn.Linear
    norm: eqx.nn.LayerNorm

    def __init__(self, size: int, key: Any) -> None:
        self.linear = eqx.nn.Linear(size, size, key=key)
        self.norm = eqx.nn.LayerNorm(size)

    def __call__(self, x: Any) -> Any:
        return self.norm(x + jax.nn.relu(self.linear(x)))


class Tower(eqx.Module):
    blocks: tuple
    out: eqx.nn.Linear

    def __init__(self, sizes: tuple[int, ...], key: Any) -> None:
        keys = jax.random.split(key, len(sizes) + 1)
        self.blocks = tuple(Block(s, k) for s, k in zip(sizes, keys, strict=False))
        self.out = eqx.nn.Linear(sizes[-1], 2, key=keys[-1])

    def __call__(self, x: Any) -> Any:
        for block in self.blocks:
            x = block(x)
        return self.out(x)


@pytest.mark.parametrize("batch", [False, True])
def test_auto_functions_share_one_function_per_class(batch: bool) -> None:
    model = assert_module_matches(Tower((4, 4, 4), KEY), [(4,)], batch=batch, auto_functions=True)
    assert [f.name for f in model.functions] == ["Block"]
    assert node_ops(model) == ["Block", "Block", "Block", "Gemm" if batch else "MatMul"] + (
        [] if batch else ["Add"]
    )
    (function,) = model.functions
    assert list(function.input) == ["x", "linear.weight", "linear.bias", "norm.weight", "norm.bias"]
    assert initializer_names(model) >= {f"blocks.{i}.linear.weight" for i in range(3)}
    assert "Gemm" in all_ops(model) if batch else "MatMul" in all_ops(model)


def test_auto_functions_one_per_config() -> None:
    class Widen(eqx.Module):
        linear: eqx.nn.Linear

        def __call__(self, x: Any) -> Any:
            return self.linear(x)

    class Net(eqx.Module):
        a: Block
        b: Block
        widen: Widen
        c: Block

        def __call__(self, x: Any) -> Any:
            return self.c(self.widen(self.b(self.a(x))))

    keys = jax.random.split(KEY, 4)
    net = Net(
        Block(3, keys[0]),
        Block(3, keys[1]),
        Widen(eqx.nn.Linear(3, 5, key=keys[2])),
        Block(5, keys[3]),
    )
    model = assert_module_matches(net, [(3,)], batch=True, auto_functions=True)
    assert sorted(f.name for f in model.functions) == ["Block", "Block_1", "Widen"]
    assert node_names(model) == ["a/Block", "b/Block", "widen/Widen", "c/Block_1"]


def test_equinox_layers_are_not_functions() -> None:
    model = assert_module_matches(
        eqx.nn.MLP(3, 2, 4, 2, key=KEY), [(3,)], batch=True, auto_functions=True
    )
    assert list(model.functions) == []


def test_onnx_function_decorator_on_a_module_class() -> None:
    @onnx_function
    class Residual(eqx.Module):
        linear: eqx.nn.Linear

        def __call__(self, x: Any) -> Any:
            return x + self.linear(x)

    class Net(eqx.Module):
        first: Residual
        second: Residual

        def __call__(self, x: Any) -> Any:
            return self.second(self.first(x))

    a, b = jax.random.split(KEY)
    net = Net(Residual(eqx.nn.Linear(3, 3, key=a)), Residual(eqx.nn.Linear(3, 3, key=b)))
    model = assert_module_matches(net, [(3,)], batch=True)
    assert node_ops(model) == ["Residual", "Residual"]
    assert [f.name for f in model.functions] == ["Residual"]
    assert "Gemm" in [n.op_type for n in model.functions[0].node]
    # outside an export, the class behaves as before
    assert net.first(jax.numpy.ones(3)).shape == (3,)


def test_functions_and_names_are_deterministic() -> None:
    tower = Tower((4, 4), KEY)
    first = export_onnx(tower, [(4,)], batch=True, auto_functions=True).SerializeToString()
    second = export_onnx(tower, [(4,)], batch=True, auto_functions=True).SerializeToString()
    assert first == second


def test_blocks_with_constant_tables_share_a_function() -> None:
    class Rotary(eqx.Module):
        rope: eqx.nn.RotaryPositionalEmbedding
        linear: eqx.nn.Linear

        def __call__(self, x: Any) -> Any:
            return self.rope(jax.vmap(self.linear)(x))

    class Net(eqx.Module):
        first: Rotary
        second: Rotary

        def __call__(self, x: Any) -> Any:
            return self.second(self.first(x))

    a, b = jax.random.split(KEY)
    net = Net(
        Rotary(eqx.nn.RotaryPositionalEmbedding(4), eqx.nn.Linear(4, 4, key=a)),
        Rotary(eqx.nn.RotaryPositionalEmbedding(4), eqx.nn.Linear(4, 4, key=b)),
    )
    model = assert_module_matches(net, [(3, 4)], batch=True, auto_functions=True)
    assert [f.name for f in model.functions] == ["Rotary"]
