"""A small Vision Transformer in Flax NNX, exported with a symbolic batch.

Patch embedding as an ``nnx.Conv`` with ``strides == kernel_size == patch`` (one ONNX ``Conv``),
a learned class token and position embedding, ``depth`` pre-norm blocks of (LayerNorm,
``nnx.MultiHeadAttention``, LayerNorm, MLP with gelu) and a linear head on the class token.
Input ``("B", H, W, C)`` images, channels last. ``ViTConfig.small()`` is CI-sized.

Run ``python -m examples.flax_vit [out.onnx]``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import onnx
from flax import nnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.flax import mode_copy


@dataclass(frozen=True)
class ViTConfig:
    image_size: int = 224
    channels: int = 3
    patch: int = 16
    dim: int = 768
    depth: int = 12
    heads: int = 12
    mlp_dim: int = 3072
    classes: int = 1000
    dropout: float = 0.1

    @classmethod
    def small(cls) -> ViTConfig:
        return cls(
            image_size=16, channels=3, patch=4, dim=32, depth=2, heads=4, mlp_dim=64, classes=10
        )

    @property
    def tokens(self) -> int:
        return (self.image_size // self.patch) ** 2 + 1

    @property
    def images(self) -> list[tuple[object, ...]]:
        return [("B", self.image_size, self.image_size, self.channels)]


class MLP(nnx.Module):
    def __init__(self, config: ViTConfig, *, rngs: nnx.Rngs) -> None:
        self.fc1 = nnx.Linear(config.dim, config.mlp_dim, rngs=rngs)
        self.fc2 = nnx.Linear(config.mlp_dim, config.dim, rngs=rngs)
        self.dropout = nnx.Dropout(config.dropout, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.dropout(self.fc2(self.dropout(nnx.gelu(self.fc1(x)))))


class EncoderBlock(nnx.Module):
    def __init__(self, config: ViTConfig, *, rngs: nnx.Rngs) -> None:
        self.norm1 = nnx.LayerNorm(config.dim, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(
            num_heads=config.heads,
            in_features=config.dim,
            dropout_rate=config.dropout,
            decode=False,
            rngs=rngs,
        )
        self.norm2 = nnx.LayerNorm(config.dim, rngs=rngs)
        self.mlp = MLP(config, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nnx.Module):
    def __init__(self, config: ViTConfig, *, rngs: nnx.Rngs) -> None:
        self.patch_embed = nnx.Conv(
            config.channels,
            config.dim,
            (config.patch, config.patch),
            strides=config.patch,
            padding="VALID",
            rngs=rngs,
        )
        init = nnx.initializers.truncated_normal(0.02)
        self.cls_token = nnx.Param(init(rngs.params(), (1, 1, config.dim)))
        self.pos_embed = nnx.Param(init(rngs.params(), (1, config.tokens, config.dim)))
        self.dropout = nnx.Dropout(config.dropout, rngs=rngs)
        self.blocks = nnx.List([EncoderBlock(config, rngs=rngs) for _ in range(config.depth)])
        self.norm = nnx.LayerNorm(config.dim, rngs=rngs)
        self.head = nnx.Linear(config.dim, config.classes, rngs=rngs)

    def __call__(self, images: jax.Array) -> jax.Array:
        x = self.patch_embed(images)  # B, H/p, W/p, D
        b, h, w, d = x.shape
        x = x.reshape(b, h * w, d)
        cls = jnp.broadcast_to(self.cls_token[...], (b, 1, d))
        x = self.dropout(jnp.concatenate([cls, x], axis=1) + self.pos_embed[...])
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))


def main(path: str = "vit.onnx") -> onnx.ModelProto:
    config = ViTConfig.small()
    model = ViT(config, rngs=nnx.Rngs(0))
    to_onnx(model, config.images, path=path)
    onnx_model = onnx.load(path)
    reference = mode_copy(model)  # inference mode, as exported; the model itself is left as it is
    print(verify(reference, onnx_model, config.images, sizes={"B": [1, 4]}))
    print(f"{len(onnx_model.graph.node)} nodes: {[n.op_type for n in onnx_model.graph.node]}")
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
