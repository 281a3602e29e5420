"""The support tables: every registered primitive and every module or function mapped to a
coarse op, with their ONNX ops and whether they are tested.

A primitive counts as *tested* when a passing test ran its lowering rule; the record is the
committed file ``tests/lowered_primitives.txt`` (see :mod:`jax2onnx_nn.testing.coverage`).
The docs' support table (``docs/support.md``, by ``scripts/gen_support_table.py``) and
``jax2onnx-nn ops`` render it.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from jax2onnx_nn.core import coarse, session
from jax2onnx_nn.core.api import MIN_OPSET
from jax2onnx_nn.core.coarse import ModuleRow

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
    return {
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }


def support_rows(tested: set[str] | None = None) -> list[SupportRow]:
    """One row per registered lax-level rule, then the call-like primitives whose body is
    inlined (the coarse ops of modules are in :func:`module_rows`)."""
    from jax2onnx_nn.core.lower import CALL_BODIES
    from jax2onnx_nn.core.registry import registered

    def is_tested(name: str) -> bool | None:
        return None if tested is None else name in tested

    coarse = {row.primitive for row in module_rows()}
    rows = [
        SupportRow(
            name,
            (", ".join(reg.onnx_ops) or "(no node)") + (f" (only {reg.only})" if reg.only else ""),
            max(reg.min_opset, MIN_OPSET),
            is_tested(name),
        )
        for name, reg in registered().items()
        if name not in coarse
    ]
    rows += [
        SupportRow(name, "(body inlined)", MIN_OPSET, is_tested(name))
        for name in sorted(CALL_BODIES)
    ]
    return rows


def module_rows() -> list[ModuleRow]:
    """The modules and functions mapped to coarse ops, of every registered adapter whose
    framework is installed (importing the adapter declares them)."""
    for adapter in session.adapters():
        try:
            session.import_adapter(adapter)
        except ImportError:  # the framework is not installed: its adapter has no rows
            continue
    return coarse.module_rows()


def module_support_rows(tested: set[str] | None = None) -> list[SupportRow]:
    """:func:`module_rows` as support rows: ``primitive`` is the module or function, opset 0
    and tested None for a module without a coarse op of its own."""
    return [
        SupportRow(
            row.target,
            row.onnx_ops,
            max(row.min_opset, MIN_OPSET),
            None if tested is None else row.primitive in tested,
        )
        if row.primitive
        else SupportRow(row.target, row.onnx_ops, 0, None)
        for row in module_rows()
    ]


def markdown_table(tested: set[str] | None) -> str:
    """The support table of ``docs/support.md``."""
    with_tested = tested is not None
    head = "| JAX primitive | ONNX ops | min opset |" + (" tested |" if with_tested else "")
    rule = "|---|---|---|" + ("---|" if with_tested else "")
    lines = [head, rule]
    for row in support_rows(tested):
        mark = f" {'yes' if row.tested else 'no'} |" if with_tested else ""
        lines.append(f"| `{row.primitive}` | {row.onnx_ops} | {row.min_opset} |{mark}")
    lines += [
        "",
        "Modules and functions mapped to one coarse op each (a call the op does not model exactly",
        "is lowered primitive by primitive instead; below the opset shown it always is):",
        "",
        "| Module / function | ONNX ops | from opset |" + (" tested |" if with_tested else ""),
        "|---|---|---|" + ("---|" if with_tested else ""),
    ]
    for row in module_support_rows(tested):
        opset = row.min_opset or "-"
        mark = (
            f" {'-' if row.tested is None else 'yes' if row.tested else 'no'} |"
            if with_tested
            else ""
        )
        lines.append(f"| `{row.primitive}` | {row.onnx_ops} | {opset} |{mark}")
    return "\n".join(lines)


def refresh_generated_block(
    readme: pathlib.Path, begin: str, end: str, body: str, *, check: bool, what: str, script: str
) -> int:
    """Put ``body`` between the ``begin``/``end`` markers of ``readme`` (or, with ``check``, only
    say whether it is already there): the one writer of the generated tables (docs/support.md,
    docs/runtimes.md).

    Returns the exit code of the generating script: 1 when ``check`` finds the block stale.
    """
    text = readme.read_text()
    head, sep, rest = text.partition(begin)
    if not sep:
        raise SystemExit(f"{readme} has no {begin} marker")
    _, sep2, tail = rest.partition(end)
    if not sep2:
        raise SystemExit(f"{readme} has no {end} marker")
    new = f"{head}{begin}\n{body}\n{end}{tail}"
    if check:
        if new != text:
            print(f"{readme.name} {what} is stale: run python {script}")
            return 1
        return 0
    readme.write_text(new)
    return 0
