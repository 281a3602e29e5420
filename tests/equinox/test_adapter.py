"""Exporting Equinox modules: weights named by pytree path, inference-mode copies, the ways a
callable holds modules, ``export_onnx(batch=...)``, the mixin, names and patches."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

from jax2onnx_nn import SpecError, to_onnx
from jax2onnx_nn.core.source_locations import portable_path
from jax2onnx_nn.core.verify import run_onnx
from jax2onnx_nn.equinox import OnnxExportable, batched_spec, export_onnx
from tests.equinox.helpers import assert_module_matches, initializer_names, node_names, node_ops

KEY = jax.random.key(0)


class Encoder(eqx.Module):
    layers: list
    norms: dict
    dropout: eqx.nn.Dropout
    scale: float = eqx.field(static=True)

    def __init__(self, key: Any) -> None:
        a, b = jax.random.split(key)
        self.layers = [eqx.nn.Linear(4, 8, key=a), eqx.nn.Linear(8, 3, key=b)]
        self.norms = {"first": eqx.nn.LayerNorm(8)}
        self.dropout = eqx.nn.Dropout(0.5)
        self.scale = 2.0

    def __call__(self, x: Any, *, key: Any = None) -> Any:
        x = self.norms["first"](jax.nn.relu(self.layers[0](x)))
        return self.layers[1](self.dropout(x, key=key)) * self.scale

    def hidden(self, x: Any) -> Any:
        return self.layers[0](x)


class Classifier(eqx.Module, OnnxExportable):
    encoder: Encoder
    head: eqx.nn.Linear

    def __init__(self, key: Any) -> None:
        a, b = jax.random.split(key)
        self.encoder = Encoder(a)
        self.head = eqx.nn.Linear(3, 2, key=b)

    def __call__(self, x: Any) -> Any:
        return self.head(self.encoder(x))


EXPECTED_NAMES = {
    "encoder.layers.0.weight",
    "encoder.layers.0.bias",
    "encoder.layers.1.weight",
    "encoder.layers.1.bias",
    "encoder.norms.first.weight",
    "encoder.norms.first.bias",
    "head.weight",
    "head.bias",
}


def test_weights_are_named_by_pytree_path_and_static_fields_are_config() -> None:
    model = assert_module_matches(Classifier(KEY), [(4,)], batch=True)
    assert initializer_names(model) >= EXPECTED_NAMES
    assert not any("scale" in name or "dropout" in name for name in initializer_names(model))


def test_node_names_are_module_paths_without_equinox_scopes() -> None:
    model = export_onnx(Classifier(KEY), [(4,)], batch=True)
    assert node_names(model) == [
        "encoder/layers/0/Gemm",
        "encoder/Relu",
        "encoder/norms/first/LayerNormalization",
        "encoder/layers/1/Gemm",
        "encoder/Mul",
        "head/Gemm",
    ]
    assert not any("eqx.nn" in name for name in node_names(model))


def test_node_source_lines_are_the_models_lines_not_library_ones() -> None:
    model = export_onnx(Classifier(KEY), [(4,)], batch=True)
    encoder_line = f"test_adapter.py:{Encoder.__call__.__code__.co_firstlineno + 1}"
    docs = {n.name: n.doc_string for n in model.graph.node}
    assert (
        encoder_line in docs["encoder/layers/0/Gemm"]
        and encoder_line in docs["encoder/norms/first/LayerNormalization"]
    )
    here = portable_path(__file__)
    assert all(doc.startswith(here) for doc in docs.values()), (
        docs
    )  # no equinox or jax2onnx_nn frame


def test_export_runs_in_inference_mode_on_a_copy() -> None:
    classifier = Classifier(KEY)
    before = jax.tree_util.tree_leaves(classifier)
    model = assert_module_matches(classifier, [(4,)], batch=True)
    assert "RandomUniform" not in node_ops(model) and "Dropout" not in node_ops(model)
    assert classifier.encoder.dropout.inference is False  # the user's module is unchanged
    assert all(a is b for a, b in zip(before, jax.tree_util.tree_leaves(classifier), strict=True))


def test_training_mode_keeps_dropout() -> None:
    encoder = Encoder(KEY)

    def fn(x: Any) -> Any:
        return encoder(x, key=jax.random.key(3))

    inference = to_onnx(fn, [(4,)])
    training = to_onnx(fn, [(4,)], training=True)
    x = np.random.default_rng(0).standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(
        run_onnx(inference, [x])[0], eqx.nn.inference_mode(encoder)(x), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(run_onnx(training, [x])[0], fn(x), rtol=1e-5, atol=1e-6)
    assert len(node_ops(training)) > len(node_ops(inference))


def test_functions_closing_over_modules() -> None:
    classifier = Classifier(KEY)
    callables = (
        (lambda x: classifier(x), (4,)),
        (jax.vmap(classifier), ("B", 4)),
        (jax.jit(jax.vmap(classifier)), ("B", 4)),
    )
    for fn, spec in callables:
        model = assert_module_matches(fn, [spec])
        assert initializer_names(model) >= EXPECTED_NAMES
        assert node_ops(model).count("Gemm" if spec[0] == "B" else "MatMul") == 3


def test_closure_over_two_modules_prefixes_names() -> None:
    first, second = eqx.nn.Linear(3, 3, key=KEY), eqx.nn.Linear(3, 2, key=jax.random.key(1))

    def fn(x: Any) -> Any:
        return second(first(x))

    model = assert_module_matches(fn, [(3,)])
    assert initializer_names(model) == {
        "first.weight",
        "first.bias",
        "second.weight",
        "second.bias",
    }


def test_bound_method_export() -> None:
    encoder = Encoder(KEY)
    model = assert_module_matches(encoder.hidden, [(4,)])
    assert initializer_names(model) == {"layers.0.weight", "layers.0.bias"}
    assert model.graph.name == "hidden"


def test_export_onnx_batch_names_and_symbolic_dim() -> None:
    model = export_onnx(Classifier(KEY), [(4,)], batch="N")
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", 4]
    assert model.graph.input[0].name == "x"
    assert model.graph.name == "Classifier"


def test_mixin_and_path(tmp_path: Any) -> None:
    path = tmp_path / "classifier.onnx"
    classifier = Classifier(KEY)
    assert classifier.export_onnx([(4,)], path, batch=True) == str(
        path
    )  # written, its path returned
    assert (
        onnx.load(path).SerializeToString()
        == classifier.export_onnx([(4,)], batch=True).SerializeToString()
    )
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(
        run_onnx(path, [x])[0], jax.vmap(eqx.nn.inference_mode(classifier))(x), rtol=1e-5, atol=1e-5
    )


def test_export_onnx_needs_a_module() -> None:
    with pytest.raises(TypeError, match="eqx.Module"):
        export_onnx(lambda x: x, [(3,)])


def test_batched_specs() -> None:
    specs = [(3,), ((2, 2), "int32"), jax.ShapeDtypeStruct((5,), jnp.float16), 1.0, {"a": (7,)}]
    assert [batched_spec(s, "B") for s in specs] == [
        ("B", 3),
        (("B", 2, 2), "int32"),
        (("B", 5), jnp.float16),
        ("B",),
        {"a": ("B", 7)},
    ]


def test_numpy_weights_are_weights() -> None:
    class Scale(eqx.Module):
        w: np.ndarray

        def __call__(self, x: Any) -> Any:
            return x @ self.w

    model = assert_module_matches(
        Scale(np.arange(12, dtype=np.float32).reshape(4, 3)), [(4,)], batch=True
    )
    assert initializer_names(model) == {"w"}


def test_patches_are_undone() -> None:
    originals = {cls: cls.__call__ for cls in (eqx.nn.Linear, eqx.nn.Conv, Encoder, Classifier)}
    export_onnx(Classifier(KEY), [(4,)], batch=True)
    with pytest.raises(SpecError, match="dot_general"):
        export_onnx(
            Classifier(KEY), [(5,)], batch=True
        )  # wrong input size: JAX's error, as a SpecError
    assert all(cls.__call__ is fn for cls, fn in originals.items())


def test_same_model_same_bytes() -> None:
    first = export_onnx(Classifier(KEY), [(4,)], batch=True).SerializeToString()
    second = export_onnx(Classifier(KEY), [(4,)], batch=True).SerializeToString()
    assert first == second


def test_state_is_named_after_its_layer() -> None:
    class Net(eqx.Module):
        bn: eqx.nn.BatchNorm

        def __call__(self, x: Any, state: Any) -> Any:
            return self.bn(x, state)

    net, state = eqx.nn.make_with_state(Net)(eqx.nn.BatchNorm(3, "batch", mode="ema"))
    model = assert_module_matches(net, [(3,)], batch=True, state=state)
    assert initializer_names(model) == {
        "bn.weight",
        "bn.bias",
        "bn.ema_state_index.mean",
        "bn.ema_state_index.var",
    }
