"""An Equinox decoder with an explicit fixed-buffer cache (the contract's step as __call__)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from tests.genai.models import Cache, attend, rope, write


class EqxBlock(eqx.Module):
    qkv: eqx.nn.Linear
    proj: eqx.nn.Linear
    up: eqx.nn.Linear
    down: eqx.nn.Linear
    norm1: eqx.nn.RMSNorm
    norm2: eqx.nn.RMSNorm
    heads: int = eqx.field(static=True)

    def __init__(self, dim: int, heads: int, key: jax.Array):
        keys = jax.random.split(key, 4)
        self.heads = heads
        self.qkv = eqx.nn.Linear(dim, 3 * dim, use_bias=False, key=keys[0])
        self.proj = eqx.nn.Linear(dim, dim, use_bias=False, key=keys[1])
        self.up = eqx.nn.Linear(dim, 2 * dim, key=keys[2])
        self.down = eqx.nn.Linear(2 * dim, dim, key=keys[3])
        self.norm1, self.norm2 = eqx.nn.RMSNorm(dim), eqx.nn.RMSNorm(dim)

    def __call__(self, x, positions, kv, attention_mask, cache_index):  # type: ignore[no-untyped-def]
        tokens = jax.vmap(jax.vmap(self.norm1))(x)
        q, k, v = jnp.split(jax.vmap(jax.vmap(self.qkv))(tokens), 3, axis=-1)
        batch, length, dim = x.shape
        q, k, v = (
            t.reshape(batch, length, self.heads, dim // self.heads).transpose(0, 2, 1, 3)
            for t in (q, k, v)
        )
        q, k = rope(q, positions), rope(k, positions)
        keys, values = write(kv[0], k, cache_index), write(kv[1], v, cache_index)
        out = attend(q, keys, values, attention_mask, cache_index)
        x = x + jax.vmap(jax.vmap(self.proj))(out.transpose(0, 2, 1, 3).reshape(batch, length, dim))
        h = jax.vmap(jax.vmap(self.up))(jax.vmap(jax.vmap(self.norm2))(x))
        return x + jax.vmap(jax.vmap(self.down))(jax.nn.relu(h)), (keys, values)


class EqxDecoder(eqx.Module):
    embed: eqx.nn.Embedding
    blocks: list[EqxBlock]
    head: eqx.nn.Linear

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, key: jax.Array):
        keys = jax.random.split(key, layers + 2)
        self.embed = eqx.nn.Embedding(vocab, dim, key=keys[0])
        self.blocks = [EqxBlock(dim, heads, k) for k in keys[1:-1]]
        self.head = eqx.nn.Linear(dim, vocab, use_bias=False, key=keys[-1])

    def __call__(
        self,
        input_ids: jax.Array,
        position_ids: jax.Array,
        cache: Cache,
        *,
        cache_index: jax.Array,
        attention_mask: jax.Array,
    ) -> tuple[jax.Array, Cache]:
        x = self.embed.weight[input_ids]
        new = []
        for block, kv in zip(self.blocks, cache, strict=True):
            x, kv = block(x, position_ids, kv, attention_mask, cache_index)
            new.append(kv)
        return jax.vmap(jax.vmap(self.head))(x), new
