"""Linear-algebra benchmark: graph size and onnxruntime latency against jax.jit.

    python benchmarks/linalg_bench.py                      # 4x4, 16x16, 64x64, float32
    python benchmarks/linalg_bench.py --sizes 8 24 --unroll-limit 64   # force unrolling

Per case and size: nodes of the main graph, nodes including Loop bodies, export time, median latency
of onnxruntime (one thread) and of jax.jit on CPU, on a batch of 8 well-conditioned matrices
(``python benchmarks/linalg_bench.py --cases eigh eigvalsh svd svdvals eig eigvals --sizes 4 16 64``
for the eigen solvers, ``eig_left_right`` being eig with left vectors too, ``eig_complex`` /
``eigvals_complex`` on complex64 Gaussian matrices; add ``--accuracy`` for svd/eigh errors
against float64 LAPACK, ``--solve-accuracy`` for float32 solve/inv errors, onnxruntime's and
jax.jit's). A size ``MxN`` (``--sizes 64x8 8x64``) is a Gaussian rectangle, for the cases that
take one (svd, svdvals, qr).
``--cpu-time`` measures onnxruntime by process CPU time instead of wall time (it runs on one thread,
so this is its own work, steady on a busy machine; jax.jit stays wall time). ``--unroll-limit``
overrides ``steps.UNROLL_LIMIT`` (largest unrolled size) and ``--block`` ``steps.BLOCK`` (columns
per trip of the blocked cholesky, lu, qr and triangular_solve), which is how the defaults were
chosen. Latencies are "median (min)": on a loaded machine the median moves with the load, the min
much less."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import onnx
from jax import lax

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.core.lowerings.lapack import steps

BATCH = 8


def gp_mean(a: jax.Array, b: jax.Array) -> jax.Array:
    """cholesky + two triangular solves (a GP posterior mean's linear algebra)."""
    factor = jnp.linalg.cholesky(a)
    z = jsl.solve_triangular(factor, b, lower=True)
    return jsl.solve_triangular(factor, z, lower=True, trans=1)


CASES: dict[str, Callable[[jax.Array, jax.Array], Any]] = {
    "eigvals": lambda a, b: jnp.linalg.eigvals(a),
    "eig": lambda a, b: jnp.linalg.eig(a),
    "eig_left_right": lambda a, b: lax.linalg.eig(a, compute_left_eigenvectors=True),
    # complex64 Gaussian matrices (fed to onnxruntime as (real, imag) pairs)
    "eigvals_complex": lambda a, b: jnp.linalg.eigvals(a),
    "eig_complex": lambda a, b: jnp.linalg.eig(a),
    "qr": lambda a, b: jnp.linalg.qr(a),
    "qr_pivoting": lambda a, b: jsl.qr(a, pivoting=True),
    "cholesky": lambda a, b: lax.linalg.cholesky(a, symmetrize_input=False),
    "trsm": lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True),
    "lu": lambda a, b: lax.linalg.lu(a),
    "cholesky+2 trsm": gp_mean,
    "solve": jnp.linalg.solve,
    "inv": lambda a, b: jnp.linalg.inv(a),
    "lu_solve": lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b),
    "slogdet": lambda a, b: jnp.linalg.slogdet(a),
    "eigh": lambda a, b: jnp.linalg.eigh(a),
    "eigvalsh": lambda a, b: jnp.linalg.eigvalsh(a),
    "svd": lambda a, b: jnp.linalg.svd(a),
    "svdvals": lambda a, b: jnp.linalg.svdvals(a),
}


def _latency_ms(
    run: Callable[[], Any], repeat: int, clock: Callable[[], float] = time.perf_counter
) -> str:
    """ "median (min)" of ``repeat`` runs after one warm-up, in ms."""
    run()
    times = []
    for _ in range(repeat):
        t = clock()
        run()
        times.append(clock() - t)
    return f"{1e3 * statistics.median(times):.3f} ({1e3 * min(times):.3f})"


def _all_nodes(graph: onnx.GraphProto) -> int:
    return sum(
        1 + sum(_all_nodes(a.g) for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
        for n in graph.node
    )


def _shape(size: str) -> tuple[int, int]:
    """``"16"`` -> (16, 16), ``"64x8"`` -> (64, 8)."""
    m, _, n = size.partition("x")
    return int(m), int(n or m)


def bench(name: str, size: str, repeat: int, clock: Callable[[], float] = time.perf_counter) -> str:
    import onnxruntime as ort

    fn = CASES[name]
    rng = np.random.default_rng(0)
    n, cols = _shape(size)
    m = rng.normal(size=(BATCH, n, cols))
    a = (m @ np.swapaxes(m, -1, -2) / n + np.eye(n) if n == cols else m).astype(np.float32)
    b = rng.normal(size=(BATCH, n, 1)).astype(np.float32)
    if name.endswith("_complex"):
        a = (m + 1j * rng.normal(size=m.shape)).astype(np.complex64)
    start = time.perf_counter()
    try:
        model = to_onnx(fn, [jax.ShapeDtypeStruct(a.shape, a.dtype), b.shape])
    except SpecError:  # a square-only case on a rectangle
        return f"| {name} | {size} | takes square matrices only | | | | |"
    except ConversionError as err:
        return f"| {name} | {size} | not lowered: {str(err).splitlines()[1].strip()} | | | | |"
    export_s = time.perf_counter() - start
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    pairs = np.stack([a.real, a.imag], axis=-1) if np.iscomplexobj(a) else a
    feeds = dict(zip([i.name for i in session.get_inputs()], [pairs, b], strict=False))
    ort_ms = _latency_ms(lambda: session.run(None, feeds), repeat, clock)
    jitted = jax.jit(fn)
    jax_ms = _latency_ms(lambda: jax.block_until_ready(jitted(a, b)), repeat)
    return (
        f"| {name} | {size} | {len(model.graph.node)} | {_all_nodes(model.graph)} | "
        f"{export_s:.1f} | {ort_ms} | {jax_ms} |"
    )


def accuracy(size: str, dtype: type) -> str:
    """svd, svdvals and eigh through onnxruntime on a batch of random Gaussian (m, n) matrices
    (eigh: square ones only), against float64 LAPACK: largest value error over the largest
    value, reconstruction error over max |a|, and deviation of U^T U, V^T V from I."""
    import onnxruntime as ort

    from jax2onnx_nn.core import jax_internals as jxi

    n, cols = _shape(size)
    a = np.random.default_rng(n).normal(size=(BATCH, n, cols)).astype(dtype)
    sym = a + np.swapaxes(a, -1, -2) if n == cols else np.zeros((BATCH, 1, 1), dtype)
    x64 = dtype == np.float64
    with jxi.x64(x64):
        model = to_onnx(
            lambda a, s: (
                *jnp.linalg.svd(a, full_matrices=False),
                jnp.linalg.svdvals(a),
                *jnp.linalg.eigh(s),
            ),
            [a, sym],
            enable_double_precision=x64,
        )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    u, s, vh, values, w, v = session.run(
        None, dict(zip([i.name for i in session.get_inputs()], [a, sym], strict=True))
    )
    eye = np.eye(min(n, cols))

    def rel(x: np.ndarray, ref: np.ndarray) -> float:
        return float(np.max(np.abs(x - ref)) / np.max(np.abs(ref)))

    mT = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    reference = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    svd = (
        rel(s, reference),
        rel((u * s[..., None, :]) @ vh, a),
        max(np.abs(mT(u) @ u - eye).max(), np.abs(vh @ mT(vh) - eye).max()),
        rel(values, reference),
    )
    row = " | ".join(f"{e:.1e}" for e in svd)
    if n == cols:
        eigh = (
            rel(w, np.linalg.eigvalsh(sym.astype(np.float64))),
            rel((v * w[..., None, :]) @ mT(v), sym),
            np.abs(mT(v) @ v - np.eye(n)).max(),
        )
        row += " | " + " | ".join(f"{e:.1e}" for e in eigh)
    else:
        row += " | - | - | -"
    return f"| {size} | {np.dtype(dtype).name} | {row} |"


def solve_accuracy(size: str, count: int = 2048) -> str:
    """solve and inv in float32 on ``count`` Gaussian (n, n) matrices (a few ill-conditioned
    among them), onnxruntime and jax.jit against float64 LAPACK: per matrix the largest error
    over the largest |entry| of the solution, as median / 90th / 99th percentile."""
    import onnxruntime as ort

    n = int(size)
    rng = np.random.default_rng(n)
    a, b = (
        rng.normal(size=(count, n, n)).astype(np.float32),
        rng.normal(size=(count, n, 1)).astype(np.float32),
    )
    cells = []
    for name, ref in (
        ("solve", np.linalg.solve(a.astype(np.float64), b.astype(np.float64))),
        ("inv", np.linalg.inv(a.astype(np.float64))),
    ):
        fn = CASES[name]
        session = ort.InferenceSession(
            to_onnx(fn, [a.shape, b.shape]).SerializeToString(), providers=["CPUExecutionProvider"]
        )
        feeds = dict(zip([i.name for i in session.get_inputs()], [a, b], strict=False))
        for got in (session.run(None, feeds)[0], np.asarray(jax.jit(fn)(a, b))):
            errors = np.max(np.abs(got - ref), axis=(-2, -1)) / np.max(np.abs(ref), axis=(-2, -1))
            cells.append(" / ".join(f"{e:.1e}" for e in np.percentile(errors, [50, 90, 99])))
    return f"| {n} | {' | '.join(cells)} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="*", default=["4", "16", "64"], help="n (square) or MxN")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--unroll-limit", type=int, default=None)
    parser.add_argument(
        "--block", type=int, default=None, help="columns per trip of the blocked factorizations"
    )
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument(
        "--accuracy", action="store_true", help="svd/eigh errors vs float64 LAPACK instead"
    )
    parser.add_argument(
        "--solve-accuracy",
        action="store_true",
        help="float32 solve/inv errors vs float64 LAPACK instead",
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="onnxruntime latency as process CPU time (one thread)",
    )
    args = parser.parse_args(argv)
    if args.solve_accuracy:
        print(
            "float32 Gaussian matrices, error over max |x| against float64 LAPACK, per matrix: "
            "median / p90 / p99"
        )
        print("| n | solve onnxruntime | solve jax.jit | inv onnxruntime | inv jax.jit |")
        print("|---|---|---|---|---|")
        for n in args.sizes:
            print(solve_accuracy(n), flush=True)
        return 0
    if args.accuracy:
        print(f"batch {BATCH} random Gaussian matrices through onnxruntime vs float64 LAPACK")
        print(
            "| n | dtype | svd values | svd U s Vh | svd orthogonality | svdvals | eigh values | "
            "eigh V w V^T | eigh orthogonality |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for dtype in (np.float32, np.float64):
            for n in args.sizes:
                print(accuracy(n, dtype), flush=True)
        return 0
    if args.unroll_limit is not None:
        steps.UNROLL_LIMIT = args.unroll_limit
    if args.block is not None:
        steps.BLOCK = args.block
    clock = time.process_time if args.cpu_time else time.perf_counter
    print(
        f"batch {BATCH}, float32, unroll limit {steps.UNROLL_LIMIT}, block {steps.BLOCK}; "
        "latency: median (min) ms of --repeat runs, onnxruntime on 1 thread"
        + (" as CPU time" if args.cpu_time else "")
    )
    print("| case | n | nodes | nodes incl. Loop bodies | export s | onnxruntime ms | jax.jit ms |")
    print("|---|---|---|---|---|---|---|")
    for name in args.cases:
        for n in args.sizes:
            print(bench(name, n, args.repeat, clock), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
