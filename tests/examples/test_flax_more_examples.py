"""The ViT, GRU and autoencoder examples, exported and compared with JAX through onnxruntime
at several symbolic sizes; the coarse graph is also checked against the lax-level export."""

from __future__ import annotations

import pytest

pytest.importorskip("flax")

import onnx
from flax import nnx

from examples import flax_autoencoder, flax_gru, flax_vit
from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.flax import mode_copy


def _all_ops(model: onnx.ModelProto) -> list[str]:
    """Op types of every node, inside control-flow bodies too."""
    ops: list[str] = []

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            ops.append(node.op_type)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)

    walk(model.graph)
    return ops


def _check(module: nnx.Module, specs: list, sizes: dict, **options: object) -> onnx.ModelProto:
    model = to_onnx(module, specs, **options)
    onnx.checker.check_model(model, full_check=True)
    verify(mode_copy(module), model, specs, sizes=sizes, jit=True).raise_if_failed()
    return model


def test_vit() -> None:
    config = flax_vit.ViTConfig.small()
    module = flax_vit.ViT(config, rngs=nnx.Rngs(0))
    model = _check(module, config.images, {"B": [1, 2, 5]})
    ops = _all_ops(model)
    assert ops.count("LayerNormalization") == 2 * config.depth + 1
    assert ops.count("Conv") == 1 and "Einsum" not in ops
    # the three projections and the attention as one packed com.microsoft.Attention (a batch
    # of 0 gives an empty result: no If)
    assert ops.count("Attention") == config.depth and "Softmax" not in ops and "If" not in ops
    assert ops.count("Gelu") == config.depth
    lax_level = _check(module, config.images, {"B": [3]}, coarse_ops=False)
    assert len(ops) < len(_all_ops(lax_level)) / 2


def test_vit_auto_functions() -> None:
    config = flax_vit.ViTConfig.small()
    module = flax_vit.ViT(config, rngs=nnx.Rngs(0))
    model = _check(module, config.images, {"B": [1, 3]}, auto_functions=True)
    assert sorted(f.name for f in model.functions) == ["EncoderBlock", "MLP"]
    assert [n.op_type for n in model.graph.node].count("EncoderBlock") == config.depth


def test_gru_over_symbolic_batch_and_time() -> None:
    module = flax_gru.GRUClassifier(
        flax_gru.FEATURES, flax_gru.HIDDEN, flax_gru.CLASSES, rngs=nnx.Rngs(0)
    )
    model = _check(module, flax_gru.SEQUENCES, {"B": [1, 3, 2], "T": [1, 7, 16]})
    ops = _all_ops(model)
    assert (
        "Scan" not in ops and "Loop" not in ops and ops.count("GRU") == 1
    )  # the cell over the whole sequence
    lax_level = _check(module, flax_gru.SEQUENCES, {"B": [2], "T": [3]}, coarse_ops=False)
    assert "GRU" not in _all_ops(lax_level) and len(ops) < len(_all_ops(lax_level))
    dims = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims[:2] == ["B", "T"]
    assert [len(o.type.tensor_type.shape.dim) for o in model.graph.output] == [3, 2]


def test_gru_empty_sequence_keeps_the_initial_carry() -> None:
    module = flax_gru.GRUClassifier(
        flax_gru.FEATURES, flax_gru.HIDDEN, flax_gru.CLASSES, rngs=nnx.Rngs(0)
    )
    _check(module, flax_gru.SEQUENCES, {"B": [2], "T": [0]})


def test_autoencoder() -> None:
    module = flax_autoencoder.AutoEncoder(rngs=nnx.Rngs(0))
    model = _check(module, flax_autoencoder.IMAGES, {"B": [1, 4, 7]})
    ops = _all_ops(model)
    assert ops.count("Conv") == 2 and ops.count("ConvTranspose") == 2 and ops.count("Gemm") == 2
    assert ops.count("Sigmoid") == 1
    lax_level = _check(module, flax_autoencoder.IMAGES, {"B": [2]}, coarse_ops=False)
    assert len(ops) <= len(_all_ops(lax_level))


def test_autoencoder_auto_functions_pass_kernels_as_function_inputs() -> None:
    module = flax_autoencoder.AutoEncoder(rngs=nnx.Rngs(0))
    model = _check(module, flax_autoencoder.IMAGES, {"B": [1, 3]}, auto_functions=True)
    assert sorted(f.name for f in model.functions) == ["Decoder", "Encoder"]
    decoder = next(f for f in model.functions if f.name == "Decoder")
    assert [n.op_type for n in decoder.node].count("ConvTranspose") == 2
