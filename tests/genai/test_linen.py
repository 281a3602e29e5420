"""linen_step: a Linen model of MultiHeadDotProductAttention(decode=True) layers, applied with
mutable=["cache"], generates JAX's greedy tokens in onnxruntime-genai and in the onnxruntime
loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import linen

from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.genai import export_decoder, generate_genai, generate_jax, generate_onnx
from jax2onnx_nn.genai.linen import linen_step
from tests.genai.decode_models import LinenDecoder, scaled

EOS, PAD = 96, 0
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42]]
TOKENS = {"max_new_tokens": 32, "eos_token_id": EOS, "pad_token_id": PAD}


def _params(module: linen.Module, length: int, seed: int) -> Any:
    ids = jnp.zeros((1, length), jnp.int32)
    variables = module.init(jax.random.key(seed), ids, ids, mask=jnp.ones((1, 1, 1, length), bool))
    return variables["params"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path]:
    module = LinenDecoder()
    step, cache = linen_step(module, {"params": scaled(_params(module, 64, 1), 2.0)}, 64)
    folder = tmp_path_factory.mktemp("linen")
    export_decoder(step, folder, cache=cache, num_heads=4, eos_token_id=EOS, pad_token_id=PAD)
    return step, cache, folder


def test_cache_spec_comes_from_the_cache_collection(exported: tuple[Any, Any, Path]) -> None:
    _, cache, _ = exported
    assert (cache.num_layers, cache.kv_heads, cache.head_dim, cache.max_length) == (2, 4, 16, 64)


def test_genai_and_onnxruntime_generate_jax_tokens(exported: tuple[Any, Any, Path]) -> None:
    pytest.importorskip("onnxruntime_genai")
    step, cache, folder = exported
    expected = generate_jax(step, cache, PROMPTS[:1], **TOKENS)
    assert len(expected[0]) == 32 and len(set(expected[0])) > 8, expected
    assert generate_genai(folder, PROMPTS[:1], max_new_tokens=32, pad_token_id=PAD) == expected
    assert generate_onnx(folder, PROMPTS[:1], **TOKENS) == expected


def test_padded_batch_in_onnxruntime_matches_jax(exported: tuple[Any, Any, Path]) -> None:
    step, cache, folder = exported
    expected = generate_jax(step, cache, PROMPTS, **TOKENS)
    assert generate_onnx(folder, PROMPTS, **TOKENS) == expected


class _Counter(linen.Module):
    """Keeps a position counter beside its attention's cache (as Flax's lm1b example does for
    its position embeddings): linen_step sets it to cache_index."""

    @linen.compact
    def __call__(self, ids: jax.Array, positions: jax.Array, *, mask: jax.Array) -> jax.Array:
        del positions  # counted here instead
        first = not self.has_variable("cache", "cache_index")
        index = self.variable("cache", "cache_index", lambda: jnp.int32(0))
        length = ids.shape[1]
        if first:
            at = jnp.arange(length)[None]
        else:
            at = index.value + jnp.zeros_like(ids)
            index.value = index.value + 1
        x = linen.Embed(97, 16)(ids) + linen.Embed(16, 16)(at)
        x = linen.MultiHeadDotProductAttention(num_heads=2, decode=True)(x, mask=mask)
        return linen.Dense(97)(x)


def test_a_position_counter_in_the_cache_follows_cache_index() -> None:
    """The step's logits for a prompt equal Linen's own decoding, token by token with the
    cache collection threaded through apply (the counter moving with it)."""
    module = _Counter()
    ids, ones = jnp.zeros((1, 16), jnp.int32), jnp.ones((1, 1, 1, 16), bool)
    variables = module.init(jax.random.key(0), ids, ids, mask=ones)
    step, cache = linen_step(module, variables, 16)
    prompt = jnp.array([[3, 4, 5]], jnp.int32)
    logits, _ = jax.jit(step)(
        prompt,
        prompt,
        cache.zeros(1),
        cache_index=jnp.int32(0),
        attention_mask=jnp.ones((1, 16), jnp.int32),
    )

    @jax.jit
    def one_token(collection: Any, token: jax.Array) -> tuple[jax.Array, Any]:
        out, mutated = module.apply(
            {"params": variables["params"], "cache": collection},
            token,
            token,
            mask=ones,
            mutable=["cache"],
        )
        return out, mutated["cache"]

    collection = variables["cache"]
    for t in range(3):
        expected, collection = one_token(collection, prompt[:, t : t + 1])
        assert jnp.allclose(logits[:, t], expected[:, 0], atol=1e-5)


class _NoDecode(linen.Module):
    @linen.compact
    def __call__(self, ids: jax.Array, positions: jax.Array, *, mask: jax.Array) -> jax.Array:
        x = linen.Embed(97, 16)(ids)
        return linen.MultiHeadDotProductAttention(num_heads=2)(x, mask=mask)


class _Extra(linen.Module):
    @linen.compact
    def __call__(self, ids: jax.Array, positions: jax.Array, *, mask: jax.Array) -> jax.Array:
        x = linen.Embed(97, 16)(ids)
        total = self.variable("cache", "running_sum", jnp.zeros, (1, 16))
        total.value = total.value + x.sum(1)
        return linen.MultiHeadDotProductAttention(num_heads=2, decode=True)(x, mask=mask)


@pytest.mark.parametrize(
    "module, message",
    [
        (_NoDecode(), r"_NoDecode applied with mutable=\['cache'\] created no cache.*decode=True"),
        (_Extra(), r"_Extra's cache holds running_sum float32\[1, 16\], not an attention layer's"),
    ],
)
def test_a_model_the_contract_cannot_carry_is_refused(module: linen.Module, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        linen_step(module, {"params": _params(module, 8, 0)}, 8)
