"""Shared helpers of the Flax tests: a one-call export-and-compare check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx
from flax import nnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.flax import mode_copy


def assert_module_matches(
    module: Any,
    inputs: Sequence[Any],
    *,
    sizes: Mapping[str, Sequence[int]] | None = None,
    reference: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    **to_onnx_options: Any,
) -> onnx.ModelProto:
    """Export ``module``, check the model, and compare onnxruntime with the module in JAX
    (inference mode unless ``training=True``) on random inputs for every size in ``sizes``."""
    model = to_onnx(module, inputs, **to_onnx_options)
    onnx.checker.check_model(model, full_check=True)
    if reference is None:
        reference = (
            mode_copy(module, to_onnx_options.get("training", False))
            if isinstance(module, nnx.Module)
            else module
        )
    report = verify(
        reference,
        model,
        inputs,
        sizes=sizes,
        rtol=rtol,
        atol=atol,
        enable_double_precision=to_onnx_options.get("enable_double_precision", False),
        training=to_onnx_options.get("training", False),
    )
    report.raise_if_failed()
    return model


def node_ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def node_names(model: onnx.ModelProto) -> list[str]:
    return [n.name for n in model.graph.node]
