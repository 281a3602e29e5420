"""Exporting nnx.Modules: inference-mode copies, names by module path, scopes, modes."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from examples.flax_mlp import MLP
from jax2onnx_nn import SpecError, to_onnx
from jax2onnx_nn.core import patching
from jax2onnx_nn.flax import mode_copy
from tests.flax.helpers import assert_module_matches, node_names, node_ops

README_NAMES = {
    "linear1.kernel",
    "linear1.bias",
    "bn.mean",
    "bn.var",
    "bn.scale",
    "bn.bias",
    "linear2.kernel",
    "linear2.bias",
}


def _state_arrays(module: nnx.Module) -> dict[str, np.ndarray]:
    def data(v: Any) -> np.ndarray:
        value = v.get_value()
        return np.array(
            jax.random.key_data(value)
            if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key)
            else value
        )

    return {".".join(map(str, p)): data(v) for p, v in nnx.to_flat_state(nnx.state(module))}


@pytest.mark.parametrize("coarse_ops", [False, True])
def test_readme_mlp(coarse_ops: bool) -> None:
    model = MLP(30, 20, 10, rngs=nnx.Rngs(0))
    before = _state_arrays(model)
    onnx_model = assert_module_matches(
        model, [("B", 30)], sizes={"B": [1, 7, 128]}, coarse_ops=coarse_ops
    )
    assert {i.name for i in onnx_model.graph.initializer} >= README_NAMES
    assert onnx_model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "B"
    # the user's module is untouched: still in training mode, same state
    assert model.bn.use_running_average is False and model.dropout.deterministic is False
    after = _state_arrays(model)
    assert before.keys() == after.keys() and all(
        np.array_equal(before[k], after[k]) for k in before
    )
    if coarse_ops:
        assert node_ops(onnx_model) == ["Gemm", "BatchNormalization", "Gelu", "Gemm"]
    else:
        assert "Gemm" not in node_ops(onnx_model) and "BatchNormalization" not in node_ops(
            onnx_model
        )


def test_node_names_carry_the_module_path() -> None:
    onnx_model = to_onnx(MLP(30, 20, 10, rngs=nnx.Rngs(0)), [("B", 30)])
    assert node_names(onnx_model) == [
        "linear1/Gemm",
        "bn/BatchNormalization",
        "Gelu",
        "linear2/Gemm",
    ]


class Nested(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.encoder = nnx.Sequential(
            nnx.Linear(6, 8, rngs=rngs), nnx.relu, nnx.Linear(8, 4, rngs=rngs)
        )
        self.head = nnx.Linear(4, 2, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        return self.head(self.encoder(x))

    def encode(self, x: Any) -> Any:
        return self.encoder(x)


def test_nested_paths_and_captured_activations() -> None:
    onnx_model = assert_module_matches(Nested(nnx.Rngs(1)), [("B", 6)], sizes={"B": [1, 5]})
    assert node_names(onnx_model) == [
        "encoder/layers/0/Gemm",
        "encoder/Relu",
        "encoder/layers/2/Gemm",
        "head/Gemm",
    ]
    assert {i.name for i in onnx_model.graph.initializer} == {
        "encoder.layers.0.kernel",
        "encoder.layers.0.bias",
        "encoder.layers.2.kernel",
        "encoder.layers.2.bias",
        "head.kernel",
        "head.bias",
    }


def test_bound_method_export() -> None:
    module = Nested(nnx.Rngs(2))
    onnx_model = to_onnx(module.encode, [("B", 6)])
    assert node_ops(onnx_model) == ["Gemm", "Relu", "Gemm"]
    assert "encoder.layers.0.kernel" in {i.name for i in onnx_model.graph.initializer}
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    from jax2onnx_nn.core.verify import run_onnx

    np.testing.assert_allclose(run_onnx(onnx_model, [x])[0], module.encode(x), rtol=1e-5, atol=1e-6)


def test_closure_over_a_module_still_gets_coarse_ops() -> None:
    module = Nested(nnx.Rngs(3))
    onnx_model = assert_module_matches(
        lambda x: module(x) * 2.0, [("B", 6)], reference=lambda x: module(x) * 2.0
    )
    assert node_ops(onnx_model).count("Gemm") == 3


class Stateful(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(5, 4, rngs=rngs)
        self.bn = nnx.BatchNorm(4, momentum=0.5, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        return self.bn(self.linear(x))


def test_training_mode_uses_batch_statistics() -> None:
    module = Stateful(nnx.Rngs(4))
    mean_before = np.array(module.bn.mean.get_value())
    onnx_model = assert_module_matches(module, [("B", 5)], sizes={"B": [2, 9]}, training=True)
    assert "BatchNormalization" not in node_ops(
        onnx_model
    )  # batch statistics: computed in the graph
    np.testing.assert_array_equal(module.bn.mean.get_value(), mean_before)  # no update leaked out


class _Opaque:
    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def __call__(self, x: Any) -> Any:
        return self._fn(x)


def test_inference_mode_is_the_default_even_for_a_module_in_training_mode() -> None:
    module = Stateful(nnx.Rngs(5))
    onnx_model = assert_module_matches(module, [("B", 5)], sizes={"B": [1, 3]})
    assert node_ops(onnx_model) == ["Gemm", "BatchNormalization"]
    with pytest.raises(
        AssertionError
    ):  # the module as it is (training mode) computes something else
        training_copy = mode_copy(module, training=True)
        # an object whose insides verify does not look into (a closure over the module would
        # be put into inference mode like the module itself)
        assert_module_matches(
            module, [("B", 5)], sizes={"B": [3]}, reference=_Opaque(training_copy)
        )


class WithDropout(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(6, 6, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        return self.dropout(self.linear(x))


def test_dropout_inference_is_no_node_and_training_is_exact() -> None:
    module = WithDropout(nnx.Rngs(6))
    assert node_ops(assert_module_matches(module, [(4, 6)])) == ["Gemm"]
    # training mode: the dropout mask comes from the module's own RNG stream, as in JAX
    onnx_model = assert_module_matches(module, [(4, 6)], training=True)
    assert len(onnx_model.graph.node) > 1


def test_patches_are_undone_after_export_and_after_errors() -> None:
    originals = (
        nnx.Linear.__call__,
        nnx.Sequential.__call__,
        jax.nn.relu,
        nnx.gelu,
        jax.nn.dot_product_attention,
    )
    to_onnx(Nested(nnx.Rngs(7)), [("B", 6)])
    with pytest.raises(SpecError, match="dot_general"):
        to_onnx(Nested(nnx.Rngs(7)), [("B", 5)])  # wrong feature size: tracing fails
    assert (
        nnx.Linear.__call__,
        nnx.Sequential.__call__,
        jax.nn.relu,
        nnx.gelu,
        jax.nn.dot_product_attention,
    ) == originals
    assert patching.active_options() is None


def test_same_module_exported_twice_gives_identical_bytes() -> None:
    module = MLP(30, 20, 10, rngs=nnx.Rngs(0))
    assert (
        to_onnx(module, [("B", 30)]).SerializeToString()
        == to_onnx(module, [("B", 30)]).SerializeToString()
    )


def test_double_precision_module() -> None:
    with jax.enable_x64(True):
        module = Stateful(nnx.Rngs(8))
        module.linear.kernel.set_value(jnp.asarray(module.linear.kernel.get_value(), jnp.float64))
        assert_module_matches(
            module, [(("B", 5), "float64")], sizes={"B": [2]}, enable_double_precision=True
        )


class Captured(nnx.Module):
    """Functions stored on the module before the export (the Flax tutorial's pooling idiom)."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        from functools import partial

        self.conv = nnx.Conv(2, 3, (3, 3), rngs=rngs)
        self.act = nnx.gelu
        self.pool = partial(nnx.avg_pool, window_shape=(2, 2), strides=(2, 2))

    def __call__(self, x: Any) -> Any:
        return self.pool(self.act(self.conv(x)))


def test_functions_captured_on_the_module_map_to_coarse_ops() -> None:
    module = Captured(nnx.Rngs(9))
    onnx_model = assert_module_matches(module, [("B", 6, 6, 2)], sizes={"B": [2]})
    assert node_ops(onnx_model) == ["Transpose", "Conv", "Gelu", "AveragePool", "Transpose"]
    assert module.act is nnx.gelu  # the user's module keeps its own attributes
