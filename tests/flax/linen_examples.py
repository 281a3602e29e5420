"""Small Linen models after the architectures of flax's examples (ResNet, the LM transformer,
a seq2seq LSTM, a VAE), written for the tests: each layer a Linen layer as users write them."""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
from flax import linen as nn


class ResNetBlock(nn.Module):
    """Conv -> BatchNorm -> relu -> Conv -> BatchNorm, plus a projected shortcut (flax's
    examples/imagenet ``ResNetBlock``)."""

    filters: int
    strides: tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x, train: bool = False):
        norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9)
        residual = x
        y = nn.Conv(self.filters, (3, 3), self.strides, use_bias=False)(x)
        y = nn.relu(norm()(y))
        y = nn.Conv(self.filters, (3, 3), use_bias=False)(y)
        y = norm(scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = nn.Conv(self.filters, (1, 1), self.strides, use_bias=False)(residual)
            residual = norm(name="norm_proj")(residual)
        return nn.relu(residual + y)


class ResNet(nn.Module):
    """Stem conv, max pool, two stages of blocks, global average pool, Dense."""

    num_classes: int = 5

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Conv(8, (3, 3), (2, 2), padding=[(1, 1), (1, 1)], use_bias=False, name="conv_init")(
            x
        )
        x = nn.BatchNorm(use_running_average=not train, name="bn_init")(x)
        x = nn.relu(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        x = ResNetBlock(8)(x, train)
        x = ResNetBlock(16, strides=(2, 2))(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.num_classes)(x)


class DecoderBlock(nn.Module):
    """Pre-norm causal self-attention and MLP (flax's examples/lm1b ``EncoderDecoder1DBlock``)."""

    heads: int = 2
    mlp: int = 32

    @nn.compact
    def __call__(self, x, mask):
        y = nn.LayerNorm()(x)
        y = nn.MultiHeadDotProductAttention(num_heads=self.heads, deterministic=True)(y, mask=mask)
        x = x + y
        y = nn.LayerNorm()(x)
        y = nn.Dense(self.mlp)(y)
        y = nn.gelu(y)
        return x + nn.Dense(x.shape[-1])(y)


class TransformerLM(nn.Module):
    """Token and learned position embeddings, causal blocks, a final norm, logits from the
    tied embedding (``Embed.attend``)."""

    vocab: int = 20
    width: int = 16
    length: int = 6
    layers: int = 2

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(self.vocab, self.width, name="embed")
        positions = self.param(
            "pos_embedding", nn.initializers.normal(0.02), (1, self.length, self.width)
        )
        x = embed(tokens) + positions[:, : tokens.shape[1]]
        mask = nn.make_causal_mask(tokens)
        for i in range(self.layers):
            x = DecoderBlock(name=f"block_{i}")(x, mask)
        x = nn.LayerNorm(name="final_norm")(x)
        return embed.attend(x)


class Seq2seq(nn.Module):
    """An LSTM encoder whose final carry starts an LSTM decoder (teacher forcing: the decoder
    reads the target sequence), projected to the output vocabulary (flax's examples/seq2seq)."""

    hidden: int = 8
    vocab: int = 7

    @nn.compact
    def __call__(self, source, target):
        encoder = nn.RNN(nn.LSTMCell(self.hidden), return_carry=True, name="encoder")
        carry, _ = encoder(source)
        decoder = nn.RNN(nn.LSTMCell(self.hidden), name="decoder")
        y = decoder(target, initial_carry=carry)
        return nn.Dense(self.vocab, name="logits")(y)


class VAE(nn.Module):
    """Dense encoder to mean and log-variance, the latent from given noise, Dense decoder to
    Bernoulli logits and their sigmoid (flax's examples/vae)."""

    latents: int = 4
    hidden: int = 16
    features: int = 12

    @nn.compact
    def __call__(self, x, noise):
        h = nn.relu(nn.Dense(self.hidden, name="fc1")(x))
        mean = nn.Dense(self.latents, name="fc2_mean")(h)
        logvar = nn.Dense(self.latents, name="fc2_logvar")(h)
        z = mean + noise * jnp.exp(0.5 * logvar)
        h = nn.relu(nn.Dense(self.hidden, name="fc3")(z))
        logits = nn.Dense(self.features, name="fc4")(h)
        return nn.sigmoid(logits), mean, logvar
