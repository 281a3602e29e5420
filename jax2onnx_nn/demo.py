"""The built-in demo: export example models, verify each against JAX, print a summary."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import onnx


@dataclass
class DemoModel:
    name: str
    what: str  # one line: what the model is
    make: Callable[[], Any]
    inputs: list[Any]
    sizes: dict[str, list[int]]
    options: dict[str, Any] = field(default_factory=dict)


def _mlp_function() -> Any:
    keys = jax.random.split(jax.random.key(0), 2)
    w1 = jax.random.normal(keys[0], (30, 20)) * 0.2
    w2 = jax.random.normal(keys[1], (20, 10)) * 0.2

    def mlp(x: jax.Array) -> jax.Array:
        return jax.nn.gelu(x @ w1) @ w2

    return mlp


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _example(name: str) -> Any:
    """A module of the repository's examples/ folder (the demo runs from a checkout)."""
    import importlib
    import sys

    if _ROOT not in sys.path:
        sys.path.insert(0, _ROOT)
    return importlib.import_module(f"examples.{name}")


def _flax_mlp() -> Any:
    from flax import nnx

    # left in training mode, as users have it: exports (and verify) use inference mode
    return _example("flax_mlp").MLP(30, 20, 10, rngs=nnx.Rngs(0))


def _toy_gpt() -> Any:
    from flax import nnx

    gpt2 = _example("flax_gpt2")
    return gpt2.GPT(gpt2.GPTConfig.small(), rngs=nnx.Rngs(0))


def demo_models() -> list[DemoModel]:
    models = [
        DemoModel(
            "jax_mlp",
            "a plain JAX function: x @ w1, gelu, @ w2 (30 -> 20 -> 10)",
            _mlp_function,
            [("B", 30)],
            {"B": [1, 7, 128]},
        )
    ]
    try:
        import flax  # noqa: F401
    except ImportError:
        return models
    if os.path.exists(os.path.join(_ROOT, "examples", "flax_gpt2.py")):
        models.append(
            DemoModel(
                "flax_mlp",
                "the README's Flax NNX MLP: Linear, BatchNorm, Dropout, gelu (inference mode)",
                _flax_mlp,
                [("B", 30)],
                {"B": [1, 7, 128]},
            )
        )
        models.append(
            DemoModel(
                "toy_gpt",
                "a toy GPT: GPT-2's architecture at 2 layers, 2 heads, width 32, vocabulary 97 "
                "(not the 124M GPT-2); one ONNX function per block",
                _toy_gpt,
                [(("B", "T"), "int32")],
                {"B": [1, 2], "T": [8, 32]},
                {"auto_functions": True},
            )
        )
    return models


def _sizes_text(report: Any) -> str:
    """``B=1 T=8, B=2 T=32``: the sizes of the symbolic dims of each verified run."""
    return ", ".join(
        " ".join(f"{k}={v}" for k, v in run.sizes.items()) or "static shapes" for run in report.runs
    )


def _tolerance_text(report: Any) -> str:
    """The default tolerance of each float dtype among the outputs; ints and bools exact."""
    from jax2onnx_nn.core.verify import default_tolerance

    dtypes = dict.fromkeys(o.dtype for run in report.runs for o in run.outputs)
    parts = []
    for dtype in dtypes:
        rtol, atol = default_tolerance(dtype)
        parts.append(f"{dtype} rtol {rtol:g}, atol {atol:g}" if rtol or atol else f"{dtype} exact")
    return "; ".join(parts)


def run_demo(out_dir: str = "out") -> int:
    """Export each demo model into ``out_dir``, verify it against JAX, print a summary.

    Returns the exit code: 0 all verified, 1 a mismatch, 4 onnxruntime is not installed (one
    line naming the extra and the files written so far).
    """
    from jax2onnx_nn.core.api import to_onnx
    from jax2onnx_nn.core.runtimes import RuntimeUnavailable
    from jax2onnx_nn.core.verify import verify
    from jax2onnx_nn.exit_codes import MISSING_EXTRA
    from jax2onnx_nn.summary import model_summary

    os.makedirs(out_dir, exist_ok=True)
    failures = 0
    written: list[str] = []
    for demo in demo_models():
        model_fn = demo.make()
        path = os.path.join(out_dir, f"{demo.name}.onnx")
        start = time.perf_counter()
        written.append(to_onnx(model_fn, demo.inputs, path=path, **demo.options))
        seconds = time.perf_counter() - start
        model = onnx.load(path)
        try:
            report = verify(model_fn, model, demo.inputs, sizes=demo.sizes, jit=True)
        except RuntimeUnavailable as err:
            print(
                f"jax2onnx-nn: error: the demo verifies in onnxruntime: {err}; written so far: "
                f"{', '.join(written)}",
                file=sys.stderr,
            )
            return MISSING_EXTRA
        status = "verified" if report.ok else "MISMATCH"
        print(f"== {demo.name}: {demo.what}")
        print(
            f"   {path} (exported in {seconds:.2f}s); {status} vs JAX in onnxruntime at "
            f"{_sizes_text(report)}: max abs err {report.max_abs:.2g}, max rel err "
            f"{report.max_rel:.2g} (tolerance {_tolerance_text(report)})"
        )
        print(model_summary(model))
        if not report.ok:
            print(report)
            failures += 1
    print(
        f"\n{'all models verified' if not failures else f'{failures} model(s) failed'}; files in "
        f"{os.path.abspath(out_dir)}"
    )
    return 1 if failures else 0
