"""Keras layers as coarse ops (``jax2onnx_nn/keras/coarse.py``): node counts, onnxruntime
against Keras's forward at two batch sizes, and the calls the ops do not model (lowered op by
op, with Keras's numbers)."""

import os
import subprocess
import sys
from collections import Counter

import jax
import keras
import numpy as np
import onnxruntime as ort
import pytest
from keras import layers

from jax2onnx_nn.keras import export_onnx
from jax2onnx_nn.testing import assert_exports_match

BATCHES = {"batch": [1, 3]}


def S(*shape, dtype="float32"):
    return jax.ShapeDtypeStruct(shape, dtype)


def _ops(model):
    return Counter(n.op_type for n in model.graph.node)


def _export(model, specs, sizes=BATCHES, **options):
    return assert_exports_match(
        lambda *xs: model(*xs, training=False), specs, sizes=sizes, **options
    )


def _randomize_statistics(model):
    """Moving statistics that are not 0 / 1 and gammas that are not 1, so folding shows."""
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            n = layer.moving_mean.shape
            layer.moving_mean.assign(rng.normal(size=n).astype("float32"))
            layer.moving_variance.assign(rng.uniform(0.5, 2, size=n).astype("float32"))
            layer.gamma.assign(rng.uniform(0.5, 2, size=n).astype("float32"))
            layer.beta.assign(rng.normal(size=n).astype("float32"))


def _residual_cnn():
    keras.utils.set_random_seed(0)
    x = keras.Input((16, 16, 3))
    y = layers.ZeroPadding2D(1)(x)
    y = layers.Conv2D(8, 3, strides=2, use_bias=False, name="stem")(y)
    y = layers.BatchNormalization(name="stem_bn")(y)
    y = layers.ReLU(6.0)(y)
    z = layers.DepthwiseConv2D(3, padding="same", name="dw")(y)
    z = layers.BatchNormalization()(z)
    z = layers.Activation("relu")(z)
    z = layers.Conv2D(8, 1, activation="relu", name="pw")(z)
    y = layers.Add()([y, z])
    y = layers.MaxPooling2D(padding="same")(y)
    y = layers.GlobalAveragePooling2D()(y)
    y = layers.Dense(5, activation="softmax", name="head")(y)
    model = keras.Model(x, y)
    _randomize_statistics(model)
    return model


def test_channels_last_cnn_is_its_layers_behind_one_transpose():
    onnx_model = _export(_residual_cnn(), [S("batch", 16, 16, 3)])
    ops = _ops(onnx_model)
    # the BatchNormalizations folded into the convs, ReLU6 one Clip, one Transpose at the input
    assert ops["Conv"] == 3 and ops["Transpose"] == 1 and "BatchNormalization" not in ops
    assert ops["Gemm"] == 1 and ops["Softmax"] == 1 and ops["ReduceMean"] == 1
    assert ops["Pad"] == 1 and ops["Add"] == 1 and ops["Clip"] == 1
    names = {n.name for n in onnx_model.graph.node}
    assert {"stem/Conv", "dw/Conv", "pw/Conv", "head/Gemm"} <= {n.split("/", 1)[-1] for n in names}
    assert {"stem.kernel", "head.kernel"} <= {i.name for i in onnx_model.graph.initializer}


def test_batch_norm_without_a_conv_before_it_is_one_node():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6, 4)), layers.BatchNormalization(axis=1)])
    _randomize_statistics(model)
    onnx_model = _export(model, [S("batch", 6, 4)])
    assert _ops(onnx_model) == Counter({"BatchNormalization": 1})


@pytest.mark.parametrize("rank", [1, 3])
def test_conv_1d_and_3d_channels_first(rank):
    keras.utils.set_random_seed(0)
    conv = {1: layers.Conv1D, 3: layers.Conv3D}[rank]
    spatial = (5,) * rank
    model = keras.Sequential(
        [
            keras.Input((2, *spatial)),
            conv(4, 3, padding="same", data_format="channels_first", activation="sigmoid"),
            layers.Conv1D(3, 2, groups=1) if rank == 1 else layers.Flatten(),
        ]
    )
    onnx_model = _export(model, [S("batch", 2, *spatial)])
    assert _ops(onnx_model)["Conv"] == (2 if rank == 1 else 1)
    assert _ops(onnx_model)["Sigmoid"] == 1


def test_dense_and_layer_norm_on_sequences():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((7, 8)),
            layers.Dense(16, activation="gelu"),
            layers.LayerNormalization(epsilon=1e-5),
            layers.Dense(4, use_bias=False),
        ]
    )
    onnx_model = _export(model, [S("batch", 7, 8)])
    assert _ops(onnx_model) == Counter({"MatMul": 2, "Add": 1, "Gelu": 1, "LayerNormalization": 1})


def test_merges_and_average_pooling():
    keras.utils.set_random_seed(0)
    x = keras.Input((8, 8, 4))
    a = layers.Conv2D(4, 1)(x)
    b = layers.Conv2D(4, 3, padding="same")(x)
    s = layers.Conv2D(4, 1, activation="sigmoid")(layers.GlobalAveragePooling2D(keepdims=True)(a))
    y = layers.Concatenate()([layers.Multiply()([a, s]), layers.Add()([a, b, a])])
    y = layers.AveragePooling2D(3, strides=2, padding="same")(y)
    onnx_model = _export(keras.Model(x, y), [S("batch", 8, 8, 4)])
    ops = _ops(onnx_model)
    assert ops["Transpose"] == 2 and ops["Concat"] == 1 and ops["AveragePool"] == 1
    assert ops["Mul"] == 1 and ops["Add"] == 2


class _Scaled(layers.Dense):
    def call(self, inputs, training=None):
        return super().call(inputs) * 2.0


@pytest.mark.parametrize(
    "layer, shape, absent",
    [
        # Keras pads the input itself: the lax conv, its bias a separate Add
        (layers.Conv1D(3, 3, padding="causal"), (6, 2), "Gemm"),
        (layers.Dense(3, activation=lambda v: v * v), (5,), "Gemm"),  # not in the table
        (layers.LayerNormalization(axis=1), (4, 3), "LayerNormalization"),  # a leading axis
    ],
)
def test_calls_the_ops_do_not_model_keep_kerass_numbers(layer, shape, absent):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape), layer])
    onnx_model = _export(model, [S("batch", *shape)])
    assert absent not in _ops(onnx_model)
    if isinstance(layer, layers.Conv1D):
        assert _ops(onnx_model)["Add"] == 1


def test_a_subclass_overriding_call_is_lowered_from_its_body():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), _Scaled(3)])
    onnx_model = _export(model, [S("batch", 4)])
    assert "Gemm" not in _ops(onnx_model)  # its own call, op by op


def test_mixed_bfloat16_dense_gelu_layer_norm_dense():
    """Issue 29: 49 nodes on the lax path; each coarse op computes in float32 between Casts."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((16,)),
                layers.Dense(32, activation="gelu"),
                layers.LayerNormalization(),
                layers.Dense(8),
            ]
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    onnx_model = _export(model, [S("batch", 16)], rtol=2**-7, atol=2**-7)
    ops = _ops(onnx_model)
    assert len(onnx_model.graph.node) <= 20
    assert ops["Gemm"] == 2 and ops["Gelu"] == 1 and ops["LayerNormalization"] == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, budget", [("MobileNetV2", 150), ("ResNet50", 180), ("EfficientNetB0", 260)]
)
def test_applications_node_counts_and_matches(name, budget):
    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, name)(weights=None, input_shape=(64, 64, 3))
    _randomize_statistics(model)
    for batch in (1, 2):
        x = np.random.default_rng(batch).normal(size=(batch, 64, 64, 3)).astype("float32")
        onnx_model = assert_exports_match(
            lambda v: model(v, training=False),
            [S(batch, 64, 64, 3)],
            input_values=[x],
            rtol=1e-4,
            atol=1e-6,
        )
        assert len(onnx_model.graph.node) <= budget, _ops(onnx_model)
        assert _ops(onnx_model)["Transpose"] <= 1
    # as a Keras user exports it: a symbolic batch, run at two sizes
    onnx_model = export_onnx(model)
    assert len(onnx_model.graph.node) <= budget, _ops(onnx_model)
    session = ort.InferenceSession(
        onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (name,) = [i.name for i in onnx_model.graph.input]
    for batch in (1, 3):
        x = np.random.default_rng(batch).normal(size=(batch, 64, 64, 3)).astype("float32")
        (got,) = session.run(None, {name: x})
        np.testing.assert_allclose(got, model(x, training=False), rtol=1e-4, atol=1e-6)


def test_first_export_of_a_process_gets_the_coarse_ops():
    """The adapter is imported before the session patches are applied (it adds its own): the
    first export of a fresh process has the coarse op too."""
    script = (
        "import jax, keras\n"
        "from jax2onnx_nn import to_onnx\n"
        "m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])\n"
        "p = to_onnx(lambda x: m(x, training=False), [jax.ShapeDtypeStruct((2, 4), 'float32')])\n"
        "print([n.op_type for n in p.graph.node])\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "['Gemm']"


@pytest.mark.parametrize("strides", [1, 2])
def test_separable_conv_is_two_convs(strides):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((9, 9, 3)),
            layers.SeparableConv2D(
                5, 3, strides=strides, padding="same", depth_multiplier=2, activation="relu"
            ),
        ]
    )
    onnx_model = _export(model, [S("batch", 9, 9, 3)])
    assert _ops(onnx_model) == Counter({"Conv": 2, "Relu": 1, "Transpose": 2})


def test_group_normalization_channels_last_after_a_conv():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6, 6, 4)),
            layers.Conv2D(8, 3, padding="same"),
            layers.GroupNormalization(groups=2, epsilon=1e-5),
            layers.Activation("relu"),
        ]
    )
    onnx_model = _export(model, [S("batch", 6, 6, 4)])
    assert _ops(onnx_model) == Counter(
        {"Conv": 1, "GroupNormalization": 1, "Relu": 1, "Transpose": 2}
    )


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["as-traced", "float32", "float16"])
def test_mobilenet_v2_under_mixed_bfloat16_verifies_under_each_precision_policy(policy):
    """Issue 29: a Keras application in bfloat16 (the mixed_bfloat16 policy: float32 weights
    and inputs, bfloat16 compute) exports as traced and under both policies and verifies
    against Keras in onnxruntime (verify's bfloat16 tolerance and its float32-answer check)."""
    from jax2onnx_nn import to_onnx, verify

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(0)
        model = keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    _randomize_statistics(model)

    def fn(x):
        return model(x, training=False)

    specs = [S(2, 64, 64, 3)]
    io = {} if policy == "as-traced" else {"io_dtype": "float32"}
    onnx_model = to_onnx(fn, specs, precision=policy, **io)
    report = verify(fn, onnx_model, specs)
    assert report.ok, str(report)
    ops = _ops(onnx_model)
    assert ops["Conv"] == 52, ops  # the convolutions stay coarse ops at every precision
    if policy == "float32":  # the float32 model's graph (its 150-node budget)
        assert len(onnx_model.graph.node) <= 150 and "BatchNormalization" not in ops, ops
