"""Keras layers as coarse ops (``jax2onnx_nn/keras/coarse_layers.py``): op types and node
counts, onnxruntime against Keras's forward at two batch sizes, and the calls the ops do not
model (lowered op by op, with Keras's numbers)."""

from collections import Counter

import jax
import keras
import numpy as np
import pytest
from keras import layers

from jax2onnx_nn.keras.coarse_layers import einsum_plan
from jax2onnx_nn.testing import assert_exports_match

BATCHES = {"batch": [1, 3]}


def S(*shape, dtype="float32"):
    return jax.ShapeDtypeStruct(shape, dtype)


def _ops(model):
    return Counter(n.op_type for n in model.graph.node)


def _export(model, specs, **options):
    return assert_exports_match(
        lambda *xs: model(*xs, training=False), specs, sizes=BATCHES, **options
    )


def test_embedding_is_one_gather_named_by_the_layer():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,), dtype="int32"), layers.Embedding(10, 4)])
    # out-of-range and negative indices: jnp.take's NaN rows and wrapped indices
    ids = np.array([[0, 9, -1, 10, -11]] * 3, np.int32)
    onnx_model = _export(model, [S("batch", 5, dtype="int32")], input_values=[ids])
    ops = _ops(onnx_model)
    assert ops["Gather"] == 1 and len(onnx_model.graph.node) <= 7, ops
    assert any(n.name.endswith("embedding/Gather") for n in onnx_model.graph.node)
    assert "embedding.embeddings" in {i.name for i in onnx_model.graph.initializer}


@pytest.mark.parametrize(
    "equation, shape, output_shape, bias_axes, expected",
    [
        ("ab,bc->ac", (8,), 6, "c", {"Gemm": 1}),
        ("abc,cd->abd", (5, 8), (None, 6), "d", {"MatMul": 1, "Add": 1}),
        # MultiHeadAttention's projections, into heads and out of them: a MatMul between
        # reshapes, the bias added before the reshape into heads (the attention's cancel them)
        ("abc,cde->abde", (5, 8), (None, 2, 3), "de", {"MatMul": 1, "Add": 1, "Reshape": 1}),
        ("abcd,cde->abe", (5, 2, 3), (None, 8), "e", {"Reshape": 1, "MatMul": 1, "Add": 1}),
        ("...b,bc->...c", (5, 8), 6, None, {"MatMul": 1}),
        ("abc,dc->abd", (5, 8), (None, 6), None, {"MatMul": 1}),  # the kernel transposed
    ],
)
def test_einsum_dense_as_a_dense_layer_is_one_matrix_product(
    equation, shape, output_shape, bias_axes, expected
):
    keras.utils.set_random_seed(0)
    layer = layers.EinsumDense(equation, output_shape=output_shape, bias_axes=bias_axes)
    model = keras.Sequential([keras.Input(shape), layer])
    onnx_model = _export(model, [S("batch", *shape)])
    assert _ops(onnx_model) == Counter(expected)


@pytest.mark.parametrize(
    "make, nodes, matmuls",
    [
        # was 16 (symbolic batch) / 13 (static) with each projection one Einsum, then 12 / 9;
        # self-attention on onnxruntime: the q/k/v projections packed into one
        # com.microsoft.Attention, then the output projection's MatMul and bias
        (lambda: layers.MultiHeadAttention(num_heads=2, key_dim=4), {"batch": 3, 2: 3}, 1),
        # was 22 / 19 (20 with a symbolic batch: the reshape chains merged over it)
        (
            lambda: layers.GroupQueryAttention(
                head_dim=4, num_query_heads=4, num_key_value_heads=2
            ),
            {"batch": 20, 2: 17},
            4,
        ),
    ],
)
def test_attention_layers_are_their_projections_and_one_attention_op(make, nodes, matmuls):
    """The projections' reshapes into heads and out of them cancel against the attention's
    own (onnxruntime's MultiHeadAttention on [B, T, heads * size]; self-attention with as
    many key heads as query heads is one packed com.microsoft.Attention)."""
    keras.utils.set_random_seed(0)
    x = keras.Input((5, 8))
    model = keras.Model(x, make()(x, x))
    for batch, count in nodes.items():
        onnx_model = assert_exports_match(
            lambda x: model(x, training=False),
            [S(batch, 5, 8)],
            sizes=BATCHES if batch == "batch" else None,
        )
        ops = _ops(onnx_model)
        assert len(onnx_model.graph.node) == count and ops["MatMul"] == matmuls, ops
        assert "Einsum" not in ops


def test_einsum_plan_declines_what_is_not_one_matrix_product():
    assert einsum_plan("abc,cd->adb", 3) is None  # the output transposed
    assert einsum_plan("abc,acd->abd", 3) is None  # a batch axis in the kernel
    assert einsum_plan("abc,cd->abd", 3) == (2, (0, 1), 1)


def test_einsum_dense_outside_the_plan_keeps_kerass_numbers():
    keras.utils.set_random_seed(0)
    layer = layers.EinsumDense("abc,cd->adb", output_shape=(6, None))
    onnx_model = _export(keras.Sequential([keras.Input((5, 8)), layer]), [S("batch", 5, 8)])
    assert "MatMul" not in _ops(onnx_model)


@pytest.mark.parametrize("opset, expected", [(21, 6), (23, 1)])
def test_rms_normalization(opset, expected):
    keras.utils.set_random_seed(0)
    layer = layers.RMSNormalization(epsilon=1e-5)
    model = keras.Sequential([keras.Input((5, 8)), layer])
    layer.scale.assign(np.linspace(0.5, 2, 8, dtype="float32"))
    onnx_model = _export(model, [S("batch", 5, 8)], opset=opset)
    assert len(onnx_model.graph.node) == expected
    assert ("RMSNormalization" in _ops(onnx_model)) == (opset >= 23)


def test_layer_normalization_rms_scaling_keeps_kerass_variance():
    """Keras's ``rms_scaling`` divides by the variance (not the mean square): no
    RMSNormalization, Keras's numbers (it was an RMSNormalization off by up to 6.4)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), layers.LayerNormalization(rms_scaling=True)])
    x = np.random.default_rng(0).normal(3.0, 1.0, size=(3, 8)).astype("float32")
    onnx_model = _export(model, [S("batch", 8)], opset=23, input_values=[x])
    assert "RMSNormalization" not in _ops(onnx_model)


def test_unit_normalization_keeps_a_zero_vector_zero():
    model = keras.Sequential([keras.Input((5, 8)), layers.UnitNormalization(axis=[1, 2])])
    x = np.random.default_rng(0).normal(size=(3, 5, 8)).astype("float32")
    x[1] = 0
    onnx_model = _export(model, [S("batch", 5, 8)], input_values=[x])
    assert _ops(onnx_model) == Counter(
        {"ReduceSumSquare": 1, "Sqrt": 1, "Reciprocal": 1, "Min": 1, "Mul": 1}
    )


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"max_value": 3.0}, {"Clip": 1}),
        ({"threshold": 0.5}, {"ThresholdedRelu": 1}),
        ({"threshold": 0.25, "max_value": 1.0}, {"ThresholdedRelu": 1, "Clip": 1}),
        ({"negative_slope": 0.1}, {"LeakyRelu": 1}),
        ({"max_value": 6.0}, {"Clip": 1}),
    ],
)
def test_relu_options(options, expected):
    model = keras.Sequential([keras.Input((8,)), layers.ReLU(**options)])
    x = np.linspace(-2, 8, 24, dtype="float32").reshape(3, 8)
    onnx_model = _export(model, [S("batch", 8)], input_values=[x])
    assert _ops(onnx_model) == Counter(expected)


def test_relu_slope_and_max_value_keep_kerass_numbers():
    model = keras.Sequential([keras.Input((8,)), layers.ReLU(negative_slope=0.1, max_value=1.0)])
    onnx_model = _export(model, [S("batch", 8)])
    assert "Clip" not in _ops(onnx_model) and "LeakyRelu" not in _ops(onnx_model)


def test_normalization_and_rescaling_are_their_affine_ops():
    mean, variance = np.array([1.0, 2, 3], "float32"), np.array([4.0, 0, 0.25], "float32")
    model = keras.Sequential(
        [
            keras.Input((3,)),
            layers.Normalization(mean=mean, variance=variance),
            layers.Rescaling(0.5, offset=-1.0),
        ]
    )
    onnx_model = _export(model, [S("batch", 3)])
    assert _ops(onnx_model) == Counter({"Sub": 1, "Div": 1, "Mul": 1, "Add": 1})


def test_residual_layer_normalization_on_onnxruntime_keeps_its_axis():
    """Keras writes LayerNormalization's axis as a positive 2; onnxruntime's rows rewrite
    (a residual norm on [B*T, D] rows) normalises the rows' last axis, not a rank-2 axis 2."""
    keras.utils.set_random_seed(0)
    x, skip = keras.Input((5, 8)), keras.Input((5, 8))
    norm = layers.LayerNormalization(axis=-1)
    model = keras.Model([x, skip], norm(layers.Add()([x, skip])))
    onnx_model = assert_exports_match(
        lambda a, b: model([a, b], training=False),
        [S("batch", 5, 8), S("batch", 5, 8)],
        sizes=BATCHES,
    )
    (ln,) = [n for n in onnx_model.graph.node if n.op_type == "LayerNormalization"]
    assert [a.i for a in ln.attribute if a.name == "axis"] == [-1]
