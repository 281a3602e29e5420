"""The support table: every registered primitive, its ONNX ops, and whether it is tested.

A primitive counts as *tested* when a passing test ran its lowering rule; the record is the
committed file ``tests/lowered_primitives.txt`` (see :mod:`jax2onnx_nn.testing.coverage`).
The README's table (``scripts/gen_support_table.py``) and ``jax2onnx-nn ops`` render it.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

RECORD = pathlib.Path(__file__).resolve().parents[2] / "tests" / "lowered_primitives.txt"


@dataclass(frozen=True)
class SupportRow:
    primitive: str
    onnx_ops: str
    min_opset: int
    tested: bool | None  # None: no record available (an installed package without tests)


def read_record(path: pathlib.Path = RECORD) -> set[str] | None:
    """The recorded primitive names, or None when there is no record."""
    if not path.exists():
        return None
    return {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}


def support_rows(tested: set[str] | None = None) -> list[SupportRow]:
    """One row per registered rule, then the call-like primitives whose body is inlined."""
    from jax2onnx_nn.core.api import MIN_OPSET
    from jax2onnx_nn.core.lower import CALL_BODIES
    from jax2onnx_nn.core.registry import registered

    def is_tested(name: str) -> bool | None:
        return None if tested is None else name in tested

    rows = [
        SupportRow(name, ", ".join(reg.onnx_ops) or "(no node)", max(reg.min_opset, MIN_OPSET), is_tested(name))
        for name, reg in registered().items()
    ]
    rows += [SupportRow(name, "(body inlined)", MIN_OPSET, is_tested(name)) for name in sorted(CALL_BODIES)]
    return rows


def module_rows() -> list[tuple[str, ...]]:
    """(module or function, ONNX ops) of the framework adapters' coarse ops, when declared."""
    try:
        from jax2onnx_nn.core.patching import coarse_table  # type: ignore[attr-defined]
    except ImportError:
        return []
    return [(target, ", ".join(ops)) for target, ops in coarse_table()]


def markdown_table(tested: set[str] | None) -> str:
    """The README's support table."""
    with_tested = tested is not None
    head = "| JAX primitive | ONNX ops | min opset |" + (" tested |" if with_tested else "")
    rule = "|---|---|---|" + ("---|" if with_tested else "")
    lines = [head, rule]
    for row in support_rows(tested):
        mark = f" {'yes' if row.tested else 'no'} |" if with_tested else ""
        lines.append(f"| `{row.primitive}` | {row.onnx_ops} | {row.min_opset} |{mark}")
    modules = module_rows()
    if modules:
        lines += ["", "| Module / function | ONNX ops |", "|---|---|"]
        lines += [f"| `{target}` | {ops} |" for target, ops in modules]
    return "\n".join(lines)
