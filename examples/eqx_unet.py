"""A small U-Net score network ``model(t, y)`` for score-based diffusion in Equinox (the U-Net
Equinox's score-based diffusion example names as the alternative to its MLP-Mixer).

A scalar diffusion time ``t`` gets a sinusoidal embedding and an MLP (``eqx.nn.Linear``); each
residual block adds a per-channel projection of it to its features. The down path halves the
resolution with strided ``eqx.nn.Conv2d``, the up path doubles it with
``eqx.nn.ConvTranspose2d`` and concatenates the skip connection of the same resolution.

The module works on one example (``t`` a scalar, ``y`` of shape (1, 16, 16)); the export is
``jax.vmap`` of it, so ``t`` is ``float[B]`` and ``y`` is ``float[B, 1, 16, 16]``. Every layer is
one ONNX op over the whole batch: Conv, ConvTranspose, GroupNormalization (opset 21), Gemm.
Run ``python -m examples.eqx_unet [out.onnx]``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import onnx

from jax2onnx_nn import verify
from jax2onnx_nn.equinox import export_onnx

CHANNELS, SIZE = 1, 16
WIDTHS = (8, 16)
EMBEDDING = 16  # size of the sinusoidal time embedding
GROUPS = 4


def sinusoidal_embedding(t: jax.Array, size: int) -> jax.Array:
    """``[sin(t w_i), cos(t w_i)]`` for geometric frequencies ``w_i`` (transformer positions)."""
    frequencies = np.exp(-np.log(10_000.0) * np.arange(size // 2) / (size // 2 - 1)).astype(
        np.float32
    )
    angles = t * frequencies
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)])


class ResidualBlock(eqx.Module):
    """GroupNorm -> silu -> Conv2d, twice, with the time embedding added in between."""

    norm1: eqx.nn.GroupNorm
    conv1: eqx.nn.Conv2d
    time: eqx.nn.Linear
    norm2: eqx.nn.GroupNorm
    conv2: eqx.nn.Conv2d
    skip: eqx.nn.Conv2d | None

    def __init__(self, channels_in: int, channels_out: int, key: jax.Array) -> None:
        k1, k2, k3, k4 = jax.random.split(key, 4)
        self.norm1 = eqx.nn.GroupNorm(min(GROUPS, channels_in), channels_in)
        self.conv1 = eqx.nn.Conv2d(channels_in, channels_out, 3, padding=1, key=k1)
        self.time = eqx.nn.Linear(EMBEDDING, channels_out, key=k2)
        self.norm2 = eqx.nn.GroupNorm(GROUPS, channels_out)
        self.conv2 = eqx.nn.Conv2d(channels_out, channels_out, 3, padding=1, key=k3)
        # a 1x1 conv matches the channels of the residual when they change
        self.skip = (
            None
            if channels_in == channels_out
            else eqx.nn.Conv2d(channels_in, channels_out, 1, key=k4)
        )

    def __call__(self, x: jax.Array, embedding: jax.Array) -> jax.Array:
        h = self.conv1(jax.nn.silu(self.norm1(x)))
        h = h + self.time(embedding)[:, None, None]
        h = self.conv2(jax.nn.silu(self.norm2(h)))
        return h + (x if self.skip is None else self.skip(x))


class UNet(eqx.Module):
    """``(t, y) -> score`` of the same shape as ``y``; two resolutions (16x16 and 8x8)."""

    time_mlp: eqx.nn.MLP
    stem: eqx.nn.Conv2d
    down_block: ResidualBlock
    downsample: eqx.nn.Conv2d
    middle_block: ResidualBlock
    upsample: eqx.nn.ConvTranspose2d
    up_block: ResidualBlock
    head_norm: eqx.nn.GroupNorm
    head: eqx.nn.Conv2d

    def __init__(self, key: jax.Array) -> None:
        keys = jax.random.split(key, 8)
        low, high = WIDTHS
        self.time_mlp = eqx.nn.MLP(
            EMBEDDING, EMBEDDING, EMBEDDING, depth=1, activation=jax.nn.silu, key=keys[0]
        )
        self.stem = eqx.nn.Conv2d(CHANNELS, low, 3, padding=1, key=keys[1])
        self.down_block = ResidualBlock(low, low, keys[2])
        self.downsample = eqx.nn.Conv2d(low, high, 3, stride=2, padding=1, key=keys[3])
        self.middle_block = ResidualBlock(high, high, keys[4])
        self.upsample = eqx.nn.ConvTranspose2d(high, low, 4, stride=2, padding=1, key=keys[5])
        self.up_block = ResidualBlock(2 * low, low, keys[6])
        self.head_norm = eqx.nn.GroupNorm(GROUPS, low)
        self.head = eqx.nn.Conv2d(low, CHANNELS, 3, padding=1, key=keys[7])

    def __call__(self, t: jax.Array, y: jax.Array) -> jax.Array:
        embedding = self.time_mlp(sinusoidal_embedding(t, EMBEDDING))
        skip = self.down_block(self.stem(y), embedding)  # (8, 16, 16)
        h = self.middle_block(self.downsample(skip), embedding)  # (16, 8, 8)
        h = jnp.concatenate([self.upsample(h), skip], axis=0)  # (16, 16, 16)
        h = self.up_block(h, embedding)  # (8, 16, 16)
        return self.head(jax.nn.silu(self.head_norm(h)))


def reference(model: UNet) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """What the export computes, in JAX: the model vmapped over ``t`` and ``y`` (jitted, so that
    the comparison compiles one program per batch size instead of one per op)."""
    return eqx.filter_jit(eqx.filter_vmap(eqx.nn.inference_mode(model)))


def build() -> UNet:
    # An "rbg" key: eqx initialises each differently shaped weight with its own small compiled
    # program, and those compile ~3x faster than with the default threefry keys.
    return UNet(jax.random.key(0, impl="rbg"))


def main(path: str = "eqx_unet.onnx") -> onnx.ModelProto:
    model = build()
    export_onnx(model, [(), (CHANNELS, SIZE, SIZE)], path, batch=True, opset=21)
    onnx_model = onnx.load(path)
    print(
        verify(
            reference(model), onnx_model, [("B",), ("B", CHANNELS, SIZE, SIZE)], sizes={"B": [1, 3]}
        )
    )
    print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
