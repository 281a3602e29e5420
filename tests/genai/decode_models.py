"""Decoders whose attention keeps Flax's own cache (``decode=True``): an nnx model of
``nnx.MultiHeadAttention`` layers (grouped-query) and a Linen model of
``MultiHeadDotProductAttention`` layers, both GPT-2-like (learned positions, LayerNorm)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen, nnx


class NnxBlock(nnx.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, *, rngs: nnx.Rngs):
        self.ln1, self.ln2 = nnx.LayerNorm(dim, rngs=rngs), nnx.LayerNorm(dim, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(
            heads, dim, num_kv_heads=kv_heads, decode=True, rngs=rngs
        )
        self.up = nnx.Linear(dim, 2 * dim, rngs=rngs)
        self.down = nnx.Linear(2 * dim, dim, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.down(jax.nn.gelu(self.up(self.ln2(x))))


class NnxDecoder(nnx.Module):
    """``model(input_ids, position_ids, mask=mask) -> logits``, one token per call."""

    def __init__(
        self,
        vocab: int = 97,
        dim: int = 64,
        layers: int = 2,
        heads: int = 4,
        kv_heads: int = 2,
        context: int = 64,
        *,
        rngs: nnx.Rngs,
    ):
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.positions = nnx.Embed(context, dim, rngs=rngs)
        self.blocks = nnx.List([NnxBlock(dim, heads, kv_heads, rngs=rngs) for _ in range(layers)])
        self.norm = nnx.LayerNorm(dim, rngs=rngs)

    def __call__(
        self, input_ids: jax.Array, position_ids: jax.Array, *, mask: jax.Array
    ) -> jax.Array:
        x = self.embed(input_ids) + self.positions(position_ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.embed.attend(self.norm(x))


class LinenBlock(linen.Module):
    heads: int

    @linen.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        attention = linen.MultiHeadDotProductAttention(num_heads=self.heads, decode=True)
        x = x + attention(linen.LayerNorm()(x), mask=mask)
        h = linen.Dense(2 * x.shape[-1])(linen.LayerNorm()(x))
        return x + linen.Dense(x.shape[-1])(jax.nn.gelu(h))


class LinenDecoder(linen.Module):
    """``apply(variables, input_ids, position_ids, mask=mask, mutable=["cache"])``."""

    vocab: int = 97
    dim: int = 64
    layers: int = 2
    heads: int = 4
    context: int = 64

    @linen.compact
    def __call__(
        self, input_ids: jax.Array, position_ids: jax.Array, *, mask: jax.Array
    ) -> jax.Array:
        embed = linen.Embed(self.vocab, self.dim)
        x = embed(input_ids) + linen.Embed(self.context, self.dim)(position_ids)
        for _ in range(self.layers):
            x = LinenBlock(self.heads)(x, mask)
        return embed.attend(linen.LayerNorm()(x))


def scaled(tree: object, scale: float) -> object:
    """Float leaves times ``scale``: a random small model's logits are then far from ties."""
    return jax.tree.map(lambda a: a * scale if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)
