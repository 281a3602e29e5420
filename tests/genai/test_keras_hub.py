"""A keras-hub GemmaCausalLM built small from its classes: its call_with_cache, exported with
keras_hub_step, generates JAX's greedy tokens in onnxruntime-genai and onnxruntime."""

from __future__ import annotations

from pathlib import Path

import pytest

from jax2onnx_nn.genai import export_decoder, generate_genai, generate_jax, generate_onnx
from jax2onnx_nn.genai.keras_hub import keras_hub_step

keras_hub = pytest.importorskip("keras_hub")  # pulls tensorflow: not in the [test] extra

EOS, PAD = 1, 0


def test_gemma_causal_lm_generates_jax_tokens(tmp_path: Path) -> None:
    import keras

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GemmaBackbone(
        vocabulary_size=97,
        num_layers=2,
        num_query_heads=4,
        num_key_value_heads=1,
        hidden_dim=64,
        intermediate_dim=128,
        head_dim=16,
    )
    causal_lm = keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=None)
    for weight in causal_lm.weights:  # logits far from ties: 32 varied tokens
        weight.assign(weight * 3.0)
    step, cache = keras_hub_step(causal_lm, max_length=64)
    assert (cache.num_layers, cache.kv_heads, cache.head_dim) == (2, 1, 16)
    export_decoder(step, tmp_path, cache=cache, num_heads=4, eos_token_id=EOS, pad_token_id=PAD)
    prompts, ids = [[5, 6, 7, 8, 9, 10, 11]], {"max_new_tokens": 32, "pad_token_id": PAD}
    expected = generate_jax(step, cache, prompts, eos_token_id=EOS, **ids)
    assert len(expected[0]) == 32 and len(set(expected[0])) > 8, expected
    assert generate_onnx(tmp_path, prompts, eos_token_id=EOS, **ids) == expected
    pytest.importorskip("onnxruntime_genai")
    assert generate_genai(tmp_path, prompts, **ids) == expected
