"""Command line: ``python -m jax2onnx_nn {demo,export,inspect,ops}``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any


def _parse_input(text: str) -> Any:
    """``B,30`` -> ("B", 30); ``B,T:int32`` -> (("B", "T"), "int32")."""
    shape_text, _, dtype = text.partition(":")
    dims: list[Any] = []
    for part in shape_text.split(","):
        part = part.strip()
        if not part:
            continue
        dims.append(int(part) if part.lstrip("-").isdigit() else part)
    return (tuple(dims), dtype) if dtype else tuple(dims)


def _load_target(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"error: expected MODULE:ATTR, got {spec!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise SystemExit(f"error: cannot import {module_name!r}: {err}") from err
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise SystemExit(f"error: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    return target


def _summary(model: Any) -> str:
    import onnx

    def dims(vi: Any) -> str:
        t = vi.type.tensor_type
        shape = [d.dim_param or str(d.dim_value) for d in t.shape.dim]
        return f"{vi.name}: {onnx.TensorProto.DataType.Name(t.elem_type).lower()}[{', '.join(shape)}]"

    ops = Counter(n.op_type for n in model.graph.node)
    weight_bytes = sum(len(t.raw_data) for t in model.graph.initializer)
    lines = ["inputs:  " + "; ".join(dims(v) for v in model.graph.input)]
    lines.append("outputs: " + "; ".join(dims(v) for v in model.graph.output))
    lines.append(f"nodes:   {len(model.graph.node)} ({', '.join(f'{k} x{v}' for k, v in ops.most_common())})")
    if model.functions:
        calls = Counter(n.op_type for n in model.graph.node if n.domain)
        lines.append("functions: " + ", ".join(f"{f.name} (called {calls.get(f.name, 0)}x)" for f in model.functions))
    lines.append(f"weights: {len(model.graph.initializer)} initializers, {weight_bytes / 1e6:.2f} MB")
    opsets = ", ".join(f"{o.domain or 'ai.onnx'}={o.version}" for o in model.opset_import)
    lines.append(f"opset:   {opsets}")
    return "\n".join(lines)


def _cmd_demo(args: argparse.Namespace) -> int:
    from jax2onnx_nn.demo import run_demo

    return run_demo(args.out)


def _cmd_export(args: argparse.Namespace) -> int:
    from jax2onnx_nn import ConversionError, to_onnx, verify

    target = _load_target(args.target)
    if not callable(target):
        raise SystemExit(f"error: {args.target} is not callable")
    if isinstance(target, type) or (getattr(target, "__code__", None) is not None and target.__code__.co_argcount == 0 and not args.input):
        target = target()
    inputs = [_parse_input(t) for t in args.input]
    start = time.perf_counter()
    try:
        model = to_onnx(target, inputs, path=args.output, opset=args.opset, enable_double_precision=args.f64)
    except ConversionError as err:
        if args.debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.output} in {time.perf_counter() - start:.2f}s")
    print(_summary(model))
    if args.verify:
        report = verify(target, model, inputs, enable_double_precision=args.f64)
        print(report)
        return 0 if report.ok else 1
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    import onnx

    print(_summary(onnx.load(args.model, load_external_data=False)))
    return 0


def _cmd_ops(args: argparse.Namespace) -> int:
    from jax2onnx_nn.core.registry import registered

    for name, reg in registered().items():
        print(f"{name:32s} {' '.join(reg.onnx_ops)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jax2onnx-nn", description="Export JAX programs to ONNX.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="export the built-in example models and verify them")
    demo.add_argument("--out", default="out", help="folder for the .onnx files (default ./out)")
    demo.set_defaults(func=_cmd_demo)
    export = sub.add_parser("export", help="export MODULE:ATTR (callable, module or factory)")
    export.add_argument("target")
    export.add_argument("--input", action="append", default=[], help="one input spec: B,30 or B,T:int32")
    export.add_argument("-o", "--output", required=True)
    export.add_argument("--opset", type=int, default=None)
    export.add_argument("--f64", action="store_true", help="enable_double_precision")
    export.add_argument("--verify", action="store_true", help="compare onnxruntime with JAX")
    export.add_argument("--debug", action="store_true", help="show tracebacks")
    export.set_defaults(func=_cmd_export)
    inspect_ = sub.add_parser("inspect", help="summarize an .onnx file")
    inspect_.add_argument("model")
    inspect_.set_defaults(func=_cmd_inspect)
    ops = sub.add_parser("ops", help="list supported primitives")
    ops.set_defaults(func=_cmd_ops)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
