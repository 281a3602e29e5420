"""A one-screen text summary of an ONNX model, shared by the CLI and the demo."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any


def _graphs(graph: Any) -> Iterator[Any]:
    """A graph and all its sub-graphs (If/Loop/Scan bodies), depth first."""
    import onnx

    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def _nodes(graph_or_function: Any) -> Iterator[Any]:
    import onnx

    for node in graph_or_function.node:
        yield node
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                yield from _nodes(sub)


def tensor_bytes(tensor: Any, base_dir: str | None = None) -> tuple[int, bool]:
    """(bytes of a TensorProto's data, stored externally?): external data (its ``length``, or
    the rest of the file), raw_data, or the typed fields (sub-byte types packed)."""
    import onnx

    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in tensor.external_data}
        if "length" in info:
            return int(info["length"]), True
        path = os.path.join(base_dir or "", info.get("location", ""))
        size = os.path.getsize(path) if os.path.isfile(path) else 0
        return max(size - int(info.get("offset", 0)), 0), True
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data), False
    if tensor.data_type == onnx.TensorProto.STRING:
        return sum(len(s) for s in tensor.string_data), False
    count = math.prod(tensor.dims)
    bits = {
        onnx.TensorProto.INT4: 4,
        onnx.TensorProto.UINT4: 4,
        getattr(onnx.TensorProto, "FLOAT4E2M1", -1): 4,
    }.get(tensor.data_type)
    if bits is not None:
        return (count * bits + 7) // 8, False
    return count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize, False


def _value_text(vi: Any) -> str:
    t = vi.type.tensor_type
    dims = ", ".join(
        d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?") for d in t.shape.dim
    )
    dtype = _dtype_name(t.elem_type)
    return f"{vi.name}: {dtype}[{dims}]"


def _dtype_name(elem_type: int) -> str:
    import onnx

    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, ValueError, TypeError):
        return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type else "?"


def _size_text(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _histogram(counts: Counter[str]) -> str:
    return ", ".join(
        f"{op} {n}" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def _function_calls(model: Any) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    """Per local function: its call nodes, and how often it runs per run of the model (a call
    inside a function called twice runs twice)."""
    local = {(f.domain, f.name): f for f in model.functions}
    main = Counter(
        (n.domain, n.op_type) for n in _nodes(model.graph) if (n.domain, n.op_type) in local
    )
    inner = {
        key: Counter((n.domain, n.op_type) for n in _nodes(f) if (n.domain, n.op_type) in local)
        for key, f in local.items()
    }
    sites = sum(inner.values(), Counter(main))
    runs: Counter[tuple[str, str]] = Counter(main)
    for _ in range(len(local)):  # functions call each other without cycles: depth <= count
        deeper = Counter(main)
        for caller, callees in inner.items():
            for callee, n in callees.items():
                deeper[callee] += n * runs[caller]
        runs = deeper
    return sites, runs


def model_summary(model: Any, base_dir: str | None = None) -> str:
    """A one-screen summary of a ModelProto: I/O with dims, op histogram, functions and their
    call counts, initializer bytes, opsets (what ``jax2onnx-nn export`` / ``inspect`` and the
    demo print). ``base_dir``: where external data files are, for their sizes.

    Example::

        print(model_summary(to_onnx(fn, [("B", 30)])))
    """
    g = model.graph
    main_ops = Counter(n.op_type for n in _nodes(g))
    n_sub = sum(len(s.node) for s in list(_graphs(g))[1:])
    lines = ["inputs:  " + ("; ".join(_value_text(v) for v in g.input) or "(none)")]
    lines.append("outputs: " + "; ".join(_value_text(v) for v in g.output))
    inside = f", {n_sub} in sub-graphs" if n_sub else ""
    lines.append(f"nodes:   {sum(main_ops.values())}{inside}: {_histogram(main_ops)}")
    if model.functions:
        sites, runs = _function_calls(model)
        lines.append(f"functions: {len(model.functions)}")
        for f in model.functions:
            key = (f.domain, f.name)
            where = (
                f" ({sites[key]} call node{'s' * (sites[key] != 1)})"
                if sites[key] != runs[key]
                else ""
            )
            lines.append(
                f"  {f.domain}.{f.name}: called {runs[key]}x{where}, {len(f.node)} nodes "
                f"({_histogram(Counter(n.op_type for n in f.node))})"
            )
    sizes = [tensor_bytes(t, base_dir) for t in g.initializer]
    total = sum(b for b, _ in sizes)
    external = sum(b for b, ext in sizes if ext)
    ext_text = f", {_size_text(external)} in external data" if external else ""
    lines.append(f"weights: {len(g.initializer)} initializers, {_size_text(total)}{ext_text}")
    opsets = ", ".join(f"{o.domain or 'ai.onnx'}={o.version}" for o in model.opset_import)
    lines.append(f"opset:   {opsets} (IR version {model.ir_version})")
    return "\n".join(lines)


__all__ = ["model_summary", "tensor_bytes"]
