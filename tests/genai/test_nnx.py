"""nnx_step: an nnx model of nnx.MultiHeadAttention(decode=True) layers generates JAX's
greedy tokens in onnxruntime-genai and in the onnxruntime loop."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.genai import export_decoder, generate_genai, generate_jax, generate_onnx
from jax2onnx_nn.genai.nnx import nnx_step
from tests.genai.decode_models import NnxDecoder
from tests.genai.models import scaled_init

EOS, PAD = 96, 0
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42]]
TOKENS = {"max_new_tokens": 32, "eos_token_id": EOS, "pad_token_id": PAD}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[NnxDecoder, Any, Any, Path]:
    model = NnxDecoder(rngs=nnx.Rngs(0))
    scaled_init(model, 2.0)
    step, cache = nnx_step(model, max_length=64)
    folder = tmp_path_factory.mktemp("nnx")
    export_decoder(step, folder, cache=cache, num_heads=4, eos_token_id=EOS, pad_token_id=PAD)
    return model, step, cache, folder


def test_cache_spec_comes_from_the_attention_layers(
    exported: tuple[NnxDecoder, Any, Any, Path],
) -> None:
    _, _, cache, _ = exported
    assert (cache.num_layers, cache.kv_heads, cache.head_dim, cache.max_length) == (2, 2, 16, 64)


def test_genai_and_onnxruntime_generate_jax_tokens(
    exported: tuple[NnxDecoder, Any, Any, Path],
) -> None:
    pytest.importorskip("onnxruntime_genai")
    _, step, cache, folder = exported
    expected = generate_jax(step, cache, PROMPTS[:1], **TOKENS)
    assert len(expected[0]) == 32 and len(set(expected[0])) > 8, expected
    assert generate_genai(folder, PROMPTS[:1], max_new_tokens=32, pad_token_id=PAD) == expected
    assert generate_onnx(folder, PROMPTS[:1], **TOKENS) == expected


def test_padded_batch_in_onnxruntime_matches_jax(
    exported: tuple[NnxDecoder, Any, Any, Path],
) -> None:
    """Prompts of different lengths, left-padded: the mask reaches nnx's attention as mask=."""
    _, step, cache, folder = exported
    expected = generate_jax(step, cache, PROMPTS, **TOKENS)
    assert generate_onnx(folder, PROMPTS, **TOKENS) == expected


def test_one_step_writes_the_attention_cache_in_the_contracts_layout(
    exported: tuple[NnxDecoder, Any, Any, Path],
) -> None:
    """The step's logits are the model's, token by token, and its cache is nnx's own
    cached_key transposed: what nnx writes for the token at slot 2 + t sits at [:, :, 2 + t]."""
    model, step, cache, _ = exported
    ids, positions = jnp.array([[3, 4, 5]], jnp.int32), jnp.array([[0, 1, 2]], jnp.int32)
    logits, new = jax.jit(step)(
        ids,
        positions,
        cache.zeros(1),
        cache_index=jnp.int32(2),
        attention_mask=jnp.ones((1, 64), jnp.int32),
    )
    reference = nnx.clone(model)
    for block in reference.blocks:
        block.attn.init_cache((1, 64, 64))
        block.attn.cache_index[...] = jnp.int32(2)

    @nnx.jit
    def one_token(model: NnxDecoder, ids: jax.Array, positions: jax.Array) -> jax.Array:
        return model(ids, positions, mask=jnp.ones((1, 1, 1, 64), bool))

    expected = [one_token(reference, ids[:, t : t + 1], positions[:, t : t + 1]) for t in range(3)]
    assert jnp.allclose(logits, jnp.concatenate(expected, axis=1), atol=1e-4)
    for (key, value), block in zip(new, reference.blocks, strict=True):
        assert key.shape == value.shape == (1, 2, 64, 16)
        assert jnp.allclose(key, block.attn.cached_key[...].transpose(0, 2, 1, 3), atol=1e-5)
        assert jnp.allclose(value, block.attn.cached_value[...].transpose(0, 2, 1, 3), atol=1e-5)
    assert not jnp.any(new[0][0][:, :, :2]) and jnp.all(jnp.any(new[0][0][:, :, 2:5], axis=-1))


class _NoCache(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.attn = nnx.MultiHeadAttention(2, 8, decode=False, rngs=rngs)


class _TwoSizes(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.small = nnx.MultiHeadAttention(2, 8, decode=True, rngs=rngs)
        self.large = nnx.MultiHeadAttention(2, 16, decode=True, rngs=rngs)


class _OwnCounter(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.attn = nnx.MultiHeadAttention(2, 8, decode=True, rngs=rngs)
        self.steps = nnx.Cache(jnp.int32(0))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda rngs: nnx.Linear(2, 2, rngs=rngs), r"Linear has no nnx.MultiHeadAttention"),
        (_NoCache, r"_NoCache.attn is an nnx.MultiHeadAttention with decode=False.*decode=True"),
        (_TwoSizes, r"_TwoSizes.(large|small) has 2 kv heads of size (8|4).*one cache shape"),
        (_OwnCounter, r"_OwnCounter.steps is an nnx.Cache outside the attention layers"),
    ],
)
def test_a_model_the_contract_cannot_carry_is_refused(make: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        nnx_step(make(rngs=nnx.Rngs(0)), max_length=8)  # type: ignore[operator]


def test_genai_keeps_the_eos_it_stops_at(
    exported: tuple[NnxDecoder, Any, Any, Path], tmp_path: Path
) -> None:
    """With eos set to the model's 5th token, onnxruntime-genai stops there; generate_genai
    returns the eos as the other loops do (onnxruntime-genai 0.18 leaves it out of a lone
    sequence)."""
    pytest.importorskip("onnxruntime_genai")
    _, _, _, folder = exported
    tokens = generate_onnx(folder, PROMPTS[:1], **TOKENS)[0]
    eos = next(t for i, t in enumerate(tokens) if i >= 4 and t not in tokens[:i])
    shutil.copytree(folder, tmp_path / "eos")
    config = json.loads((tmp_path / "eos" / "genai_config.json").read_text())
    config["model"]["eos_token_id"] = eos
    (tmp_path / "eos" / "genai_config.json").write_text(json.dumps(config))
    expected = generate_onnx(tmp_path / "eos", PROMPTS[:1], **(TOKENS | {"eos_token_id": eos}))
    assert expected[0][-1] == eos and len(expected[0]) < 32
    got = generate_genai(tmp_path / "eos", PROMPTS[:1], max_new_tokens=32, pad_token_id=PAD)
    assert got == expected
