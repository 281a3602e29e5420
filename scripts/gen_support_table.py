"""Regenerate the README's support table from the lowering registry (never edit it by hand).

    python scripts/gen_support_table.py          # rewrite README.md in place
    python scripts/gen_support_table.py --check  # exit 1 if README.md is stale
"""

from __future__ import annotations

import argparse
import pathlib
import sys

BEGIN = "<!-- support-table:begin -->"
END = "<!-- support-table:end -->"
README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def render() -> str:
    from jax2onnx_nn.core.lower import CALL_BODIES
    from jax2onnx_nn.core.registry import registered

    rows = ["| JAX primitive | ONNX ops | min opset |", "|---|---|---|"]
    for name, reg in registered().items():
        ops = ", ".join(reg.onnx_ops) or "(no node)"
        rows.append(f"| `{name}` | {ops} | {max(reg.min_opset, 17)} |")
    for name in sorted(CALL_BODIES):
        rows.append(f"| `{name}` | (body inlined) | 17 |")
    try:
        from jax2onnx_nn.core.patching import coarse_table

        modules = coarse_table()
    except ImportError:
        modules = []
    if modules:
        rows += ["", "| Module / function | ONNX ops |", "|---|---|"]
        rows += [f"| `{target}` | {', '.join(ops)} |" for target, ops in modules]
    return "\n".join(rows)


def updated(text: str) -> str:
    head, sep, rest = text.partition(BEGIN)
    if not sep:
        raise SystemExit(f"{README} has no {BEGIN} marker")
    _, sep2, tail = rest.partition(END)
    if not sep2:
        raise SystemExit(f"{README} has no {END} marker")
    return f"{head}{BEGIN}\n{render()}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = README.read_text()
    new = updated(text)
    if args.check:
        if new != text:
            print("README.md support table is stale: run python scripts/gen_support_table.py")
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
