"""onnxruntime's GroupQueryAttention in the decoder (core/targets/onnxruntime_gqa.py, opt-in:
target=WITH_GROUP_QUERY_ATTENTION): the Llama-style step generates JAX's greedy tokens with it,
a padded batch of prompts of different lengths included, in onnxruntime-genai and the plain
onnxruntime loop; a batch or a length of 0 runs; the default onnxruntime target and the others
keep ONNX Attention."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from flax import nnx

from jax2onnx_nn.core.targets.onnxruntime import WITH_GROUP_QUERY_ATTENTION
from jax2onnx_nn.genai import CacheSpec, export_decoder, generate_genai, generate_jax, generate_onnx
from jax2onnx_nn.genai.padding import padded_batch_step
from tests.genai.models import Llama, scaled_init

EOS, PAD = 96, 0
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42]]
CACHE = CacheSpec(num_layers=2, kv_heads=2, head_dim=16, max_length=64)
TOKENS: dict[str, Any] = {"max_new_tokens": 32, "eos_token_id": EOS, "pad_token_id": PAD}
GQA: dict[str, Any] = {
    "num_heads": 4,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
    "target": WITH_GROUP_QUERY_ATTENTION,
}


def _llama() -> Llama:
    model = Llama(rngs=nnx.Rngs(1))
    scaled_init(model, 3.0)
    return model


def _branch_ops(path: Path) -> collections.Counter[str]:
    """The op types in the main graph's If branches (domain-qualified; ``:Attention/past``
    for an ONNX Attention that takes the past)."""
    ops: collections.Counter[str] = collections.Counter()
    for node in onnx.load(str(path)).graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                ops.update(f"{n.domain}:{n.op_type}" for n in attribute.g.node)
                ops.update(
                    ":Attention/past"
                    for n in attribute.g.node
                    if n.op_type == "Attention" and len(n.input) == 6
                )
    return ops


@pytest.fixture(scope="module")
def alone() -> list[list[int]]:
    """What JAX generates for each prompt alone (the padded batch must give the same)."""
    tokens = generate_jax(_llama(), CACHE, PROMPTS, **TOKENS)
    assert all(len(t) == 32 for t in tokens) and tokens[0] != tokens[1]
    return tokens


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gqa")
    export_decoder(_llama(), folder, cache=CACHE, **GQA)
    return folder


@pytest.fixture(scope="module")
def padded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gqa_padded")
    step = padded_batch_step(_llama(), CACHE, pad_token_id=PAD)
    export_decoder(step, folder, cache=CACHE, **GQA)
    return folder


def test_each_attention_is_group_query_attention_in_its_if(plain: Path, padded: Path) -> None:
    ops = _branch_ops(plain / "model.onnx")
    assert ops["com.microsoft:GroupQueryAttention"] == 2 and ops[":Attention"] == 0, ops
    # (the padded wrapper's first layer attends over the buffer it scatters into, not the
    # past: an Attention without a cache, which stays)
    ops = _branch_ops(padded / "model.onnx")
    assert ops["com.microsoft:GroupQueryAttention"] == 1 and ops[":Attention/past"] == 0, ops


def test_onnxruntime_loop_generates_jax_tokens_left_padded(
    plain: Path, alone: list[list[int]]
) -> None:
    """The loop pads the shorter prompt on the left: its pads are masked by attention_bias."""
    assert generate_onnx(plain, PROMPTS, **TOKENS) == alone


def test_genai_generates_jax_tokens(plain: Path, alone: list[list[int]]) -> None:
    pytest.importorskip("onnxruntime_genai")
    for prompt, tokens in zip(PROMPTS, alone, strict=True):
        assert generate_genai(plain, [prompt], max_new_tokens=32, pad_token_id=PAD) == [tokens]


def test_genai_padded_batch_generates_each_prompts_tokens(
    padded: Path, alone: list[list[int]]
) -> None:
    pytest.importorskip("onnxruntime_genai")
    assert generate_genai(padded, PROMPTS, max_new_tokens=32, pad_token_id=PAD) == alone


def test_onnxruntime_padded_batch_generates_each_prompts_tokens(
    padded: Path, alone: list[list[int]]
) -> None:
    assert generate_onnx(padded, PROMPTS, **TOKENS) == alone


@pytest.mark.parametrize(("batch", "tokens", "past"), [(0, 3, 0), (0, 1, 4), (2, 0, 4), (2, 0, 0)])
def test_an_empty_batch_or_length_runs(plain: Path, batch: int, tokens: int, past: int) -> None:
    """GroupQueryAttention kills the process on a batch of 0: the If keeps it from running."""
    session = ort.InferenceSession(str(plain / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds: dict[str, np.ndarray] = {
        "input_ids": np.ones((batch, tokens), np.int32),
        "attention_mask": np.ones((batch, past + tokens), np.int32),
        "position_ids": np.zeros((batch, tokens), np.int32) + past,
    }
    for i in range(CACHE.num_layers):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = np.ones((batch, 2, past, 16), np.float32)
    logits, *present = session.run(None, feeds)
    assert logits.shape == (batch, tokens, 97)
    assert all(p.shape == (batch, 2, past + tokens, 16) for p in present)


@pytest.mark.parametrize("target", [None, "openvino", "onnxruntime-web"])
def test_other_targets_keep_onnx_attention(tmp_path: Path, target: str | None) -> None:
    export_decoder(
        _llama(),
        tmp_path,
        cache=CACHE,
        num_heads=4,
        eos_token_id=EOS,
        pad_token_id=PAD,
        target=target,
    )
    model = onnx.load(str(tmp_path / "model.onnx"))
    assert all(o.domain != "com.microsoft" for o in model.opset_import), model.opset_import
    ops = _branch_ops(tmp_path / "model.onnx")
    # (openvino's decoder opset predates Attention: the decomposition)
    assert ops[":Attention/past"] == (0 if target == "openvino" else 2), ops
