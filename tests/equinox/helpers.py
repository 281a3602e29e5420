"""Shared helpers of the Equinox tests: export, check, and compare with the module in JAX."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import onnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.equinox import batched_spec, export_onnx
from jax2onnx_nn.equinox.modules import export_copy, retarget


def reference(
    module: Any, *, batch: bool = False, state: Any = None, training: bool = False
) -> Callable[..., Any]:
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
    """Export with ``export_onnx`` (a function: with ``to_onnx``), check the model, and compare
    onnxruntime with JAX on random inputs for every size in ``sizes`` (batch dim ``B`` when
    ``batch``)."""
    if isinstance(module, eqx.Module):
        model = export_onnx(module, inputs, batch=batch, state=state, **options)
        fn = reference(module, batch=batch, state=state, training=options.get("training", False))
    else:  # a function (closing over modules): exported with to_onnx, compared with the
        # function rebuilt around its modules in inference mode (what the export traces)
        model = to_onnx(module, inputs, **options)
        fn, _ = retarget(module, lambda tree: export_copy(tree, options.get("training", False)))
    onnx.checker.check_model(model, full_check=True)
    specs = (
        [batched_spec(s, "B", options.get("enable_double_precision", False)) for s in inputs]
        if batch
        else inputs
    )
    report = verify(
        fn,
        model,
        specs,
        sizes=sizes or ({"B": [1, 4]} if batch else None),
        rtol=rtol,
        atol=atol,
        enable_double_precision=options.get("enable_double_precision", False),
        training=options.get("training", False),
    )
    report.raise_if_failed()
    return model


def node_ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def all_ops(model: onnx.ModelProto) -> list[str]:
    """Op types of every node: main graph, bodies of If/Loop/Scan, and functions."""
    ops: list[str] = []

    def walk(nodes: Any) -> None:
        for node in nodes:
            ops.append(node.op_type)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g.node)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    for graph in attr.graphs:
                        walk(graph.node)

    walk(model.graph.node)
    for function in model.functions:
        walk(function.node)
    return ops


def node_names(model: onnx.ModelProto) -> list[str]:
    return [n.name for n in model.graph.node]


def initializer_names(model: onnx.ModelProto) -> set[str]:
    return {i.name for i in model.graph.initializer}
