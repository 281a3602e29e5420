"""Cache layouts and attention windows: what the contract expresses generates JAX's tokens,
what it cannot gets a SpecError naming what to change."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax import lax

from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.genai import CacheSpec, export_decoder, generate_genai, generate_jax, generate_onnx
from tests.genai.models import scaled_init

EOS, PAD = 96, 0
WINDOW = 6
CACHE = CacheSpec(num_layers=1, kv_heads=2, head_dim=16, max_length=64)


class WindowDecoder(nnx.Module):
    """One layer of sliding-window attention (each query sees its last WINDOW slots) over the
    full fixed buffer, GQA 4/2 heads; ``ring=True`` keeps only WINDOW slots instead (a ring
    buffer, which the contract cannot express)."""

    def __init__(self, *, rngs: nnx.Rngs, ring: bool = False, repeat_kv: bool = False):
        self.ring, self.repeat_kv = ring, repeat_kv
        self.embed = nnx.Embed(97, 64, rngs=rngs)
        self.q = nnx.Linear(64, 64, rngs=rngs)
        self.kv = nnx.Linear(64, 64, rngs=rngs)
        self.out = nnx.Linear(64, 97, rngs=rngs)

    def __call__(
        self,
        input_ids: jax.Array,
        position_ids: jax.Array,
        cache: list[tuple[jax.Array, jax.Array]],
        *,
        cache_index: jax.Array,
        attention_mask: jax.Array,
    ) -> tuple[jax.Array, list[tuple[jax.Array, jax.Array]]]:
        ((k_cache, v_cache),) = cache
        x = self.embed(input_ids) + jnp.sin(position_ids[..., None] / 7.0)
        b, s, _ = x.shape
        q = self.q(x).reshape(b, s, 4, 16).transpose(0, 2, 1, 3)
        k, v = jnp.split(self.kv(x).reshape(b, s, 4, 16).transpose(0, 2, 1, 3), 2, axis=1)
        if self.ring:  # the window's slots only: the contract's error names the fix
            k_cache, v_cache = k_cache[:, :, :WINDOW], v_cache[:, :, :WINDOW]
        at = (0, 0, cache_index, 0)
        k_cache = lax.dynamic_update_slice(k_cache, k, at)
        v_cache = lax.dynamic_update_slice(v_cache, v, at)
        keys, values = jnp.repeat(k_cache, 2, axis=1), jnp.repeat(v_cache, 2, axis=1)
        scores = q @ keys.transpose(0, 1, 3, 2) / math.sqrt(16)
        slots = jnp.arange(keys.shape[2])[None, :]
        query_slots = (cache_index + jnp.arange(s))[:, None]
        allowed = (slots <= query_slots) & (slots > query_slots - WINDOW)
        allowed = allowed[None, None] & (attention_mask[:, None, None, : keys.shape[2]] > 0)
        scores = jnp.where(allowed, scores, jnp.finfo(scores.dtype).min)
        h = (jax.nn.softmax(scores, axis=-1) @ values).transpose(0, 2, 1, 3).reshape(b, s, -1)
        if self.repeat_kv:
            return self.out(x + h), [(keys, values)]
        return self.out(x + h), [(k_cache, v_cache)]


@pytest.fixture(scope="module")
def window(tmp_path_factory: pytest.TempPathFactory) -> tuple[WindowDecoder, Path]:
    model = WindowDecoder(rngs=nnx.Rngs(5))
    scaled_init(model, 2.0)
    folder = tmp_path_factory.mktemp("window")
    export_decoder(model, folder, cache=CACHE, num_heads=4, eos_token_id=EOS, pad_token_id=PAD)
    return model, folder


def test_sliding_window_over_the_full_buffer_generates_jax_tokens(
    window: tuple[WindowDecoder, Path],
) -> None:
    """A window of 6 over 7 prompt and 32 generated tokens: the mask, not the cache, slides."""
    pytest.importorskip("onnxruntime_genai")
    model, folder = window
    prompt = [[5, 6, 7, 8, 9, 10, 11]]
    tokens: dict[str, Any] = {"max_new_tokens": 32, "pad_token_id": PAD}
    expected = generate_jax(model, CACHE, prompt, eos_token_id=EOS, **tokens)
    assert len(expected[0]) == 32 and len(set(expected[0])) > 8, expected
    assert generate_genai(folder, prompt, **tokens) == expected
    assert generate_onnx(folder, prompt, eos_token_id=EOS, **tokens) == expected


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"ring": True},
            r"cache\[0\] key of shape \(1, 2, 6, 16\); the fixed layout needs \[B, 2, 64, 16\]"
            r".*A buffer of 6 slots \(a sliding window's ring buffer\) is not expressible.*"
            r"mask the keys older than the window",
        ),
        (
            {"repeat_kv": True},
            r"cache\[0\] key of shape \(1, 4, 64, 16\).*This has 4 heads, not "
            r"CacheSpec.kv_heads=2: cache the keys and values before repeating them",
        ),
    ],
)
def test_a_cache_the_contract_cannot_express_names_the_fix(
    tmp_path: Path, options: dict[str, bool], message: str
) -> None:
    model = WindowDecoder(rngs=nnx.Rngs(0), **options)
    with pytest.raises(SpecError, match=message):
        export_decoder(model, tmp_path, cache=CACHE, num_heads=4, eos_token_id=EOS, pad_token_id=0)


def test_a_cache_stacked_into_one_array_names_the_split(tmp_path: Path) -> None:
    model = WindowDecoder(rngs=nnx.Rngs(0))

    def stacked(input_ids, position_ids, cache, *, cache_index, attention_mask):  # type: ignore[no-untyped-def]
        logits, new = model(
            input_ids, position_ids, cache, cache_index=cache_index, attention_mask=attention_mask
        )
        return logits, jnp.stack([jnp.stack(pair, axis=1) for pair in new], axis=1)

    with pytest.raises(
        SpecError,
        match=r"got one array of shape \(1, 1, 2, 2, 64, 16\): a cache stacked into one array.*"
        r"split into a \(key, value\) pair per layer",
    ):
        export_decoder(
            stacked, tmp_path, cache=CACHE, num_heads=4, eos_token_id=EOS, pad_token_id=PAD
        )
