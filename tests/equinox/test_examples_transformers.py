"""The Equinox transformer examples (ViT, BERT) export, match JAX through onnxruntime, and are
made of coarse ops: one LayerNormalization per LayerNorm, one Softmax per attention, a Conv for
the ViT patches, a Gather per Embedding, no dropout or random-number nodes."""

from __future__ import annotations

from collections import Counter
from typing import Any

import equinox as eqx
import jax
import numpy as np
import onnx
import pytest

from examples import eqx_bert, eqx_vit
from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core.verify import run_onnx
from jax2onnx_nn.equinox import export_onnx
from jax2onnx_nn.testing.coverage import recording
from tests.equinox.helpers import all_ops, assert_module_matches, initializer_names, node_ops

# What a dropout in training mode leaves in a graph: ONNX random ops, or the BitShift / BitwiseXor
# of a lowered threefry.
# Primitives of the lax path of the layers (softmax, norms, attention logits, conv, jnp.where,
# dropout's random bits): none is lowered when every layer is its coarse op.
LAX_PATH = {
    "reduce_max",
    "exp",
    "rsqrt",
    "dot_general",
    "conv_general_dilated",
    "select_n",
    "random_bits",
    "threefry2x32",
}
RANDOM_OPS = {
    "Dropout",
    "RandomUniform",
    "RandomUniformLike",
    "RandomNormal",
    "RandomNormalLike",
    "Multinomial",
    "BitShift",
    "BitwiseXor",
}


def _batched(module: eqx.Module) -> Any:
    """What ``export_onnx(module, ..., batch=True)`` computes, in JAX. (Not ``reference``: its
    named vmap axis recompiles every op of the model, which doubles the test time.)"""
    return jax.vmap(eqx.nn.inference_mode(module))


def _batch_dims(model: onnx.ModelProto) -> list[str]:
    values = [*model.graph.input, *model.graph.output]
    return [v.type.tensor_type.shape.dim[0].dim_param for v in values]


def _assert_coarse(model: onnx.ModelProto, *, layer_norms: int, attentions: int) -> Counter[str]:
    counts = Counter(all_ops(model))
    assert counts["LayerNormalization"] == layer_norms
    assert counts["Softmax"] == attentions
    assert not {"ReduceMax", "ReduceMean", "Exp", "Sqrt"} & set(counts)  # no lax softmax / norm
    assert not RANDOM_OPS & set(counts)
    return counts


# -- ViT ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vit() -> eqx_vit.VisionTransformer:
    return eqx_vit.VisionTransformer(jax.random.key(0))


def _written(tmp_path_factory: pytest.TempPathFactory, example: Any, name: str) -> onnx.ModelProto:
    """The file the example's ``main`` writes (the tests read what a user gets)."""
    path = tmp_path_factory.mktemp(name) / f"{name}.onnx"
    example.main(str(path))
    return onnx.load(path)


@pytest.fixture(scope="module")
def vit_onnx(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    return _written(tmp_path_factory, eqx_vit, "vit")


def test_vit_matches_jax(vit: eqx_vit.VisionTransformer, vit_onnx: onnx.ModelProto) -> None:
    onnx.checker.check_model(vit_onnx, full_check=True)
    spec = [("B", eqx_vit.CHANNELS, eqx_vit.IMAGE, eqx_vit.IMAGE)]
    verify(_batched(vit), vit_onnx, spec, sizes={"B": [1, 3]}, jit=True).raise_if_failed()
    assert _batch_dims(vit_onnx) == ["B", "B"]


def test_vit_graph_is_coarse(vit_onnx: onnx.ModelProto) -> None:
    counts = _assert_coarse(vit_onnx, layer_norms=2 * eqx_vit.DEPTH + 1, attentions=eqx_vit.DEPTH)
    assert counts["Conv"] == 1 and counts["Gemm"] == 1  # the patches; the head on one token
    conv = next(n for n in vit_onnx.graph.node if n.op_type == "Conv")
    attributes = {a.name: list(a.ints) for a in conv.attribute}
    assert attributes["strides"] == [eqx_vit.PATCH] * 2
    assert {
        "cls_token",
        "positional_embedding",
        "patch_embedding.conv.weight",
    } <= initializer_names(vit_onnx)


# -- BERT -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bert() -> eqx_bert.BertClassifier:
    return eqx_bert.BertClassifier(jax.random.key(0))


@pytest.fixture(scope="module")
def bert_onnx(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    return _written(tmp_path_factory, eqx_bert, "bert")


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "all_ones"])
@pytest.mark.parametrize("batch", [1, 3])
def test_bert_matches_jax(
    bert: eqx_bert.BertClassifier, bert_onnx: onnx.ModelProto, batch: int, padded: bool
) -> None:
    inputs = eqx_bert.example_batch(batch, padded=padded, seed=batch)
    assert (inputs[1] == 0).any() == padded
    report = verify(
        _batched(bert), bert_onnx, eqx_bert.BATCHED_INPUTS, input_values=inputs, jit=True
    )
    report.raise_if_failed()


def test_bert_checks_and_keeps_the_batch_symbolic(bert_onnx: onnx.ModelProto) -> None:
    onnx.checker.check_model(bert_onnx, full_check=True)
    assert _batch_dims(bert_onnx) == ["B", "B", "B"]
    assert [i.type.tensor_type.elem_type for i in bert_onnx.graph.input] == [
        onnx.TensorProto.INT32
    ] * 2


def test_bert_graph_is_coarse(bert_onnx: onnx.ModelProto) -> None:
    layers = eqx_bert.LAYERS
    counts = _assert_coarse(bert_onnx, layer_norms=1 + 2 * layers, attentions=layers)
    assert (
        counts["Gather"] == 1
    )  # the tokens; position and segment lookups at constant ids are folded
    assert counts["Where"] >= layers  # the mask, inside each attention
    assert {
        "encoder.embedder_block.token_embedder.weight",
        "encoder.pooler.weight",
    } <= initializer_names(bert_onnx)


def test_bert_padding_is_masked_out(bert_onnx: onnx.ModelProto) -> None:
    """Tokens at padded positions do not change the logits; the mask does."""
    token_ids, mask = eqx_bert.example_batch(3, padded=True)
    junk = np.where(
        mask == 0, np.arange(token_ids.size).reshape(token_ids.shape) % eqx_bert.VOCAB, token_ids
    ).astype(np.int32)
    logits = run_onnx(bert_onnx, [token_ids, mask])[0]
    np.testing.assert_allclose(run_onnx(bert_onnx, [junk, mask])[0], logits, rtol=1e-6, atol=1e-6)
    unmasked = run_onnx(bert_onnx, [token_ids, np.ones_like(mask)])[0]
    assert not np.allclose(unmasked[1:], logits[1:], atol=1e-4)  # sequences 1, 2 have padding


@pytest.mark.parametrize(
    ("example", "inputs", "coarse"),
    [
        (
            "vit",
            [(eqx_vit.CHANNELS, eqx_vit.IMAGE, eqx_vit.IMAGE)],
            {"eqx_conv", "eqx_layer_norm", "eqx_attention", "eqx_linear"},
        ),
        (
            "bert",
            eqx_bert.INPUTS,
            {"eqx_embedding", "eqx_layer_norm", "eqx_attention", "eqx_linear"},
        ),
    ],
)
def test_every_layer_is_lowered_as_its_coarse_op(
    request: pytest.FixtureRequest, example: str, inputs: list[Any], coarse: set[str]
) -> None:
    """No eqx layer of the examples falls back to its lax path (the ONNX op histogram alone
    would not say: softmax, for one, can also be one Softmax node on the lax path)."""
    lowered: set[str] = set()
    with recording(lowered):
        export_onnx(request.getfixturevalue(example), inputs, batch=True)
    assert coarse <= lowered
    assert not LAX_PATH & lowered


# -- the exporter fix the BERT example needed: attention masks of any real dtype -------------


class _MaskedAttention(eqx.Module):
    attention: eqx.nn.MultiheadAttention

    def __call__(self, x: Any, mask: Any) -> Any:
        return self.attention(x, x, x, mask=mask)


@pytest.mark.parametrize("per_head", [False, True], ids=["2d", "3d"])
@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.uint8, np.float32])
def test_attention_mask_of_any_real_dtype_is_coarse(dtype: Any, per_head: bool) -> None:
    """eqx masks with jnp.where, where a nonzero mask entry means "attend"; int and float
    masks (the Equinox BERT example's) stay one Softmax, not the lax decomposition."""
    heads, seq = 2, 4
    module = _MaskedAttention(eqx.nn.MultiheadAttention(heads, 8, key=jax.random.key(1)))
    mask_shape = (heads, seq, seq) if per_head else (seq, seq)
    lowered: set[str] = set()
    with recording(lowered):
        model = assert_module_matches(
            module, [(seq, 8), (mask_shape, dtype)], batch=True, sizes={"B": [1, 3]}
        )
    assert "eqx_attention" in lowered and not LAX_PATH & lowered  # the handler took the call
    ops = node_ops(model)
    assert ops.count("Softmax") == 1 and "ReduceMax" not in ops and "Where" in ops


def test_float_mask_reads_as_jnp_where_does() -> None:
    """-0.0 masks out, NaN, inf and fractions attend (``mask != 0``), fully masked rows too."""
    module = _MaskedAttention(eqx.nn.MultiheadAttention(2, 8, key=jax.random.key(2)))
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    mask = np.array(
        [
            [1.0, -0.0, np.nan, 0.5],
            [0.0, 0.0, 0.0, 0.0],
            [np.inf, 0.0, -2.0, 0.0],
            [1.0, 1.0, 1.0, 1.0],
        ],
        np.float32,
    )
    lowered: set[str] = set()
    with recording(lowered):
        model = to_onnx(module, [(4, 8), ((4, 4), np.float32)])
    assert "eqx_attention" in lowered and not LAX_PATH & lowered
    np.testing.assert_allclose(run_onnx(model, [x, mask])[0], module(x, mask), rtol=1e-5, atol=1e-5)
