"""padded_batch_step: prompts of different lengths in one batch generate, in
onnxruntime-genai 0.18 itself, what each prompt generates alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flax import nnx

from jax2onnx_nn.genai import CacheSpec, export_decoder, generate_genai, generate_jax, generate_onnx
from jax2onnx_nn.genai.padding import padded_batch_step
from tests.genai.models import Gpt2, scaled_init

EOS, PAD = 96, 0
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42]]
CACHE = CacheSpec(num_layers=2, kv_heads=4, head_dim=16, max_length=64)
TOKENS: dict[str, Any] = {"max_new_tokens": 32, "eos_token_id": EOS, "pad_token_id": PAD}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[list[int]], Path]:
    """The GPT-2-style decoder (learned positions: a position counted wrong changes its
    tokens) wrapped and exported, and the tokens JAX generates for each prompt."""
    model = Gpt2(rngs=nnx.Rngs(3))
    scaled_init(model, 2.0)
    folder = tmp_path_factory.mktemp("padded")
    export_decoder(
        padded_batch_step(model, CACHE, pad_token_id=PAD),
        folder,
        cache=CACHE,
        num_heads=4,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    # JAX's padded batch (what each prompt generates alone: test_export checks the JAX loop)
    alone = generate_jax(model, CACHE, PROMPTS, **TOKENS)
    assert all(len(t) == 32 for t in alone) and alone[0] != alone[1]
    return alone, folder


def test_genai_padded_batch_generates_each_prompts_tokens(
    exported: tuple[list[list[int]], Path],
) -> None:
    """onnxruntime-genai 0.18 feeds this batch an all-ones mask and positions 0..6 for both
    rows; the graph masks the 4 pads of the second row and counts its positions from 0."""
    pytest.importorskip("onnxruntime_genai")
    alone, folder = exported
    assert generate_genai(folder, PROMPTS, max_new_tokens=32, pad_token_id=PAD) == alone


def test_onnxruntime_padded_batch_generates_each_prompts_tokens(
    exported: tuple[list[list[int]], Path],
) -> None:
    """Fed the contract's mask and positions, the wrapped graph computes the same."""
    alone, folder = exported
    assert generate_onnx(folder, PROMPTS, **TOKENS) == alone


def test_a_growing_cache_is_refused() -> None:
    growing = CacheSpec(num_layers=2, kv_heads=4, head_dim=16, max_length=64, layout="growing")
    with pytest.raises(ValueError, match=r"fixed-layout step.*takes attention_mask"):
        padded_batch_step(Gpt2(rngs=nnx.Rngs(0)), growing, pad_token_id=PAD)
