"""Small decoders written as the contract's steps: Llama-style (GQA, RoPE, RMSNorm, SwiGLU),
Gemma-style (soft-capped logits, tied embeddings), GPT-2-style (learned positions, MHA,
LayerNorm), each over a fixed-buffer or growing cache."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax

Cache = list[tuple[jax.Array, jax.Array]]


def rope(x: jax.Array, positions: jax.Array, theta: float = 10000.0) -> jax.Array:
    """Rotary embedding (rotate-half) of ``x`` ``[B, H, S, D]`` at ``positions`` ``[B, S]``."""
    half = x.shape[-1] // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions[:, None, :, None].astype(jnp.float32) * freqs
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def write(cache: jax.Array, new: jax.Array, cache_index: jax.Array | None) -> jax.Array:
    """The fixed layout writes at ``cache_index``; the growing one concatenates."""
    if cache_index is None:
        return jnp.concatenate([cache, new], axis=2)
    return lax.dynamic_update_slice(cache, new.astype(cache.dtype), (0, 0, cache_index, 0))


def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    attention_mask: jax.Array,
    first_slot: jax.Array | int,
    softcap: float | None = None,
) -> jax.Array:
    """Causal attention of ``q`` ``[B, H, S, D]`` over cache slots ``k, v`` ``[B, KV, T, D]``
    (query i sits at slot ``first_slot + i``), pads masked; GQA by repeating the kv heads."""
    groups = q.shape[1] // k.shape[1]
    k, v = jnp.repeat(k, groups, axis=1), jnp.repeat(v, groups, axis=1)
    scores = jnp.einsum("bhsd,bhtd->bhst", q, k) / math.sqrt(q.shape[-1])
    if softcap is not None:
        scores = softcap * jnp.tanh(scores / softcap)
    slots = jnp.arange(k.shape[2])
    query_slots = first_slot + jnp.arange(q.shape[2])
    allowed = (slots[None, :] <= query_slots[:, None])[None, None] & (
        attention_mask[:, None, None, :] > 0
    )
    scores = jnp.where(allowed, scores, jnp.finfo(scores.dtype).min)
    return jnp.einsum("bhst,bhtd->bhsd", jax.nn.softmax(scores, axis=-1), v)


def attend_with_jax_nn(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    attention_mask: jax.Array,
    first_slot: jax.Array | int,
    softcap: float | None = None,
) -> jax.Array:
    """:func:`attend` through ``jax.nn.dot_product_attention`` (GQA by its kv heads; ONNX
    Attention from opset 23)."""
    assert softcap is None, "jax.nn.dot_product_attention has no softcap"
    slots = jnp.arange(k.shape[2])
    query_slots = first_slot + jnp.arange(q.shape[2])
    allowed = (slots[None, :] <= query_slots[:, None])[None, None] & (
        attention_mask[:, None, None, :] > 0
    )
    out = jax.nn.dot_product_attention(
        q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), mask=allowed
    )
    return out.transpose(0, 2, 1, 3)


class LlamaBlock(nnx.Module):
    def __init__(
        self,
        dim: int,
        heads: int,
        kv_heads: int,
        hidden: int,
        *,
        rngs: nnx.Rngs,
        jax_nn_attention: bool = False,
    ):
        self.jax_nn_attention = jax_nn_attention
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nnx.Linear(dim, heads * self.head_dim, use_bias=False, rngs=rngs)
        self.k = nnx.Linear(dim, kv_heads * self.head_dim, use_bias=False, rngs=rngs)
        self.v = nnx.Linear(dim, kv_heads * self.head_dim, use_bias=False, rngs=rngs)
        self.o = nnx.Linear(heads * self.head_dim, dim, use_bias=False, rngs=rngs)
        self.attn_norm = nnx.RMSNorm(dim, rngs=rngs)
        self.mlp_norm = nnx.RMSNorm(dim, rngs=rngs)
        self.gate = nnx.Linear(dim, hidden, use_bias=False, rngs=rngs)
        self.up = nnx.Linear(dim, hidden, use_bias=False, rngs=rngs)
        self.down = nnx.Linear(hidden, dim, use_bias=False, rngs=rngs)

    def heads_of(self, x: jax.Array, n: int) -> jax.Array:
        return x.reshape(*x.shape[:2], n, self.head_dim).transpose(0, 2, 1, 3)

    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        kv: tuple[jax.Array, jax.Array],
        attention_mask: jax.Array,
        cache_index: jax.Array | None,
        softcap: float | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        h = self.attn_norm(x)
        q = rope(self.heads_of(self.q(h), self.heads), positions)
        k = rope(self.heads_of(self.k(h), self.kv_heads), positions)
        v = self.heads_of(self.v(h), self.kv_heads)
        keys, values = write(kv[0], k, cache_index), write(kv[1], v, cache_index)
        first = cache_index if cache_index is not None else keys.shape[2] - x.shape[1]
        attention = attend_with_jax_nn if self.jax_nn_attention else attend
        out = attention(q, keys, values, attention_mask, first, softcap)
        x = x + self.o(out.transpose(0, 2, 1, 3).reshape(*x.shape[:2], -1))
        h = self.mlp_norm(x)
        return x + self.down(jax.nn.silu(self.gate(h)) * self.up(h)), (keys, values)


class Llama(nnx.Module):
    """A Llama-style decoder whose ``__call__`` is the fixed-layout step."""

    def __init__(
        self,
        vocab: int = 97,
        dim: int = 64,
        layers: int = 2,
        heads: int = 4,
        kv_heads: int = 2,
        hidden: int = 128,
        *,
        rngs: nnx.Rngs,
        jax_nn_attention: bool = False,
    ):
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.blocks = nnx.List(
            [
                LlamaBlock(
                    dim, heads, kv_heads, hidden, rngs=rngs, jax_nn_attention=jax_nn_attention
                )
                for _ in range(layers)
            ]
        )
        self.norm = nnx.RMSNorm(dim, rngs=rngs)
        self.head = nnx.Linear(dim, vocab, use_bias=False, rngs=rngs)

    def __call__(
        self,
        input_ids: jax.Array,
        position_ids: jax.Array,
        cache: Cache,
        *,
        cache_index: jax.Array,
        attention_mask: jax.Array,
    ) -> tuple[jax.Array, Cache]:
        x = self.embed(input_ids)
        new = []
        for block, kv in zip(self.blocks, cache, strict=True):
            x, kv = block(x, position_ids, kv, attention_mask, cache_index)
            new.append(kv)
        return self.head(self.norm(x)), new


def scaled_init(module: nnx.Module, scale: float) -> None:
    """Weights times ``scale``: a random small model's logits are then far from ties."""
    for _, param in nnx.iter_graph(module):
        if isinstance(param, nnx.Param):
            param[...] = param[...] * scale


def llama_kwargs(**overrides: Any) -> dict[str, Any]:
    return {
        "vocab": 97,
        "dim": 64,
        "layers": 2,
        "heads": 4,
        "kv_heads": 2,
        "hidden": 128,
    } | overrides


class Gemma(nnx.Module):
    """A Gemma-style decoder (fixed-layout step): embeddings scaled by sqrt(dim) and tied to
    the output, GeGLU, attention and final logits soft-capped."""

    def __init__(self, vocab: int = 97, dim: int = 64, layers: int = 2, *, rngs: nnx.Rngs):
        self.dim = dim
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.blocks = nnx.List([LlamaBlock(dim, 4, 1, 128, rngs=rngs) for _ in range(layers)])
        self.norm = nnx.RMSNorm(dim, rngs=rngs)

    def __call__(
        self,
        input_ids: jax.Array,
        position_ids: jax.Array,
        cache: Cache,
        *,
        cache_index: jax.Array,
        attention_mask: jax.Array,
    ) -> tuple[jax.Array, Cache]:
        x = self.embed(input_ids) * jnp.sqrt(jnp.float32(self.dim))
        new = []
        for block, kv in zip(self.blocks, cache, strict=True):
            x, kv = block(x, position_ids, kv, attention_mask, cache_index, softcap=50.0)
            new.append(kv)
        logits = self.embed.attend(self.norm(x))
        return 30.0 * jnp.tanh(logits / 30.0), new


class Gpt2Block(nnx.Module):
    def __init__(self, dim: int, heads: int, *, rngs: nnx.Rngs):
        self.heads, self.head_dim = heads, dim // heads
        self.ln1, self.ln2 = nnx.LayerNorm(dim, rngs=rngs), nnx.LayerNorm(dim, rngs=rngs)
        self.qkv = nnx.Linear(dim, 3 * dim, rngs=rngs)
        self.proj = nnx.Linear(dim, dim, rngs=rngs)
        self.fc = nnx.Linear(dim, 4 * dim, rngs=rngs)
        self.out = nnx.Linear(4 * dim, dim, rngs=rngs)

    def __call__(
        self,
        x: jax.Array,
        kv: tuple[jax.Array, jax.Array],
        attention_mask: jax.Array,
        cache_index: jax.Array | None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        batch, length = x.shape[:2]
        q, k, v = jnp.split(self.qkv(self.ln1(x)), 3, axis=-1)
        q, k, v = (
            t.reshape(batch, length, self.heads, self.head_dim).transpose(0, 2, 1, 3)
            for t in (q, k, v)
        )
        keys, values = write(kv[0], k, cache_index), write(kv[1], v, cache_index)
        first = cache_index if cache_index is not None else keys.shape[2] - length
        out = attend(q, keys, values, attention_mask, first)
        x = x + self.proj(out.transpose(0, 2, 1, 3).reshape(batch, length, -1))
        return x + self.out(jax.nn.gelu(self.fc(self.ln2(x)))), (keys, values)


class Gpt2(nnx.Module):
    """A GPT-2-style decoder (learned positions, MHA, LayerNorm, GELU, tied embeddings) whose
    step grows its cache, or writes a fixed buffer when given ``cache_index``."""

    def __init__(
        self,
        vocab: int = 97,
        dim: int = 64,
        layers: int = 2,
        heads: int = 4,
        context: int = 64,
        *,
        rngs: nnx.Rngs,
    ):
        self.wte = nnx.Embed(vocab, dim, rngs=rngs)
        self.wpe = nnx.Embed(context, dim, rngs=rngs)
        self.blocks = nnx.List([Gpt2Block(dim, heads, rngs=rngs) for _ in range(layers)])
        self.ln_f = nnx.LayerNorm(dim, rngs=rngs)

    def __call__(
        self,
        input_ids: jax.Array,
        position_ids: jax.Array,
        cache: Cache,
        *,
        attention_mask: jax.Array,
        cache_index: jax.Array | None = None,
    ) -> tuple[jax.Array, Cache]:
        x = self.wte(input_ids) + self.wpe(position_ids)
        new = []
        for block, kv in zip(self.blocks, cache, strict=True):
            x, kv = block(x, kv, attention_mask, cache_index)
            new.append(kv)
        return self.wte.attend(self.ln_f(x)), new
