"""Shared helpers of the Equinox tests: export, check, and compare with the module in JAX."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import onnx

from jax2onnx_nn import verify
from jax2onnx_nn.equinox import batched_spec, export_onnx


def reference(module: Any, *, batch: bool = False, state: Any = None, training: bool = False) -> Callable[..., Any]:
    """What the export computes, in JAX: the module in inference mode (or training mode), with
    the state as last argument (its result dropped), vmapped over a batch if asked."""
    fn: Callable[..., Any] = eqx.nn.inference_mode(module, value=not training)
    if state is not None:
        inner = fn

        def fn(*args: Any) -> Any:
            return inner(*args, state)[0]

    if batch:
        fn = functools.partial(jax.vmap, axis_name="batch")(fn)
    return fn


def assert_module_matches(
    module: Any,
    inputs: Sequence[Any],
    *,
    batch: bool = False,
    state: Any = None,
    sizes: Mapping[str, Sequence[int]] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    **options: Any,
) -> onnx.ModelProto:
    """Export with ``export_onnx``, check the model, and compare onnxruntime with JAX on random
    inputs for every size in ``sizes`` (batch dim ``B`` when ``batch``)."""
    model = export_onnx(module, inputs, batch=batch, state=state, **options)
    onnx.checker.check_model(model, full_check=True)
    specs = [batched_spec(s, "B", options.get("enable_double_precision", False)) for s in inputs] if batch else inputs
    fn = reference(module, batch=batch, state=state, training=options.get("training", False))
    report = verify(
        fn, model, specs, sizes=sizes or ({"B": [1, 4]} if batch else None), rtol=rtol, atol=atol,
        enable_double_precision=options.get("enable_double_precision", False),
    )
    report.raise_if_failed()
    return model


def node_ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def node_names(model: onnx.ModelProto) -> list[str]:
    return [n.name for n in model.graph.node]


def initializer_names(model: onnx.ModelProto) -> set[str]:
    return {i.name for i in model.graph.initializer}
