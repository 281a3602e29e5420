"""export_decoder: a decode step with its KV cache -> a folder onnxruntime-genai generates with.

The step is the user's JAX function; the graph around it speaks onnxruntime-genai's (and
optimum's) language: inputs ``input_ids``, ``attention_mask``, ``position_ids``,
``past_key_values.{i}.key/.value``, outputs ``logits``, ``present.{i}.key/.value``, batch,
sequence and past length symbolic, one graph for prefill and decode. At the graph boundary the
cache always grows (``past`` ``[B, kv_heads, P, head_dim]`` in, ``present`` ``[B, kv_heads,
P + S, head_dim]`` out, what onnxruntime-genai feeds on every device without buffer sharing);
a step over a fixed buffer gets its buffer padded from ``past`` and returns the first ``P + S``
slots of what it wrote.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx_nn.core.api import to_onnx
from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.core.trace_errors import user_frame
from jax2onnx_nn.genai.opset import decoder_opset

BATCH = "batch_size"
SEQUENCE = "sequence_length"
PAST = "past_sequence_length"
TOTAL = "total_sequence_length"  # the attention mask's length with a shared buffer
BUFFER = "max_length"  # the shared buffer's length: the generation's max_length
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)


@dataclass(frozen=True)
class CacheSpec:
    """The KV cache a decode step takes: one ``(key, value)`` per layer.

    Args:
        num_layers: layers (pairs in the cache list).
        kv_heads: key/value heads (fewer than the query heads with grouped-query attention).
        head_dim: size of one head.
        max_length: the longest sequence (prompt and generated tokens) the model serves; the
            buffer length of the ``"fixed"`` layout, the context length in both.
        layout: ``"fixed"``: each key/value is a ``[B, kv_heads, max_length, head_dim]`` buffer
            the step writes the new tokens into at ``cache_index`` (``lax.dynamic_update_slice``),
            as JAX models keep their cache; ``"growing"``: ``[B, kv_heads, P, head_dim]`` in,
            the step returns ``[B, kv_heads, P + S, head_dim]`` (the new keys concatenated).
        dtype: the cache's element type.
    """

    num_layers: int
    kv_heads: int
    head_dim: int
    max_length: int
    layout: Literal["fixed", "growing"] = "fixed"
    dtype: Any = jnp.float32

    def __post_init__(self) -> None:
        if self.layout not in ("fixed", "growing"):
            raise ValueError(
                f"CacheSpec.layout must be 'fixed' or 'growing', got {self.layout!r}: a cache "
                "of another layout (paged, sliding window, [B, T, heads, head_dim]) must be "
                "transposed / gathered into one of these inside the step"
            )
        for name in ("num_layers", "kv_heads", "head_dim", "max_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"CacheSpec.{name} must be an int >= 1, got {value!r}")

    def zeros(self, batch: int, length: int | None = None) -> list[tuple[jax.Array, jax.Array]]:
        """An empty cache for ``batch`` sequences: ``length`` slots (default: the fixed
        layout's ``max_length``, the growing layout's 0)."""
        if length is None:
            length = self.max_length if self.layout == "fixed" else 0
        shape = (batch, self.kv_heads, length, self.head_dim)
        return [
            (jnp.zeros(shape, self.dtype), jnp.zeros(shape, self.dtype))
            for _ in range(self.num_layers)
        ]


@dataclass(frozen=True)
class DecoderExport:
    """What :func:`export_decoder` wrote: the folder, the model file, the config and the
    cache layout the step used, and whether the graph shares one buffer between past and
    present (else its cache grows)."""

    folder: Path
    model_path: Path
    config: dict[str, Any]
    layout: str
    share_buffer: bool = False


def export_decoder(
    step: Callable[..., Any],
    folder: str | os.PathLike[str],
    *,
    cache: CacheSpec,
    num_heads: int,
    hidden_size: int | None = None,
    eos_token_id: int | Sequence[int],
    pad_token_id: int,
    bos_token_id: int | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
    model_type: str = "llama",
    share_buffer: bool = False,
    **options: Any,
) -> DecoderExport:
    """Export a decode step with its KV cache to a folder ``onnxruntime_genai.Model`` opens.

    Args:
        step: ``step(input_ids, position_ids, cache, **kw) -> (logits, cache)`` with
            ``input_ids`` / ``position_ids`` int32 ``[B, S]``, ``logits`` float ``[B, S, V]``
            and ``cache`` a list of ``(key, value)`` per layer in ``cache.layout``. Keywords
            the step names are given: ``attention_mask`` (int32, 1 for a real token, 0 for a
            pad; ``[B, max_length]`` over the fixed buffer's slots, ``[B, P + S]`` for the
            growing cache) and, for the fixed layout, ``cache_index`` (int32 scalar: the slot
            of ``input_ids[:, 0]``, the number of tokens already cached). One graph serves
            prefill (S > 1) and decode (S = 1).
        folder: the folder to write (created): ``model.onnx`` (weights in ``model.onnx.data``
            when large), ``genai_config.json``, and the tokenizer's files when given.
        cache: the cache's :class:`CacheSpec`.
        num_heads: query heads; ``hidden_size`` defaults to ``num_heads * head_dim``.
        eos_token_id, pad_token_id, bos_token_id: the ids onnxruntime-genai stops at and pads
            with (a prompt token equal to ``pad_token_id`` is taken for a pad).
        tokenizer: a folder holding ``tokenizer.json`` and the like, copied in.
        model_type: onnxruntime-genai's ``type`` (any decoder-only type it knows).
        share_buffer: fixed layout only: the graph takes and returns the whole buffer
            (``past_key_values`` ``[B, kv_heads, max_length, head_dim]``, its length the
            generation's ``max_length`` up to ``cache.max_length``; ``attention_mask``
            ``[B, total_sequence_length]``) and the config says
            ``past_present_share_buffer: true``, so onnxruntime-genai keeps one buffer per
            layer instead of a growing one.
        options: export options of :func:`~jax2onnx_nn.to_onnx` (``opset``, ``target``, ...);
            ``opset`` defaults to the newest at which the target runs ONNX ``Attention`` with its
            kernel (:func:`~jax2onnx_nn.genai.opset.decoder_opset`: 24 for onnxruntime).

    Returns:
        A :class:`DecoderExport` (folder, model path, the config written, the layout used).

    Raises:
        SpecError: the step does not take or return what the contract says (named, with what
            to change).

    Example::

        spec = CacheSpec(num_layers=2, kv_heads=2, head_dim=16, max_length=64)
        export_decoder(model, "out", cache=spec, num_heads=4, eos_token_id=2, pad_token_id=0)
        og_model = onnxruntime_genai.Model("out")
    """
    folder = Path(folder)
    for name in ("input_names", "output_names"):
        if name in options:
            raise TypeError(f"export_decoder names the graph's values itself; drop {name}=")
    if share_buffer and cache.layout != "fixed":
        raise ValueError(
            "share_buffer=True needs CacheSpec(layout='fixed'): a growing cache cannot share "
            "one buffer between past and present"
        )
    kwargs = step_keywords(step, cache.layout)
    graph_fn = _graph_function(step, cache, kwargs, share_buffer)
    layers = range(cache.num_layers)
    specs = _input_specs(cache, share_buffer)
    input_names = ["input_ids", "attention_mask", "position_ids"] + [
        f"past_key_values.{i}.{kv}" for i in layers for kv in ("key", "value")
    ]
    output_names = ["logits"] + [f"present.{i}.{kv}" for i in layers for kv in ("key", "value")]
    out = jax.eval_shape(graph_fn, *_example_inputs(cache, share_buffer))
    vocab = _check_outputs(out, cache)
    if cache.layout == "fixed" and not share_buffer:
        _check_slots_follow_the_cache(graph_fn, cache, step)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / "model.onnx"
    options.setdefault("model_name", "decoder")
    if options.get("opset") is None:
        options["opset"] = decoder_opset(options.get("target"))
    if share_buffer:
        bounds: tuple[str, ...] = (
            *(f"{dim} <= {cache.max_length}" for dim in (BUFFER, TOTAL, SEQUENCE)),
            # the mask covers the buffer's first slots, the new tokens fit in it
            f"{TOTAL} <= {BUFFER}",
            f"{SEQUENCE} <= {BUFFER}",
        )
    else:
        bounds = (f"{PAST} + {SEQUENCE} <= {cache.max_length}",) if cache.layout == "fixed" else ()
    options["constraints"] = (*options.get("constraints", ()), *bounds)
    try:
        to_onnx(
            graph_fn,
            specs,
            path=model_path,
            input_names=tuple(input_names),
            output_names=tuple(output_names),
            **options,
        )
    except BaseException:
        if created and not any(folder.iterdir()):  # nothing half-written: no empty folder left
            folder.rmdir()
        raise
    config = genai_config(
        cache,
        num_heads=num_heads,
        hidden_size=hidden_size or num_heads * cache.head_dim,
        vocab_size=vocab,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        model_type=model_type,
        filename=model_path.name,
    )
    config["search"]["past_present_share_buffer"] = share_buffer
    (folder / "genai_config.json").write_text(json.dumps(config, indent=4))
    if tokenizer is not None:
        for name in TOKENIZER_FILES:
            source = Path(tokenizer) / name
            if source.is_file():
                shutil.copyfile(source, folder / name)
    return DecoderExport(folder, model_path, config, cache.layout, share_buffer)


def genai_config(
    cache: CacheSpec,
    *,
    num_heads: int,
    hidden_size: int,
    vocab_size: int,
    eos_token_id: int | Sequence[int],
    pad_token_id: int,
    bos_token_id: int | None,
    model_type: str,
    filename: str,
) -> dict[str, Any]:
    """onnxruntime-genai's ``genai_config.json`` for the graph :func:`export_decoder` writes:
    its value names, the sizes it allocates the cache with, the ids, and greedy search up to
    the context length (``past_present_share_buffer`` off: the graph's cache grows)."""
    eos = list(eos_token_id) if isinstance(eos_token_id, Sequence) else eos_token_id
    model: dict[str, Any] = {
        "type": model_type,
        "context_length": cache.max_length,
        "vocab_size": vocab_size,
        "eos_token_id": eos,
        "pad_token_id": pad_token_id,
        "decoder": {
            "filename": filename,
            "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
            "head_size": cache.head_dim,
            "hidden_size": hidden_size,
            "num_attention_heads": num_heads,
            "num_key_value_heads": cache.kv_heads,
            "num_hidden_layers": cache.num_layers,
            "inputs": {
                "input_ids": "input_ids",
                "attention_mask": "attention_mask",
                "position_ids": "position_ids",
                "past_key_names": "past_key_values.%d.key",
                "past_value_names": "past_key_values.%d.value",
            },
            "outputs": {
                "logits": "logits",
                "present_key_names": "present.%d.key",
                "present_value_names": "present.%d.value",
            },
        },
    }
    if bos_token_id is not None:
        model["bos_token_id"] = bos_token_id
    search = {
        "max_length": cache.max_length,
        "min_length": 0,
        "do_sample": False,
        "num_beams": 1,
        "num_return_sequences": 1,
        "past_present_share_buffer": False,
        "early_stopping": True,
        "length_penalty": 1.0,
        "diversity_penalty": 0.0,
        "no_repeat_ngram_size": 0,
        "repetition_penalty": 1.0,
        "temperature": 1.0,
        "top_k": 1,
        "top_p": 1.0,
    }
    return {"model": model, "search": search}


def step_keywords(step: Callable[..., Any], layout: str) -> tuple[str, ...]:
    """The contract's keywords ``step`` takes (``attention_mask``, and ``cache_index`` for the
    fixed layout, which needs it: the step cannot tell where to write otherwise)."""
    try:
        params = inspect.signature(step).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    names = tuple(
        name
        for name in ("attention_mask", "cache_index")
        if (name in params or takes_any) and not (name == "cache_index" and layout != "fixed")
    )
    if layout == "fixed" and "cache_index" not in names:
        raise SpecError(
            f"the fixed cache layout writes the new tokens at a slot the step is told: "
            f"{_name(step)} takes no `cache_index` keyword. Add `*, cache_index` to its "
            "parameters (an int32 scalar: write at lax.dynamic_update_slice(..., (0, 0, "
            "cache_index, 0))), or give CacheSpec(layout='growing') for a step that "
            "concatenates its new keys to the past"
        )
    return names


def _name(step: Callable[..., Any]) -> str:
    return getattr(step, "__qualname__", None) or type(step).__name__


def _graph_function(
    step: Callable[..., Any], cache: CacheSpec, keywords: tuple[str, ...], share_buffer: bool
) -> Callable[..., Any]:
    """The exported function: the graph's inputs -> the step's arguments, its results -> the
    graph's outputs. A fixed buffer is as long as what the graph returns: ``past`` with ``S``
    empty slots after it (growing at the boundary: the step writes them, and what it returns
    is ``present``), or the slots it was given (a shared buffer). Not ``cache.max_length``
    slots: the step's attention then reads only the slots in use, and the buffer's write at
    ``P`` into ``past``'s padding lowers to a Concat (no Pad, no Slice at the boundary)."""

    def decoder(
        input_ids: jax.Array,
        attention_mask: jax.Array,
        position_ids: jax.Array,
        *past: jax.Array,
    ) -> tuple[jax.Array, list[tuple[jax.Array, jax.Array]]]:
        pairs = [(past[2 * i], past[2 * i + 1]) for i in range(cache.num_layers)]
        given_slots, new_slots = pairs[0][0].shape[2], input_ids.shape[1]
        total = attention_mask.shape[1] if share_buffer else given_slots + new_slots
        slots = given_slots if share_buffer else total
        given: dict[str, Any] = {}
        mask = attention_mask
        if cache.layout == "fixed":
            if not share_buffer:
                grow = ((0, 0), (0, 0), (0, new_slots), (0, 0))
                pairs = [(jnp.pad(k, grow), jnp.pad(v, grow)) for k, v in pairs]
            else:  # the mask covers the first `total` of the buffer's slots
                mask = jnp.pad(attention_mask, ((0, 0), (0, slots - total)))
            given["cache_index"] = jnp.asarray(total - new_slots, jnp.int32)
        if "attention_mask" in keywords:
            given["attention_mask"] = mask
        logits, new = step(input_ids, position_ids, pairs, **given)
        new = _check_cache(new, cache, step, slots)
        return logits, new

    decoder.__name__ = _name(step).rpartition(".")[2] or "decoder"
    return decoder


def _check_cache(new: Any, cache: CacheSpec, step: Callable[..., Any], length: Any) -> list[Any]:
    """The step's returned cache as a list of pairs (each ``length`` slots long), or a
    SpecError saying what it returned."""
    if not isinstance(new, (list, tuple)) or len(new) != cache.num_layers:
        if isinstance(new, (list, tuple)):
            got = f"{type(new).__name__} of {len(new)}"
        elif getattr(new, "shape", None) is not None:
            got = (
                f"one array of shape {_shape_text(new.shape)}: a cache stacked into one array "
                "(as keras-hub keeps [B, layers, 2, T, heads, head_dim]) is split into a "
                "(key, value) pair per layer in the step, as jax2onnx_nn.genai.keras_hub does"
            )
        else:
            got = type(new).__name__
        raise SpecError(
            f"{_name(step)} must return (logits, cache) with cache a list of "
            f"{cache.num_layers} (key, value) pairs (CacheSpec.num_layers), got {got}"
        )
    pairs = []
    for i, pair in enumerate(new):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise SpecError(
                f"{_name(step)} returned cache[{i}] = {type(pair).__name__}; each layer's "
                "entry must be a (key, value) pair"
            )
        for kv, value in zip(("key", "value"), pair, strict=True):
            shape = getattr(value, "shape", None)
            if not _cache_shape_fits(shape, cache.kv_heads, length, cache.head_dim):
                expected = (
                    f"[B, {cache.kv_heads}, {cache.max_length}, {cache.head_dim}] (the buffer "
                    "written in place, same shape as given)"
                    if cache.layout == "fixed"
                    else f"[B, {cache.kv_heads}, past + S, {cache.head_dim}] (the past with the "
                    "new keys concatenated)"
                )
                raise SpecError(
                    f"{_name(step)} returned cache[{i}] {kv} of shape {_shape_text(shape)}; "
                    f"the {cache.layout} layout needs {expected}. {_layout_advice(shape, cache)}"
                )
        pairs.append(tuple(pair))
    return pairs


def _layout_advice(shape: Any, cache: CacheSpec) -> str:
    """What to change for a returned key/value of ``shape``, by the layout it looks like."""
    if shape is not None and len(shape) == 4 and shape[3] == cache.head_dim:
        heads, slots = shape[1], shape[2]
        if slots == cache.kv_heads and heads != cache.kv_heads:
            return (
                "This is a cache laid out [B, T, heads, head_dim]: take and return it "
                "transposed to [B, heads, T, head_dim] (k.transpose(0, 2, 1, 3)) in the step"
            )
        if isinstance(heads, int) and heads > cache.kv_heads and heads % cache.kv_heads == 0:
            return (
                f"This has {heads} heads, not CacheSpec.kv_heads={cache.kv_heads}: cache the "
                "keys and values before repeating them for the query heads (grouped-query "
                "attention), or give kv_heads the number the step caches"
            )
        if (
            cache.layout == "fixed"
            and heads == cache.kv_heads
            and isinstance(slots, int)
            and slots < cache.max_length
        ):
            return (
                f"A buffer of {slots} slots (a sliding window's ring buffer) is not "
                "expressible: onnxruntime-genai feeds every past token's keys. Keep "
                "CacheSpec.max_length slots and mask the keys older than the window in the "
                "attention instead"
            )
    return (
        "A cache laid out [B, T, heads, head_dim] is transposed to [B, heads, T, head_dim] in "
        "the step; other layouts (paged, a sliding window's ring buffer) are not expressible"
    )


def _cache_shape_fits(shape: Any, heads: int, length: Any, head_dim: int) -> bool:
    if shape is None or len(shape) != 4 or shape[1] != heads or shape[3] != head_dim:
        return False
    return bool(shape[2] == length)


def _shape_text(shape: Any) -> str:
    return "None" if shape is None else f"({', '.join(str(d) for d in shape)})"


def _input_specs(cache: CacheSpec, share_buffer: bool) -> list[Any]:
    slots, total = (BUFFER, TOTAL) if share_buffer else (PAST, f"{PAST} + {SEQUENCE}")
    kv = ((BATCH, cache.kv_heads, slots, cache.head_dim), cache.dtype)
    return [
        ((BATCH, SEQUENCE), jnp.int32),
        ((BATCH, total), jnp.int32),
        ((BATCH, SEQUENCE), jnp.int32),
        *[kv] * (2 * cache.num_layers),
    ]


def _check_slots_follow_the_cache(
    graph_fn: Callable[..., Any], cache: CacheSpec, step: Callable[..., Any]
) -> None:
    """A fixed-layout step is traced with ``past + S`` slots, not ``max_length``: one that
    works with ``max_length`` slots and fails with fewer sizes something by the constant."""
    if cache.max_length < 2:
        return
    slots = cache.max_length - 1
    try:
        jax.eval_shape(graph_fn, *_example_inputs(cache, False, past=slots - 1))
    except Exception as err:  # the step's own error, for a buffer of other length
        where = user_frame(err.__traceback__)
        raise SpecError(
            f"{_name(step)} works with a cache of max_length={cache.max_length} slots but not "
            f"with {slots}: {type(err).__name__}: {err}\n"
            + (f"  at {where}\n" if where else "")
            + "export_decoder traces a fixed-layout step with the slots in use (past_sequence_"
            "length + sequence_length), so one graph serves every generation length. Fix: size "
            f"what spans the cache by the cache itself (k_cache.shape[2]), not by the constant "
            f"{cache.max_length}."
        ) from None


def _example_inputs(
    cache: CacheSpec, share_buffer: bool, *, past: int | None = None
) -> list[jax.ShapeDtypeStruct]:
    """Concrete shapes (batch 1, ``max_length - 1`` past unless given, 1 new: the step's
    buffer is ``max_length`` slots, as its errors say) to check the step's results before the
    export."""
    batch, new = 1, 1
    past = cache.max_length - 1 if past is None else past
    slots = past + new if share_buffer else past
    ids = jax.ShapeDtypeStruct((batch, new), jnp.int32)
    kv = jax.ShapeDtypeStruct((batch, cache.kv_heads, slots, cache.head_dim), cache.dtype)
    mask = jax.ShapeDtypeStruct((batch, past + new), jnp.int32)
    return [ids, mask, ids, *[kv] * (2 * cache.num_layers)]


def _check_outputs(out: Any, cache: CacheSpec) -> int:
    """The vocabulary size, from the logits the step returns for a concrete call."""
    logits = out[0]
    if len(logits.shape) != 3 or not jnp.issubdtype(logits.dtype, jnp.floating):
        raise SpecError(
            f"the step's logits must be float [B, S, vocab], got {logits.dtype}"
            f"{_shape_text(logits.shape)}: return the logits of every position (onnxruntime-"
            "genai reads the last one)"
        )
    return int(np.int64(logits.shape[2]))
