"""Share of random well-conditioned matrices whose exported vectors match JAX's, sign included.

    python -m benchmarks.vector_signs                       # every function, float32 and float64
    python -m benchmarks.vector_signs --functions eigh_lower svd_full --batch 64
    python -m benchmarks.vector_signs --functions schur eig --kernel Haswell
    python -m benchmarks.vector_signs --functions eigh_lower --sizes 26 32 64 --no-reproducers

Per function (eigh with the lower and the upper triangle, svd full / reduced, eig (right
vectors, left ones alone, both: each side's share and whether the values come in JAX's
order; and of complex matrices), schur, qr reduced / complete, hessenberg), dtype and shape
(square 1..16, tall, wide, 1xN, Nx1, batched):
one export of a batch of matrices, run in onnxruntime, each matrix's vectors compared with
JAX's CPU result column by column, not up to sign. A column matches when it is within
``TOLERANCE * eps * n / gap`` of JAX's (gap: the smallest distance of its value to another,
relative to the largest value: the conditioning of the vector), and a matrix matches when all
its vector columns do. Matrices are drawn as issue 34 describes: a small perturbation (a
symmetric tanh/sin outer product, or tanh of a Gaussian / 5) plus a diagonal of distinct values
3, 6, 9, ..., and Gaussian ones. Prints the share per function and dtype, and the two
reproducers of issue 34 (a 2x2 eigh, a batch of 1x5 svds).

``--kernel CORE`` adds a column: the share of matrices on which JAX itself, with OpenBLAS's
kernels for another CPU (``OPENBLAS_CORETYPE=CORE`` in a subprocess: Haswell is what a machine
with AVX2 and no AVX-512 runs), gives the vectors it gives here. Where JAX's signs hinge on the
rounding of a BLAS kernel, that share is below 100% and is the ceiling of any export.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from jax2onnx_nn import to_onnx  # noqa: E402
from jax2onnx_nn.core.runtimes import open_session  # noqa: E402

jax.config.update("jax_enable_x64", True)

TOLERANCE = 1000.0
SQUARE = [(n, n) for n in (1, 2, 3, 4, 5, 8, 16)]
RECTANGLES = [(5, 3), (8, 2), (3, 5), (2, 8), (1, 5), (5, 1)]

# name -> (fn of a -> (vectors..., values or None), takes rectangles, symmetric input)
FUNCTIONS: dict[str, tuple[Callable[[jax.Array], tuple], bool, bool]] = {
    "eigh_lower": (lambda a: (*lax.linalg.eigh(a, lower=True),), False, True),
    "eigh_upper": (lambda a: (*lax.linalg.eigh(a, lower=False),), False, True),
    "svd_full": (lambda a: (*jnp.linalg.svd(a, full_matrices=True),), True, False),
    "svd_reduced": (lambda a: (*jnp.linalg.svd(a, full_matrices=False),), True, False),
    "eig": (lambda a: jnp.linalg.eig(a)[::-1], False, False),
    # left vectors alone, and both sides (left, right, values): each side's share printed
    "eig_left": (
        lambda a: lax.linalg.eig(
            a, compute_left_eigenvectors=True, compute_right_eigenvectors=False
        )[::-1],
        False,
        False,
    ),
    "eig_both": (
        lambda a: (lambda w, vl, vr: (vl, vr, w))(
            *lax.linalg.eig(a, compute_left_eigenvectors=True)
        ),
        False,
        False,
    ),
    # complex matrices (complex64 for float32, complex128 for float64)
    "eig_complex": (lambda a: jnp.linalg.eig(a)[::-1], False, False),
    "schur": (lambda a: jsl.schur(a)[::-1], False, False),
    "qr_reduced": (lambda a: (*jnp.linalg.qr(a, mode="reduced"),), True, False),
    "qr_complete": (lambda a: (*jnp.linalg.qr(a, mode="complete"),), True, False),
    "hessenberg": (lambda a: jsl.hessenberg(a, calc_q=True)[::-1], False, False),
}


def draw(
    rng: np.random.Generator, kind: str, batch: int, m: int, n: int, symmetric: bool, dtype: Any
) -> np.ndarray:
    """``batch`` matrices m x n of ``kind``: 'perturbed' (a small perturbation plus a diagonal
    of distinct values 3, 6, ...) or 'gaussian' (of a complex dtype: both parts so, the
    diagonal on the real one)."""
    if np.issubdtype(dtype, np.complexfloating):
        x = rng.standard_normal((2, batch, m, n))
        if kind == "perturbed":
            x = np.tanh(x) / 5
            x[0] = x[0] + np.eye(m, n) * (3.0 * np.arange(1, n + 1))[None, :]
        return (x[0] + 1j * x[1]).astype(dtype)
    x = rng.standard_normal((batch, m, n))
    if kind == "gaussian":
        a = (x + np.swapaxes(x, -1, -2)) / 2 if symmetric else x
    else:
        diagonal = np.eye(m, n) * (3.0 * np.arange(1, n + 1))[None, :]
        if symmetric:
            v = rng.standard_normal((batch, n))
            t, s = np.tanh(v), np.sin(v)
            a = (t[:, :, None] * s[:, None, :] + s[:, :, None] * t[:, None, :]) / 4 + diagonal
        else:
            a = np.tanh(x) / 5 + diagonal
    return a.astype(dtype)


def _gaps(values: np.ndarray) -> np.ndarray:
    """Each value's distance to the nearest other one over the largest magnitude, (batch, k)."""
    values = np.asarray(values)
    if values.shape[-1] < 2:
        return np.ones(values.shape)
    d = np.abs(values[..., :, None] - values[..., None, :])
    k = values.shape[-1]
    d = np.where(np.eye(k, dtype=bool), np.inf, d)
    scale = np.max(np.abs(values), axis=-1, keepdims=True)
    return np.min(d, axis=-1) / np.where(scale == 0, 1, scale)


def _values_of(name: str, outputs: tuple, a: np.ndarray) -> np.ndarray:
    if name.startswith("eigh"):
        return outputs[-1]
    if name.startswith("svd"):
        return outputs[1]
    if name.startswith("eig"):  # eig's values come last
        return outputs[-1]
    if name == "schur":
        return np.diagonal(outputs[-1], axis1=-2, axis2=-1)
    return np.ones(a.shape[:-2] + (min(a.shape[-2:]),))  # qr, hessenberg: no values to separate


def _vector_outputs(name: str, outputs: tuple) -> list[np.ndarray]:
    """The outputs holding vectors (columns), and for svd's vh its rows as columns."""
    if name.startswith("svd"):
        return [outputs[0], np.swapaxes(outputs[2], -1, -2)]
    if name == "eig_both":
        return [outputs[0], outputs[1]]
    return [outputs[0]]


def matches(
    name: str, ours: tuple, ref: tuple, a: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(sign agrees, exact within tolerance, exact per vector output) per matrix of the batch."""
    eps = float(np.finfo(a.real.dtype).eps)
    gaps = _gaps(_values_of(name, ref, a))
    n = max(a.shape[-2:])
    sign_ok = np.ones(a.shape[0], bool)
    exact_ok = np.ones(a.shape[0], bool)
    per_output = []
    for mine, theirs in zip(_vector_outputs(name, ours), _vector_outputs(name, ref), strict=True):
        k = min(gaps.shape[-1], mine.shape[-1])
        gap = np.ones(mine.shape[:-2] + (mine.shape[-1],))
        gap[..., :k] = gaps[..., :k]
        tol = TOLERANCE * eps * n / np.maximum(gap, 1e-300)
        diff = np.max(np.abs(mine - theirs), axis=-2)
        # a column's sign agrees when it is nearer JAX's than the negated one is
        dot = np.real(np.sum(np.conj(theirs) * mine, axis=-2))
        sign_ok &= np.all(dot > 0, axis=-1) | (mine.shape[-1] == 0)
        per_output.append(np.all(diff <= np.minimum(tol, 0.5), axis=-1))
        exact_ok &= per_output[-1]
    return sign_ok, exact_ok, per_output


def values_in_order(name: str, ours: tuple, ref: tuple, a: np.ndarray) -> np.ndarray | None:
    """Per matrix, whether eig's values are JAX's in JAX's order (within TOLERANCE eps of the
    largest); None for the other functions."""
    if not name.startswith("eig") or name.startswith("eigh"):
        return None
    mine, theirs = _values_of(name, ours, a), _values_of(name, ref, a)
    scale = np.max(np.abs(theirs), axis=-1, keepdims=True)
    tol = TOLERANCE * float(np.finfo(a.dtype).eps) * np.maximum(scale, 1e-300)
    return np.all(np.abs(mine - theirs) <= tol, axis=-1)


def case_input(
    name: str, dtype: Any, shape: tuple[int, int], kind: str, batch: int, seed: int
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The batch of matrices of one case and JAX's CPU result on it (an ``_complex`` case's
    matrices complex64 for float32, complex128 for float64)."""
    fn, _, symmetric = FUNCTIONS[name]
    if name.endswith("_complex"):
        dtype = np.dtype(np.complex128 if np.dtype(dtype) == np.float64 else np.complex64)
    a = draw(np.random.default_rng(seed), kind, batch, *shape, symmetric, dtype)
    return a, tuple(np.asarray(r) for r in jax.jit(fn)(jnp.asarray(a)))


def openblas_core() -> str:
    """The kernel family of the OpenBLAS that JAX's LAPACK calls run on (scipy's), or '?'."""
    import scipy

    libs = Path(scipy.__file__).resolve().parent.parent / "scipy.libs"
    for lib in glob.glob(str(libs / "libscipy_openblas*.so*")):
        corename = getattr(ctypes.CDLL(lib), "scipy_openblas_get_corename", None)
        if corename is not None:
            corename.restype = ctypes.c_char_p
            return str(corename().decode())
    return "?"


def references_on(core: str, cases: list[tuple]) -> tuple[str, list[tuple[np.ndarray, ...]]]:
    """JAX's results on ``cases`` (run_case's arguments) computed in a subprocess whose
    OpenBLAS uses ``core``'s kernels, and the kernel family it reports using."""
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "cases.json", Path(tmp) / "refs.npz"
        spec.write_text(json.dumps(cases))
        env = {**os.environ, "OPENBLAS_CORETYPE": core}
        subprocess.run(
            [sys.executable, "-m", "benchmarks.vector_signs", "--references", str(spec), str(out)],
            env=env,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        with np.load(out) as data:
            used = str(data["core"])
            refs = [
                tuple(data[f"{i}_{j}"] for j in range(int(data[f"{i}_n"])))
                for i in range(len(cases))
            ]
    return used, refs


def _write_references(spec: str, out: str) -> None:
    cases = [
        (n, d, tuple(shape), *rest) for n, d, shape, *rest in json.loads(Path(spec).read_text())
    ]
    arrays: dict[str, Any] = {"core": np.array(openblas_core())}
    for i, case in enumerate(cases):
        _, ref = case_input(*case)
        arrays[f"{i}_n"] = np.array(len(ref))
        arrays.update({f"{i}_{j}": r for j, r in enumerate(ref)})
    np.savez(out, **arrays)


def run_case(
    name: str, dtype: Any, shape: tuple[int, int], kind: str, batch: int, seed: int
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray | None]:
    fn = FUNCTIONS[name][0]
    a, ref = case_input(name, dtype, shape, kind, batch, seed)
    wide = a.real.dtype == np.float64
    model = to_onnx(fn, [jax.ShapeDtypeStruct(a.shape, a.dtype)], enable_double_precision=wide)
    session = open_session(model)
    feed = np.stack([a.real, a.imag], axis=-1) if np.iscomplexobj(a) else a  # a complex pair
    ours = tuple(_as_complex(np.asarray(o), r) for o, r in zip(session([feed]), ref, strict=True))
    return (*matches(name, ours, ref, a), values_in_order(name, ours, ref, a))


def _as_complex(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """A complex output as the model gives it, (real, imag) on a last axis of 2, as complex."""
    if np.iscomplexobj(ref) and ours.shape == (*ref.shape, 2):
        return ours[..., 0] + 1j * ours[..., 1]
    return ours


def nodes(name: str, n: int, dtype: Any = np.float32) -> int:
    """Nodes of the exported graph, Loop/Scan/If bodies included, for one n x n matrix."""
    fn = FUNCTIONS[name][0]
    model = to_onnx(
        fn, [jax.ShapeDtypeStruct((n, n), dtype)], enable_double_precision=dtype == np.float64
    )

    def count(graph: Any) -> int:
        total = 0
        for node in graph.node:
            total += 1
            for attr in node.attribute:
                if attr.g is not None and attr.g.node:
                    total += count(attr.g)
        return total

    return count(model.graph)


def reproducers() -> list[str]:
    """Issue 34's two reproducers: whether each output matches JAX's, sign included."""

    def f(x0: jax.Array) -> Any:
        a = (
            jnp.outer(jnp.tanh(x0), jnp.sin(x0)) + jnp.outer(jnp.sin(x0), jnp.tanh(x0))
        ) / 4 + jnp.diag(3.0 * jnp.arange(1, 3, dtype=x0.dtype))
        return jnp.linalg.eigh(a)

    def g(x0: jax.Array) -> Any:
        a = jnp.tanh(x0) / 5 + jnp.eye(1, 5, dtype=x0.dtype) * (
            3.0 * jnp.arange(1, 6, dtype=x0.dtype)
        )
        return jnp.linalg.svd(a, full_matrices=True)

    lines = []
    rng = np.random.default_rng(34)
    for label, fn, shape in (("eigh 2x2 (f)", f, (2,)), ("svd 3x1x5 full (g)", g, (3, 1, 5))):
        worst = []
        for _ in range(20):
            x = rng.standard_normal(shape).astype(np.float32)
            ref = [np.asarray(r) for r in jax.tree_util.tree_leaves(jax.jit(fn)(x))]
            model = to_onnx(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype)])
            ours = [np.asarray(o) for o in open_session(model)([x])]
            worst.append(
                max(float(np.max(np.abs(o - r), initial=0)) for o, r in zip(ours, ref, strict=True))
            )
        lines.append(
            f"{label}: max abs error over 20 draws {max(worst):.2e}, "
            f"draws above 1e-4: {sum(w > 1e-4 for w in worst)}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--functions", nargs="*", default=list(FUNCTIONS))
    parser.add_argument("--dtypes", nargs="*", default=["float32", "float64"])
    parser.add_argument("--kinds", nargs="*", default=["perturbed", "gaussian"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument(
        "--sizes", nargs="*", type=int, help="square sizes only, instead of 1..16 and rectangles"
    )
    parser.add_argument("--nodes", action="store_true", help="print node counts for 4x4 and 16x16")
    parser.add_argument("--no-reproducers", action="store_true")
    parser.add_argument(
        "--kernel",
        metavar="CORE",
        help="also compare JAX with itself on OpenBLAS's CORE kernels (e.g. Haswell)",
    )
    parser.add_argument("--references", nargs=2, help=argparse.SUPPRESS)  # the subprocess
    args = parser.parse_args()
    if args.references:
        _write_references(*args.references)
        return
    rows = []
    for name in args.functions:
        shapes = SQUARE + (RECTANGLES if FUNCTIONS[name][1] else [])
        if args.sizes:
            shapes = [(n, n) for n in args.sizes]
        for dtype in args.dtypes:
            for kind in args.kinds:
                cases = [
                    (name, np.dtype(dtype).name, shape, kind, args.batch, 1000 * i + 7)
                    for i, shape in enumerate(shapes)
                ]
                rows.append((name, dtype, kind, cases))
    other: list[tuple[np.ndarray, ...]] = []
    if args.kernel:
        used, other = references_on(args.kernel, [c for *_, cases in rows for c in cases])
        print(f"JAX's OpenBLAS kernels here: {openblas_core()}; in the comparison: {used}")
    header = f"{'function':12} {'dtype':8} {'kind':10} {'sign':>12} {'exact':>12}"
    print(header + (f" {'JAX on ' + args.kernel:>17}" if args.kernel else "") + "  failing shapes")
    index = 0
    for name, dtype, kind, cases in rows:
        signs = exact = total = same = ordered = 0
        outputs: list[int] = []
        values: np.ndarray | None = None
        failing = []
        for case in cases:
            s, e, per_output, values = run_case(*case)
            signs, exact, total = signs + int(s.sum()), exact + int(e.sum()), total + s.size
            outputs = [
                m + int(o.sum())
                for m, o in zip(outputs or [0] * len(per_output), per_output, strict=True)
            ]
            ordered += 0 if values is None else int(values.sum())
            if not e.all():
                failing.append(f"{case[2][0]}x{case[2][1]}:{int((~e).sum())}")
            if other:
                a, ref = case_input(*case)
                same += int(matches(name, other[index], ref, a)[0].sum())
            index += 1
        kernel = f" {same:5}/{total:<4} {100 * same / total:5.1f}%" if other else ""
        extra = ""
        if len(outputs) > 1:  # each vector output's share: eig_both's left, right
            extra += "per output " + " ".join(f"{100 * m / total:.1f}%" for m in outputs)
        if values is not None:
            extra += f" values in order {100 * ordered / total:.1f}%"
        print(
            f"{name:12} {dtype:8} {kind:10} {signs:5}/{total:<4} "
            f"{100 * signs / total:5.1f}% "
            f"{exact:5}/{total:<4} {100 * exact / total:5.1f}%{kernel}  {' '.join(failing)}"
            f"{'  ' + extra.strip() if extra else ''}",
            flush=True,
        )
    if args.nodes:
        for name in args.functions:
            print(f"nodes {name}: 4x4 {nodes(name, 4)}, 16x16 {nodes(name, 16)}", flush=True)
    if not args.no_reproducers:
        for line in reproducers():
            print(line)


if __name__ == "__main__":
    main()
