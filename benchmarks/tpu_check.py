"""Exports from an accelerator host, in one command: ``python3 -m benchmarks.tpu_check``.

Run it on a TPU (or GPU) host from the repository root; it runs on a CPU host too (``--small``
for a quick run). It needs jax (with the accelerator's jaxlib, e.g. ``pip install
"jax[tpu]"``), numpy, onnx, onnx-ir, onnxruntime and flax: ``pip install -e . onnxruntime
flax`` from the repository root.

It prints one table:

1. the benchmark models (``benchmarks/models.py``), built with their weights on the default
   device, exported and verified in onnxruntime: JAX's reference on the CPU (verify's default,
   the "max abs" column) and on the default device (the "on device" column: a TPU's default
   matmul precision is bfloat16 passes, so that one is 1e-2 off for a right export);
2. an MLP of ~1.2 GB of weights made on the devices (sharded over all of them), exported with
   ``path=``: the host memory the export needed above what the process held, over the weight
   bytes (``benchmarks/device_memory.py``, in a fresh process);
3. a ``shard_map`` program over all devices and Pallas kernels (compiled on a TPU, in
   interpret mode elsewhere), exported and verified against JAX on the default device.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

MODELS = ["jax_mlp", "flax_mlp", "cnn", "vit", "gpt_4l"]
SMALL_MODELS = ["jax_mlp", "flax_mlp"]


def _row(name: str, seconds: float, status: str, cpu: str, device: str, note: str = "") -> None:
    print(f"{name:<28} {seconds:>7.1f} {status:<9} {cpu:>11} {device:>11}  {note}", flush=True)


def _verify_both(
    fn: Any, model: Any, inputs: list[Any], sizes: dict[str, list[int]]
) -> tuple[Any, Any]:
    from jax2onnx_nn import verify

    on_cpu = verify(fn, model, inputs, sizes=sizes, jit=True)
    on_device = verify(fn, model, inputs, sizes=sizes, jit=True, reference_device="default")
    return on_cpu, on_device


def check_models(names: list[str]) -> bool:
    import jax

    from benchmarks import models
    from jax2onnx_nn import to_onnx

    ok = True
    for name in names:
        start = time.perf_counter()
        try:
            fn, inputs, options = getattr(models, name)()
            model = to_onnx(fn, inputs, **options)
            sizes = {"B": [1, 2]} if any("B" in str(s) for s in inputs) else {}
            on_cpu, on_device = _verify_both(fn, model, inputs, sizes)
            status = "PASS" if on_cpu.ok else "MISMATCH"
            ok &= on_cpu.ok
            _row(
                name,
                time.perf_counter() - start,
                status,
                f"{on_cpu.max_abs:.2g}",
                f"{on_device.max_abs:.2g}",
                f"reference: {on_cpu.reference}",
            )
        except Exception as err:
            ok = False
            _row(
                name,
                time.perf_counter() - start,
                "ERROR",
                "-",
                "-",
                f"{type(err).__name__}: {str(err).splitlines()[0][:120]}",
            )
            traceback.print_exc(limit=3, file=sys.stderr)
    del jax
    return ok


def check_streaming(megabytes: float) -> bool:
    start = time.perf_counter()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.device_memory", "--megabytes", str(megabytes)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    figures = dict(re.findall(r"(\w+)=(\S+)", result.stdout))
    if result.returncode != 0 or "ratio" not in figures:
        _row(
            f"path= {megabytes:g} MB",
            time.perf_counter() - start,
            "ERROR",
            "-",
            "-",
            result.stderr.strip()[-200:],
        )
        return False
    ratio = float(figures["ratio"])
    status = "PASS" if ratio <= 0.3 else "OVER 0.3"
    _row(
        f"path= {megabytes:g} MB",
        time.perf_counter() - start,
        status,
        "-",
        "-",
        f"host peak / weight bytes {ratio:.3f} ({int(figures['host_extra_bytes']) / 1e6:.0f} MB "
        "for "
        f"{int(figures['weight_bytes']) / 1e6:.0f} MB on {figures['devices']} "
        f"{figures['platform']} device(s), "
        f"export {figures['seconds']} s)",
    )
    return ratio <= 0.3


def _shard_map_program() -> tuple[Callable[..., Any], list[Any]]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import PartitionSpec as P

    shard_map = (
        getattr(jax, "shard_map", None)
        or __import__("jax.experimental.shard_map", fromlist=["x"]).shard_map
    )
    n = len(jax.devices())
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    w = jax.random.normal(jax.random.key(1), (64, 32 * n)) / 8

    def local(x, w):  # tensor parallel: columns of w on each device, then all_gather and psum
        h = jnp.tanh(x @ w)
        gathered = lax.all_gather(h, "x", axis=1, tiled=True)
        return gathered, lax.psum(h.sum(axis=1), "x")

    def program(x):
        return shard_map(
            local, mesh=mesh, in_specs=(P(), P(None, "x")), out_specs=(P(), P()), check_vma=False
        )(x, w)

    return program, [(8, 64)]


def _pallas_programs(interpret: bool) -> list[tuple[str, Callable[..., Any], list[Any]]]:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.sin(x_ref[...]) + y_ref[...] * 2

    def add(x, y):
        block = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(
            add_kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // 8,),
            in_specs=[block, block],
            out_specs=block,
            interpret=interpret,
        )(x, y)

    def softmax_kernel(x_ref, o_ref):
        x = x_ref[...]
        e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
        o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)

    def softmax(x):
        block = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(
            softmax_kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // 8,),
            in_specs=[block],
            out_specs=block,
            interpret=interpret,
        )(x)

    return [("pallas add", add, [(32, 128), (32, 128)]), ("pallas softmax", softmax, [(32, 128)])]


def check_programs() -> bool:
    import jax

    from jax2onnx_nn import to_onnx, verify

    platform = jax.default_backend()
    interpret = platform not in ("tpu", "gpu")
    programs = [(f"shard_map {len(jax.devices())} dev", *_shard_map_program())]
    programs += [
        (f"{name} ({'interpret' if interpret else 'compiled'})", fn, inputs)
        for name, fn, inputs in _pallas_programs(interpret)
    ]
    ok = True
    for name, fn, inputs in programs:
        start = time.perf_counter()
        try:
            model = to_onnx(fn, inputs)
            # compiled kernels and the mesh's devices are the accelerator's: the reference is
            # computed there, at full float32 matmul precision (a TPU's default is bf16 passes)
            # ('highest' is bf16 passes too: measured ~1e-4 off float32 on a v5e, so 1e-4)
            with jax.default_matmul_precision("highest"):
                report = verify(fn, model, inputs, reference_device="default", rtol=1e-4, atol=1e-4)
            ok &= report.ok
            _row(
                name,
                time.perf_counter() - start,
                "PASS" if report.ok else "MISMATCH",
                "-",
                f"{report.max_abs:.2g}",
                f"reference: {report.reference}",
            )
        except Exception as err:
            ok = False
            _row(
                name,
                time.perf_counter() - start,
                "ERROR",
                "-",
                "-",
                f"{type(err).__name__}: {str(err).splitlines()[0][:120]}",
            )
            traceback.print_exc(limit=3, file=sys.stderr)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="export and verify from an accelerator host")
    parser.add_argument(
        "--small", action="store_true", help="two small models and a 100 MB export (a quick run)"
    )
    parser.add_argument(
        "--megabytes",
        type=float,
        default=None,
        help="weights of the streamed export (default 1200)",
    )
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["models", "streaming", "programs"]
    )
    args = parser.parse_args(argv)
    print(f"{'check':<28} {'seconds':>7} {'result':<9} {'max abs':>11} {'on device':>11}  note")
    print("-" * 100)
    ok = True
    # first, in a process of its own: one process at a time can hold a TPU, so this one opens
    # the device only after the streamed export's process has ended
    if "streaming" not in args.skip:
        ok &= check_streaming(args.megabytes or (100 if args.small else 1200))
    import jax

    import jax2onnx_nn

    print(
        f"jax {jax.__version__} on {jax.default_backend()} ({len(jax.devices())} x "
        f"{jax.devices()[0].device_kind}), jax2onnx_nn {jax2onnx_nn.__version__}"
    )
    if "models" not in args.skip:
        ok &= check_models(SMALL_MODELS if args.small else MODELS)
    if "programs" not in args.skip:
        ok &= check_programs()
    print("-" * 100)
    print("all PASS" if ok else "some checks did not pass")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
