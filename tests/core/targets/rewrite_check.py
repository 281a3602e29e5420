"""What a target rewrite is for: a model exported for its runtime with the rewrite and without
it (``Target.without``), both run there against JAX."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import onnx
import pytest

from jax2onnx_nn import TARGETS, to_onnx, verify
from jax2onnx_nn.core.runtimes import missing_reason
from jax2onnx_nn.core.targets.profile import Rewrite


@dataclass
class Outcome:
    """Whether an export ran on the runtime and matched JAX, and what it said if not."""

    ok: bool
    said: str


def run_on(
    runtime: str,
    rewrites_left_out: Sequence[Rewrite],
    fn: Callable[..., Any],
    specs: Sequence[Any],
    inputs: Sequence[Any],
    **options: Any,
) -> Outcome:
    """Export ``fn`` for ``runtime``'s profile less ``rewrites_left_out``, run it there on
    ``inputs`` and compare with JAX (a failing export or run is an outcome too)."""
    target = TARGETS[runtime].without(*rewrites_left_out)
    try:
        model = to_onnx(fn, specs, target=target, **options)
        report = verify(fn, model, specs, input_values=inputs, runtime=runtime)
    except Exception as err:
        return Outcome(False, f"{type(err).__name__}: {str(err).splitlines()[0][:200]}")
    return Outcome(report.ok, "" if report.ok else f"max abs error {report.max_abs}")


def assert_needed(
    runtime: str,
    rewrite: Rewrite,
    fn: Callable[..., Any],
    specs: Sequence[Any],
    inputs: Sequence[Any],
    **options: Any,
) -> None:
    """With ``rewrite`` the model matches JAX on ``runtime``; without it, it does not."""
    with_it = run_on(runtime, (), fn, specs, inputs, **options)
    assert with_it.ok, f"{rewrite.__name__} on {runtime}: {with_it.said}"
    without = run_on(runtime, (rewrite,), fn, specs, inputs, **options)
    assert not without.ok, (
        f"{rewrite.__name__} is not needed on today's {runtime}: the model matches without it"
    )


def needs(runtime: str) -> pytest.MarkDecorator:
    """Skip where ``runtime`` is not installed."""
    return pytest.mark.skipif(
        missing_reason(runtime) is not None, reason=str(missing_reason(runtime))
    )


def exported(
    runtime: str,
    rewrites_left_out: Sequence[Rewrite],
    fn: Callable[..., Any],
    specs: Sequence[Any],
    **options: Any,
) -> onnx.ModelProto:
    """``fn`` exported for ``runtime``'s profile less ``rewrites_left_out``."""
    target = TARGETS[runtime].without(*rewrites_left_out)
    return to_onnx(fn, specs, target=target, **options)


def op_counts(graph: onnx.GraphProto) -> Counter[str]:
    """How many nodes of each op type ``graph`` holds, its Loop/Scan/If bodies included."""
    counts: Counter[str] = Counter()
    for node in graph.node:
        counts[node.op_type] += 1
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                counts.update(op_counts(body))
    return counts


def scan_node(graph: onnx.GraphProto) -> onnx.NodeProto:
    """The one Scan of ``graph``'s top level."""
    (scan,) = [n for n in graph.node if n.op_type == "Scan"]
    return scan
