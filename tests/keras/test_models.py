"""Keras 3 models on the JAX backend, exported as Keras exports them: ``lambda *xs:
model(*xs, training=False)`` over ShapeDtypeStructs with a "batch" dim, checked in
onnxruntime at two batch sizes."""

import jax
import keras
import numpy as np
import pytest
from keras import layers

from jax2onnx_nn import SpecError, to_onnx
from jax2onnx_nn.testing import assert_exports_match

BATCHES = {"batch": [1, 3]}


def S(*shape, dtype="float32"):
    return jax.ShapeDtypeStruct(shape, dtype)


def _inference(model):
    return lambda *xs: model(*xs, training=False)


def _export(model, specs, sizes=BATCHES, **options):
    keras.utils.set_random_seed(0)
    return assert_exports_match(_inference(model), specs, sizes=sizes, **options)


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _dims(vi):
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def _randomize_batch_norm(model):
    """Moving statistics that are not 0 / 1, so that inference mode is visible."""
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            layer.moving_mean.assign(rng.normal(size=layer.moving_mean.shape).astype("float32"))
            layer.moving_variance.assign(
                rng.uniform(0.5, 2, size=layer.moving_variance.shape).astype("float32")
            )


def test_sequential_dense():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(4)]
    )
    onnx_model = _export(model, [S("batch", 8)])
    # weights named by their Keras variable paths, also from a global or a dict holding the model
    names = {i.name for i in onnx_model.graph.initializer}
    assert {
        f"{layer.name}.kernel" for layer in model.layers
    } <= names  # dense.kernel, dense_1.kernel
    held = {"net": model}
    from_dict = to_onnx(lambda x: held["net"](x, training=False), [S("batch", 8)])
    assert {i.name for i in from_dict.graph.initializer} == names
    assert _ops(onnx_model) == ["Gemm", "Relu", "Gemm"]
    assert _dims(onnx_model.graph.input[0]) == ["batch", 8] and _dims(
        onnx_model.graph.output[0]
    ) == ["batch", 4]


@pytest.mark.slow
def test_conv_batch_norm_pooling_in_inference_mode():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            layers.Conv2D(8, 3, padding="same", activation="relu"),
            layers.BatchNormalization(),
            layers.MaxPooling2D(),
            layers.AveragePooling2D(2),
            layers.GlobalAveragePooling2D(),
            layers.Dropout(0.5),
            layers.Dense(2),
        ]
    )
    _randomize_batch_norm(model)
    onnx_model = _export(model, [S("batch", 16, 16, 3)])
    assert "Conv" in _ops(onnx_model) and "RandomUniform" not in _ops(onnx_model)


def test_dynamic_height_and_width():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((None, None, 3)),
            layers.Conv2D(
                4, 3, strides=2, padding="same"
            ),  # padding computed from h, w at run time
            layers.MaxPooling2D(3, strides=2, padding="same"),
            layers.GlobalMaxPooling2D(),
            layers.Dense(2),
        ]
    )
    onnx_model = _export(
        model, [S("batch", "h", "w", 3)], sizes={"batch": [1, 2], "h": [8, 5], "w": [8, 11]}
    )
    assert _dims(onnx_model.graph.input[0]) == ["batch", "h", "w", 3]


@pytest.mark.slow
def test_lstm_and_bidirectional_lstm():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((5, 4)),
            layers.LSTM(6, return_sequences=True),
            layers.Bidirectional(layers.LSTM(3)),
            layers.Dense(2),
        ]
    )
    _export(model, [S("batch", 5, 4)])


@pytest.mark.slow
def test_embedding_conv1d_gru_int_tokens():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((7,), dtype="int32"),
            layers.Embedding(20, 6),
            layers.Conv1D(5, 3, padding="causal"),
            layers.GRU(4, return_sequences=True),
            layers.GlobalAveragePooling1D(),
            layers.Dense(1, activation="sigmoid"),
        ]
    )
    keras_model = _inference(model)
    onnx_model = to_onnx(keras_model, [S("batch", 7, dtype="int32")])
    tokens = np.random.default_rng(0).integers(0, 20, size=(3, 7)).astype(np.int32)
    assert_exports_match(keras_model, [S("batch", 7, dtype="int32")], input_values=[tokens])
    assert onnx_model.graph.input[0].type.tensor_type.elem_type == 6  # INT32


@pytest.mark.slow
def test_functional_multi_head_attention_with_causal_mask():
    keras.utils.set_random_seed(0)
    x = keras.Input((6, 8))
    y = layers.MultiHeadAttention(num_heads=2, key_dim=4)(x, x, use_causal_mask=True)
    y = layers.LayerNormalization()(y + x)
    onnx_model = _export(keras.Model(x, y), [S("batch", 6, 8)])
    assert "Softmax" in _ops(onnx_model)


@pytest.fixture(scope="module")
def two_input_model():
    keras.utils.set_random_seed(0)
    a, b = keras.Input((4,), name="a"), keras.Input((3,), name="b")
    out = layers.Dense(2)(layers.Concatenate()([a, layers.Dense(4)(b)]))
    return a, b, out


def test_functional_dict_inputs(two_input_model):
    a, b, out = two_input_model
    onnx_model = _export(
        keras.Model({"a": a, "b": b}, out), [{"a": S("batch", 4), "b": S("batch", 3)}]
    )
    assert [i.name for i in onnx_model.graph.input] == ["input_0/a", "input_0/b"]


@pytest.mark.parametrize("container", [list, tuple])
def test_functional_list_and_tuple_inputs(two_input_model, container):
    a, b, out = two_input_model
    onnx_model = _export(keras.Model([a, b], out), [container([S("batch", 4), S("batch", 3)])])
    assert [_dims(i) for i in onnx_model.graph.input] == [["batch", 4], ["batch", 3]]


class _TwoInputs(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = layers.Dense(8, activation="gelu")
        self.norm = layers.LayerNormalization()
        self.drop = layers.Dropout(0.5)
        self.head = layers.Dense(2, activation="softmax")

    def call(self, x, scale, training=False):
        return self.head(self.drop(self.norm(self.dense(x)), training=training)) * scale


def test_subclassed_model_with_two_positional_inputs_and_dropout():
    keras.utils.set_random_seed(0)
    model = _TwoInputs()
    model(np.zeros((1, 5), "float32"), np.ones((1, 2), "float32"))
    onnx_model = _export(model, [S("batch", 5), S("batch", 2)])
    assert [_dims(i) for i in onnx_model.graph.input] == [["batch", 5], ["batch", 2]]
    assert "RandomUniform" not in _ops(onnx_model)


def test_wrong_input_size_is_a_spec_error_naming_the_layer():
    model = keras.Sequential([keras.Input((8,)), layers.Dense(4)])
    message = (
        r"(?s)layer 'dense\w*' is incompatible with the layer: expected axis -1 .* value 8"
        r".*input specs:\n  input_0: float32\[batch, 9\]"
    )
    with pytest.raises(SpecError, match=message) as info:
        to_onnx(_inference(model), [S("batch", 9)])
    assert "\x1b[" not in str(info.value)
