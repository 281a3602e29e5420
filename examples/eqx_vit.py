"""A small Vision Transformer in Equinox, as in the Equinox documentation's ViT example.

Patches come from an ``eqx.nn.Conv2d`` with ``kernel_size == stride == patch`` (one ONNX
``Conv``: a linear map of each patch) flattened to a ``(patches, width)`` sequence; a learned
class token is put in front and a learned position embedding added (both plain arrays of the
module, so weights of the graph). Then ``DEPTH`` pre-norm blocks (``eqx.nn.LayerNorm``,
``eqx.nn.MultiheadAttention``, LayerNorm, an MLP of two ``eqx.nn.Linear`` with gelu), each
with ``eqx.nn.Dropout``, and a LayerNorm + Linear head on the class token.

The module takes one image ``(C, H, W)``; the export is ``jax.vmap`` of it over a symbolic
batch ``"B"``, in inference mode: the dropouts are identities and leave no node, each
LayerNorm is one ``LayerNormalization``, each attention core MatMul / Div / Softmax / MatMul.
Run ``python -m examples.eqx_vit [out.onnx]``.
"""

from __future__ import annotations

import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import onnx

from jax2onnx_nn import verify
from jax2onnx_nn.equinox import export_onnx

CHANNELS, IMAGE, PATCH = 3, 32, 8
WIDTH, HEADS, MLP_WIDTH, DEPTH, CLASSES = 32, 4, 64, 2, 10
DROPOUT = 0.1
PATCHES = (IMAGE // PATCH) ** 2


class PatchEmbedding(eqx.Module):
    conv: eqx.nn.Conv2d

    def __init__(self, key: jax.Array) -> None:
        self.conv = eqx.nn.Conv2d(CHANNELS, WIDTH, PATCH, stride=PATCH, key=key)

    def __call__(self, image: jax.Array) -> jax.Array:
        """(C, H, W) -> (patches, width): each patch to one vector, in row-major order."""
        return self.conv(image).reshape(WIDTH, -1).T


class AttentionBlock(eqx.Module):
    attention_norm: eqx.nn.LayerNorm
    attention: eqx.nn.MultiheadAttention
    mlp_norm: eqx.nn.LayerNorm
    mlp_in: eqx.nn.Linear
    mlp_out: eqx.nn.Linear
    dropout1: eqx.nn.Dropout
    dropout2: eqx.nn.Dropout

    def __init__(self, key: jax.Array) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.attention_norm = eqx.nn.LayerNorm(WIDTH)
        self.attention = eqx.nn.MultiheadAttention(HEADS, WIDTH, dropout_p=DROPOUT, key=k1)
        self.mlp_norm = eqx.nn.LayerNorm(WIDTH)
        self.mlp_in = eqx.nn.Linear(WIDTH, MLP_WIDTH, key=k2)
        self.mlp_out = eqx.nn.Linear(MLP_WIDTH, WIDTH, key=k3)
        self.dropout1 = eqx.nn.Dropout(DROPOUT)
        self.dropout2 = eqx.nn.Dropout(DROPOUT)

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        k1, k2, k3 = (None, None, None) if key is None else jax.random.split(key, 3)
        h = jax.vmap(self.attention_norm)(x)
        x = x + self.attention(h, h, h, key=k1)
        h = jax.nn.gelu(jax.vmap(self.mlp_in)(jax.vmap(self.mlp_norm)(x)))
        h = jax.vmap(self.mlp_out)(self.dropout1(h, key=k2))
        return x + self.dropout2(h, key=k3)


class VisionTransformer(eqx.Module):
    patch_embedding: PatchEmbedding
    cls_token: jax.Array
    positional_embedding: jax.Array
    dropout: eqx.nn.Dropout
    blocks: list[AttentionBlock]
    head_norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k_patch, k_cls, k_pos, k_head, *k_blocks = jax.random.split(key, 4 + DEPTH)
        self.patch_embedding = PatchEmbedding(k_patch)
        self.cls_token = jax.random.normal(k_cls, (1, WIDTH))
        self.positional_embedding = jax.random.normal(k_pos, (PATCHES + 1, WIDTH))
        self.dropout = eqx.nn.Dropout(DROPOUT)
        self.blocks = [AttentionBlock(k) for k in k_blocks]
        self.head_norm = eqx.nn.LayerNorm(WIDTH)
        self.head = eqx.nn.Linear(WIDTH, CLASSES, key=k_head)

    def __call__(self, image: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        """Logits of one (C, H, W) image; ``key`` only for dropout in training mode."""
        keys = [None] * (DEPTH + 1) if key is None else list(jax.random.split(key, DEPTH + 1))
        x = jnp.concatenate([self.cls_token, self.patch_embedding(image)], axis=0)
        x = self.dropout(x + self.positional_embedding, key=keys[0])
        for block, block_key in zip(self.blocks, keys[1:], strict=True):
            x = block(x, key=block_key)
        return self.head(self.head_norm(x[0]))


def main(path: str = "eqx_vit.onnx") -> onnx.ModelProto:
    vit = VisionTransformer(jax.random.key(0))
    export_onnx(vit, [(CHANNELS, IMAGE, IMAGE)], path, batch=True)
    onnx_model = onnx.load(path)
    reference = jax.vmap(eqx.nn.inference_mode(vit))
    print(verify(reference, onnx_model, [("B", CHANNELS, IMAGE, IMAGE)], sizes={"B": [1, 3]}))
    print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
