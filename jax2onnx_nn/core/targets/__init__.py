"""Deployment targets: how a graph is written so that a runtime runs it and computes JAX's
numbers.

One module per runtime holds its :class:`~jax2onnx_nn.core.targets.profile.Target` (data: the
opsets it loads, whether it runs model-local functions, how a static-length loop is written,
the element types its kernels lack, the ops it cannot run) and the graph rewrites that make its
ops compute what JAX computes, each a function declared with
:func:`~jax2onnx_nn.core.ir.census.rewrite` whose docstring is the reason it exists; rewrites
that more than one runtime needs are in :mod:`.common`. ``to_onnx(..., target=...)`` looks the
profile up in :data:`TARGETS`; :func:`apply_rewrites` runs a profile's rewrites.

What each profile says was measured with the runtimes themselves (onnxruntime 1.32,
onnxruntime-web 1.30 WASM under Node.js 20, OpenVINO 2026.4 CPU, tract 0.23) or, for TensorRT
(no GPU here), read from onnx-tensorrt's operator support list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import onnx_ir as ir

from jax2onnx_nn.core.ir.census import acts_on, may_act, op_census
from jax2onnx_nn.core.ir.edit import Editor
from jax2onnx_nn.core.ir.walk import graph_nodes
from jax2onnx_nn.core.targets import onnxruntime, onnxruntime_web, openvino, tensorrt, tract
from jax2onnx_nn.core.targets.profile import Rewrite, Target

TARGETS: Mapping[str, Target] = MappingProxyType(
    {m.PROFILE.name: m.PROFILE for m in (onnxruntime, onnxruntime_web, openvino, tract, tensorrt)}
)

DEFAULT_TARGET = "onnxruntime"


def get_target(target: str | Target | None) -> Target:
    """The profile for a target name (None: onnxruntime); a :class:`Target` is used as given."""
    if isinstance(target, Target):
        return target
    name = DEFAULT_TARGET if target is None else target
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}")
    return TARGETS[name]


def apply_rewrites(model: ir.Model, rewrites: Sequence[Rewrite]) -> int:
    """Run ``rewrites`` in order over every node of every graph (bodies included), each rewrite
    called only on the nodes of the op types and domain it declares; returns how many nodes
    changed.

    A rewrite sees what the ones before it wrote (the order is the profile's), so each has a
    walk of its own, but only when the model holds an op type it acts on: the op census is
    taken once, and again only after a rewrite changed something."""
    counter = [0]
    changed = 0
    opset = model.opset_imports.get("", 0)
    census: set[str] | None = None
    for rule in rewrites:
        if census is None:
            census = op_census(model)
        if not may_act(rule, census):
            continue
        changed_before = changed
        for node in graph_nodes(model.graph):
            if node.graph is None or not acts_on(rule, node):
                continue
            edit = Editor(node, counter, opset, model.graph)
            result = rule(node, edit)
            if result is None or result is False:
                continue
            if result is not True:
                edit.replace(*([result] if isinstance(result, ir.Value) else result))
            changed += 1
        if changed != changed_before:
            census = None
    return changed


__all__ = ["DEFAULT_TARGET", "TARGETS", "Target", "apply_rewrites", "get_target"]
