"""The built-in demo: export example models, verify each against JAX, print a summary."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax


@dataclass
class DemoModel:
    name: str
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


def _gpt2_small() -> Any:
    from flax import nnx

    gpt2 = _example("flax_gpt2")
    return gpt2.GPT(gpt2.GPTConfig.small(), rngs=nnx.Rngs(0))


def demo_models() -> list[DemoModel]:
    models = [DemoModel("jax_mlp", _mlp_function, [("B", 30)], {"B": [1, 7, 128]})]
    try:
        import flax  # noqa: F401
    except ImportError:
        return models
    if os.path.exists(os.path.join(_ROOT, "examples", "flax_gpt2.py")):
        models.append(DemoModel("flax_mlp", _flax_mlp, [("B", 30)], {"B": [1, 7, 128]}))
        models.append(DemoModel("gpt2_small", _gpt2_small, [(("B", "T"), "int32")], {"B": [1, 2], "T": [8, 32]}, {"auto_functions": True}))
    return models


def run_demo(out_dir: str = "out") -> int:
    from jax2onnx_nn.__main__ import _summary
    from jax2onnx_nn.core.api import to_onnx
    from jax2onnx_nn.core.verify import verify

    os.makedirs(out_dir, exist_ok=True)
    failures = 0
    for demo in demo_models():
        model_fn = demo.make()
        path = os.path.join(out_dir, f"{demo.name}.onnx")
        start = time.perf_counter()
        model = to_onnx(model_fn, demo.inputs, path=path, **demo.options)
        seconds = time.perf_counter() - start
        report = verify(model_fn, model, demo.inputs, sizes=demo.sizes, jit=True)
        status = "verified" if report.ok else "MISMATCH"
        print(f"== {demo.name}: {path} (exported in {seconds:.2f}s, {status} vs JAX, max abs err {report.max_abs:.2g})")
        print(_summary(model))
        if not report.ok:
            print(report)
            failures += 1
    print(f"\n{'all models verified' if not failures else f'{failures} model(s) failed'}; files in {os.path.abspath(out_dir)}")
    return 1 if failures else 0
