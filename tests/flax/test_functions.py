"""Module boundaries as ONNX functions: @onnx_function classes and auto_functions=True."""

from __future__ import annotations

from typing import Any

import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from examples.flax_mlp_functions import MLPBlock, MyModel
from jax2onnx_nn import onnx_function, to_onnx
from jax2onnx_nn.core.functions import DOMAIN
from tests.flax.helpers import assert_module_matches


def _calls(graph: Any) -> list[tuple[str, str]]:
    return [(n.name, n.op_type) for n in graph.node if n.domain == DOMAIN]


def test_readme_two_blocks_one_function_two_calls() -> None:
    model = assert_module_matches(MyModel(16, rngs=nnx.Rngs(0)), [("B", 16)], sizes={"B": [1, 5]})
    assert [f.name for f in model.functions] == ["MLPBlock"]
    assert _calls(model.graph) == [("block1/MLPBlock", "MLPBlock"), ("block2/MLPBlock", "MLPBlock")]
    (function,) = model.functions
    assert list(function.input) == [
        "x",
        "linear1.kernel",
        "linear1.bias",
        "batchnorm.mean",
        "batchnorm.var",
        "batchnorm.scale",
        "batchnorm.bias",
        "linear2.kernel",
        "linear2.bias",
    ]
    assert [n.op_type for n in function.node] == [
        "Gemm",
        "Gelu",
        "BatchNormalization",
        "Gemm",
        "Gelu",
    ]
    weights = {i.name for i in model.graph.initializer}
    assert {"block1.linear1.kernel", "block2.linear1.kernel", "block2.batchnorm.var"} <= weights
    assert model.graph.node[0].input[1] == "block1.linear1.kernel"


def test_readme_static_shape() -> None:
    model = assert_module_matches(MyModel(32, rngs=nnx.Rngs(1)), [(10, 32)])
    assert len(model.functions) == 1 and len(_calls(model.graph)) == 2


def test_different_configs_give_different_functions() -> None:
    class Pair(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.small = MLPBlock(8, rngs=rngs)
            self.proj = nnx.Linear(8, 12, rngs=rngs)
            self.big = MLPBlock(12, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            return self.big(self.proj(self.small(x)))

    model = assert_module_matches(Pair(nnx.Rngs(2)), [("B", 8)], sizes={"B": [3]})
    assert sorted(f.name for f in model.functions) == ["MLPBlock", "MLPBlock_1"]


@onnx_function
class Inner(nnx.Module):
    def __init__(self, dim: int, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(dim, dim, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        return nnx.relu(self.linear(x))


@onnx_function
class OuterBlock(nnx.Module):
    def __init__(self, dim: int, rngs: nnx.Rngs) -> None:
        self.a = Inner(dim, rngs)
        self.b = Inner(dim, rngs)
        self.norm = nnx.LayerNorm(dim, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        return self.norm(self.b(self.a(x)) + x)


class Stack(nnx.Module):
    def __init__(self, dim: int, depth: int, rngs: nnx.Rngs) -> None:
        self.blocks = nnx.List([OuterBlock(dim, rngs) for _ in range(depth)])

    def __call__(self, x: Any) -> Any:
        for block in self.blocks:
            x = block(x)
        return x


@settings(max_examples=6)
@given(depth=st.integers(1, 3), dim=st.sampled_from([4, 8]))
def test_nested_functions(depth: int, dim: int) -> None:
    model = assert_module_matches(
        Stack(dim, depth, nnx.Rngs(depth)), [("B", dim)], sizes={"B": [2]}
    )
    assert sorted(f.name for f in model.functions) == ["Inner", "OuterBlock"]
    outer = next(f for f in model.functions if f.name == "OuterBlock")
    assert [c for _, c in _calls(outer)] == ["Inner", "Inner"]
    assert [c for _, c in _calls(model.graph)] == ["OuterBlock"] * depth
    assert _calls(model.graph)[0][0] == "blocks/0/OuterBlock"


class Plain(nnx.Module):
    """No decorators: auto_functions makes the user's classes functions."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.blocks = nnx.List([Residual(6, rngs) for _ in range(3)])
        self.head = nnx.Linear(6, 2, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Residual(nnx.Module):
    def __init__(self, dim: int, rngs: nnx.Rngs) -> None:
        self.ff = nnx.Sequential(nnx.Linear(dim, dim, rngs=rngs), nnx.gelu)
        self.norm = nnx.LayerNorm(dim, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        return x + self.ff(self.norm(x))


@pytest.mark.parametrize("coarse_ops", [True, False])
def test_auto_functions(coarse_ops: bool) -> None:
    model = assert_module_matches(
        Plain(nnx.Rngs(3)),
        [("B", 6)],
        sizes={"B": [1, 4]},
        auto_functions=True,
        coarse_ops=coarse_ops,
    )
    assert [f.name for f in model.functions] == [
        "Residual"
    ]  # flax layers and the root are no functions
    assert [c for _, c in _calls(model.graph)] == ["Residual"] * 3
    if coarse_ops:
        (function,) = model.functions
        assert [n.op_type for n in function.node] == ["LayerNormalization", "Gemm", "Gelu", "Add"]


def test_without_auto_functions_there_are_none() -> None:
    model = to_onnx(Plain(nnx.Rngs(3)), [("B", 6)])
    assert len(model.functions) == 0
    assert [n.name for n in model.graph.node][:2] == [
        "blocks/0/norm/LayerNormalization",
        "blocks/0/ff/layers/0/Gemm",
    ]


def test_auto_functions_with_decorated_classes_adds_no_second_layer() -> None:
    model = assert_module_matches(
        MyModel(8, rngs=nnx.Rngs(4)), [("B", 8)], sizes={"B": [2]}, auto_functions=True
    )
    assert [f.name for f in model.functions] == ["MLPBlock"]
    (function,) = model.functions
    assert all(n.domain != DOMAIN for n in function.node)


def test_functions_outside_exports_are_plain_calls() -> None:
    import numpy as np

    module = MyModel(8, rngs=nnx.Rngs(5))
    module.eval()
    x = np.ones((2, 8), np.float32)
    expected = module.block2(module.block1(x))
    np.testing.assert_array_equal(module(x), expected)


def test_training_mode_state_updates_run_inline() -> None:
    model = assert_module_matches(
        MyModel(8, rngs=nnx.Rngs(6)), [(4, 8)], training=True, auto_functions=True
    )
    assert len(model.functions) == 0  # BatchNorm updates its statistics: no function boundary


@given(
    shared=st.lists(st.sampled_from(["attr", "list", "dict", "tuple"]), max_size=3),
    order=st.permutations(["a", "b", "c"]),
)
@settings(max_examples=10)
def test_module_paths_are_iter_graphs(shared: list[str], order: list[str]) -> None:
    """The per-export walk of the module copy finds every module at the path (and in the
    order) ``nnx.graph.iter_graph`` gives: a module held in several places (attributes,
    nnx.List, nnx.Dict, a data tuple) keeps its first path, which names its nodes."""
    from jax2onnx_nn.flax.functions import modules_in

    rngs = nnx.Rngs(0)
    common = nnx.Linear(2, 2, rngs=rngs)

    class Holder(nnx.Module):
        def __init__(self) -> None:
            holders = {
                "attr": lambda: common,
                "list": lambda: nnx.List([nnx.Dropout(0.1), common]),
                "dict": lambda: nnx.Dict({"norm": nnx.BatchNorm(2, rngs=rngs), "layer": common}),
                "tuple": lambda: nnx.data((common, 3)),
            }
            for name, kind in zip(order, shared, strict=False):
                setattr(self, name, holders[kind]())
            self.own = nnx.Linear(2, 3, rngs=rngs)
            self.width = 4

    root = Holder()
    expected = [
        (path, node) for path, node in nnx.graph.iter_graph(root) if isinstance(node, nnx.Module)
    ]
    found = modules_in(root)
    assert [path for path, _ in found] == [path for path, _ in expected]
    assert all(a is b for (_, a), (_, b) in zip(found, expected, strict=True))
