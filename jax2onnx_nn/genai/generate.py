"""Greedy generation with an exported decoder in plain onnxruntime, and with its JAX step.

Both loops feed what onnxruntime-genai feeds: prompts padded on the left with the pad id,
``attention_mask`` 0 at a pad and 1 elsewhere, ``position_ids`` counting a row's real tokens
(0 at a pad), the cache growing by the tokens of each call. So the three (onnxruntime-genai,
this onnxruntime loop, JAX) generate the same tokens when the graph computes JAX's numbers.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx_nn.genai.export import CacheSpec, step_keywords


def padded_prompts(
    prompts: Sequence[Sequence[int]], pad_token_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(input_ids, attention_mask, position_ids)``, int32 ``[B, longest]``: the prompts
    padded on the left as onnxruntime-genai pads them."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generation needs at least one prompt, each of at least one token")
    longest = max(len(p) for p in prompts)
    ids = np.full((len(prompts), longest), pad_token_id, np.int32)
    for row, prompt in enumerate(prompts):
        ids[row, longest - len(prompt) :] = prompt
    mask = (ids != pad_token_id).astype(np.int32)
    positions = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 0).astype(np.int32)
    return ids, mask, positions


class _Greedy:
    """The bookkeeping both loops share: the next tokens, which rows are done, what each
    generated."""

    def __init__(self, batch: int, eos_token_id: int | Sequence[int], pad_token_id: int) -> None:
        self.eos = {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id)
        self.pad = pad_token_id
        self.done = np.zeros(batch, bool)
        self.tokens: list[list[int]] = [[] for _ in range(batch)]

    def pick(self, last_logits: np.ndarray) -> np.ndarray:
        """The argmax of each row's last logits (the pad id for a row that is done)."""
        chosen = np.argmax(last_logits, axis=-1).astype(np.int32)
        chosen = np.where(self.done, self.pad, chosen).astype(np.int32)
        for row, token in enumerate(chosen):
            if not self.done[row]:
                self.tokens[row].append(int(token))
                self.done[row] = int(token) in self.eos
        return chosen


def generate_onnx(
    model: str | os.PathLike[str],
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    eos_token_id: int | Sequence[int],
    pad_token_id: int,
    session_options: Any = None,
) -> list[list[int]]:
    """Greedy generation with an :func:`~jax2onnx_nn.genai.export_decoder` model in plain
    onnxruntime (no onnxruntime-genai needed).

    Args:
        model: the exported folder or its ``model.onnx``.
        prompts: token ids per sequence (of different lengths: padded on the left).
        max_new_tokens: tokens to generate per sequence at most.
        eos_token_id: a row stops after generating it (or one of them).
        pad_token_id: the pad id (as in the exported ``genai_config.json``).
        session_options: ``onnxruntime.SessionOptions`` for the session.

    Returns:
        The generated tokens of each prompt (its eos token included when one was generated).

    Example::

        tokens = generate_onnx("out", [[5, 6, 7]], max_new_tokens=32, eos_token_id=2,
                               pad_token_id=0)
    """
    import onnxruntime as ort  # optional: only this loop needs it

    path = Path(model)
    if path.is_dir():
        path = path / "model.onnx"
    session = ort.InferenceSession(str(path), session_options, providers=["CPUExecutionProvider"])
    past_inputs = [i for i in session.get_inputs() if i.name.startswith("past_key_values.")]
    output_names = [o.name for o in session.get_outputs()]
    ids, mask, positions = padded_prompts(prompts, pad_token_id)
    batch = len(prompts)
    # a shared buffer (its length a named dim, not the past's) holds the whole generation
    shared = bool(past_inputs) and past_inputs[0].shape[2] == "max_length"
    slots = ids.shape[1] + max_new_tokens if shared else 0
    feeds: dict[str, np.ndarray] = {
        i.name: np.zeros((batch, i.shape[1], slots, i.shape[3]), _numpy_dtype(i.type))
        for i in past_inputs
    }
    greedy = _Greedy(batch, eos_token_id, pad_token_id)
    for _ in range(max_new_tokens):
        feeds.update(input_ids=ids, attention_mask=mask, position_ids=positions)
        results = dict(zip(output_names, session.run(output_names, feeds), strict=True))
        ids = greedy.pick(results["logits"][:, -1])[:, None]
        if greedy.done.all():
            break
        for i in past_inputs:
            feeds[i.name] = results[i.name.replace("past_key_values.", "present.")]
        positions = positions[:, -1:] + 1
        mask = np.concatenate([mask, np.ones((batch, 1), np.int32)], axis=1)
    return greedy.tokens


def generate_jax(
    step: Callable[..., Any],
    cache: CacheSpec,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    eos_token_id: int | Sequence[int],
    pad_token_id: int,
    jit: bool = True,
) -> list[list[int]]:
    """Greedy generation with the JAX step :func:`~jax2onnx_nn.genai.export_decoder` takes,
    fed as the exported graph is fed: the reference the ONNX loops are compared with.

    Arguments as :func:`generate_onnx`, with the step and its :class:`CacheSpec` in place of
    the model; ``jit`` compiles the step: once for the prompt and once for decoding over a
    fixed buffer, once per token over a growing cache (whose shapes change every step).
    """
    keywords = step_keywords(step, cache.layout)
    ids, mask, positions = padded_prompts(prompts, pad_token_id)
    batch = len(prompts)
    fixed = cache.layout == "fixed"
    call = _jitted(step) if jit else step
    kv = cache.zeros(batch)
    greedy = _Greedy(batch, eos_token_id, pad_token_id)
    cached = 0
    for _ in range(max_new_tokens):
        given: dict[str, Any] = {}
        if fixed:
            given["cache_index"] = jnp.int32(cached)
        if "attention_mask" in keywords:
            width = cache.max_length if fixed else mask.shape[1]
            given["attention_mask"] = jnp.asarray(
                np.pad(mask, ((0, 0), (0, width - mask.shape[1])))
            )
        logits, kv = call(jnp.asarray(ids), jnp.asarray(positions), kv, **given)
        cached += ids.shape[1]
        ids = greedy.pick(np.asarray(logits[:, -1]))[:, None]
        if greedy.done.all() or cached + 1 > cache.max_length:
            break
        positions = positions[:, -1:] + 1
        mask = np.concatenate([mask, np.ones((batch, 1), np.int32)], axis=1)
    return greedy.tokens


def generate_genai(
    folder: str | os.PathLike[str],
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    pad_token_id: int,
) -> list[list[int]]:
    """Greedy generation in onnxruntime-genai (``pip install jax2onnx_nn[genai]``): the
    tokens generated after each prompt (the prompts padded on the left with the pad id)."""
    import onnxruntime_genai as og

    ids, _, _ = padded_prompts(prompts, pad_token_id)
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(
        do_sample=False, batch_size=len(prompts), max_length=ids.shape[1] + max_new_tokens
    )
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    while not generator.is_done():
        generator.generate_next_token()
    eos = json.loads((Path(folder) / "genai_config.json").read_text())["model"]["eos_token_id"]
    eos = {eos} if isinstance(eos, int) else set(eos)
    last = [int(t) for t in generator.get_next_tokens()]
    generated = []
    for row in range(len(prompts)):
        tokens = [int(t) for t in generator.get_sequence(row)[ids.shape[1] :]]
        ends = [i for i, t in enumerate(tokens) if t in eos]
        if not ends and len(tokens) < max_new_tokens and last[row] in eos:
            # onnxruntime-genai 0.18 leaves the eos that ends the whole generation out of the
            # sequence (a row that stops earlier, in a batch, keeps it)
            tokens.append(last[row])
        generated.append(tokens[: ends[0] + 1] if ends else tokens)
    return generated


def _jitted(step: Callable[..., Any]) -> Callable[..., Any]:
    """``step`` compiled: a hashable callable (a function, an nnx module) as it is; a pytree
    module holding arrays (Equinox) with its arrays as arguments."""
    try:
        hash(step)
        return jax.jit(step)
    except TypeError:
        pass
    leaves, treedef = jax.tree.flatten(step)
    is_array = [isinstance(leaf, (jax.Array, np.ndarray)) for leaf in leaves]
    arrays = [leaf for leaf, array in zip(leaves, is_array, strict=True) if array]

    def pure(arrays: list[Any], *args: Any, **kwargs: Any) -> Any:
        given = iter(arrays)
        filled = [next(given) if a else leaf for leaf, a in zip(leaves, is_array, strict=True)]
        return jax.tree.unflatten(treedef, filled)(*args, **kwargs)

    return functools.partial(jax.jit(pure), arrays)


def _numpy_dtype(onnx_type: str) -> np.dtype:
    names = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64"}
    return np.dtype(names.get(onnx_type, "float32"))
