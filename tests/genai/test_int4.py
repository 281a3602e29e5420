"""A Llama-style decoder with int4 weights (qwix PTQ, tiles of 64): onnxruntime-genai and the
onnxruntime loop generate the quantized JAX model's greedy tokens from a 4-bit file."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import onnx
import pytest
from flax import nnx

from jax2onnx_nn.genai import CacheSpec, export_decoder, generate_genai, generate_jax, generate_onnx
from tests.genai.models import Llama, scaled_init

qwix = pytest.importorskip("qwix")

EOS, PAD = 96, 0
CACHE = CacheSpec(num_layers=1, kv_heads=2, head_dim=16, max_length=64)
PROMPT = [[5, 6, 7, 8, 9, 10, 11]]


def _quantized() -> tuple[Llama, nnx.Module]:
    model = Llama(layers=1, rngs=nnx.Rngs(1))
    scaled_init(model, 3.0)
    rules = [qwix.QuantizationRule(module_path=".*", weight_qtype="int4", tile_size=64)]
    ids = jnp.zeros((1, 1), jnp.int32)
    quantized = qwix.quantize_model(
        model,
        qwix.PtqProvider(rules),
        ids,
        ids,
        CACHE.zeros(1),
        cache_index=jnp.int32(0),
        attention_mask=jnp.ones((1, CACHE.max_length), jnp.int32),
    )
    return model, quantized


@pytest.mark.slow  # qwix quantizes eagerly: 45-55 s on the shared 2-core machine
def test_int4_decoder_generates_the_quantized_models_tokens(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime_genai")
    model, quantized = _quantized()
    options = {"cache": CACHE, "num_heads": 4, "eos_token_id": EOS, "pad_token_id": PAD}
    export_decoder(quantized, tmp_path / "int4", **options)
    export_decoder(model, tmp_path / "float", **options)
    graph = onnx.load(str(tmp_path / "int4" / "model.onnx")).graph
    # q, k, v, o, gate, up, down and the head: every Linear a 4-bit MatMulNBits
    assert [n.op_type for n in graph.node].count("MatMulNBits") == 8
    int4_size = (tmp_path / "int4" / "model.onnx").stat().st_size
    float_size = (tmp_path / "float" / "model.onnx").stat().st_size
    assert int4_size < 0.4 * float_size, (int4_size, float_size)

    expected = generate_jax(
        quantized, CACHE, PROMPT, max_new_tokens=32, eos_token_id=EOS, pad_token_id=PAD
    )
    assert len(expected[0]) == 32 and len(set(expected[0])) > 8, expected
    tokens = {"max_new_tokens": 32, "pad_token_id": PAD}
    assert generate_genai(tmp_path / "int4", PROMPT, **tokens) == expected
    assert generate_onnx(tmp_path / "int4", PROMPT, eos_token_id=EOS, **tokens) == expected
