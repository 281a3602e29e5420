"""A convolutional autoencoder in Flax NNX, exported with a symbolic batch.

Encoder: two stride-2 ``nnx.Conv`` (+ relu) and an ``nnx.Linear`` bottleneck; decoder: an
``nnx.Linear`` and two stride-2 ``nnx.ConvTranspose`` (+ relu, sigmoid at the end). Input
``("B", 16, 16, 1)`` images, channels last; returns the reconstruction and the code.

Run ``python -m examples.flax_autoencoder [out.onnx]``.
"""

from __future__ import annotations

import sys

import jax
import onnx
from flax import nnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.flax import mode_copy

SIZE, CODE = 16, 8


class Encoder(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.conv1 = nnx.Conv(1, 8, (3, 3), strides=2, rngs=rngs)
        self.conv2 = nnx.Conv(8, 16, (3, 3), strides=2, rngs=rngs)
        self.bottleneck = nnx.Linear(16 * (SIZE // 4) ** 2, CODE, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = nnx.relu(self.conv2(nnx.relu(self.conv1(x))))
        return self.bottleneck(x.reshape(x.shape[0], -1))


class Decoder(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.expand = nnx.Linear(CODE, 16 * (SIZE // 4) ** 2, rngs=rngs)
        self.deconv1 = nnx.ConvTranspose(16, 8, (3, 3), strides=2, rngs=rngs)
        self.deconv2 = nnx.ConvTranspose(8, 1, (3, 3), strides=2, rngs=rngs)

    def __call__(self, code: jax.Array) -> jax.Array:
        x = nnx.relu(self.expand(code)).reshape(code.shape[0], SIZE // 4, SIZE // 4, 16)
        return nnx.sigmoid(self.deconv2(nnx.relu(self.deconv1(x))))


class AutoEncoder(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.encoder = Encoder(rngs=rngs)
        self.decoder = Decoder(rngs=rngs)

    def __call__(self, images: jax.Array) -> tuple[jax.Array, jax.Array]:
        code = self.encoder(images)
        return self.decoder(code), code


IMAGES = [("B", SIZE, SIZE, 1)]


def main(path: str = "autoencoder.onnx") -> onnx.ModelProto:
    model = AutoEncoder(rngs=nnx.Rngs(0))
    to_onnx(model, IMAGES, path=path)
    onnx_model = onnx.load(path)
    print(verify(mode_copy(model), onnx_model, IMAGES, sizes={"B": [1, 6]}))
    print(f"{len(onnx_model.graph.node)} nodes: {[n.op_type for n in onnx_model.graph.node]}")
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
