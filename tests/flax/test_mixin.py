"""``OnnxExportable.export_onnx`` and ``jax2onnx_nn.flax.export_onnx``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest
from flax import nnx

from examples.flax_mlp import MLP
from jax2onnx_nn.flax import OnnxExportable, export_onnx, mode_copy
from jax2onnx_nn.testing.assertions import op_types


class Classifier(nnx.Module, OnnxExportable):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.body = nnx.Linear(12, 6, rngs=rngs)
        self.out = nnx.Linear(6, 3, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        return nnx.softmax(self.out(nnx.relu(self.body(x))))


def test_method_writes_the_file_and_returns_its_path(tmp_path: Path) -> None:
    from jax2onnx_nn import verify

    module = Classifier(nnx.Rngs(0))
    path = tmp_path / "classifier.onnx"
    assert module.export_onnx([("B", 12)], path, input_names=["pixels"], opset=19) == str(path)
    model = module.export_onnx([("B", 12)], input_names=["pixels"], opset=19)  # in memory
    loaded = onnx.load(str(path))
    assert loaded.SerializeToString() == model.SerializeToString()
    assert [i.name for i in loaded.graph.input] == ["pixels"]
    assert {o.domain: o.version for o in loaded.opset_import}[""] == 19
    assert op_types(model) == ["Gemm", "Relu", "Gemm", "Softmax"]
    verify(module, str(path), [("B", 12)], sizes={"B": [1, 4]}).raise_if_failed()


def test_function_form_for_any_module() -> None:
    from jax2onnx_nn import verify

    module = MLP(30, 20, 10, rngs=nnx.Rngs(1))
    model = export_onnx(module, [("B", 30)], auto_functions=True)
    verify(mode_copy(module), model, [("B", 30)], sizes={"B": [2]}).raise_if_failed()
    training = export_onnx(module, [("B", 30)], training=True)
    assert "BatchNormalization" not in op_types(training)


def test_export_onnx_needs_a_module() -> None:
    with pytest.raises(TypeError, match="nnx.Module"):
        export_onnx(lambda x: x, [(2,)])  # type: ignore[arg-type]
