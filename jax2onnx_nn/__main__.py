"""Command line: ``python -m jax2onnx_nn {export,demo,inspect,ops}`` (also ``jax2onnx-nn``).

Exit codes: 0 success; 1 the exported model disagrees with JAX (``--verify``); 2 bad
arguments (a MODULE:ATTR that cannot be imported or found, a bad ``--input``, a bad option);
3 the export failed (unsupported primitives, an error in the exported code); ``ops PATTERN``
exits 1 when nothing matches; 4 an extra that is needed is not installed (onnxruntime for
``--verify`` and ``demo``); 130 interrupted (Ctrl-C: a file being written is left as it was).
Errors are one message, not a traceback; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib
import importlib.util
import inspect
import os
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

from jax2onnx_nn.exit_codes import (
    EXPORT_FAILED,
    INTERRUPTED,
    MISMATCH,
    MISSING_EXTRA,
    NOT_FOUND,
    OK,
    USAGE,
)
from jax2onnx_nn.summary import model_summary, tensor_bytes  # noqa: F401  (tensor_bytes: for tests)


class UsageError(Exception):
    """A bad command line: reported as one message, exit code 2."""


# -- export ---------------------------------------------------------------------------------


def parse_input(text: str) -> Any:
    """``B,30`` -> ("B", 30); ``B,T:int32`` -> (("B", "T"), "int32"); ``:int32`` -> a scalar."""
    import jax.numpy as jnp

    from jax2onnx_nn.core import jax_internals as jxi

    shape_text, _, dtype = text.partition(":")
    dims: list[int | str] = []
    for part in (p.strip() for p in shape_text.split(",")) if shape_text.strip() else ():
        if part.isdigit():
            dims.append(int(part))
            continue
        try:
            if not any(c.isalpha() for c in part):
                raise ValueError("a dim is a size >= 0 or contains a name")
            jxi.parse_symbolic_shape(part, jxi.new_symbolic_scope())
        except Exception as err:
            raise UsageError(
                f"--input {text!r}: {part!r} is not a dim (a size like 30, a name like B, or an "
                f"expression like 2*B); expected e.g. --input B,30 or --input B,T:int32"
            ) from err
        dims.append(part)
    if not dtype:
        return tuple(dims)
    try:
        jnp.dtype(dtype)
    except TypeError as err:
        raise UsageError(
            f"--input {text!r}: {dtype!r} is not a dtype (e.g. float32, int32, bool)"
        ) from err
    return (tuple(dims), dtype)


def _import(module_name: str) -> Any:
    if module_name.endswith(".py") or os.sep in module_name:
        path = os.path.abspath(module_name)
        if not os.path.isfile(path):
            raise UsageError(f"cannot import {module_name!r}: no such file")
        spec = importlib.util.spec_from_file_location(
            os.path.splitext(os.path.basename(path))[0], path
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise UsageError(
                f"cannot import {module_name!r}: no module named {err.name!r} (run from the folder "
                "that contains it, or install it)"
            ) from err
        raise


def load_target(text: str, debug: bool = False) -> Any:
    """``MODULE:ATTR`` (or ``path/to/file.py:ATTR``) -> the object; ATTR may be dotted."""
    module_name, sep, attr = text.rpartition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected MODULE:ATTR (e.g. mypkg.models:make_model), got {text!r}")
    try:
        module = _import(module_name)
    except UsageError:
        raise
    except Exception as err:
        if debug:
            raise
        raise UsageError(f"importing {module_name!r} failed: {type(err).__name__}: {err}") from err
    target: Any = module
    for i, part in enumerate(attr.split(".")):
        if not hasattr(target, part):
            owner = ".".join([module_name, *attr.split(".")[:i]])
            names = sorted(
                n
                for n in dir(target)
                if not n.startswith("_") and callable(getattr(target, n, None))
            )
            hint = f"; callables there: {', '.join(names[:12])}" if names else ""
            raise UsageError(f"{owner!r} has no attribute {part!r}{hint}")
        target = getattr(target, part)
    return target


def _is_factory(target: Any) -> bool:
    """A class, or a function taking no parameters at all: called to get the exportable."""
    if isinstance(target, type):
        return True
    if not (
        inspect.isfunction(target)
        or inspect.ismethod(target)
        or isinstance(target, functools.partial)
    ):
        return False
    try:
        return not inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False


def exportable(target: Any, name: str, debug: bool = False) -> Any:
    """The callable to export: ``target`` itself, or what a factory (class, zero-parameter
    function) returns."""
    if _is_factory(target):
        try:
            target = target()
        except Exception as err:
            if debug:
                raise
            kind = "class" if isinstance(target, type) else "factory"
            raise UsageError(
                f"calling the {kind} {name}() failed: {type(err).__name__}: {err}"
            ) from err
    if not callable(target):
        raise UsageError(
            f"{name} is a {type(target).__name__}: expected a function, a module instance, or a "
            "class / zero-argument factory returning one"
        )
    return target


def _names(text: str | None) -> tuple[str | int, ...] | None:
    if not text:
        return None
    return tuple(
        int(t) if t.lstrip("-").isdigit() else t for t in (p.strip() for p in text.split(",")) if t
    )


def _sizes(texts: Sequence[str]) -> dict[str, list[int]]:
    sizes: dict[str, list[int]] = {}
    for text in texts:
        name, sep, values = text.partition("=")
        try:
            sizes[name.strip()] = [int(v) for v in values.split(",")]
            if not sep or not name.strip() or min(sizes[name.strip()]) < 1:
                raise ValueError
        except ValueError as err:
            raise UsageError(
                f"--size {text!r}: expected NAME=N[,N...] with sizes >= 1, e.g. --size B=1,8"
            ) from err
    return sizes


def _cmd_export(args: argparse.Namespace) -> int:
    from jax2onnx_nn import MAX_OPSET, MIN_OPSET, ConversionError, SpecError, to_onnx
    from jax2onnx_nn.core.config import ExportConfig

    inputs = [parse_input(t) for t in args.input]
    sizes = _sizes(args.size)
    if sizes and args.verify:  # a misspelled --size is found before the export, not after
        from jax2onnx_nn.core.verify import sizes_per_dim
        from jax2onnx_nn.testing.roundtrip import dim_names_of

        try:
            dims = dim_names_of(inputs)
        except ValueError:
            dims = None  # bad --input specs: the export says what is wrong with them
        try:
            if dims is not None:
                sizes_per_dim(sizes, dims)
        except ValueError as err:
            raise UsageError(f"--size: {err}") from err
    try:  # validated here, before the target is loaded, and once: to_onnx takes this config
        config = ExportConfig(
            opset=args.opset,
            enable_double_precision=args.f64,
            auto_functions=args.functions,
            inputs_as_nchw=_names(args.inputs_as_nchw),
            outputs_as_nchw=_names(args.outputs_as_nchw),
            target=args.deploy_target,
            functions="inline" if args.inline_functions else None,
            fold_weights=args.fold_weights,
            loop_bound=args.loop_bound,
            source_locations=not args.no_source_locations,
            precision=args.precision,
            io_dtype=args.io_dtype,
        )
    except ValueError as err:
        if args.loop_bound is not None and args.loop_bound < 1:
            raise UsageError(
                f"--loop-bound {args.loop_bound}: give the most steps a data-dependent while_loop "
                "may take (>= 1)"
            ) from err
        raise UsageError(
            f"--opset {args.opset}: supported opsets are {MIN_OPSET} ... {MAX_OPSET}"
        ) from err
    fn = exportable(load_target(args.target, args.debug), args.target, args.debug)
    start = time.perf_counter()
    try:
        written = to_onnx(fn, inputs, config, path=args.output)
    except SpecError as err:
        if args.debug:
            raise
        raise UsageError(f"bad --input for {args.target}: {err}") from err
    except ConversionError as err:
        if args.debug:
            raise
        print(f"jax2onnx-nn: error: {err}", file=sys.stderr)
        return EXPORT_FAILED
    except Exception as err:
        if args.debug:
            raise
        print(
            f"jax2onnx-nn: error: exporting {args.target} failed: {type(err).__name__}: {err}\n"
            f"(run with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXPORT_FAILED
    args.written = written
    print(f"wrote {os.path.abspath(written)} in {time.perf_counter() - start:.2f}s")
    import onnx

    model = onnx.load(written, load_external_data=args.verify)  # the weights only to verify
    print(model_summary(model, os.path.dirname(os.path.abspath(written))))
    if not args.verify:
        return OK
    from jax2onnx_nn.core.runtimes import RuntimeUnavailable
    from jax2onnx_nn.testing.roundtrip import dim_names_of, roundtrip

    sizes = sizes or {name: [1, 4] for name in dim_names_of(inputs)}
    runtime, note = verify_runtime(args.deploy_target)
    if note:
        print(note)
    try:
        result = roundtrip(
            fn,
            inputs,
            onnx_model=model,
            sizes=sizes,
            enable_double_precision=args.f64,
            runtime=runtime,
            reference_device=args.reference_device,
        )
    except RuntimeUnavailable as err:
        if args.debug:
            raise
        written = os.path.abspath(args.output)
        print(
            f"jax2onnx-nn: error: --verify runs the model in {runtime}: {err}; "
            f"{written} was written",
            file=sys.stderr,
        )
        return MISSING_EXTRA
    print(result)
    return OK if result.ok else MISMATCH


def verify_runtime(target: str | None) -> tuple[str, str]:
    """The runtime ``--verify`` runs a model exported for ``target`` in: the target's own where
    it is installed, else onnxruntime, with a note that says why (empty for onnxruntime)."""
    from jax2onnx_nn.core.runtimes import RUNTIMES, missing_reason

    if target is None or target == "onnxruntime":
        return "onnxruntime", ""
    if target not in RUNTIMES:
        return "onnxruntime", (
            f"note: --verify runs the model in onnxruntime: {target} has no "
            f"runtime here (--verify runs {', '.join(RUNTIMES)})"
        )
    reason = missing_reason(target)
    if reason is not None:
        return "onnxruntime", (
            f"note: --verify runs the model in onnxruntime, not {target}: {reason}"
        )
    return target, ""


# -- inspect --------------------------------------------------------------------------------


def _cmd_inspect(args: argparse.Namespace) -> int:
    import onnx

    if not os.path.isfile(args.model):
        raise UsageError(f"{args.model}: no such file")
    try:
        model = onnx.load(args.model, load_external_data=False)
    except Exception as err:
        if args.debug:
            raise
        raise UsageError(f"{args.model} is not an ONNX model: {type(err).__name__}: {err}") from err
    print(
        f"{args.model}: {model.graph.name or '(unnamed graph)'}, produced by "
        f"{model.producer_name or '?'} {model.producer_version}"
    )
    print(model_summary(model, os.path.dirname(os.path.abspath(args.model))))
    return OK


# -- ops and demo ---------------------------------------------------------------------------


def _cmd_ops(args: argparse.Namespace) -> int:
    from jax2onnx_nn.testing.support import (
        markdown_table,
        module_support_rows,
        read_record,
        support_rows,
    )

    tested = read_record()
    if args.markdown:
        print(markdown_table(tested))
        return OK
    pattern = (args.pattern or "").lower()
    found = 0
    for title, all_rows in (
        ("primitive", support_rows(tested)),
        ("module / function", module_support_rows(tested)),
    ):
        rows = [r for r in all_rows if pattern in r.primitive.lower()]
        if not rows:
            continue
        found += len(rows)
        width = max(len(r.primitive) for r in rows) + 2
        tested_head = "  tested" if tested is not None else ""
        print(f"{title.ljust(width)}opset{tested_head}  ONNX ops")
        for r in rows:
            mark = (
                ("  -     " if r.tested is None else "  yes   " if r.tested else "  no    ")
                if tested is not None
                else ""
            )
            print(f"{r.primitive.ljust(width)}{r.min_opset or '-':<5}{mark}  {r.onnx_ops}")
        print()
    if not found:
        print(
            f"jax2onnx-nn: {args.pattern!r} is not supported: no primitive, module or function "
            "name contains it (case-insensitive); `python -m jax2onnx_nn ops` lists all",
            file=sys.stderr,
        )
        return NOT_FOUND
    return OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from jax2onnx_nn.demo import run_demo

    return run_demo(args.out)


# -- main -----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", help="show tracebacks instead of one-line errors"
    )
    parser = argparse.ArgumentParser(
        prog="jax2onnx-nn",
        description="Export JAX programs (functions, Flax NNX and Equinox modules) to ONNX.",
        epilog="exit codes: 0 ok, 1 verification mismatch (ops: nothing matches), 2 bad arguments, "
        "3 export failed, 4 onnxruntime missing, 130 interrupted",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{export,demo,inspect,ops}")
    export = sub.add_parser(
        "export",
        parents=[common],
        help="export MODULE:ATTR to an .onnx file",
        description="ATTR: a function, a module instance, or a class / zero-argument factory "
        "returning one.",
    )
    export.add_argument(
        "target",
        metavar="MODULE:ATTR",
        help="e.g. mypkg.models:make_model or path/to/file.py:model",
    )
    export.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="SPEC",
        help="one per positional argument: B,30 (float32, symbolic B) or B,T:int32; :float32 is a "
        "scalar",
    )
    export.add_argument("-o", "--output", required=True, metavar="PATH")
    export.add_argument(
        "--opset",
        type=int,
        default=None,
        help="ONNX opset, 13 up to the newest the installed onnx and onnxruntime know (default 21)",
    )
    export.add_argument(
        "--f64", action="store_true", help="enable_double_precision: float64 stays float64"
    )
    export.add_argument(
        "--functions",
        action="store_true",
        help="auto_functions: module classes become ONNX functions",
    )
    export.add_argument(
        "--target",
        dest="deploy_target",
        default=None,
        choices=["onnxruntime", "onnxruntime-web", "openvino", "tract", "tensorrt"],
        help="the runtime the model is for (default onnxruntime): kernel types, loop forms, NaN "
        "and integer semantics",
    )
    export.add_argument(
        "--fold-weights",
        action="store_true",
        help="fold BatchNorm / per-channel Mul+Add after Conv or Gemm into its weights (~1 ulp "
        "from JAX)",
    )
    export.add_argument(
        "--loop-bound",
        type=int,
        default=None,
        metavar="N",
        help="loop_bound: a while_loop whose condition depends on the data becomes a Scan of at "
        "most N steps (tract has no Loop); float results NaN where N steps do not finish it",
    )
    export.add_argument(
        "--no-source-locations",
        action="store_true",
        help="source_locations=False: no source lines in the nodes' doc strings "
        "(by default relative paths: the project's, the installed packages')",
    )
    export.add_argument(
        "--precision",
        default="as-traced",
        choices=["as-traced", "float32", "float16"],
        help="as-traced: the program's dtypes; float32: bf16/f16 weights upcast, every op float32; "
        "float16: every op float16, reductions/softmax/norms float32 (docs/precision.md)",
    )
    export.add_argument(
        "--io-dtype",
        default=None,
        choices=["model", "float32"],
        help="graph input/output dtype: the model's, or float32 (default: float32 under "
        "--precision float32)",
    )
    export.add_argument(
        "--inline-functions",
        action="store_true",
        help="inline ONNX functions (automatic for targets without them)",
    )
    export.add_argument(
        "--inputs-as-nchw",
        metavar="NAMES",
        help="channels-last inputs to expose NCHW (names or indices, comma-separated)",
    )
    export.add_argument(
        "--outputs-as-nchw", metavar="NAMES", help="channels-last outputs to expose NCHW"
    )
    export.add_argument(
        "--verify",
        action="store_true",
        help="compare the model with JAX on random inputs, run in the --target's "
        "runtime (onnxruntime where that is not installed, or for tensorrt)",
    )
    export.add_argument(
        "--reference-device",
        choices=["cpu", "default"],
        default="cpu",
        help="where --verify computes JAX's reference: cpu (default; an accelerator's "
        "default matmul precision would make a right export look wrong) or JAX's default device",
    )
    export.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="NAME=N,..",
        help="sizes of a symbolic dim for --verify, e.g. B=1,8 (default 1,4)",
    )
    export.set_defaults(func=_cmd_export)
    demo = sub.add_parser(
        "demo", parents=[common], help="export the built-in example models and verify them"
    )
    demo.add_argument("--out", default="out", help="folder for the .onnx files (default ./out)")
    demo.set_defaults(func=_cmd_demo)
    inspect_ = sub.add_parser("inspect", parents=[common], help="summarize an .onnx file")
    inspect_.add_argument("model", metavar="MODEL.onnx")
    inspect_.set_defaults(func=_cmd_inspect)
    ops = sub.add_parser(
        "ops", parents=[common], help="the support table: primitives, ONNX ops, tested"
    )
    ops.add_argument(
        "pattern", nargs="?", help="only primitives / modules whose name contains this (any case)"
    )
    ops.add_argument(
        "--markdown", action="store_true", help="print the markdown table of docs/support.md"
    )
    ops.set_defaults(func=_cmd_ops)
    return parser


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """A warning as one line of the command's own: the location Python would print is the
    command's (``<frozen runpy>``), not the user's; our warnings name the user's source line
    in their text."""
    print(f"jax2onnx-nn: warning: {message}", file=sys.stderr if file is None else file)


def _unknown_arguments(parser: argparse.ArgumentParser, command: str, extra: list[str]) -> str:
    """The error for arguments ``command`` does not take, with the closest flag it does take."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[
        command
    ]
    flags = [f for action in sub._actions for f in action.option_strings if f.startswith("--")]
    lines = [f"{command}: unrecognized arguments: {' '.join(extra)}"]
    for word in extra:
        if word.startswith("-"):
            close = difflib.get_close_matches(word.split("=")[0], flags, n=1, cutoff=0.6)
            if close:
                lines.append(f"{word.split('=')[0]}: did you mean {close[0]}?")
    lines.append(f"the options are listed by: python -m jax2onnx_nn {command} --help")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        print(
            f"jax2onnx-nn: error: {_unknown_arguments(parser, args.command, extra)}",
            file=sys.stderr,
        )
        return USAGE
    output = getattr(args, "output", None)
    existed = output is not None and os.path.exists(output)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return int(args.func(args))
    except UsageError as err:
        if args.debug:
            raise
        print(f"jax2onnx-nn: error: {err}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        if args.debug:
            raise
        state = (
            "written"
            if getattr(args, "written", None)
            else "left unchanged"
            if existed
            else "not written"
        )
        print(
            f"jax2onnx-nn: interrupted{f'; {output} was {state}' if output else ''}",
            file=sys.stderr,
        )
        return INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
