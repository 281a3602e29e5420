"""Fingerprints of the graphs the exporter writes: a sha256 of each serialized model.

Exports the runtime matrix's models (scripts/gen_runtime_table.py: the benchmark models it
checks and the examples) for every target profile, and the other benchmark models of
benchmarks/models.py for the default target, and prints one ``name target sha256`` line each
(``name target fails: ...`` where the export fails). A change that only moves code (a
refactoring of the passes or the target rewrites) must print the same lines before and after::

    python3 -m benchmarks.graph_fingerprint > /tmp/fp_before.txt
    ... (the change)
    python3 -m benchmarks.graph_fingerprint | diff /tmp/fp_before.txt -

``--models a,b`` and ``--targets x,y`` restrict the run.
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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--targets", help="comma-separated target names (default: all)")
    args = parser.parse_args()
    split = lambda s: s.split(",") if s else None  # noqa: E731
    fingerprints(split(args.models), split(args.targets))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
