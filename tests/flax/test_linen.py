"""Flax Linen exports (jax2onnx_nn/flax/linen.py): weights named by variable path through
``module.apply``, a bound module and :func:`export_onnx`, activations as their one op; each
model run by onnxruntime at two batch sizes against JAX."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import onnx
import pytest
from flax import linen as nn

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.flax.linen import export_onnx, variable_names
from jax2onnx_nn.testing import assert_exports_match, op_types

SIZES = {"B": [1, 3]}


class ConvNet(nn.Module):
    """The issue's model: Conv -> BatchNorm -> gelu -> mean -> LayerNorm -> Dense."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Conv(8, (3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.gelu(x)
        x = x.mean(axis=(1, 2))
        x = nn.LayerNorm()(x)
        return nn.Dense(4)(x)


@pytest.fixture(scope="module")
def convnet():
    module = ConvNet()
    variables = module.init(jax.random.key(0), jnp.ones((1, 6, 6, 3)))
    # batch statistics that are not the init's zeros / ones
    stats = jax.tree.map(lambda a: a + 0.25, variables["batch_stats"])
    return module, {"params": variables["params"], "batch_stats": stats}


EXPECTED_NAMES = {
    "params/Conv_0/kernel", "params/Conv_0/bias", "params/BatchNorm_0/scale", "params/BatchNorm_0/bias",
    "batch_stats/BatchNorm_0/mean", "batch_stats/BatchNorm_0/var", "params/LayerNorm_0/scale",
    "params/LayerNorm_0/bias", "params/Dense_0/kernel", "params/Dense_0/bias",
}


def _weights(model: onnx.ModelProto) -> set[str]:
    return {i.name for i in model.graph.initializer if "/" in i.name}


def test_apply_in_a_lambda_names_weights_by_variable_path(convnet):
    module, variables = convnet
    model = assert_exports_match(lambda x: module.apply(variables, x), [("B", 6, 6, 3)], sizes=SIZES)
    assert _weights(model) == EXPECTED_NAMES
    assert not any(i.name.startswith("weight") for i in model.graph.initializer)
    assert "Gelu" in op_types(model)  # nn.gelu: one op (was 9 nodes)


def test_bound_module_names_weights_by_variable_path(convnet):
    module, variables = convnet
    bound = module.bind(variables)
    model = to_onnx(bound, [("B", 6, 6, 3)])
    assert _weights(model) == EXPECTED_NAMES
    verify(lambda x: module.apply(variables, x), model, [("B", 6, 6, 3)], sizes=SIZES).raise_if_failed()


def test_export_onnx(convnet):
    module, variables = convnet
    model = export_onnx(module, variables, [("B", 6, 6, 3)])
    assert _weights(model) == EXPECTED_NAMES
    verify(lambda x: module.apply(variables, x), model, [("B", 6, 6, 3)], sizes=SIZES).raise_if_failed()


def test_export_onnx_with_a_method_and_options():
    class Two(nn.Module):
        def setup(self):
            self.dense = nn.Dense(3)

        def __call__(self, x):
            return self.dense(x)

        def encode(self, x):
            return jax.nn.relu(self.dense(x))

    module = Two()
    variables = module.init(jax.random.key(1), jnp.ones((1, 5)))
    model = export_onnx(module, variables, [("B", 5)], method=Two.encode, opset=18)
    assert _weights(model) == {"params/dense/kernel", "params/dense/bias"}
    assert model.opset_import[0].version == 18 and "Relu" in op_types(model)
    verify(lambda x: module.apply(variables, x, method=Two.encode), model, [("B", 5)], sizes=SIZES).raise_if_failed()


def test_use_running_average_as_a_call_argument_is_the_users():
    """``train`` is the module's call argument: the export runs it as called (here through a
    partial), with ``batch_stats`` read-only."""
    module = ConvNet()
    variables = module.init(jax.random.key(0), jnp.ones((1, 6, 6, 3)))
    apply = functools.partial(module.apply, variables, train=False)
    model = assert_exports_match(apply, [("B", 6, 6, 3)], sizes=SIZES)
    assert _weights(model) == EXPECTED_NAMES


def test_variable_names_of_a_callable_reaching_nothing_is_empty():
    assert variable_names(lambda x: x + 1) == {}
    assert variable_names(lambda x, table={"a": {"b": 1}}: x) == {}  # not a variables dict
