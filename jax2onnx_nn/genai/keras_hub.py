"""A keras-hub CausalLM's ``call_with_cache`` as the step :func:`export_decoder` takes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jax2onnx_nn.genai.export import CacheSpec


def keras_hub_step(causal_lm: Any, max_length: int) -> tuple[Callable[..., Any], CacheSpec]:
    """``(step, cache)`` for a keras-hub CausalLM on the JAX backend whose ``call_with_cache``
    keeps one ``[B, layers, 2, max_length, kv_heads, head_dim]`` cache (Gemma, Llama,
    Mistral, ...): the step moves the contract's ``(key, value)`` per layer into that tensor
    and back, and writes at ``cache_index``.

    keras-hub computes positions and the causal mask from ``cache_update_index``: the step
    takes no ``attention_mask`` and ignores ``position_ids``, so it serves prompts of one
    length per batch (no left padding).

    Example::

        step, cache = keras_hub_step(keras_hub.models.GemmaCausalLM(backbone), 64)
        export_decoder(step, "out", cache=cache, num_heads=backbone.num_query_heads, ...)
    """
    backbone = causal_lm.backbone
    spec = CacheSpec(
        num_layers=int(backbone.num_layers),
        kv_heads=int(backbone.num_key_value_heads),
        head_dim=int(backbone.head_dim),
        max_length=max_length,
    )

    def step(
        input_ids: jax.Array,
        position_ids: jax.Array,
        cache: list[tuple[jax.Array, jax.Array]],
        *,
        cache_index: jax.Array,
    ) -> tuple[jax.Array, list[tuple[jax.Array, jax.Array]]]:
        del position_ids  # keras-hub counts positions from cache_update_index
        # [B, kv_heads, T, D] per (layer, key/value) -> [B, layers, 2, T, kv_heads, D]
        stacked = jnp.stack([jnp.stack(pair, axis=1) for pair in cache], axis=1)
        logits, _, new = causal_lm.call_with_cache(
            input_ids, stacked.transpose(0, 1, 2, 4, 3, 5), cache_index
        )
        new = jnp.asarray(new).transpose(0, 1, 2, 4, 3, 5)
        return logits, [(new[:, i, 0], new[:, i, 1]) for i in range(spec.num_layers)]

    return step, spec
