"""An Equinox CNN with Conv2d, max pooling and BatchNorm (its statistics in an ``eqx.nn.State``).

The model is made with ``eqx.nn.make_with_state``; the export takes the state, so its running
statistics become weights (``block1.bn.ema_state_index.mean``, ...), and runs in inference
mode: each layer is one ONNX op (Conv, BatchNormalization, MaxPool, Gemm).
Run ``python -m examples.eqx_cnn [out.onnx]``.
"""

from __future__ import annotations

import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import onnx

from jax2onnx_nn import verify
from jax2onnx_nn.equinox import export_onnx


class ConvBlock(eqx.Module):
    conv: eqx.nn.Conv2d
    bn: eqx.nn.BatchNorm
    pool: eqx.nn.MaxPool2d

    def __init__(self, channels_in: int, channels_out: int, key: jax.Array) -> None:
        self.conv = eqx.nn.Conv2d(channels_in, channels_out, 3, padding=1, use_bias=False, key=key)
        self.bn = eqx.nn.BatchNorm(channels_out, axis_name="batch", mode="ema")
        self.pool = eqx.nn.MaxPool2d(2, 2)

    def __call__(self, x: jax.Array, state: eqx.nn.State) -> tuple[jax.Array, eqx.nn.State]:
        x, state = self.bn(self.conv(x), state)
        return self.pool(jax.nn.relu(x)), state


class CNN(eqx.Module):
    block1: ConvBlock
    block2: ConvBlock
    head: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.block1 = ConvBlock(1, 8, k1)
        self.block2 = ConvBlock(8, 16, k2)
        self.head = eqx.nn.Linear(16 * 7 * 7, 10, key=k3)

    def __call__(self, x: jax.Array, state: eqx.nn.State) -> tuple[jax.Array, eqx.nn.State]:
        x, state = self.block1(x, state)
        x, state = self.block2(x, state)
        return self.head(jnp.ravel(x)), state


def trained_state(model: CNN, state: eqx.nn.State, key: jax.Array) -> eqx.nn.State:
    """A few training-mode batches, so the running statistics are not their initial values."""
    for step in range(3):
        images = jax.random.normal(jax.random.fold_in(key, step), (16, 1, 28, 28)) * 2.0 + 0.5
        batched = jax.vmap(model, axis_name="batch", in_axes=(0, None), out_axes=(0, None))
        _, state = batched(images, state)
    return state


def build() -> tuple[CNN, eqx.nn.State]:
    model, state = eqx.nn.make_with_state(CNN)(jax.random.key(0))
    return model, trained_state(model, state, jax.random.key(1))


def reference(model: CNN, state: eqx.nn.State) -> object:
    """What the export computes, in JAX: inference mode, the state shared by the batch."""
    inference = eqx.nn.inference_mode(model)
    return jax.vmap(lambda x: inference(x, state)[0])


def main(path: str = "eqx_cnn.onnx") -> onnx.ModelProto:
    model, state = build()
    export_onnx(model, [(1, 28, 28)], path, batch=True, state=state)
    onnx_model = onnx.load(path)
    print(verify(reference(model, state), onnx_model, [("B", 1, 28, 28)], sizes={"B": [1, 5]}))
    print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
