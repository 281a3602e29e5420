"""An nnx model whose attention runs with ``decode=True`` as the step :func:`export_decoder`
takes: its ``nnx.MultiHeadAttention`` caches become the contract's cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.genai.export import CacheSpec
from jax2onnx_nn.genai.tokenwise import Pairs, heads_first, scan_tokens

#: ``call(model, input_ids [B, 1], position_ids [B, 1], mask [B, 1, 1, slots]) -> logits``
NnxCall = Callable[[nnx.Module, jax.Array, jax.Array, jax.Array], jax.Array]


def _default_call(
    model: nnx.Module, input_ids: jax.Array, position_ids: jax.Array, mask: jax.Array
) -> jax.Array:
    return model(input_ids, position_ids, mask=mask)  # type: ignore[operator]


def nnx_step(
    model: nnx.Module, max_length: int, *, call: NnxCall = _default_call
) -> tuple[Callable[..., Any], CacheSpec]:
    """``(step, cache)`` for an nnx model whose ``nnx.MultiHeadAttention`` layers run with
    ``decode=True``.

    Each attention layer's ``nnx.Cache`` variables (``cached_key`` / ``cached_value``
    ``[B, max_length, kv_heads, head_dim]``, ``cache_index``) are the contract's
    ``(key, value)`` of one layer, in the order ``nnx.iter_graph`` meets the layers, transposed
    to ``[B, kv_heads, max_length, head_dim]`` at the step's boundary: the fixed layout.
    ``nnx.MultiHeadAttention`` takes one token per call in decode mode, so the step runs
    ``call`` once per token of ``input_ids`` (``lax.scan``: one ONNX ``Loop``), each call
    writing at the layers' ``cache_index``. The model need not have called ``init_cache``:
    the step sets every cache variable from its arguments.

    Args:
        model: the nnx model; its attention layers built with ``decode=True`` (or set with
            ``nnx.view(model, decode=True)``).
        max_length: the cache's length (prompt plus generated tokens).
        call: how to run the model on one token per row: ``call(model, input_ids,
            position_ids, mask)`` with ``input_ids`` / ``position_ids`` int32 ``[B, 1]`` and
            ``mask`` bool ``[B, 1, 1, max_length]`` (False at a pad: pass it to the attention
            layers as ``mask=``), returning the logits ``[B, 1, vocab]``. The default calls
            ``model(input_ids, position_ids, mask=mask)``.

    Returns:
        The step (fixed layout, taking ``cache_index`` and ``attention_mask``) and its
        :class:`CacheSpec`.

    Raises:
        SpecError: the model has no ``nnx.MultiHeadAttention``, one runs without
            ``decode=True``, the layers' kv heads or head sizes differ, or the model keeps
            another ``nnx.Cache`` the contract cannot carry.

    Example::

        step, cache = nnx_step(model, max_length=64)
        export_decoder(step, "out", cache=cache, num_heads=4, eos_token_id=2, pad_token_id=0)
    """
    layers = _attention_layers(model)
    first = layers[0][1]
    spec = CacheSpec(
        num_layers=len(layers),
        kv_heads=int(first.num_kv_heads),
        head_dim=int(first.head_dim),
        max_length=max_length,
        dtype=first.dtype or jnp.float32,
    )
    graphdef, state = nnx.split(model)
    paths = [path for path, _ in layers]

    def one_token(
        carry: tuple[Pairs, jax.Array], ids: jax.Array, positions: jax.Array, mask: jax.Array
    ) -> tuple[jax.Array, tuple[Pairs, jax.Array]]:
        cache, index = carry
        # a module merged inside the loop's body, so its variables belong to this trace
        merged = nnx.merge(graphdef, state)
        attentions = [_module_at(merged, path) for path in paths]
        for attention, (key, value) in zip(attentions, cache, strict=True):
            attention.cached_key = nnx.Cache(key)
            attention.cached_value = nnx.Cache(value)
            attention.cache_index = nnx.Cache(index)
        logits = call(merged, ids, positions, mask)
        written = [(a.cached_key[...], a.cached_value[...]) for a in attentions]
        return logits, (written, index + 1)

    def step(
        input_ids: jax.Array,
        position_ids: jax.Array,
        cache: Pairs,
        *,
        cache_index: jax.Array,
        attention_mask: jax.Array,
    ) -> tuple[jax.Array, Pairs]:
        carry = (heads_first(cache), jnp.asarray(cache_index, jnp.int32))
        logits, (written, _) = scan_tokens(
            one_token, carry, input_ids, position_ids, attention_mask
        )
        return logits, heads_first(written)

    step.__qualname__ = f"nnx_step({type(model).__name__})"
    return step, spec


def _attention_layers(model: nnx.Module) -> list[tuple[tuple[Any, ...], nnx.MultiHeadAttention]]:
    """The model's ``nnx.MultiHeadAttention`` layers (path, module), checked against what the
    contract expresses."""
    layers: list[tuple[tuple[Any, ...], nnx.MultiHeadAttention]] = []
    caches: list[tuple[Any, ...]] = []
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.MultiHeadAttention):
            layers.append((tuple(path), node))
        elif isinstance(node, nnx.Cache):
            caches.append(tuple(path))
    name = type(model).__name__
    if not layers:
        raise SpecError(
            f"{name} has no nnx.MultiHeadAttention: nnx_step carries the caches of "
            "nnx.MultiHeadAttention(decode=True) layers; write a model of another attention as "
            "the contract's step (step(input_ids, position_ids, cache, *, cache_index, "
            "attention_mask)) and export it directly"
        )
    for path, layer in layers:
        if layer.decode is not True:
            raise SpecError(
                f"{name}.{_dotted(path)} is an nnx.MultiHeadAttention with decode="
                f"{layer.decode!r}: it keeps no cache. Build it with decode=True, or pass "
                "nnx.view(model, decode=True) to nnx_step"
            )
        if (layer.num_kv_heads, layer.head_dim) != (
            layers[0][1].num_kv_heads,
            layers[0][1].head_dim,
        ):
            raise SpecError(
                f"{name}.{_dotted(path)} has {layer.num_kv_heads} kv heads of size "
                f"{layer.head_dim}, {name}.{_dotted(layers[0][0])} "
                f"{layers[0][1].num_kv_heads} of size {layers[0][1].head_dim}: onnxruntime-genai "
                "allocates one cache shape for every layer"
            )
    owned = {path + (attr,) for path, _ in layers for attr in _CACHE_ATTRIBUTES}
    foreign = [path for path in caches if path not in owned]
    if foreign:
        raise SpecError(
            f"{name}.{_dotted(foreign[0])} is an nnx.Cache outside the attention layers' "
            "cached_key / cached_value / cache_index: the contract carries only the key/value "
            "cache between steps. Compute it from position_ids or the mask instead"
        )
    return layers


_CACHE_ATTRIBUTES = ("cached_key", "cached_value", "cache_index")


def _module_at(root: Any, path: tuple[Any, ...]) -> Any:
    node = root
    for part in path:
        node = node[part] if isinstance(part, int) else getattr(node, part)
    return node


def _dotted(path: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in path)
