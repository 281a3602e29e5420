"""Export benchmark: one table of export time (trace / lower / passes / serialize), memory,
graph size and onnxruntime latency against jax.jit, per model.

    python -m benchmarks.export_bench                    # the default set
    python -m benchmarks.export_bench --models gpt2_124m_b1 heat_fori
    python -m benchmarks.export_bench --big              # also the 300M / 600M-parameter MLPs
    python -m benchmarks.export_bench --big --memory-modes --no-latency --warm 1
        # a row per export mode (path, external, proto, ir) for each model given, one at a time

Each model runs in a fresh subprocess, so that its memory is its own. Columns:

- ``trace/lower/passes``: seconds of a warm export (``export_model``, from the second export in
  the process on), the median of ``--warm`` exports; ``export``: that export's wall time (the
  ``onnx_ir.Model``, weights not copied: what ``to_onnx`` costs before writing bytes);
  ``jaxpr``: ``jax.make_jaxpr`` of the same function on concrete inputs (warm, median of
  ``--warm``); ``export/jaxpr`` their ratio; ``min ratio`` the ratio of the fastest export to
  the fastest ``make_jaxpr`` (on a shared machine the fastest run is the one least slowed by
  the other processes: compare this column across runs); ``cpu ratio`` the same in this
  thread's CPU time (``time.thread_time``: time spent waiting for a core is left out). Each
  warm export is followed by a ``make_jaxpr``, so that both see the same load.
- ``serialize``: ``ir.to_proto`` + ``SerializeToString`` of that model (copies every weight:
  seconds grow with the weight bytes, not with the model's size as a program);
  ``total`` = ``export`` + ``serialize``.
- ``s/layer`` for the GPT-2 depth series: ``export`` over the layers, and ``ds/layer``, the
  extra ``export`` seconds per extra layer against the previous depth of the series.
- ``rss/w``: peak RSS above the process baseline (model built, nothing exported yet) during the
  first export, over the weight bytes (left out below 1 MB of weights, where it measures the
  interpreter, not the weights). The export is ``--mode``: ``path`` ``to_onnx(..., path=...)``
  (one file below ~1.8 GB of weights, external data above), ``external`` the same with
  ``external_data=True``, ``proto`` ``to_onnx`` returning a ModelProto, ``ir`` ``export_model``.
- ``nodes``: nodes of the main graph + nodes of function bodies (``fn``: function count).
- ``init_mb``, ``file_mb``: initializer bytes, size of the written file (with external data).
- ``ort_ms``, ``jit_ms``, ``ort/jit``: median latency at the row's batch size, over at most
  ``--repeat`` runs and about ``--budget`` seconds of runs each (at least 3 runs), the
  onnxruntime and ``jax.jit`` runs taken in turn (both see the same load); onnxruntime has
  as many intra-op threads as the machine has cores (XLA's CPU pool uses them all), spinning
  while idle (its default) unless ``--ort-no-spinning``.

The machine's load average is printed under the table: on a shared machine the seconds are
only comparable within one run of the table.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

# name -> (factory in benchmarks.models, its arguments, batch, sequence length)
MODELS: dict[str, tuple[str, tuple[Any, ...], int, int]] = {
    "jax_mlp": ("jax_mlp", (), 8, 0),
    "flax_mlp": ("flax_mlp", (), 8, 0),
    "cnn": ("cnn", (), 8, 0),
    "vit": ("vit", (), 8, 0),
    "eqx_vit": ("eqx_vit", (), 8, 0),
    "gpt_4l": ("gpt_4l", (), 8, 64),
    "gpt2_small": ("gpt2_small", (), 8, 16),
    "gpt2_124m_b1": ("gpt2_124m", (), 1, 64),
    "gpt2_124m_b8": ("gpt2_124m", (), 8, 64),
    "gpt2_L2": ("gpt2_layers", (2,), 1, 64),
    "gpt2_L4": ("gpt2_layers", (4,), 1, 64),
    "gpt2_L8": ("gpt2_layers", (8,), 1, 64),
    "gpt2_L12": ("gpt2_layers", (12,), 1, 64),
    "gru": ("gru", (), 8, 64),
    "linen_gru": ("linen_gru", (), 8, 64),
    "heat_fori": ("heat_fori", (), 1, 0),
    "heat_while": ("heat_while", (), 1, 0),
    "mlp_300m": ("big_mlp", (300,), 8, 0),
    "mlp_600m": ("big_mlp", (600,), 8, 0),
}
BIG = ["mlp_300m", "mlp_600m"]
MODES = ["path", "external", "proto", "ir"]
DEFAULT = [name for name in MODELS if name not in BIG]
COLUMNS = [
    "model",
    "trace",
    "lower",
    "passes",
    "export",
    "jaxpr",
    "export/jaxpr",
    "min ratio",
    "cpu ratio",
    "serialize",
    "total",
    "s/layer",
    "ds/layer",
    "rss/w",
    "nodes",
    "fn",
    "init_mb",
    "file_mb",
    "ort_ms",
    "jit_ms",
    "ort/jit",
]


def interleaved_median_ms(
    runs: dict[str, Any],
    repeat: int,
    budget: float,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median milliseconds of each of ``runs`` after ``warmup`` runs of each, the runs taken in
    turn (one of each per round) so that all of them see the same machine load: ``repeat``
    rounds, fewer (at least 3) when they take more than ``budget`` seconds per run together.
    ``clock``: wall time, or ``time.process_time`` for the CPU time of the process."""
    for run in runs.values():
        for _ in range(warmup):
            run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    rounds = 0
    while rounds < repeat and (rounds < 3 or max(sum(t) for t in times.values()) < budget):
        for name, run in runs.items():
            t = clock()
            run()
            times[name].append(clock() - t)
        rounds += 1
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def _timed(run: Any) -> tuple[float, float, Any]:
    """(wall seconds, this thread's CPU seconds, result) of one call of ``run``."""
    wall, cpu = time.perf_counter(), time.thread_time()
    result = run()
    return time.perf_counter() - wall, time.thread_time() - cpu, result


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak_rss() -> None:
    """Linux: make VmHWM (the peak RSS) restart from the current RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _count_nodes(proto: Any) -> int:
    def count(nodes: Any) -> int:
        total = 0
        for node in nodes:
            total += 1
            for attr in node.attribute:
                total += count(attr.g.node) if attr.HasField("g") else 0
                total += sum(count(g.node) for g in attr.graphs)
        return total

    return count(proto.graph.node) + sum(count(f.node) for f in proto.functions)


def bench_one(
    name: str,
    repeat: int,
    mode: str,
    latency: bool,
    warm: int = 3,
    budget: float = 5.0,
    ort_spinning: bool = True,
) -> dict[str, Any]:
    import jax
    import numpy as np
    import onnx_ir as ir

    from jax2onnx_nn import export_model, to_onnx
    from jax2onnx_nn.core import jax_internals as jxi
    from jax2onnx_nn.core.specs import parse_specs
    from jax2onnx_nn.core.verify import random_inputs

    factory, args, batch, seq = MODELS[name]
    fn, inputs, options = getattr(importlib.import_module("benchmarks.models"), factory)(*args)
    x64 = bool(options.get("enable_double_precision"))
    row: dict[str, Any] = {"model": name, "batch": batch}

    # first export: memory above the baseline, in the chosen mode
    tmp = tempfile.mkdtemp(prefix="export_bench-")
    path = os.path.join(tmp, "model.onnx")
    gc.collect()
    baseline = _rss_kb("VmRSS")
    _reset_peak_rss()
    if mode in ("path", "external"):
        to_onnx(
            fn, inputs, path=path, external_data=True if mode == "external" else None, **options
        )
    elif mode == "proto":
        to_onnx(fn, inputs, **options)
    else:
        export_model(fn, inputs, **options)
    peak = _rss_kb("VmHWM") - baseline

    with jxi.x64(x64):
        specs = parse_specs(inputs, enable_double_precision=x64)
        avals = [leaf for _, leaf in specs.flat()[0]]
        rng = np.random.default_rng(0)
        flat = random_inputs(avals, {"B": batch, "T": seq}, rng)
        if name.startswith("gpt"):
            flat = [rng.integers(0, 90, size=np.shape(flat[0])).astype(np.int32)]
        from jax2onnx_nn.testing.roundtrip import reference_for

        reference = reference_for(fn)

    # warm exports, each followed by a make_jaxpr of the same function (so that both see the
    # same load on a shared machine): the median export's timings
    def export() -> tuple[Any, dict[str, float]]:
        timings: dict[str, float] = {}
        return export_model(fn, inputs, timings=timings, **options), timings

    def make_jaxpr() -> None:
        # a fresh closure each time: jax caches traces by function; the module's weights are
        # constants of the jaxpr, as in the export
        with jxi.x64(x64):
            jax.make_jaxpr(lambda *xs: reference(*xs))(*flat)

    make_jaxpr()
    exports, jaxprs = [], []
    for _ in range(warm):
        exports.append(_timed(export))
        jaxprs.append(_timed(make_jaxpr))
    seconds, _, (model, timings) = sorted(exports, key=lambda r: r[0])[len(exports) // 2]
    jaxpr_seconds = statistics.median(r[0] for r in jaxprs)
    row["jaxpr"] = round(jaxpr_seconds, 4)
    row["export/jaxpr"] = round(seconds / jaxpr_seconds, 2)
    row["min ratio"] = round(min(r[0] for r in exports) / min(r[0] for r in jaxprs), 2)
    row["cpu ratio"] = round(min(r[1] for r in exports) / min(r[1] for r in jaxprs), 2)
    del exports
    weight_bytes = sum(
        v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None
    )
    t = time.perf_counter()
    if weight_bytes < 1.8e9:
        proto = ir.to_proto(model)
        data: Any = proto.SerializeToString()
        row["serialize"] = round(time.perf_counter() - t, 3)
    else:  # above the protobuf limit: written with external data only
        proto, data = None, None
    if mode not in ("path", "external"):
        from jax2onnx_nn.core.api import save_model

        save_model(model, path)
    file_bytes = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp))
    if proto is None:
        import onnx

        proto = onnx.load(path, load_external_data=False)
    del model
    row.update({k: round(timings[k], 3) for k in ("trace", "lower", "passes")})
    row["export"] = round(seconds, 3)
    row["total"] = round(seconds + row.get("serialize", 0.0), 3)
    if name.startswith("gpt2_L"):
        row["layers"] = args[0]
        row["s/layer"] = round(seconds / args[0], 3)
    if weight_bytes >= 1e6:
        row["rss/w"] = round(peak * 1024 / weight_bytes, 2)
    row["nodes"], row["fn"] = _count_nodes(proto), len(proto.functions)
    row["init_mb"], row["file_mb"] = round(weight_bytes / 1e6, 2), round(file_bytes / 1e6, 2)

    with jxi.x64(x64):
        if latency:
            import onnxruntime as ort

            session_options = ort.SessionOptions()
            session_options.intra_op_num_threads = os.cpu_count() or 1  # as many as XLA's CPU pool
            if (
                not ort_spinning
            ):  # idle intra-op threads sleep instead of spinning (a shared machine)
                session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(
                path if data is None else data, session_options, providers=["CPUExecutionProvider"]
            )
            feeds = {m.name: np.asarray(v) for m, v in zip(session.get_inputs(), flat, strict=True)}
            jitted = jax.jit(reference)
            medians = interleaved_median_ms(
                {
                    "ort": lambda: session.run(None, feeds),
                    "jit": lambda: jax.block_until_ready(jitted(*flat)),
                },
                repeat,
                budget,
            )
            row["ort_ms"], row["jit_ms"] = round(medians["ort"], 3), round(medians["jit"], 3)
            row["ort/jit"] = round(row["ort_ms"] / row["jit_ms"], 2)
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)
    return row


def _depth_slopes(rows: list[dict[str, Any]]) -> None:
    """``ds/layer`` of each GPT-2 depth row: extra export seconds per extra layer against the
    previous (shallower) row of the series."""
    series = sorted((r for r in rows if "layers" in r), key=lambda r: r["layers"])
    for shallow, deep in zip(series, series[1:], strict=False):
        deep["ds/layer"] = round(
            (deep["export"] - shallow["export"]) / (deep["layers"] - shallow["layers"]), 3
        )


def _run(name: str, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """One model's row, measured in a subprocess of its own; a failed model is a row that
    says so (the table stays complete), its error on stderr."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.export_bench",
        "--one",
        name,
        "--mode",
        mode,
        "--repeat",
        str(args.repeat),
        "--warm",
        str(args.warm),
        "--budget",
        str(args.budget),
    ]
    if args.no_latency:
        command.append("--no-latency")
    if args.ort_no_spinning:
        command.append("--ort-no-spinning")
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"{name}: no result after {args.timeout} s", file=sys.stderr)
        return {"model": name, "trace": "timeout"}
    if proc.returncode != 0:
        print(f"{name}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
        return {"model": name, "trace": "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=None, choices=sorted(MODELS))
    parser.add_argument("--big", action="store_true", help="also the 300M / 600M-parameter MLPs")
    parser.add_argument(
        "--mode", default="path", choices=MODES, help="export mode of the memory column"
    )
    parser.add_argument(
        "--memory-modes", action="store_true", help="a row per export mode (rss/w of each)"
    )
    parser.add_argument("--repeat", type=int, default=20, help="latency runs at most")
    parser.add_argument(
        "--budget",
        type=float,
        default=5.0,
        help="seconds of latency runs per runtime and model (at least 3 runs)",
    )
    parser.add_argument(
        "--warm",
        type=int,
        default=3,
        help="warm exports (and make_jaxpr runs) to take the median of",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds per model before it counts as failed"
    )
    parser.add_argument(
        "--no-latency", action="store_true", help="skip onnxruntime / jax.jit latencies"
    )
    parser.add_argument(
        "--ort-no-spinning",
        action="store_true",
        help="onnxruntime's idle intra-op threads sleep (session.intra_op.allow_spinning=0): on a "
        "loaded machine its default spin-waiting takes the cores from the work",
    )
    parser.add_argument("--json", help="also write the rows there")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(
            json.dumps(
                bench_one(
                    args.one,
                    args.repeat,
                    args.mode,
                    not args.no_latency,
                    args.warm,
                    args.budget,
                    not args.ort_no_spinning,
                )
            )
        )
        return 0
    names = args.models or DEFAULT + (BIG if args.big else [])
    rows, failed = [], 0
    load = os.getloadavg()
    for name in names:
        modes = MODES if args.memory_modes else [args.mode]
        for mode in modes:
            row = _run(name, args, mode)
            failed += row.get("trace") in ("failed", "timeout")
            if len(modes) > 1:
                row["model"] = f"{name} ({mode})"
            rows.append(row)
            print(" | ".join(str(row.get(c, "")) for c in COLUMNS), file=sys.stderr, flush=True)
    _depth_slopes(rows)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for row in rows:
        print("| " + " | ".join(str(row.get(c, "")) for c in COLUMNS) + " |")
    end = os.getloadavg()
    print(
        f"\nload average (1 min) at start {load[0]:.1f}, at end {end[0]:.1f}, on {os.cpu_count()} "
        "cores"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
