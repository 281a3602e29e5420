"""The Linen models of flax's examples, built small (tests/flax/linen_examples.py): each exports
with variable-path weight names and one ONNX op per layer, and matches JAX in onnxruntime at
two batch sizes. The node counts before (``coarse_ops=False``: the lax path) are in comments."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import onnx
import pytest

from jax2onnx_nn.testing import assert_exports_match, op_types
from tests.flax.linen_examples import VAE, ResNet, Seq2seq, TransformerLM

SIZES = {"B": [1, 3]}


def _all_ops(model: onnx.ModelProto) -> collections.Counter[str]:
    """Op types of the graph and of every If / Loop / Scan body in it."""
    counts: collections.Counter[str] = collections.Counter()

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            counts[node.op_type] += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)

    walk(model.graph)
    return counts


def _initializers(model: onnx.ModelProto) -> set[str]:
    return {i.name for i in model.graph.initializer}


def _export(module, inputs, specs):
    variables = module.init(jax.random.key(0), *inputs)
    variables = jax.tree.map(
        lambda a: a + 0.1 * jax.random.normal(jax.random.key(1), a.shape, a.dtype), variables
    )
    variables = jax.tree_util.tree_map_with_path(
        lambda p, a: jnp.abs(a) + 0.5 if "var" in jax.tree_util.keystr(p) else a, variables
    )
    return assert_exports_match(lambda *a: module.apply(variables, *a), specs, sizes=SIZES)


def test_resnet():
    model = _export(ResNet(), [jnp.ones((1, 16, 16, 3))], [("B", 16, 16, 3)])
    ops = op_types(model)
    assert len(ops) <= 40, ops  # 81 on the lax path
    assert ops.count("Conv") == 6 and ops.count("BatchNormalization") == 6, ops
    assert ops.count("Relu") == 5 and ops.count("Gemm") == 1, ops
    names = _initializers(model)
    assert {
        "params/conv_init/kernel",
        "batch_stats/bn_init/mean",
        "params/ResNetBlock_1/norm_proj/scale",
        "batch_stats/ResNetBlock_1/BatchNorm_1/var",
        "params/Dense_0/kernel",
    } <= names, names


def test_transformer_lm():
    model = _export(TransformerLM(), [jnp.ones((1, 6), jnp.int32)], [(("B", 6), "int32")])
    ops = op_types(model)
    # 207 on the lax path (symbolic batch); 69 + 3 of onnxruntime's residual LayerNormalization on
    # rows (Reshape, Shape, Reshape: out of its slower SkipLayerNormalization fusion)
    assert len(ops) <= 72, ops
    assert ops.count("LayerNormalization") == 5 and ops.count("Softmax") == 2, ops
    assert ops.count("Gelu") == 2 and "Gather" in ops, ops
    assert {
        "params/embed/embedding",
        "params/pos_embedding",
        "params/block_1/MultiHeadDotProductAttention_0/query/kernel",
        "params/final_norm/scale",
    } <= _initializers(model)


def test_seq2seq_lstm():
    model = _export(
        Seq2seq(), [jnp.ones((1, 5, 3)), jnp.ones((1, 4, 3))], [("B", 5, 3), ("B", 4, 3)]
    )
    ops = _all_ops(model)
    assert ops["LSTM"] == 2 and ops["Scan"] == 0 and ops["Loop"] == 0, ops
    assert len(op_types(model)) <= 12, op_types(model)
    # the cells' stacked gates named by the cell's variable path (the cells are made in
    # Seq2seq's scope, outside the RNNs)
    assert {
        "params/logits/kernel",
        "params/LSTMCell_0/W",
        "params/LSTMCell_0/R",
        "params/LSTMCell_1/B",
    } <= _initializers(model), _initializers(model)


def test_vae():
    model = _export(VAE(), [jnp.ones((1, 12)), jnp.ones((1, 4))], [("B", 12), ("B", 4)])
    ops = op_types(model)
    assert len(ops) <= 12, ops  # 17 on the lax path
    assert ops.count("Gemm") == 5 and ops.count("Relu") == 2 and "Sigmoid" in ops, ops
    assert {"params/fc1/kernel", "params/fc2_logvar/bias", "params/fc4/kernel"} <= (
        _initializers(model)
    )


@pytest.mark.parametrize("build", [ResNet, VAE])
def test_auto_functions_keep_the_numbers(build):
    """With ``auto_functions`` the user's blocks are functions (the ResNet's two blocks, of
    different configurations: two functions) and the numbers do not change."""
    module = build()
    inputs = (
        [jnp.ones((1, 16, 16, 3))] if build is ResNet else [jnp.ones((1, 12)), jnp.ones((1, 4))]
    )
    specs = [("B", 16, 16, 3)] if build is ResNet else [("B", 12), ("B", 4)]
    variables = module.init(jax.random.key(0), *inputs)
    model = assert_exports_match(
        lambda *a: module.apply(variables, *a), specs, sizes=SIZES, auto_functions=True
    )
    expected = ["ResNetBlock", "ResNetBlock_1"] if build is ResNet else []
    assert [n.op_type for n in model.graph.node if n.domain == "jax2onnx_nn"] == expected
    assert len(model.functions) == len(expected)
