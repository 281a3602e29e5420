"""Attention models in onnxruntime against ``jax.jit``: latency ratio and graph size.

    python -m benchmarks.attention_bench                 # both models, default and newest opset
    python -m benchmarks.attention_bench --models gpt --opsets 23 --profile

Models: ``vit`` a ViT-tiny encoder (examples/flax_vit.py: 4 blocks, d=192, 3 heads, MLP 768,
224x224 images in 16x16 patches, batch 8) and ``gpt`` a 4-layer GPT decoder
(examples/flax_gpt2.py: d=256, 8 heads, batch 8, 64 tokens, causal). Each is exported at each
opset of ``--opsets`` (default: the default opset and the newest). Columns:

- ``nodes``: nodes of the main graph (with the bodies of its If nodes: both branches count)
  and of function bodies; ``ops``: the op types that are
  not elementwise plumbing (Attention, MatMul, Softmax, ...) with their counts;
- ``ort_ms`` / ``jit_ms``: median latency, onnxruntime with its default session options and
  ``jax.jit``, runs taken in turn (both see the same machine load); ``ort/jit`` their ratio.
  With ``--cpu``: the process's CPU time per run instead, onnxruntime with one intra-op thread
  and XLA with one (``--xla_cpu_multi_thread_eigen=false``): the work each does, which a
  shared machine's load leaves nearly alone (its wall-clock latencies vary by 2x between runs
  there, spinning thread pools waiting for cores).

``--profile`` prints the onnxruntime time per op type (its session profiler).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks.export_bench import interleaved_median_ms


def vit_tiny() -> tuple[Any, list[Any], list[np.ndarray]]:
    """ViT-tiny's width and heads, 4 blocks, batch 8."""
    from flax import nnx

    from examples.flax_vit import ViT, ViTConfig
    from jax2onnx_nn.flax import mode_copy

    config = ViTConfig(dim=192, depth=4, heads=3, mlp_dim=768, classes=1000)
    model = mode_copy(ViT(config, rngs=nnx.Rngs(0)))
    images = np.random.default_rng(0).standard_normal((8, 224, 224, 3)).astype(np.float32)
    return model, config.images, [images]


def gpt_4l() -> tuple[Any, list[Any], list[np.ndarray]]:
    """A 4-layer GPT of width 256 (8 heads), batch 8 of 64 tokens."""
    from flax import nnx

    from examples.flax_gpt2 import GPT, TOKENS, GPTConfig
    from jax2onnx_nn.flax import mode_copy

    config = GPTConfig.small(n_layer=4, n_embd=256, n_head=8, block_size=64)
    model = mode_copy(GPT(config, rngs=nnx.Rngs(0)))
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (8, 64), dtype=np.int32)
    return model, TOKENS, [tokens]


MODELS = {"vit": vit_tiny, "gpt": gpt_4l}
PLUMBING = {
    "Add", "Mul", "Sub", "Div", "Reshape", "Transpose", "Shape", "Gather", "Concat", "Slice",
    "Unsqueeze", "Squeeze", "Cast", "Expand", "Range", "Where", "Identity", "Constant",
}  # fmt: skip


def op_counts(model: Any) -> collections.Counter[str]:
    """Op types of the main graph (with its If / Loop / Scan bodies) and the function bodies."""
    from jax2onnx_nn.testing import op_types

    functions = [n.op_type for f in model.functions for n in f.node]
    return collections.Counter(op_types(model, nested=True) + functions)


def profile_by_op(path: str, feeds: dict[str, np.ndarray], runs: int = 10) -> dict[str, float]:
    """Milliseconds per run of each op type, from onnxruntime's session profiler."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(os.path.dirname(path), "profile")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        session.run(None, feeds)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    totals: collections.Counter[str] = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            totals[event["args"]["op_name"]] += event["dur"] / 1e3 / runs
    return dict(totals.most_common())


def measure(
    name: str, opset: int, *, repeat: int, budget: float, profile: bool, cpu: bool = False
) -> dict[str, Any]:
    """Export ``name`` at ``opset``; its node counts and latency ratio."""
    import jax
    import onnx
    import onnxruntime as ort

    from jax2onnx_nn import to_onnx

    model, specs, values = MODELS[name]()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.onnx")
        to_onnx(model, specs, path=path, opset=opset)
        proto = onnx.load(path)
        counts = op_counts(proto)
        options = ort.SessionOptions()
        if cpu:
            options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feeds = {i.name: v for i, v in zip(session.get_inputs(), values, strict=True)}
        expected = np.asarray(jax.jit(model)(*values))
        error = float(np.max(np.abs(session.run(None, feeds)[0] - expected)))
        jitted = jax.jit(model)
        medians = interleaved_median_ms(
            {
                "ort": lambda: session.run(None, feeds),
                "jit": lambda: jax.block_until_ready(jitted(*values)),
            },
            repeat,
            budget,
            clock=time.process_time if cpu else time.perf_counter,
        )
        row: dict[str, Any] = {
            "model": name,
            "opset": opset,
            "nodes": sum(counts.values()),
            "ops": " ".join(f"{k}:{v}" for k, v in sorted(counts.items()) if k not in PLUMBING),
            "max_err": f"{error:.1e}",
            "ort_ms": round(medians["ort"], 2),
            "jit_ms": round(medians["jit"], 2),
            "ort/jit": round(medians["ort"] / medians["jit"], 2),
        }
        if profile:
            row["profile_ms"] = {k: round(v, 2) for k, v in profile_by_op(path, feeds).items()}
    return row


def main() -> None:
    from jax2onnx_nn.core.config import DEFAULT_OPSET, MAX_OPSET

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=sorted(MODELS))
    parser.add_argument("--opsets", nargs="*", type=int, default=[DEFAULT_OPSET, MAX_OPSET])
    parser.add_argument("--repeat", type=int, default=30, help="latency runs at most")
    parser.add_argument("--budget", type=float, default=5.0, help="seconds of runs per model")
    parser.add_argument("--profile", action="store_true", help="onnxruntime time per op type")
    parser.add_argument(
        "--cpu", action="store_true", help="CPU time per run, one thread each (see the docstring)"
    )
    args = parser.parse_args()
    if args.cpu:  # read when jax is first imported (in measure)
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        )
    for name in args.models:
        for opset in args.opsets:
            row = measure(
                name,
                opset,
                repeat=args.repeat,
                budget=args.budget,
                profile=args.profile,
                cpu=args.cpu,
            )
            profile = row.pop("profile_ms", None)
            print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            if profile:
                print("    " + "  ".join(f"{k}:{v}" for k, v in profile.items()), flush=True)
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
