"""Keras 3 models quantized with ``model.quantize`` export with their integer weights kept:
int8 (dynamic-range activations) as MatMulInteger on the int8 kernel for onnxruntime."""

from collections import Counter

import jax
import keras
import numpy as np
import onnx
import pytest

from jax2onnx_nn import to_onnx, verify


def _dense_dense(mode: str):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(16)]
    )
    model.quantize(mode)
    return model


def test_keras_int8_dense_is_matmul_integer_on_the_int8_kernel():
    model = _dense_dense("int8")
    specs = [jax.ShapeDtypeStruct(("batch", 64), np.float32)]
    onnx_model = to_onnx(model, specs)
    ops = Counter(n.op_type for n in onnx_model.graph.node)
    assert ops["MatMulInteger"] == 2 and ops["MatMul"] == 0
    kernels = [t for t in onnx_model.graph.initializer if t.name.endswith("kernel")]
    assert kernels and all(t.data_type == onnx.TensorProto.INT8 for t in kernels)
    # the activations' absmax quantization is still JAX's arithmetic op by op (49 nodes)
    assert sum(ops.values()) <= 49
    verify(model, onnx_model, specs, sizes={"batch": [1, 3]}).raise_if_failed()


@pytest.mark.parametrize("runtime", ["openvino", "tract"])
def test_keras_int8_dense_on_other_runtimes(runtime):
    from jax2onnx_nn.core.runtimes import missing_reason

    if missing_reason(runtime):
        pytest.skip(missing_reason(runtime))
    model = _dense_dense("int8")
    specs = [jax.ShapeDtypeStruct(("batch", 64), np.float32)]
    onnx_model = to_onnx(model, specs, target=runtime)
    verify(model, onnx_model, specs, sizes={"batch": [1, 3]}, runtime=runtime).raise_if_failed()
