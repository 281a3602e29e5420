"""Export benchmark: per model, export time (trace / lower / passes / serialize), graph size,
peak memory, and onnxruntime latency against jax.jit on the same inputs.

    python benchmarks/export_bench.py                 # the default set
    python benchmarks/export_bench.py --models gpt2_124m --batch 1

Each model runs in a fresh subprocess so that peak RSS is its own.
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

# name -> (module, factory returning (callable, input specs, concrete sizes for symbolic dims))
MODELS: dict[str, tuple[str, str]] = {
    "jax_mlp": ("benchmarks.models", "jax_mlp"),
    "flax_mlp": ("benchmarks.models", "flax_mlp"),
    "cnn": ("benchmarks.models", "cnn"),
    "gpt2_small": ("benchmarks.models", "gpt2_small"),
    "gpt2_124m": ("benchmarks.models", "gpt2_124m"),
    "gpt2_small_lax": ("benchmarks.models", "gpt2_small_lax"),
    "gpt2_124m_lax": ("benchmarks.models", "gpt2_124m_lax"),
    "eqx_mlp": ("benchmarks.models", "eqx_mlp"),
    "eqx_transformer": ("benchmarks.models", "eqx_transformer"),
    "eqx_vit": ("benchmarks.models", "eqx_vit"),
}
DEFAULT = ["jax_mlp", "flax_mlp", "cnn", "gpt2_small", "gpt2_small_lax", "eqx_mlp", "eqx_transformer", "eqx_vit"]


def _median_ms(run: Any, repeat: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def bench_one(name: str, batch: int, repeat: int) -> dict[str, Any]:
    import jax
    import numpy as np
    import onnx_ir as ir
    import onnxruntime as ort

    from jax2onnx_nn import export_model
    from jax2onnx_nn.core.specs import parse_specs
    from jax2onnx_nn.core.verify import random_inputs

    module, factory = MODELS[name]
    fn, inputs, options = getattr(importlib.import_module(module), factory)()
    timings: dict[str, float] = {}
    start = time.perf_counter()
    model = export_model(fn, inputs, timings=timings, **options)
    t = time.perf_counter()
    proto = ir.to_proto(model)
    data = proto.SerializeToString()
    timings["serialize"] = time.perf_counter() - t
    total = time.perf_counter() - start

    specs = parse_specs(inputs)
    avals = [leaf for _, leaf in specs.flat()[0]]
    sizes = {"B": batch, "T": 16 if name.startswith("gpt2_small") else 64}
    flat = random_inputs(avals, sizes, np.random.default_rng(0))
    if name.startswith("gpt2"):
        flat = [np.random.default_rng(0).integers(0, 90, size=np.shape(flat[0])).astype(np.int32)]
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = 2
    session = ort.InferenceSession(data, session_options, providers=["CPUExecutionProvider"])
    feeds = {m.name: np.asarray(v) for m, v in zip(session.get_inputs(), flat, strict=True)}
    ort_ms = _median_ms(lambda: session.run(None, feeds), repeat)
    jitted = jax.jit(fn)
    jax_ms = _median_ms(lambda: jax.block_until_ready(jitted(*flat)), repeat)
    return {
        "model": name,
        "trace_s": round(timings["trace"], 3),
        "lower_s": round(timings["lower"], 3),
        "passes_s": round(timings["passes"], 3),
        "serialize_s": round(timings["serialize"], 3),
        "export_s": round(total, 3),
        "nodes": len(proto.graph.node),
        "functions": len(proto.functions),
        "file_mb": round(len(data) / 1e6, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "ort_ms": round(ort_ms, 3),
        "jax_jit_ms": round(jax_ms, 3),
        "ort_vs_jax": round(ort_ms / jax_ms, 2) if jax_ms else None,
        "batch": batch,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=DEFAULT, choices=sorted(MODELS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(bench_one(args.one, args.batch, args.repeat)))
        return 0
    rows = []
    for name in args.models:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.export_bench", "--one", name, "--batch", str(args.batch), "--repeat", str(args.repeat)],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            print(f"{name}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    columns = ["model", "trace_s", "lower_s", "passes_s", "serialize_s", "export_s", "nodes", "functions", "file_mb", "peak_rss_mb", "ort_ms", "jax_jit_ms", "ort_vs_jax"]
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row.get(c)) for c in columns))
    return 0 if len(rows) == len(args.models) else 1


if __name__ == "__main__":
    sys.exit(main())
