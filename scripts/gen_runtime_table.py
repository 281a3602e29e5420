"""Regenerate the README's "Runtime support" table: the benchmark models on every runtime.

    python scripts/gen_runtime_table.py           # rewrite README.md from tests/runtime_matrix.txt
    python scripts/gen_runtime_table.py --check   # exit 1 if README.md is stale
    python scripts/gen_runtime_table.py --record  # export and verify every (model, runtime) pair
                                                  # with that runtime's target profile, rewrite the
                                                  # record, then README.md

Each model comes from benchmarks/models.py, is exported with ``target=<runtime>`` and checked
with ``verify(..., runtime=<runtime>)`` against JAX at the default tolerances. Never edit the
table by hand.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- runtime-table:begin -->"
END = "<!-- runtime-table:end -->"
README = ROOT / "README.md"
RECORD = ROOT / "tests" / "runtime_matrix.txt"
MODELS = ("jax_mlp", "flax_mlp", "cnn", "eqx_mlp", "eqx_transformer", "eqx_vit", "vit", "gru", "heat_fori", "heat_while", "gpt2_small")
RUNTIMES = ("onnxruntime", "onnxruntime-web", "openvino", "tract")


def check_pair(model_name: str, runtime: str) -> str:
    """``ok`` or ``fails: <first line of the error>`` for one (model, runtime) pair."""
    sys.path.insert(0, str(ROOT))
    import benchmarks.models as models
    from jax2onnx_nn import to_onnx, verify

    fn, specs, options = getattr(models, model_name)()
    try:
        model = to_onnx(fn, specs, target=runtime, **options)
        report = verify(fn, model, specs, runtime=runtime, jit=True)
    except Exception as err:  # noqa: BLE001 - the table records what the runtime says
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"fails: {type(err).__name__}: {first[:140]}"
    if report.ok:
        return "ok"
    from jax2onnx_nn.core.targets import get_target

    cause = "" if get_target(runtime).float64 or not options.get("enable_double_precision") else f"{runtime} computes float64 in float32: "
    return f"fails: {cause}max abs error {report.max_abs:.3g}"


def read_record() -> dict[tuple[str, str], str]:
    rows = {}
    for line in RECORD.read_text().splitlines():
        if line.strip():
            model, runtime, result = line.split("\t", 2)
            rows[(model, runtime)] = result
    return rows


def record() -> None:
    from jax2onnx_nn.core.runtimes import missing_reason

    lines = []
    for model in MODELS:
        for runtime in RUNTIMES:
            reason = missing_reason(runtime)
            result = check_pair(model, runtime) if reason is None else f"not run: {reason}"
            print(f"{model} / {runtime}: {result}", flush=True)
            lines.append(f"{model}\t{runtime}\t{result}")
    RECORD.write_text("\n".join(lines) + "\n")


def render() -> str:
    rows = read_record()
    head = ["| model | " + " | ".join(RUNTIMES) + " |", "|---|" + "---|" * len(RUNTIMES)]
    body = []
    notes = []
    for model in MODELS:
        cells = []
        for runtime in RUNTIMES:
            result = rows.get((model, runtime), "not run")
            if result == "ok":
                cells.append("yes")
            else:
                notes.append(f"{len(notes) + 1}. `{model}` on {runtime}: {result}")
                cells.append(f"no ({len(notes)})")
        body.append(f"| `{model}` | " + " | ".join(cells) + " |")
    return "\n".join(head + body + ([""] + notes if notes else []))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    if args.record:
        record()
    sys.path.insert(0, str(ROOT))
    from jax2onnx_nn.testing.support import refresh_readme_block

    return refresh_readme_block(README, BEGIN, END, render(), check=args.check, what="runtime table", script="scripts/gen_runtime_table.py")


if __name__ == "__main__":
    sys.exit(main())
