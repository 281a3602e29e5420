"""GPT-2 in Flax NNX, nanoGPT layout, exported with symbolic batch and sequence length.

Token and position ``Embed``, ``n_layer`` blocks of (LayerNorm, causal self-attention, LayerNorm,
MLP with tanh-gelu), a final LayerNorm and a head tied to the token embedding (or untied). The
input is ``("B", "T")`` int32 tokens, ``T <= block_size``. ``GPTConfig.gpt2()`` is the 124M
configuration; ``GPTConfig.small()`` a CI-sized one. With ``auto_functions=True`` each block
class becomes one ONNX function.

Run ``python -m examples.flax_gpt2 [out.onnx] [small|gpt2]``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import onnx
from flax import nnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.flax import mode_copy


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50257
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    tied_head: bool = True

    @classmethod
    def gpt2(cls) -> GPTConfig:
        return cls()

    @classmethod
    def small(cls, **overrides: object) -> GPTConfig:
        return cls(
            **{**dict(block_size=32, vocab_size=97, n_layer=2, n_head=2, n_embd=32), **overrides}
        )


class CausalSelfAttention(nnx.Module):
    def __init__(self, config: GPTConfig, *, rngs: nnx.Rngs) -> None:
        self.c_attn = nnx.Linear(config.n_embd, 3 * config.n_embd, use_bias=config.bias, rngs=rngs)
        self.c_proj = nnx.Linear(config.n_embd, config.n_embd, use_bias=config.bias, rngs=rngs)
        self.resid_dropout = nnx.Dropout(config.dropout, rngs=rngs)
        self.n_head = config.n_head

    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, c = x.shape
        q, k, v = jnp.split(self.c_attn(x), 3, axis=-1)
        heads = (b, t, self.n_head, c // self.n_head)
        y = jax.nn.dot_product_attention(
            q.reshape(heads), k.reshape(heads), v.reshape(heads), is_causal=True
        )
        return self.resid_dropout(self.c_proj(y.reshape(b, t, c)))


class MLP(nnx.Module):
    def __init__(self, config: GPTConfig, *, rngs: nnx.Rngs) -> None:
        self.c_fc = nnx.Linear(config.n_embd, 4 * config.n_embd, use_bias=config.bias, rngs=rngs)
        self.c_proj = nnx.Linear(4 * config.n_embd, config.n_embd, use_bias=config.bias, rngs=rngs)
        self.dropout = nnx.Dropout(config.dropout, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.dropout(self.c_proj(nnx.gelu(self.c_fc(x), approximate=True)))


class Block(nnx.Module):
    def __init__(self, config: GPTConfig, *, rngs: nnx.Rngs) -> None:
        self.ln_1 = nnx.LayerNorm(config.n_embd, use_bias=config.bias, rngs=rngs)
        self.attn = CausalSelfAttention(config, rngs=rngs)
        self.ln_2 = nnx.LayerNorm(config.n_embd, use_bias=config.bias, rngs=rngs)
        self.mlp = MLP(config, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nnx.Module):
    def __init__(self, config: GPTConfig, *, rngs: nnx.Rngs) -> None:
        self.config = config
        self.wte = nnx.Embed(config.vocab_size, config.n_embd, rngs=rngs)
        self.wpe = nnx.Embed(config.block_size, config.n_embd, rngs=rngs)
        self.drop = nnx.Dropout(config.dropout, rngs=rngs)
        self.h = nnx.List([Block(config, rngs=rngs) for _ in range(config.n_layer)])
        self.ln_f = nnx.LayerNorm(config.n_embd, use_bias=config.bias, rngs=rngs)
        self.lm_head = (
            None
            if config.tied_head
            else nnx.Linear(config.n_embd, config.vocab_size, use_bias=False, rngs=rngs)
        )

    def __call__(self, tokens: jax.Array) -> jax.Array:
        positions = jnp.arange(tokens.shape[1])
        x = self.drop(self.wte(tokens) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return self.wte.attend(x) if self.lm_head is None else self.lm_head(x)


TOKENS = [(("B", "T"), "int32")]


def main(path: str = "gpt2.onnx", size: str = "small") -> onnx.ModelProto:
    """``python -m examples.flax_gpt2 [out.onnx] [small|gpt2]``: the CI-sized 2-layer model by
    default, the 124M GPT-2 configuration with ``gpt2``."""
    config = GPTConfig.gpt2() if size == "gpt2" else GPTConfig.small()
    model = GPT(config, rngs=nnx.Rngs(0))
    start = time.perf_counter()
    to_onnx(model, TOKENS, path=path, auto_functions=True)
    onnx_model = onnx.load(path)
    print(
        f"export: {time.perf_counter() - start:.2f} s, {len(onnx_model.graph.node)} nodes, "
        f"functions {[f.name for f in onnx_model.functions]}"
    )
    reference = mode_copy(model)  # inference mode, as exported; the model itself is left as it is
    print(
        verify(reference, onnx_model, TOKENS, sizes={"B": [1, 2], "T": [config.block_size // 4, 7]})
    )
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
