"""The Equinox examples export, match JAX through onnxruntime, and have the graphs they promise."""

from __future__ import annotations

from collections import Counter
from typing import Any

import equinox as eqx
import jax
import onnx

from examples import eqx_cnn, eqx_mlp, eqx_neural_ode, eqx_rnn, eqx_transformer
from jax2onnx_nn import verify
from jax2onnx_nn.core.jax_internals import x64
from tests.equinox.helpers import all_ops, initializer_names, node_ops


def _check(
    reference: Any,
    model: onnx.ModelProto,
    specs: list[Any],
    sizes: dict[str, list[int]],
    **options: Any,
) -> None:
    onnx.checker.check_model(model, full_check=True)
    verify(reference, model, specs, sizes=sizes, jit=True, **options).raise_if_failed()


def test_mlp_is_one_gemm_per_linear(tmp_path: Any) -> None:
    model = eqx_mlp.main(str(tmp_path / "mlp.onnx"))
    _check(
        jax.vmap(eqx.nn.inference_mode(eqx_mlp.Classifier(jax.random.key(0)))),
        model,
        [("B", 784)],
        {"B": [1, 9]},
    )
    assert node_ops(model)[:5] == ["Gemm", "Relu", "Gemm", "Relu", "Gemm"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "B"


def test_cnn_with_batch_norm_state(tmp_path: Any) -> None:
    model = eqx_cnn.main(str(tmp_path / "cnn.onnx"))
    cnn, state = eqx_cnn.build()
    _check(eqx_cnn.reference(cnn, state), model, [("B", 1, 28, 28)], {"B": [1, 3]})
    counts = Counter(node_ops(model))
    assert counts["Conv"] == 2 and counts["BatchNormalization"] == 2 and counts["Gemm"] == 1
    assert {
        "block1.bn.ema_state_index.mean",
        "block2.bn.ema_state_index.var",
        "block1.conv.weight",
    } <= initializer_names(model)


def test_transformer_block(tmp_path: Any) -> None:
    model = eqx_transformer.main(str(tmp_path / "transformer.onnx"))
    block = eqx.nn.inference_mode(eqx_transformer.TransformerBlock(jax.random.key(0)))
    _check(
        jax.vmap(block),
        model,
        [("B", eqx_transformer.SEQUENCE, eqx_transformer.WIDTH)],
        {"B": [1, 2]},
    )
    counts = Counter(node_ops(model))
    assert (
        counts["RMSNormalization"] == 2
        and counts["Softmax"] == 1
        and counts["RotaryEmbedding"] == 2
    )
    assert "ReduceMax" not in counts  # softmax is one node, not its lax decomposition


def test_gru_and_lstm_over_a_sequence(tmp_path: Any) -> None:
    model = eqx_rnn.main(str(tmp_path / "rnn.onnx"))
    rnn = eqx_rnn.SequenceModel(jax.random.key(0))
    _check(jax.vmap(rnn), model, [("B", eqx_rnn.STEPS, eqx_rnn.FEATURES)], {"B": [1, 5]})
    assert "Scan" not in all_ops(model)  # each cell runs once over the whole sequence
    assert (
        all_ops(model).count("GRU") == 1 and all_ops(model).count("LSTM") == 1
    )  # in the If of B > 0


def test_neural_ode_in_float64(tmp_path: Any) -> None:
    model = eqx_neural_ode.main(str(tmp_path / "ode.onnx"))
    with x64(True):
        ode = eqx_neural_ode.build()
        _check(
            jax.vmap(ode),
            model,
            [("B", eqx_neural_ode.STATE)],
            {"B": [1, 6]},
            enable_double_precision=True,
        )
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    assert (
        "Scan" in node_ops(model) and Counter(all_ops(model))["Gemm"] == 4 * 3
    )  # 4 stages x 3 layers
