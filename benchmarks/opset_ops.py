"""onnxruntime CPU time of the ops newer opsets bring against what is written below their
opset: ONNX ``Attention`` (23) on the ``vit`` / ``gpt_4l`` benchmark models at batch 8 and on
attention alone, ``RMSNormalization`` (23), ``RotaryEmbedding`` (23) and ``CumProd`` (26).

Each pair is the same export at the same opset (the newer op switched off by raising the
opset its rule starts from) or at the opset below the op. Run ``python -m benchmarks.opset_ops``.
Times are CPU time of the calling thread per run with one onnxruntime intra-op thread (it
runs the graph on the caller), the median of interleaved rounds: on a shared machine wall time
varies more than the difference measured. ``ratio`` < 1: the newer op is faster.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from jax2onnx_nn import to_onnx


@contextmanager
def _rule_opset(module: Any, name: str, opset: int) -> Iterator[None]:
    """The opset a rule writes its newer op from, changed for one export."""
    saved = getattr(module, name)
    setattr(module, name, opset)
    try:
        yield
    finally:
        setattr(module, name, saved)


def _attention_target(newer: bool) -> Any:
    """onnxruntime's profile, without its Attention kernel unless ``newer``."""
    from dataclasses import replace

    from jax2onnx_nn.core.targets import get_target

    profile = get_target("onnxruntime")
    return profile if newer else replace(profile, kernel_opsets={"Attention": (0, 0)})


def _session(model: Any) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options)


def _cpu_ms(
    sessions: dict[str, Any], feeds: dict[str, np.ndarray], rounds: int
) -> dict[str, float]:
    once = time.perf_counter()
    next(iter(sessions.values())).run(None, feeds)
    runs = max(3, int(0.2 / max(time.perf_counter() - once, 1e-6)))
    times: dict[str, list[float]] = {form: [] for form in sessions}
    for _ in range(rounds):
        for form, session in sessions.items():
            session.run(None, feeds)
            start = time.thread_time_ns()
            for _ in range(runs):
                session.run(None, feeds)
            times[form].append((time.thread_time_ns() - start) / runs / 1e6)
    return {form: float(np.median(t)) for form, t in times.items()}


def _pair(
    name: str,
    export: Callable[[bool], Any],
    feeds: Callable[[Any], dict[str, np.ndarray]],
    op: str,
    rounds: int,
) -> None:
    models = {"older": export(False), "newer": export(True)}
    count = [n.op_type for n in models["newer"].graph.node].count(op)
    nested = sum(
        1
        for n in models["newer"].graph.node
        for a in n.attribute
        if a.g is not None and op in [m.op_type for m in a.g.node]
    )
    sessions = {form: _session(m) for form, m in models.items()}
    ms = _cpu_ms(sessions, feeds(sessions["older"]), rounds)
    print(
        f"{name:<44} older {ms['older']:9.3f} ms   {op} ({count + nested} nodes) "
        f"{ms['newer']:9.3f} ms   ratio {ms['newer'] / ms['older']:.2f}",
        flush=True,
    )


def _random_feeds(
    shape_of: Callable[[Any], list[int]], small: bool = False
) -> Callable[[Any], dict[str, np.ndarray]]:
    """Inputs for a session: token ids for int32 inputs (the GPT), normal floats, or with
    ``small`` values in {-1, 1, 2} (products that neither overflow nor vanish)."""
    rng = np.random.default_rng(0)

    def feeds(session: Any) -> dict[str, np.ndarray]:
        out = {}
        for i in session.get_inputs():
            dtype = np.int32 if "int32" in i.type else np.float32
            if small:
                out[i.name] = rng.choice(np.array([-1, 1, 2], dtype), size=shape_of(i))
            elif dtype == np.int32:
                out[i.name] = rng.integers(0, 90, size=shape_of(i)).astype(dtype)
            else:
                out[i.name] = rng.standard_normal(shape_of(i)).astype(dtype)
        return out

    return feeds


def attention_models(rounds: int) -> None:
    from benchmarks import models
    from benchmarks.export_bench import MODELS

    for name in ("vit", "gpt_4l"):
        factory, args, batch, seq = MODELS[name]
        fn, inputs, options = getattr(models, factory)(*args)

        def export(newer: bool, fn: Any = fn, inputs: Any = inputs, options: Any = options) -> Any:
            return to_onnx(fn, inputs, opset=23, target=_attention_target(newer), **options)

        dims = {"B": batch, "T": seq}
        _pair(
            f"{name} batch {batch}",
            export,
            _random_feeds(lambda i, dims=dims: [dims.get(d, d) for d in i.shape]),
            "Attention",
            rounds,
        )


def attention_alone(rounds: int) -> None:
    import jax

    for b, t, n, h, causal in [
        (8, 17, 4, 16, False),
        (8, 64, 8, 32, True),
        (8, 197, 12, 64, False),
        (1, 512, 12, 64, True),
    ]:

        def fn(q: Any, k: Any, v: Any, causal: bool = causal) -> Any:
            return jax.nn.dot_product_attention(q, k, v, is_causal=causal)

        def export(newer: bool, fn: Any = fn, shape: Any = (b, t, n, h)) -> Any:
            return to_onnx(fn, [shape] * 3, opset=23, target=_attention_target(newer))

        _pair(
            f"attention B={b} T={t} N={n} H={h} causal={causal}",
            export,
            _random_feeds(lambda i: list(i.shape)),
            "Attention",
            rounds,
        )


def rms_norm(rounds: int) -> None:
    import equinox as eqx
    import jax
    from flax import nnx

    for shape in [(8, 64, 256), (8, 197, 768)]:
        layer = nnx.RMSNorm(shape[-1], epsilon=1e-6, rngs=nnx.Rngs(0))
        norm = eqx.nn.RMSNorm(shape[-1], 1e-6)
        for lib, fn in (("nnx", layer), ("eqx", jax.vmap(jax.vmap(norm)))):

            def export(newer: bool, fn: Any = fn, shape: Any = shape) -> Any:
                return to_onnx(fn, [shape], opset=23 if newer else 22)

            _pair(
                f"{lib}.RMSNorm {shape} (opset 22 vs 23)",
                export,
                _random_feeds(lambda i: list(i.shape)),
                "RMSNormalization",
                rounds,
            )


def rotary(rounds: int) -> None:
    import equinox as eqx
    import jax

    from examples import eqx_transformer
    from jax2onnx_nn.equinox import coarse

    block = jax.vmap(eqx.nn.inference_mode(eqx_transformer.TransformerBlock(jax.random.key(0))))
    cases = [
        (
            "eqx RoPE per head (8, 64, 8, 32)",
            jax.vmap(jax.vmap(eqx.nn.RotaryPositionalEmbedding(32), in_axes=1, out_axes=1)),
            (8, 64, 8, 32),
        ),
        (
            "eqx RoPE per head (8, 512, 12, 64)",
            jax.vmap(jax.vmap(eqx.nn.RotaryPositionalEmbedding(64), in_axes=1, out_axes=1)),
            (8, 512, 12, 64),
        ),
        ("eqx_transformer block B=8", block, (8, eqx_transformer.SEQUENCE, eqx_transformer.WIDTH)),
    ]
    for name, fn, shape in cases:

        def export(newer: bool, fn: Any = fn, shape: Any = shape) -> Any:
            with _rule_opset(coarse, "ROTARY_OPSET", 23 if newer else 99):
                return to_onnx(fn, [shape], opset=23)

        _pair(name, export, _random_feeds(lambda i: list(i.shape)), "RotaryEmbedding", rounds)


def cumprod(rounds: int) -> None:
    from jax import lax

    for shape, dtype in [((8, 1024), np.float32), ((64, 4096), np.float32), ((8, 1024), np.int32)]:

        def export(newer: bool, shape: Any = shape, dtype: Any = dtype) -> Any:
            return to_onnx(
                lambda x: lax.cumprod(x, 1),
                [(shape, np.dtype(dtype).name)],
                opset=26 if newer else 25,
            )

        _pair(
            f"cumprod {shape} {np.dtype(dtype).name} (opset 25 vs 26)",
            export,
            _random_feeds(lambda i: list(i.shape), small=True),
            "CumProd",
            rounds,
        )


SECTIONS = {
    "attention_models": attention_models,
    "attention": attention_alone,
    "rms_norm": rms_norm,
    "rotary": rotary,
    "cumprod": cumprod,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sections", nargs="*", help=f"some of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument(
        "--rounds", type=int, default=9, help="interleaved rounds to take the median of"
    )
    args = parser.parse_args(argv)
    for section in args.sections or SECTIONS:
        SECTIONS[section](args.rounds)
    import os

    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
