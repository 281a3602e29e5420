"""A batch of prompts of different lengths in onnxruntime-genai 0.18, which does not mask pads.

onnxruntime-genai 0.18 feeds a left-padded batch with ``attention_mask`` all ones and
``position_ids`` ``0..S-1`` for every row (observed with ``og.set_log_options(enabled=True,
model_input_values=True)``; its sources since 0.9.1 would mask leading pads, the released
binary does not), and each decode step with ones and the same position for every row. The
graph therefore has to find the pads itself: :func:`padded_batch_step` marks them in the
cache it returns (the first element of layer 0's key at a pad slot is NaN, a value no real key
holds), reads the marks back from the past it is given, and gives the step the mask and
positions the contract defines (0 at a pad, a row's real tokens counted from 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax2onnx_nn.genai.export import CacheSpec, step_keywords

Pairs = list[tuple[jax.Array, jax.Array]]


def padded_batch_step(
    step: Callable[..., Any], cache: CacheSpec, *, pad_token_id: int
) -> Callable[..., Any]:
    """``step`` made to serve a left-padded batch however the mask and positions are fed.

    A prompt's leading ``pad_token_id`` tokens are pads; the wrapped step masks them and
    counts each row's positions from its first real token, from ``input_ids`` on the prompt
    and from marks it keeps in the cache afterwards (NaN in element 0 of layer 0's key at a
    pad slot; the step never sees them: they are zeroed before it runs). Fed what the contract
    says (``generate_onnx``), it computes what ``step`` computes; fed what onnxruntime-genai
    0.18 feeds (all-ones mask, positions ``0..S-1``), it computes the same.

    Args:
        step: a fixed-layout step taking ``cache_index`` and ``attention_mask``.
        cache: its :class:`CacheSpec`.
        pad_token_id: the pad id (``export_decoder``'s ``pad_token_id``).

    Returns:
        The step to give :func:`export_decoder` (same signature).

    Raises:
        ValueError: a growing-layout cache, or a step without ``attention_mask``.

    Example::

        export_decoder(padded_batch_step(model, cache, pad_token_id=0), "out", cache=cache,
                       num_heads=4, eos_token_id=2, pad_token_id=0)
    """
    if cache.layout != "fixed" or "attention_mask" not in step_keywords(step, cache.layout):
        raise ValueError(
            "padded_batch_step needs a fixed-layout step (CacheSpec(layout='fixed')) that "
            "takes attention_mask: the pads are masked through it"
        )

    def padded(
        input_ids: jax.Array,
        position_ids: jax.Array,
        cache: Pairs,
        *,
        cache_index: jax.Array,
        attention_mask: jax.Array,
    ) -> tuple[jax.Array, Pairs]:
        del position_ids  # recomputed: onnxruntime-genai 0.18 counts pads
        first_key = cache[0][0]
        slots = jnp.arange(first_key.shape[2])
        cached = (slots < cache_index)[None, :] & (attention_mask > 0)
        past_pads = cached & jnp.isnan(first_key[:, 0, :, 0])
        past_real = cached & ~past_pads
        started = jnp.any(past_real, axis=1, keepdims=True)
        new_pads = (jnp.cumprod(input_ids == pad_token_id, axis=1) > 0) & ~started
        pads = past_pads | lax.dynamic_update_slice(
            jnp.zeros_like(past_pads), new_pads, (jnp.int32(0), jnp.asarray(cache_index, jnp.int32))
        )
        real_new = (~new_pads).astype(jnp.int32)
        before = jnp.sum(past_real, axis=1, keepdims=True, dtype=jnp.int32)
        positions = jnp.where(new_pads, 0, before + jnp.cumsum(real_new, axis=1) - 1)
        mask = jnp.where(pads, 0, attention_mask).astype(attention_mask.dtype)
        given = [(jnp.where(jnp.isnan(first_key), 0.0, first_key), cache[0][1]), *cache[1:]]
        logits, new = step(
            input_ids,
            positions.astype(jnp.int32),
            given,
            cache_index=cache_index,
            attention_mask=mask,
        )
        key, value = new[0]
        marks = pads[:, None, :, None] & (jnp.arange(key.shape[3]) == 0)
        return logits, [(jnp.where(marks, jnp.nan, key).astype(key.dtype), value), *new[1:]]

    padded.__qualname__ = getattr(step, "__qualname__", type(step).__name__)
    return padded
