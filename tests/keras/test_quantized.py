"""Keras 3 models quantized with ``model.quantize`` export with their integer weights kept:
int8 (dynamic-range activations) as one compact coarse op per Dense (QuantizeLinear of the
absmax-scaled rows, MatMulIntegerToFloat for onnxruntime, MatMulInteger -> DequantizeLinear
elsewhere), int4 as an INT4 initializer into DequantizeLinear -> MatMul
(jax2onnx_nn/keras/quant.py)."""

from collections import Counter

import jax
import jax.numpy as jnp
import keras
import numpy as np
import onnx
import pytest

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core.runtimes import missing_reason, run_model

SPECS = [jax.ShapeDtypeStruct(("batch", 64), np.float32)]


def _dense_dense(mode: str, config=None, activation="relu"):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(32, activation=activation),
            keras.layers.Dense(16),
        ]
    )
    model.quantize(mode, config=config)
    return model


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def _initializer_types(model: onnx.ModelProto) -> dict[str, int]:
    return {t.name: t.data_type for t in model.graph.initializer}


def test_keras_int8_dense_is_twenty_nodes_with_int8_kernels():
    model = _dense_dense("int8")
    onnx_model = to_onnx(model, SPECS)
    ops = _ops(onnx_model)
    # per Dense: Abs, ReduceMax, Gemm (the NaN carrier), Add, Div, Mul, QuantizeLinear,
    # MatMulIntegerToFloat, Div, Add (the second reads a Relu: no Abs); 49 op by op before
    assert sum(ops.values()) == 20, ops
    assert ops["MatMulIntegerToFloat"] == 2 and ops["QuantizeLinear"] == 2 and ops["MatMul"] == 0
    types = _initializer_types(onnx_model)
    first, second = (f"{layer.name}.kernel" for layer in model.layers)
    assert types[first] == types[second] == onnx.TensorProto.INT8
    verify(model, onnx_model, SPECS, sizes={"batch": [1, 3]}).raise_if_failed()


def _edge_rows() -> np.ndarray:
    x = np.random.default_rng(1).standard_normal((7, 64)).astype(np.float32) * 3
    x[1, 5] = np.nan  # a NaN row
    x[2, 7] = np.inf  # an infinite row: scale 0, every product 0 / 0
    x[3] = 0.0  # a zero row: scale 127 / 1e-7
    x[4] = 1e-9  # below epsilon
    x[5, :] = np.arange(64) - 31.5  # products on halves: round half to even
    return x


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_keras_int8_rows_as_keras_computes_them(target):
    model = _dense_dense("int8", activation=None)
    x = _edge_rows()
    want = np.asarray(model(jnp.asarray(x)))
    got = run_model(to_onnx(model, SPECS, target=target), [x], runtime=target)[0]
    finite = np.isfinite(want)
    assert np.isnan(want[1]).all() and np.isnan(want[2]).all()  # Keras's own answer
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


def test_keras_int8_activations_quantized_bit_for_bit():
    """The int8 rows are Keras's: with a kernel of ones (scale 127) the output is the sum of
    the quantized row over (127 * the row's scale); one quantum off would show as 1 / 127."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(1, use_bias=False)])
    model.layers[0].kernel.assign(np.ones((64, 1), np.float32))
    model.quantize("int8")
    x = np.random.default_rng(2).standard_normal((256, 64)).astype(np.float32)
    want = np.asarray(model(jnp.asarray(x)))
    for target in ("onnxruntime", "onnxruntime-web"):
        got = run_model(to_onnx(model, SPECS, target=target), [x])[0]
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_keras_int8_dense_on_a_sequence():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5, 16)), keras.layers.Dense(8, activation="gelu")])
    model.quantize("int8")
    specs = [jax.ShapeDtypeStruct(("batch", 5, 16), np.float32)]
    onnx_model = to_onnx(model, specs)
    assert _ops(onnx_model)["MatMulIntegerToFloat"] == 1
    verify(model, onnx_model, specs, sizes={"batch": [1, 2]}).raise_if_failed()


@pytest.mark.parametrize("runtime", ["onnxruntime-web", "openvino", "tract"])
def test_keras_int8_dense_on_other_runtimes(runtime):
    if missing_reason(runtime):
        pytest.skip(missing_reason(runtime))
    model = _dense_dense("int8")
    onnx_model = to_onnx(model, SPECS, target=runtime)
    ops = _ops(onnx_model)
    assert ops["MatMulInteger"] == 2 and ops["QuantizeLinear"] == 2 and ops["MatMul"] == 0
    verify(model, onnx_model, SPECS, sizes={"batch": [1, 3]}, runtime=runtime).raise_if_failed()


def _int4_config(block_size):
    from keras.quantizers import Int4QuantizationConfig

    return Int4QuantizationConfig(block_size=block_size)


@pytest.mark.parametrize(("block_size", "scale_shape"), [(None, [32]), (128, [32]), (32, [2, 32])])
def test_keras_int4_dense_unpacked_at_export_time(block_size, scale_shape):
    config = _int4_config(block_size) if block_size != 128 else None  # 128: Keras's default
    model = _dense_dense("int4", config=config)
    onnx_model = to_onnx(model, SPECS, target="openvino")
    ops = _ops(onnx_model)
    assert sum(ops.values()) == 7 and ops["DequantizeLinear"] == 2, ops  # 103 op by op before
    # onnxruntime: MatMulNBits (its zero points for Keras's asymmetric blocks), 4-bit in memory
    assert _ops(to_onnx(model, SPECS))["MatMulNBits"] == 2
    name = model.layers[0].name
    kernel = next(t for t in onnx_model.graph.initializer if t.name == f"{name}.kernel")
    assert kernel.data_type == onnx.TensorProto.INT4 and list(kernel.dims) == [64, 32]
    scale = next(t for t in onnx_model.graph.initializer if t.name == f"{name}.kernel_scale")
    assert list(scale.dims) == scale_shape
    assert not any(
        t.data_type == onnx.TensorProto.FLOAT and t.name.endswith("kernel")
        for t in onnx_model.graph.initializer
    )
    for target in ("onnxruntime", "openvino", "tract"):
        if missing_reason(target):
            continue
        exported = to_onnx(model, SPECS, target=target)
        verify(model, exported, SPECS, sizes={"batch": [1, 3]}, runtime=target).raise_if_failed()


def test_keras_int4_file_is_a_fifth_of_the_float_one():
    from benchmarks.models import keras_mlp

    specs = [jax.ShapeDtypeStruct(("batch", 256), np.float32)]
    sizes = {mode: to_onnx(keras_mlp(mode), specs).ByteSize() for mode in (None, "int8", "int4")}
    assert sizes["int4"] <= 0.2 * sizes[None] and sizes["int8"] <= 0.3 * sizes[None], sizes
