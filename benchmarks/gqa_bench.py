"""onnxruntime's ``com.microsoft.GroupQueryAttention`` against the attention a decoder step
exported by ``jax2onnx_nn.genai.export_decoder`` computes, on the CPU.

    python -m benchmarks.gqa_bench

``export_decoder`` (opset 24) writes the new keys and values into the fixed buffer
(``TensorScatter`` at the cache index) and runs ONNX ``Attention`` over the whole buffer,
slots past the last token masked by floats added to the logits. ``GroupQueryAttention``
takes the new keys and values with the buffer and ``seqlens_k`` (tokens cached, less one)
and writes them itself, attending to the tokens so far only. Both ops alone, the same
inputs (8 query heads, 2 kv heads of 32, a buffer of 256 slots), prefill (64 tokens, empty
cache) and decode (1 token after 16 or 128): milliseconds, the ratio, and the largest
differences of the attention and of the cache written. ``--cpu``: CPU time on one thread
(else wall clock with the default session options); rounds alternate the two ops.

``--past``: the form ``export_decoder`` writes since the past went into ``Attention``
(``Attention(q, k, v, mask, past_key, past_value)``, the cache growing, the causal mask as
floats) against ``GroupQueryAttention`` with that mask as its ``attention_bias`` (what
``target=WITH_GROUP_QUERY_ATTENTION`` writes, core/targets/onnxruntime_gqa.py) and without.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

HEADS, KV_HEADS, HEAD_DIM, SLOTS = 8, 2, 32, 256
CASES = [(1, 64, 0), (4, 64, 0), (1, 1, 16), (1, 1, 128), (4, 1, 128)]  # batch, tokens, cached


def _models() -> tuple[bytes, bytes]:
    """The exported step's attention (ONNX Attention) and GroupQueryAttention, serialized."""
    from onnx import TensorProto
    from onnx import helper as h

    f, scale = TensorProto.FLOAT, float(1 / np.sqrt(HEAD_DIM))
    cache = [h.make_tensor_value_info(n, f, ["B", KV_HEADS, SLOTS, HEAD_DIM]) for n in ("pk", "pv")]
    outputs = [h.make_tensor_value_info(n, f, None) for n in ("y", "kb", "vb")]
    attention = h.make_graph(
        [
            h.make_node("TensorScatter", ["pk", "k", "index"], ["kb"], axis=2),
            h.make_node("TensorScatter", ["pv", "v", "index"], ["vb"], axis=2),
            h.make_node("Attention", ["q", "kb", "vb", "mask"], ["y"], scale=scale),
        ],
        "attention",
        [
            h.make_tensor_value_info("q", f, ["B", HEADS, "S", HEAD_DIM]),
            h.make_tensor_value_info("k", f, ["B", KV_HEADS, "S", HEAD_DIM]),
            h.make_tensor_value_info("v", f, ["B", KV_HEADS, "S", HEAD_DIM]),
            *cache,
            h.make_tensor_value_info("index", TensorProto.INT64, ["B"]),
            h.make_tensor_value_info("mask", f, ["B", 1, "S", SLOTS]),
        ],
        outputs,
    )
    gqa = h.make_graph(
        [
            h.make_node(
                "GroupQueryAttention",
                ["q", "k", "v", "pk", "pv", "seqlens_k", "total"],
                ["y", "kb", "vb"],
                domain="com.microsoft",
                num_heads=HEADS,
                kv_num_heads=KV_HEADS,
                scale=scale,
            )
        ],
        "gqa",
        [
            h.make_tensor_value_info("q", f, ["B", "S", HEADS * HEAD_DIM]),
            h.make_tensor_value_info("k", f, ["B", "S", KV_HEADS * HEAD_DIM]),
            h.make_tensor_value_info("v", f, ["B", "S", KV_HEADS * HEAD_DIM]),
            *cache,
            h.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["B"]),
            h.make_tensor_value_info("total", TensorProto.INT32, []),
        ],
        outputs,
    )
    opsets = [h.make_opsetid("", 24), h.make_opsetid("com.microsoft", 1)]
    return tuple(  # type: ignore[return-value]
        h.make_model(g, opset_imports=opsets, ir_version=10).SerializeToString()
        for g in (attention, gqa)
    )


def _feeds(batch: int, tokens: int, cached: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same queries, keys, values and cache for both forms."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((batch, HEADS, tokens, HEAD_DIM), np.float32)
    k, v = (rng.standard_normal((batch, KV_HEADS, tokens, HEAD_DIM), np.float32) for _ in "kv")
    past = np.zeros((2, batch, KV_HEADS, SLOTS, HEAD_DIM), np.float32)
    past[:, :, :, :cached] = rng.standard_normal((2, batch, KV_HEADS, cached, HEAD_DIM))
    kept = np.arange(SLOTS)[None, :] <= (cached + np.arange(tokens))[:, None]
    mask = np.where(kept, 0, np.finfo(np.float32).min).astype(np.float32)
    attention = {
        "q": q,
        "k": k,
        "v": v,
        "pk": past[0],
        "pv": past[1],
        "index": np.full(batch, cached, np.int64),
        "mask": np.broadcast_to(mask, (batch, 1, tokens, SLOTS)).copy(),
    }

    def flat(x: np.ndarray) -> np.ndarray:
        return x.transpose(0, 2, 1, 3).reshape(batch, tokens, -1)

    gqa = {
        "q": flat(q),
        "k": flat(k),
        "v": flat(v),
        "pk": past[0].copy(),
        "pv": past[1].copy(),
        "seqlens_k": np.full(batch, cached + tokens - 1, np.int32),
        "total": np.asarray(cached + tokens, np.int32),
    }
    return attention, gqa


def _past_models() -> list[bytes]:
    """Attention taking the past, GroupQueryAttention with the mask as its bias, without."""
    from onnx import TensorProto
    from onnx import helper as h

    f, scale = TensorProto.FLOAT, float(1 / np.sqrt(HEAD_DIM))
    common = [
        h.make_tensor_value_info("q", f, ["B", "S", HEADS * HEAD_DIM]),
        h.make_tensor_value_info("k", f, ["B", "S", KV_HEADS * HEAD_DIM]),
        h.make_tensor_value_info("v", f, ["B", "S", KV_HEADS * HEAD_DIM]),
        h.make_tensor_value_info("pk", f, ["B", KV_HEADS, "P", HEAD_DIM]),
        h.make_tensor_value_info("pv", f, ["B", KV_HEADS, "P", HEAD_DIM]),
    ]
    mask = h.make_tensor_value_info("mask", f, ["B", 1, "S", "T"])
    lengths = [
        h.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["B"]),
        h.make_tensor_value_info("total", TensorProto.INT32, []),
    ]
    outputs = [h.make_tensor_value_info(n, f, None) for n in ("y", "kb", "vb")]
    heads: dict[str, Any] = {"num_heads": HEADS, "kv_num_heads": KV_HEADS, "scale": scale}
    gqa_inputs = ["q", "k", "v", "pk", "pv", "seqlens_k", "total", "", "", ""]
    graphs = [
        h.make_graph(
            [
                h.make_node(
                    "Attention",
                    ["q", "k", "v", "mask", "pk", "pv"],
                    ["y", "kb", "vb"],
                    q_num_heads=HEADS,
                    kv_num_heads=KV_HEADS,
                    scale=scale,
                )
            ],
            "attention",
            [*common, mask],
            outputs,
        ),
        h.make_graph(
            [
                h.make_node(
                    "GroupQueryAttention",
                    [*gqa_inputs, "mask"],
                    ["y", "kb", "vb"],
                    domain="com.microsoft",
                    **heads,
                )
            ],
            "gqa_bias",
            [*common, *lengths, mask],
            outputs,
        ),
        h.make_graph(
            [
                h.make_node(
                    "GroupQueryAttention",
                    gqa_inputs,
                    ["y", "kb", "vb"],
                    domain="com.microsoft",
                    **heads,
                )
            ],
            "gqa",
            [*common, *lengths],
            outputs,
        ),
    ]
    opsets = [h.make_opsetid("", 24), h.make_opsetid("com.microsoft", 1)]
    return [
        h.make_model(g, opset_imports=opsets, ir_version=10).SerializeToString() for g in graphs
    ]


def _past_feeds(batch: int, tokens: int, cached: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    total = cached + tokens

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, np.float32)

    common = {
        "q": normal(batch, tokens, HEADS * HEAD_DIM),
        "k": normal(batch, tokens, KV_HEADS * HEAD_DIM),
        "v": normal(batch, tokens, KV_HEADS * HEAD_DIM),
        "pk": normal(batch, KV_HEADS, cached, HEAD_DIM),
        "pv": normal(batch, KV_HEADS, cached, HEAD_DIM),
    }
    kept = np.arange(total)[None, :] <= (cached + np.arange(tokens))[:, None]
    fill = np.float32(-0.7 * np.finfo(np.float32).max)  # (jax.nn's, as the export writes it)
    mask = np.broadcast_to(np.where(kept, 0, fill).astype(np.float32), (batch, 1, tokens, total))
    lengths = {
        "seqlens_k": np.full(batch, total - 1, np.int32),
        "total": np.asarray(total, np.int32),
    }
    return [
        {**common, "mask": mask.copy()},
        {**common, **lengths, "mask": mask.copy()},
        {**common, **lengths},
    ]


def main_past(sessions: list[Any], clock: Any, rounds: int) -> None:
    for batch, tokens, cached in [*CASES, (1, 256, 0), (1, 1, 512)]:
        feeds = _past_feeds(batch, tokens, cached)
        results = [s.run(None, f) for s, f in zip(sessions, feeds, strict=True)]
        error = max(
            float(np.abs(a - b).max())
            for r in results[1:]
            for a, b in zip(results[0], r, strict=True)
        )
        times: list[list[float]] = [[] for _ in sessions]
        for _ in range(rounds):
            for i, (session, f) in enumerate(zip(sessions, feeds, strict=True)):
                for _ in range(10):
                    start = clock()
                    session.run(None, f)
                    times[i].append(clock() - start)
        ms = [float(np.median(t)) * 1e3 for t in times]
        print(
            f"batch={batch} tokens={tokens} cached={cached}  Attention(past) {ms[0]:.3f} ms  "
            f"GQA+bias {ms[1] / ms[0]:.2f}x  GQA {ms[2] / ms[0]:.2f}x  max|d| {error:.1e}",
            flush=True,
        )
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def main() -> None:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="CPU time on one thread")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--past", action="store_true", help="against Attention taking the past")
    args = parser.parse_args()
    options = ort.SessionOptions()
    if args.cpu:
        options.intra_op_num_threads = options.inter_op_num_threads = 1
    clock = time.process_time if args.cpu else time.perf_counter
    if args.past:
        main_past(
            [
                ort.InferenceSession(m, options, providers=["CPUExecutionProvider"])
                for m in _past_models()
            ],
            clock,
            args.rounds,
        )
        return
    sessions = [
        ort.InferenceSession(m, options, providers=["CPUExecutionProvider"]) for m in _models()
    ]
    clock = time.process_time if args.cpu else time.perf_counter
    for batch, tokens, cached in CASES:
        feeds = _feeds(batch, tokens, cached)
        (y, *cache), (y_gqa, *cache_gqa) = (
            s.run(None, f) for s, f in zip(sessions, feeds, strict=True)
        )
        y = y.transpose(0, 2, 1, 3).reshape(y_gqa.shape)
        written = cached + tokens
        cache_error = max(
            float(np.abs(a[:, :, :written] - b[:, :, :written]).max())
            for a, b in zip(cache, cache_gqa, strict=True)
        )
        times: list[list[float]] = [[], []]
        for _ in range(args.rounds):
            for i, (session, f) in enumerate(zip(sessions, feeds, strict=True)):
                for _ in range(10):
                    start = clock()
                    session.run(None, f)
                    times[i].append(clock() - start)
        attention_ms, gqa_ms = (float(np.median(t)) * 1e3 for t in times)
        print(
            f"batch={batch} tokens={tokens} cached={cached}  Attention {attention_ms:.3f} ms  "
            f"GroupQueryAttention {gqa_ms:.3f} ms  gqa/attention {gqa_ms / attention_ms:.2f}  "
            f"max|d attention| {np.abs(y - y_gqa).max():.1e}  max|d cache| {cache_error:.1e}",
            flush=True,
        )
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
