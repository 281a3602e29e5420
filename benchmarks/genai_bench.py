"""Tokens per second of a GPT-2 124M-sized decoder: onnxruntime-genai against a jax.jit loop.

Exports the GPT-2-style decoder of ``tests/genai/models.py`` (growing cache) with
``jax2onnx_nn.genai.export_decoder``, then generates greedily after a random prompt in
onnxruntime-genai (prefill: the prompt's one call; decode: the tokens after it) and in a
``jax.jit`` loop over the same model's fixed-buffer step (compiled before timing), and prints
tokens/s of each phase, the graph's node count and its node count per layer (two small
exports, 1 and 2 layers, differenced)::

    python3 -m benchmarks.genai_bench                 # 12 layers, d=768, vocab 50257
    python3 -m benchmarks.genai_bench --layers 2 --dim 256 --vocab 1000   # quick

``--compare-attention`` also exports the decoder with ``com.microsoft.GroupQueryAttention``
(``target=WITH_GROUP_QUERY_ATTENTION``, core/targets/onnxruntime_gqa.py) for ONNX ``Attention``
and alternates the two in onnxruntime-genai; ``--repeats`` runs each that many times (medians);
``--threads`` sets onnxruntime's intra-op threads (1: what a loaded machine leaves comparable).
``--cpu`` adds, for each export, the CPU time on one thread of plain onnxruntime sessions: the
prompt's prefill and one decode step after it, rounds alternated, medians (wall clock at a load
of several processes a core swings by 2x from run to run; the CPU time much less).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx

# (beside each other, the test models are imported as tests.genai.models)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flax import nnx  # noqa: E402

from jax2onnx_nn.genai import CacheSpec, export_decoder, padded_prompts  # noqa: E402
from tests.genai.models import Gpt2  # noqa: E402


def _export(
    model: Gpt2, cache: CacheSpec, heads: int, folder: str, vocab: int, **options: Any
) -> float:
    started = time.perf_counter()
    export_decoder(model, folder, cache=cache, num_heads=heads, eos_token_id=vocab - 1,
                   pad_token_id=vocab - 1, **options)  # fmt: skip
    return time.perf_counter() - started


def _set_threads(folder: str, threads: int) -> None:
    """onnxruntime's intra-op threads in the folder's genai_config.json."""
    import json

    path = os.path.join(folder, "genai_config.json")
    with open(path) as f:
        config = json.load(f)
    config["model"]["decoder"]["session_options"]["intra_op_num_threads"] = threads
    with open(path, "w") as f:
        json.dump(config, f, indent=4)


def _nodes(folder: str) -> int:
    return len(onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False).graph.node)


def nodes_per_layer(dim: int, heads: int) -> tuple[int, int]:
    """Nodes of a 1-layer and of a 2-layer export of the same widths (small vocabulary)."""
    counts = []
    for layers in (1, 2):
        cache = CacheSpec(layers, heads, dim // heads, 64, layout="growing")
        model = Gpt2(vocab=97, dim=dim, layers=layers, heads=heads, context=64, rngs=nnx.Rngs(0))
        with tempfile.TemporaryDirectory() as folder:
            _export(model, cache, heads, folder, 97)
            counts.append(_nodes(folder))
    return counts[0], counts[1]


def bench_genai(folder: str, prompt: np.ndarray, new: int) -> tuple[float, float, list[int]]:
    """(prefill s, decode s for ``new - 1`` tokens, tokens) in onnxruntime-genai."""
    import onnxruntime_genai as og

    model = og.Model(folder)
    params = og.GeneratorParams(model)
    total = prompt.shape[1] + new
    params.set_search_options(do_sample=False, max_length=total, min_length=total)
    generator = og.Generator(model, params)
    started = time.perf_counter()
    generator.append_tokens(prompt)  # runs the prompt
    generator.generate_next_token()
    prefilled = time.perf_counter()
    while not generator.is_done():
        generator.generate_next_token()
    done = time.perf_counter()
    tokens = [int(t) for t in generator.get_sequence(0)[prompt.shape[1] :]]
    return prefilled - started, done - prefilled, tokens


def bench_jax(
    model: Gpt2, cache: CacheSpec, prompt: np.ndarray, new: int
) -> tuple[float, float, list[int]]:
    """(prefill s, decode s for ``new - 1`` tokens, tokens) in a jax.jit loop over the fixed
    buffer, each step compiled before timing."""
    graphdef, state = nnx.split(model)

    @functools.partial(jax.jit, donate_argnums=(3,))  # the cache is updated in place
    def step(state: Any, ids: jax.Array, positions: jax.Array, kv: Any, index: jax.Array,
             mask: jax.Array) -> tuple[jax.Array, Any]:  # fmt: skip
        logits, kv = nnx.merge(graphdef, state)(
            ids, positions, kv, attention_mask=mask, cache_index=index
        )
        return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32), kv

    length = prompt.shape[1]
    mask = jnp.asarray(np.arange(cache.max_length)[None] < length + new, jnp.int32)
    positions = jnp.arange(length, dtype=jnp.int32)[None]

    def run() -> tuple[float, float, list[int]]:
        kv = cache.zeros(1)
        started = time.perf_counter()
        token, kv = step(state, jnp.asarray(prompt), positions, kv, jnp.int32(0), mask)
        tokens = [int(token[0])]
        prefilled = time.perf_counter()
        for i in range(new - 1):
            at = jnp.int32(length + i)
            token, kv = step(state, token[:, None], at[None, None], kv, at, mask)
            tokens.append(int(token[0]))
        return prefilled - started, time.perf_counter() - prefilled, tokens

    run()  # compiles the prefill and the decode step
    return run()


def bench_cpu(folders: dict[str, str], prompt: np.ndarray, rounds: int) -> dict[str, Any]:
    """{export: (prefill ms, decode ms)}: CPU time on one thread of the prompt's call and of
    one decode step after it in onnxruntime sessions, rounds alternated, medians."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    sessions = {
        name: ort.InferenceSession(
            os.path.join(folder, "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        for name, folder in folders.items()
    }
    batch, length = prompt.shape
    feeds: list[dict[str, np.ndarray]] = []
    first = next(iter(sessions.values()))
    past = [i for i in first.get_inputs() if i.name.startswith("past_key_values")]
    heads, head_dim = past[0].shape[1], past[0].shape[3]
    prefill = {
        "input_ids": prompt.astype(np.int32),
        "attention_mask": np.ones((batch, length), np.int32),
        "position_ids": np.arange(length, dtype=np.int32)[None],
        **{i.name: np.zeros((batch, heads, 0, head_dim), np.float32) for i in past},
    }
    present = first.run(None, prefill)[1:]
    decode = {
        "input_ids": prompt[:, -1:].astype(np.int32),
        "attention_mask": np.ones((batch, length + 1), np.int32),
        "position_ids": np.full((batch, 1), length, np.int32),
        **{i.name: p for i, p in zip(past, present, strict=True)},
    }
    feeds = [prefill, decode]
    times: dict[str, list[list[float]]] = {name: [[], []] for name in sessions}
    for _ in range(rounds):
        for name, session in sessions.items():
            for phase, feed in enumerate(feeds):
                for _ in range(3):
                    started = time.process_time()
                    session.run(None, feed)
                    times[name][phase].append(time.process_time() - started)
    return {name: [float(np.median(t)) * 1e3 for t in phases] for name, phases in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--compare-attention", action="store_true")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="0: onnxruntime's default")
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, devices {jax.devices()}, cpus {os.cpu_count()}")
    heads, head_dim = args.heads, args.dim // args.heads
    one, two = nodes_per_layer(args.dim, heads)
    print(f"nodes: 1 layer {one}, 2 layers {two}: {two - one} per layer, {2 * one - two} outside")
    model = Gpt2(args.vocab, args.dim, args.layers, heads, args.max_length, rngs=nnx.Rngs(0))
    params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    cache = CacheSpec(args.layers, heads, head_dim, args.max_length, layout="growing")
    prompt, _, _ = padded_prompts(
        [list(np.random.default_rng(0).integers(0, args.vocab - 1, args.prompt))], args.vocab - 1
    )
    exports: dict[str, dict[str, Any]] = {"onnxruntime-genai": {}}
    if args.compare_attention:
        from jax2onnx_nn.core.targets.onnxruntime import WITH_GROUP_QUERY_ATTENTION

        exports["  with GroupQueryAttention"] = {"target": WITH_GROUP_QUERY_ATTENTION}
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in exports}
    with tempfile.TemporaryDirectory() as base:
        folders = {name: os.path.join(base, str(i)) for i, name in enumerate(exports)}
        for name, options in exports.items():
            seconds = _export(model, cache, heads, folders[name], args.vocab, **options)
            if args.threads:
                _set_threads(folders[name], args.threads)
            nodes = _nodes(folders[name])
            print(f"{name.strip()}: {params / 1e6:.1f}M parameters, {args.layers} layers, "
                  f"d={args.dim}; export {seconds:.1f} s, {nodes} nodes")  # fmt: skip
        for _ in range(args.repeats):  # (the exports alternated)
            for name in exports:
                og_prefill, og_decode, og_tokens = bench_genai(folders[name], prompt, args.new)
                timings[name].append((og_prefill, og_decode))
                if name == "onnxruntime-genai":
                    tokens = og_tokens
                elif og_tokens != tokens:
                    print(f"{name.strip()}: other tokens than onnxruntime-genai's")
        cpu = bench_cpu(folders, prompt, max(args.repeats, 5)) if args.cpu else {}
    fixed = CacheSpec(args.layers, heads, head_dim, args.max_length)
    jx_prefill, jx_decode, jx_tokens = bench_jax(model, fixed, prompt, args.new)
    decoded = args.new - 1
    print(f"prompt {args.prompt} tokens, {args.new} generated, batch 1")
    print(f"{'':24}{'prefill tok/s':>15}{'decode tok/s':>15}")
    rows = [(name, *np.median(np.asarray(t), axis=0)) for name, t in timings.items()]
    for name, prefill, decode in [*rows, ("jax.jit loop", jx_prefill, jx_decode)]:
        print(f"{name:24}{args.prompt / prefill:15.1f}{decoded / decode:15.1f}")
    for name, (prefill_ms, decode_ms) in cpu.items():
        print(f"{name.strip()}: CPU time on one thread (onnxruntime session): prefill "
              f"{prefill_ms:.2f} ms, decode step {decode_ms:.3f} ms")  # fmt: skip
    same = sum(a == b for a, b in zip(tokens, jx_tokens, strict=False))
    print(f"tokens equal: {same}/{len(jx_tokens)}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
