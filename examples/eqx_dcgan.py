"""A DCGAN in Equinox: a Generator (latent vector -> image) and a Discriminator (image -> P(real)).

The generator reshapes the latent vector to (latent, 1, 1) and grows it with
``eqx.nn.ConvTranspose2d`` (4x4, then stride 2 to 8x8 and 16x16), each followed by
``eqx.nn.BatchNorm`` and relu, with tanh at the end. The discriminator mirrors it with strided
``eqx.nn.Conv2d``, BatchNorm and leaky relu, and a sigmoid at the end. Both are
``eqx.nn.Sequential`` stacks whose BatchNorm layers keep their running statistics in an
``eqx.nn.State`` (``eqx.nn.make_with_state``), in "ema" mode (what eqx's default "legacy" means).

Each network is exported on its own, in inference mode with its state, so the statistics become
weights (``layers.layers.1.ema_state_index.mean``, ...) and every layer is one ONNX op over the
symbolic batch: ConvTranspose / Conv, BatchNormalization, Relu / LeakyRelu, Tanh / Sigmoid.
Run ``python -m examples.eqx_dcgan [generator.onnx [discriminator.onnx]]``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import onnx

from jax2onnx_nn import verify
from jax2onnx_nn.equinox import export_onnx

LATENT, WIDTH, CHANNELS, SIZE = 16, 8, 1, 16


def _batch_norm(channels: int) -> eqx.nn.BatchNorm:
    return eqx.nn.BatchNorm(channels, axis_name="batch", mode="ema")


class Generator(eqx.Module):
    layers: eqx.nn.Sequential

    def __init__(self, key: jax.Array) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        relu = eqx.nn.Lambda(jax.nn.relu)
        self.layers = eqx.nn.Sequential(
            [
                eqx.nn.ConvTranspose2d(
                    LATENT, 4 * WIDTH, 4, stride=1, padding=0, use_bias=False, key=k1
                ),  # 4x4
                _batch_norm(4 * WIDTH),
                relu,
                eqx.nn.ConvTranspose2d(
                    4 * WIDTH, 2 * WIDTH, 4, stride=2, padding=1, use_bias=False, key=k2
                ),  # 8x8
                _batch_norm(2 * WIDTH),
                relu,
                eqx.nn.ConvTranspose2d(
                    2 * WIDTH, CHANNELS, 4, stride=2, padding=1, use_bias=False, key=k3
                ),  # 16x16
                eqx.nn.Lambda(jax.nn.tanh),
            ]
        )

    def __call__(self, z: jax.Array, state: eqx.nn.State) -> tuple[jax.Array, eqx.nn.State]:
        return self.layers(z.reshape(LATENT, 1, 1), state)


class Discriminator(eqx.Module):
    layers: eqx.nn.Sequential

    def __init__(self, key: jax.Array) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        leaky_relu = eqx.nn.Lambda(functools.partial(jax.nn.leaky_relu, negative_slope=0.2))
        self.layers = eqx.nn.Sequential(
            [
                eqx.nn.Conv2d(
                    CHANNELS, WIDTH, 4, stride=2, padding=1, use_bias=False, key=k1
                ),  # 8x8
                leaky_relu,
                eqx.nn.Conv2d(
                    WIDTH, 2 * WIDTH, 4, stride=2, padding=1, use_bias=False, key=k2
                ),  # 4x4
                _batch_norm(2 * WIDTH),
                leaky_relu,
                eqx.nn.Conv2d(2 * WIDTH, 1, 4, stride=1, padding=0, use_bias=False, key=k3),  # 1x1
            ]
        )

    def __call__(self, image: jax.Array, state: eqx.nn.State) -> tuple[jax.Array, eqx.nn.State]:
        logit, state = self.layers(image, state)
        return jax.nn.sigmoid(jnp.reshape(logit, ())), state


def _batched(model: eqx.Module) -> Callable[..., Any]:
    """A training-mode batch: BatchNorm averages over the vmapped axis named "batch"."""
    return jax.vmap(model, axis_name="batch", in_axes=(0, None), out_axes=(0, None))


@eqx.filter_jit
def _training_step(
    generator: Generator,
    g_state: eqx.nn.State,
    discriminator: Discriminator,
    d_state: eqx.nn.State,
    latents: jax.Array,
) -> tuple[eqx.nn.State, eqx.nn.State]:
    images, g_state = _batched(generator)(latents, g_state)
    _, d_state = _batched(discriminator)(images, d_state)
    return g_state, d_state


def trained_states(
    generator: Generator,
    g_state: eqx.nn.State,
    discriminator: Discriminator,
    d_state: eqx.nn.State,
    key: jax.Array,
) -> tuple[eqx.nn.State, eqx.nn.State]:
    """Two training-mode batches through both networks (the discriminator sees the generated
    images), so that the running statistics are not their initial values."""
    for step in range(2):
        latents = jax.random.normal(jax.random.fold_in(key, step), (8, LATENT))
        g_state, d_state = _training_step(generator, g_state, discriminator, d_state, latents)
    return g_state, d_state


def build() -> tuple[Generator, eqx.nn.State, Discriminator, eqx.nn.State]:
    # An "rbg" key: eqx initialises each differently shaped weight with its own small compiled
    # program, and those compile ~3x faster than with the default threefry keys.
    g_key, d_key, data_key = jax.random.split(jax.random.key(0, impl="rbg"), 3)
    generator, g_state = eqx.nn.make_with_state(Generator)(g_key)
    discriminator, d_state = eqx.nn.make_with_state(Discriminator)(d_key)
    g_state, d_state = trained_states(generator, g_state, discriminator, d_state, data_key)
    return generator, g_state, discriminator, d_state


def reference(
    model: Generator | Discriminator, state: eqx.nn.State
) -> Callable[[jax.Array], jax.Array]:
    """What an export computes, in JAX: inference mode, the state shared by the batch."""
    inference = eqx.nn.inference_mode(model)

    @eqx.filter_jit  # one compile per batch size, not one per op
    def run(x: jax.Array) -> jax.Array:
        return jax.vmap(lambda example: inference(example, state)[0])(x)

    return run


def main(
    generator_path: str = "eqx_dcgan_generator.onnx",
    discriminator_path: str = "eqx_dcgan_discriminator.onnx",
) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    generator, g_state, discriminator, d_state = build()
    export_onnx(generator, [(LATENT,)], generator_path, batch=True, state=g_state)
    g_model = onnx.load(generator_path)
    export_onnx(
        discriminator, [(CHANNELS, SIZE, SIZE)], discriminator_path, batch=True, state=d_state
    )
    d_model = onnx.load(discriminator_path)
    print(verify(reference(generator, g_state), g_model, [("B", LATENT)], sizes={"B": [1, 3]}))
    print(
        verify(
            reference(discriminator, d_state),
            d_model,
            [("B", CHANNELS, SIZE, SIZE)],
            sizes={"B": [1, 3]},
        )
    )
    for onnx_model in (g_model, d_model):
        print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return g_model, d_model


if __name__ == "__main__":
    main(*sys.argv[1:])
