"""Fingerprints of the graphs the exporter writes: a sha256 of each serialized model.

Exports the runtime matrix's models (scripts/gen_runtime_table.py: the benchmark models it
checks and the examples) for every target profile, and the other benchmark models of
benchmarks/models.py for the default target, and prints one ``name target sha256`` line each
(``name target fails: ...`` where the export fails). A change that only moves code (a
refactoring of the passes or the target rewrites) must print the same lines before and after::

    python3 -m benchmarks.graph_fingerprint > /tmp/fp_before.txt
    ... (the change)
    python3 -m benchmarks.graph_fingerprint | diff /tmp/fp_before.txt -

``--models a,b`` and ``--targets x,y`` restrict the run. ``--linalg`` prints instead the
fingerprints of the lax.linalg routines (core/lowerings/lapack/) at sizes that unroll, loop and
block, float64 and a symbolic batch included, with node doc strings left out (a move of the
routines' code changes the source lines they name, not the graph).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import warnings
from typing import Any

# (beside each other, models' files are imported as benchmarks.models and examples.*)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# benchmark models also exported for the default target only (the big ones are left out)
EXTRA = ("gpt2_small_lax", "linen_gru", "gpt_4l")


def _digest(model: Any) -> str:
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def fingerprints(models: list[str] | None, targets: list[str] | None) -> list[str]:
    """``name target sha256`` (or ``name target fails: ...``) for each model and target."""
    import benchmarks.models as bench
    from jax2onnx_nn import to_onnx
    from jax2onnx_nn.core.targets import TARGETS
    from tests.runtime_table import GEN

    lines = []
    for name in [*GEN.MODELS, *EXTRA]:
        if models is not None and name not in models:
            continue
        for target in TARGETS if name in GEN.MODELS else ("onnxruntime",):
            if targets is not None and target not in targets:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if name in GEN.MODELS:
                        case = GEN.case(name)
                        model = case.export(target, **case.runtime_options.get(target, {}))
                    else:
                        fn, specs, options = getattr(bench, name)()
                        model = to_onnx(fn, specs, target=target, **options)
                line = f"{name} {target} {_digest(model)}"
            except Exception as err:
                line = (
                    f"{name} {target} fails: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
                )
            print(line, flush=True)
            lines.append(line)
    return lines


def _without_doc_strings(graph: Any) -> None:
    import onnx

    for node in graph.node:
        node.doc_string = ""
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _without_doc_strings(body)


def linalg_fingerprints() -> list[str]:
    """``name size sha256`` of each linalg routine's export, node doc strings left out."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    from jax import lax

    from jax2onnx_nn import to_onnx

    jax.config.update("jax_enable_x64", True)

    def gram(f: Any) -> Any:
        return lambda a: f(a @ jnp.swapaxes(a, -1, -2))

    def rhs(a: Any) -> Any:
        return a[..., :1]

    routines = {
        "cholesky": gram(jnp.linalg.cholesky),
        "lu": jsl.lu_factor,
        "qr": jnp.linalg.qr,
        "qr_complete": lambda a: jnp.linalg.qr(a, mode="complete"),
        "qr_pivoting": lambda a: jsl.qr(a, pivoting=True),
        "solve": lambda a: jnp.linalg.solve(a, rhs(a)),
        "inv": jnp.linalg.inv,
        "det": jnp.linalg.det,
        "slogdet": jnp.linalg.slogdet,
        "triangular_solve": lambda a: lax.linalg.triangular_solve(a, a, left_side=True, lower=True),
        "unit_triangular_solve": lambda a: lax.linalg.triangular_solve(
            a, a, lower=False, unit_diagonal=True, transpose_a=True
        ),
        "lu_solve": lambda a: jsl.lu_solve(jsl.lu_factor(a), rhs(a)),
        "eigh": gram(jnp.linalg.eigh),
        "eigvalsh": gram(jnp.linalg.eigvalsh),
        "eig": jnp.linalg.eig,
        "eigvals": jnp.linalg.eigvals,
        "schur": jsl.schur,
        "hessenberg": jsl.hessenberg,
        "svd": jnp.linalg.svd,
        "svdvals": lambda a: jnp.linalg.svd(a, compute_uv=False),
        "svd_wide": lambda a: jnp.linalg.svd(a[..., :2, :]),
        "pinv": jnp.linalg.pinv,
        "expm": jsl.expm,
    }
    sizes = [("3", (3, 3), "float32"), ("6", (6, 6), "float64"), ("20", (20, 20), "float32")]
    sizes += [("40", (40, 40), "float32"), ("batch", ("B", 4, 4), "float32")]
    lines = []
    for name, fn in routines.items():
        for tag, shape, dtype in sizes:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = to_onnx(fn, [(shape, dtype)])
                _without_doc_strings(model.graph)
                for function in model.functions:
                    _without_doc_strings(function)
                line = f"{name} {tag} {_digest(model)}"
            except Exception as err:
                line = f"{name} {tag} fails: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
            print(line, flush=True)
            lines.append(line)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--targets", help="comma-separated target names (default: all)")
    parser.add_argument("--linalg", action="store_true", help="the lax.linalg routines instead")
    args = parser.parse_args()
    split = lambda s: s.split(",") if s else None  # noqa: E731
    if args.linalg:
        linalg_fingerprints()
    else:
        fingerprints(split(args.models), split(args.targets))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
