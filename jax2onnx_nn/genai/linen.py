"""A Linen model applied with ``mutable=["cache"]`` as the step :func:`export_decoder` takes:
its ``MultiHeadDotProductAttention(decode=True)`` caches become the contract's cache."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen
from flax.traverse_util import flatten_dict, unflatten_dict

from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.genai.export import CacheSpec
from jax2onnx_nn.genai.tokenwise import Pairs, heads_first, scan_tokens

#: ``apply(variables, input_ids [B, 1], position_ids [B, 1], mask) -> (logits, mutated)``
LinenApply = Callable[[Mapping[str, Any], jax.Array, jax.Array, jax.Array], tuple[jax.Array, Any]]

_KEY, _VALUE, _INDEX = "cached_key", "cached_value", "cache_index"


def linen_step(
    module: linen.Module,
    variables: Mapping[str, Any],
    max_length: int,
    *,
    apply: LinenApply | None = None,
) -> tuple[Callable[..., Any], CacheSpec]:
    """``(step, cache)`` for a Linen model whose ``MultiHeadDotProductAttention`` layers run
    with ``decode=True``, applied with ``mutable=["cache"]``.

    Each attention layer's ``cache`` variables (``cached_key`` / ``cached_value``
    ``[B, max_length, heads, head_dim]``, ``cache_index``) are the contract's ``(key, value)``
    of one layer, in the order of their module paths (``layers_2`` before ``layers_10``),
    transposed to ``[B, heads, max_length, head_dim]`` at the step's boundary: the fixed layout.
    A ``cache_index`` alone in the collection (a position counter, as Flax's examples keep for
    their position embeddings) is set to the contract's ``cache_index`` too. Linen's attention
    takes one token per call in decode mode, so the step applies the model once per token of
    ``input_ids`` (``lax.scan``: one ONNX ``Loop``).

    Args:
        module: the Linen model.
        variables: its variables (``{"params": ...}``; a ``"cache"`` collection given is
            replaced by the step's).
        max_length: the cache's length (prompt plus generated tokens).
        apply: how to apply the model to one token per row: ``apply(variables, input_ids,
            position_ids, mask) -> (logits [B, 1, vocab], mutated)`` with ``mask`` bool
            ``[B, 1, 1, max_length]`` (False at a pad: give it to the attention layers as
            ``mask=``). The default is ``module.apply(variables, input_ids, position_ids,
            mask=mask, mutable=["cache"])``.

    Returns:
        The step (fixed layout, taking ``cache_index`` and ``attention_mask``) and its
        :class:`CacheSpec`.

    Raises:
        SpecError: the model keeps no cache (no attention with ``decode=True``), the layers'
            heads or head sizes differ, or the cache holds a variable the contract cannot
            carry.

    Example::

        step, cache = linen_step(model, {"params": params}, max_length=64)
        export_decoder(step, "out", cache=cache, num_heads=4, eos_token_id=2, pad_token_id=0)
    """
    if apply is None:
        apply = _default_apply(module)
    kept = {name: tree for name, tree in variables.items() if name != "cache"}
    shapes = _cache_shapes(module, kept, apply, max_length)
    layers = _attention_paths(module, shapes)
    first = shapes[layers[0] + (_KEY,)]
    spec = CacheSpec(
        num_layers=len(layers),
        kv_heads=int(first.shape[2]),
        head_dim=int(first.shape[3]),
        max_length=max_length,
        dtype=first.dtype,
    )
    counters = [path for path in shapes if path[-1] == _INDEX and path[:-1] not in layers]

    def one_token(
        carry: tuple[Pairs, jax.Array], ids: jax.Array, positions: jax.Array, mask: jax.Array
    ) -> tuple[jax.Array, tuple[Pairs, jax.Array]]:
        cache, index = carry
        flat: dict[tuple[str, ...], jax.Array] = {path: index for path in counters}
        for path, (key, value) in zip(layers, cache, strict=True):
            flat.update({path + (_KEY,): key, path + (_VALUE,): value, path + (_INDEX,): index})
        logits, mutated = apply({**kept, "cache": unflatten_dict(flat)}, ids, positions, mask)
        written = flatten_dict(dict(mutated)["cache"])
        pairs = [(written[path + (_KEY,)], written[path + (_VALUE,)]) for path in layers]
        return logits, (pairs, index + 1)

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

    step.__qualname__ = f"linen_step({type(module).__name__})"
    return step, spec


def _default_apply(module: linen.Module) -> LinenApply:
    def apply(
        variables: Mapping[str, Any], ids: jax.Array, positions: jax.Array, mask: jax.Array
    ) -> tuple[jax.Array, Any]:
        return module.apply(variables, ids, positions, mask=mask, mutable=["cache"])  # type: ignore[return-value]

    return apply


def _cache_shapes(
    module: linen.Module, variables: Mapping[str, Any], apply: LinenApply, max_length: int
) -> dict[tuple[str, ...], jax.ShapeDtypeStruct]:
    """The cache collection Linen creates for a ``max_length`` input (its decode-mode
    attention sizes the cache by the first call's keys), flattened by path."""
    ids = jnp.zeros((1, max_length), jnp.int32)
    mask = jnp.ones((1, 1, 1, max_length), bool)
    _, mutated = jax.eval_shape(lambda: apply(variables, ids, ids, mask))
    cache = dict(mutated).get("cache")
    if not cache:
        raise SpecError(
            f"{type(module).__name__} applied with mutable=['cache'] created no cache: build "
            "its attention as linen.MultiHeadDotProductAttention(decode=True) (linen_step "
            "carries that cache), or write the model as the contract's step and export it"
        )
    return {tuple(path): leaf for path, leaf in flatten_dict(dict(cache)).items()}


def _attention_paths(
    module: linen.Module, shapes: Mapping[tuple[str, ...], jax.ShapeDtypeStruct]
) -> list[tuple[str, ...]]:
    """The attention layers' paths (the parents of ``cached_key``), in natural order,
    checked against what the contract expresses."""
    name = type(module).__name__
    layers = sorted((path[:-1] for path in shapes if path[-1] == _KEY), key=_natural)
    if not layers:
        raise SpecError(
            f"{name}'s cache holds no cached_key: linen_step carries the caches of "
            "linen.MultiHeadDotProductAttention(decode=True) layers"
        )
    owned = {path + (leaf,) for path in layers for leaf in (_KEY, _VALUE, _INDEX)}
    for path, leaf in shapes.items():
        if path in owned or path[-1] == _INDEX:
            continue
        raise SpecError(
            f"{name}'s cache holds {'/'.join(path)} {leaf.dtype}{list(leaf.shape)}, not an "
            "attention layer's cached_key / cached_value / cache_index: the contract carries "
            "only the key/value cache between steps. Compute it from position_ids or the mask"
        )
    first = shapes[layers[0] + (_KEY,)].shape
    for path in layers:
        shape = shapes[path + (_KEY,)].shape
        if len(shape) != 4 or shape[2:] != first[2:]:
            raise SpecError(
                f"{name}'s cache {'/'.join(path)}/cached_key is {list(shape)}, "
                f"{'/'.join(layers[0])}/cached_key {list(first)}: the contract needs "
                "[B, max_length, heads, head_dim] with one heads and head_dim in every layer"
            )
    return layers


def _natural(path: tuple[str, ...]) -> list[Any]:
    """A sort key that orders ``layers_2`` before ``layers_10``."""
    return [
        int(part) if part.isdigit() else part
        for name in path
        for part in re.split(r"(\d+)", name)
        if part
    ]
