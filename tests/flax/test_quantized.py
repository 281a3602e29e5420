"""qwix-quantized Flax NNX models (PTQ, weight-only int8 per channel and int4 in tiles of 64)
export through core/quant/: DequantizeLinear on every target that runs the QDQ form,
MatMulNBits / a float MatMul of the int8 weight for onnxruntime, and each runs against JAX."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import onnx
import pytest
from flax import nnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core.runtimes import missing_reason

qwix = pytest.importorskip("qwix")


class MLP(nnx.Module):
    def __init__(self, width: int, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(width, width, rngs=rngs)
        self.l2 = nnx.Linear(width, width, rngs=rngs)

    def __call__(self, x):
        return self.l2(jax.nn.relu(self.l1(x)))


def _quantized(weight_qtype: str, tile_size: int | None, width: int = 128):
    model = MLP(width, nnx.Rngs(0))
    rules = [
        qwix.QuantizationRule(module_path=".*", weight_qtype=weight_qtype, tile_size=tile_size)
    ]
    x = jnp.ones((1, width))
    return model, qwix.quantize_model(model, qwix.PtqProvider(rules), x)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _weights(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


SCHEMES = [("int8", None, onnx.TensorProto.INT8), ("int4", 64, onnx.TensorProto.INT4)]


@pytest.mark.parametrize(("qtype", "tile", "stored"), SCHEMES)
@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino", "tract"])
def test_qwix_ptq_mlp_exports_the_qdq_form(qtype, tile, stored, runtime):
    if missing_reason(runtime):
        pytest.skip(missing_reason(runtime))
    _, quantized = _quantized(qtype, tile)
    specs = [("B", 128)]
    # the standard QDQ form (onnxruntime runs openvino's: its own target writes MatMulNBits)
    model = to_onnx(quantized, specs, target="openvino" if runtime == "onnxruntime" else runtime)
    qdq = ["DequantizeLinear", "MatMul", "Add", "Relu", "DequantizeLinear", "MatMul", "Add"]
    if runtime == "tract" and tile:  # tract 0.23 has no blocked DequantizeLinear
        assert "DequantizeLinear" not in _ops(model) and _ops(model).count("MatMul") == 2
    else:
        assert _ops(model) == qdq
    weights = _weights(model)
    if runtime == "tract" and stored == onnx.TensorProto.INT4:
        stored = onnx.TensorProto.INT8  # tract 0.23 has no int4 tensors
    assert weights["l1.kernel"].data_type == stored
    assert "l1.kernel.scale" in weights
    assert not [
        w
        for w in weights.values()
        if w.data_type == onnx.TensorProto.FLOAT
        and w.dims[-1:] == [128]
        and len(w.dims) == 2
        and w.dims[0] == 128
    ]
    verify(quantized, model, specs, sizes={"B": [1, 4]}, runtime=runtime).raise_if_failed()


@pytest.mark.parametrize(
    ("qtype", "tile", "ops"),
    [
        ("int8", None, ["Cast", "Mul", "MatMul", "Add", "Relu", "Cast", "Mul", "MatMul", "Add"]),
        ("int4", 64, ["MatMulNBits", "Add", "Relu", "MatMulNBits", "Add"]),
    ],
)
def test_qwix_ptq_mlp_for_onnxruntime(qtype, tile, ops):
    float_model, quantized = _quantized(qtype, tile)
    specs = [("B", 128)]
    model = to_onnx(quantized, specs)
    assert _ops(model) == ops
    report = verify(quantized, model, specs, sizes={"B": [1, 4]}, rtol=1e-5)
    report.raise_if_failed()
    size = len(model.SerializeToString())
    float_size = len(to_onnx(float_model, specs).SerializeToString())
    assert size <= (0.3 if qtype == "int8" else 0.2) * float_size, (size, float_size)
