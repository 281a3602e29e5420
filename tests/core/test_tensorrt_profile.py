"""The tensorrt profile, checked statically (no GPU here): every op an export for it emits is in
onnx-tensorrt's supported-operator list, at an opset it imports."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest

from jax2onnx_nn import TARGETS, ConversionError, to_onnx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import benchmarks.models as models  # noqa: E402
from tests.runtime_table import GEN  # noqa: E402


def _all_ops(model: onnx.ModelProto) -> set[str]:
    ops: set[str] = set()

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            ops.add(node.op_type)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)

    walk(model.graph)
    return ops


@pytest.mark.parametrize(
    "name",
    [
        "jax_mlp",
        "eqx_mlp",
        "gru",
        "heat_fori",
        *[
            pytest.param(n, marks=pytest.mark.slow)
            for n in (
                "flax_mlp",
                "cnn",
                "eqx_transformer",
                "eqx_vit",
                "vit",
                "heat_while",
                "gpt2_small",
            )
        ],
    ],
)
def test_benchmark_models_export_for_tensorrt_with_supported_ops_only(name: str) -> None:
    fn, specs, options = getattr(models, name)()
    options = {
        k: v for k, v in options.items() if k != "opset"
    }  # TensorRT 10.0 imports opsets <= 20
    model = to_onnx(fn, specs, target="tensorrt", **options)
    assert not model.functions and model.opset_import[0].version <= 20
    assert _all_ops(model) <= TARGETS["tensorrt"].ops, _all_ops(model) - TARGETS["tensorrt"].ops


# examples whose JAX operations TensorRT 10 cannot run (integer bit ops of jax.random)
UNSUPPORTED = {"gamma_sampling": ("BitShift", "gamma_sampling.py")}
FAST = (
    "flax_mlp_functions",
    "heat_equation",
    "spectral_poisson",
)  # (spectral_poisson: its FFTs are MatMuls)


@pytest.mark.parametrize(
    "name",
    [
        n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
        for n in GEN.EXAMPLES
        if n not in UNSUPPORTED
    ],
)
def test_example_models_export_for_tensorrt_with_supported_ops_only(name: str) -> None:
    model = GEN.case(name).export(
        "tensorrt", opset=20
    )  # (a case may pin a newer opset for onnxruntime)
    assert not model.functions and model.opset_import[0].version <= 20
    assert _all_ops(model) <= TARGETS["tensorrt"].ops, _all_ops(model) - TARGETS["tensorrt"].ops


@pytest.mark.slow
@pytest.mark.parametrize("name", UNSUPPORTED)
def test_example_models_tensorrt_cannot_run_fail_before_writing(name: str) -> None:
    op, source = UNSUPPORTED[name]
    with pytest.raises(
        ConversionError, match=f"(?s)target tensorrt cannot run.*{op}.*{source}.*TensorRT 10 has no"
    ):
        GEN.case(name).export("tensorrt")
