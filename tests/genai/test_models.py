"""Gemma-style, GPT-2-style and Equinox decoders: onnxruntime-genai and the onnxruntime loop
generate JAX's greedy tokens, 32 after a prompt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import jax
import pytest
from flax import nnx

from jax2onnx_nn.genai import CacheSpec, export_decoder, generate_genai, generate_jax, generate_onnx
from tests.genai.models import Gemma, Gpt2, Llama, scaled_init

EOS, PAD = 96, 0
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42]]


def _gemma() -> Gemma:
    model = Gemma(rngs=nnx.Rngs(2))
    scaled_init(model, 3.0)
    return model


def _gpt2() -> Gpt2:
    model = Gpt2(rngs=nnx.Rngs(3))
    scaled_init(model, 2.0)
    return model


def _llama_jax_nn() -> Llama:
    model = Llama(rngs=nnx.Rngs(1), jax_nn_attention=True)
    scaled_init(model, 3.0)
    return model


def _equinox() -> Any:
    eqx = pytest.importorskip("equinox")
    from tests.genai.eqx_models import EqxDecoder

    model = EqxDecoder(97, 64, 2, 4, jax.random.key(4))
    return jax.tree.map(lambda a: a * 3.0 if eqx.is_inexact_array(a) else a, model)


# name: (model, cache, query heads, export options)
MODELS: dict[str, tuple[Callable[[], Any], CacheSpec, int, dict[str, Any]]] = {
    "gemma": (_gemma, CacheSpec(num_layers=2, kv_heads=1, head_dim=16, max_length=64), 4, {}),
    "gpt2": (
        _gpt2,
        CacheSpec(num_layers=2, kv_heads=4, head_dim=16, max_length=64, layout="growing"),
        4,
        {},
    ),
    "equinox": (
        _equinox,
        CacheSpec(num_layers=2, kv_heads=4, head_dim=16, max_length=64),
        4,
        {},
    ),
    # jax.nn.dot_product_attention with GQA and a mask: ONNX Attention at opset 23
    "llama_jax_nn_opset23": (
        _llama_jax_nn,
        CacheSpec(num_layers=2, kv_heads=2, head_dim=16, max_length=64),
        4,
        {"opset": 23},
    ),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    make, cache, heads, options = MODELS[request.param]
    model = make()
    folder = tmp_path_factory.mktemp(request.param)
    result = export_decoder(
        model, folder, cache=cache, num_heads=heads, eos_token_id=EOS, pad_token_id=PAD, **options
    )
    assert result.layout == cache.layout
    return model, cache, folder


def _jax(model: Any, cache: CacheSpec, prompts: list[list[int]]) -> list[list[int]]:
    """JAX's greedy tokens, over the fixed buffer (the GPT-2 model takes both layouts: a
    growing cache would compile the step once per token)."""
    cache = replace(cache, layout="fixed")
    return generate_jax(
        model, cache, prompts, max_new_tokens=32, eos_token_id=EOS, pad_token_id=PAD
    )


def test_genai_generates_jax_tokens(exported: Any) -> None:
    pytest.importorskip("onnxruntime_genai")
    model, cache, folder = exported
    expected = _jax(model, cache, PROMPTS[:1])
    assert len(expected[0]) == 32 and len(set(expected[0])) > 8, expected
    assert generate_genai(folder, PROMPTS[:1], max_new_tokens=32, pad_token_id=PAD) == expected


def test_onnxruntime_padded_batch_generates_each_prompts_tokens(exported: Any) -> None:
    model, cache, folder = exported
    alone = [_jax(model, cache, [p])[0] for p in PROMPTS]
    tokens = generate_onnx(folder, PROMPTS, max_new_tokens=32, eos_token_id=EOS, pad_token_id=PAD)
    assert tokens == alone


def test_jax_loop_over_a_growing_cache_matches_the_fixed_buffer() -> None:
    """The GPT-2 step over its growing cache generates what it generates over a fixed buffer
    (3 tokens: each step's new shapes compile anew)."""
    model = _gpt2()
    growing = MODELS["gpt2"][1]
    tokens = generate_jax(
        model, growing, PROMPTS, max_new_tokens=3, eos_token_id=EOS, pad_token_id=PAD
    )
    assert tokens == [t[:3] for t in _jax(model, growing, PROMPTS)]


def test_jax_nn_attention_is_onnx_attention_at_opset_23(tmp_path: Path) -> None:
    import onnx

    make, cache, heads, options = MODELS["llama_jax_nn_opset23"]
    export_decoder(
        make(),
        tmp_path,
        cache=cache,
        num_heads=heads,
        eos_token_id=EOS,
        pad_token_id=PAD,
        **options,
    )

    def op_types(graph: onnx.GraphProto) -> list[str]:
        found = []
        for node in graph.node:
            found.append(node.op_type)
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    found += op_types(attribute.g)
        return found

    ops = op_types(onnx.load(str(tmp_path / "model.onnx")).graph)
    assert ops.count("Attention") == cache.num_layers, sorted(set(ops))
