"""The decoder's graph: attention, rotary embeddings and norms as single ONNX ops at the opset
export_decoder picks, and the node count per layer (greedy tokens: test_export, test_models)."""

from __future__ import annotations

import collections
from pathlib import Path

import onnx
import pytest
from flax import nnx

from jax2onnx_nn.genai import CacheSpec, export_decoder
from jax2onnx_nn.genai.opset import decoder_opset
from tests.genai.models import Llama

# the Llama-style step of tests/genai/models.py at its default opset (24), measured by
# `python3 -m benchmarks.genai_nodes`: 75 nodes of the main graph for 2 layers, 17 per layer,
# 41 outside (opset 23: the same; the package default 21: 196, 72 per layer); each Attention
# sits in an If (batch or length 0). Before the cache went into Attention: 126 at opset 24.
NODES_PER_LAYER = 17
NODES_OUTSIDE_LAYERS = 41


def _ops(layers: int, folder: Path, **options: object) -> collections.Counter[str]:
    """The main graph's op types, counted (the ops in If branches under ``If/``)."""
    model = Llama(rngs=nnx.Rngs(0), layers=layers)
    cache = CacheSpec(num_layers=layers, kv_heads=2, head_dim=16, max_length=64)
    export_decoder(
        model, folder, cache=cache, num_heads=4, eos_token_id=96, pad_token_id=0, **options
    )
    graph = onnx.load(str(folder / "model.onnx")).graph
    ops = collections.Counter(node.op_type for node in graph.node)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                ops.update(f"{node.op_type}/{n.op_type}" for n in attribute.g.node)
    return ops


def test_llama_step_is_attention_rotary_and_norm_ops(tmp_path: Path) -> None:
    ops = _ops(2, tmp_path)
    assert ops["If/Attention"] == 2 and ops["RotaryEmbedding"] == 4, ops
    assert ops["RMSNormalization"] == 5 and "Softmax" not in ops and "Cos" in ops, ops
    # the cache: past_key_values into each Attention, present out of it (no Pad, Slice or
    # TensorScatter at the boundary, no head splits or merges)
    assert not {"TensorScatter", "Pad", "Slice", "Transpose", "Reshape"} & set(ops), ops
    main = sum(n for op, n in ops.items() if "/" not in op)
    assert main <= 2 * NODES_PER_LAYER + NODES_OUTSIDE_LAYERS, ops


def test_llama_nodes_per_layer(tmp_path: Path) -> None:
    one, two = (
        sum(n for op, n in _ops(layers, tmp_path / str(layers)).items() if "/" not in op)
        for layers in (1, 2)
    )
    assert two - one <= NODES_PER_LAYER, (one, two)


def test_decoder_opset_is_the_newest_with_an_attention_kernel() -> None:
    assert decoder_opset() == decoder_opset("onnxruntime") == 24
    assert decoder_opset("tensorrt") is None  # (no Attention: the package default)


@pytest.mark.parametrize("opset", [21])
def test_an_explicit_opset_is_kept(tmp_path: Path, opset: int) -> None:
    ops = _ops(1, tmp_path, opset=opset)
    assert "If/Attention" not in ops and "Softmax" in ops, ops
