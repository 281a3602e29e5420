"""Equal large initializers stored once."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import tensor_bytes

_MERGE_MIN_BYTES = 1 << 16  # equal initializers at least this large are stored once


def merge_duplicate_initializers(model: ir.Model) -> int:
    """Make initializers with equal dtype, shape and data one (a weight closed over twice, a
    kernel rearranged the same way by two rules). Only tensors that share dtype and shape with
    another are looked at, first by a sample of their bytes, and compared whole only when the
    samples agree, so a model of distinct weights costs next to nothing. Returns how many
    were merged.

    Weights below ``_MERGE_MIN_BYTES`` keep their own initializer: equal small weights are
    mostly fresh zeros and ones (a BatchNorm mean and a Linear bias), distinct parameters whose
    module-path names a reader needs, and merging them would save next to nothing."""
    graph = model.graph
    # (dtype, shape) -> the initializers of that type: (name, value, its tensor) each
    groups: dict[tuple[Any, tuple[int, ...]], list[tuple[str, ir.Value, ir.TensorProtocol]]] = {}
    for name, value in graph.initializers.items():
        tensor = value.const_value
        if tensor is None or tensor.nbytes < _MERGE_MIN_BYTES:
            continue
        if not value.is_graph_input() and not value.is_graph_output():
            groups.setdefault((tensor.dtype, tuple(tensor.shape.numpy())), []).append(
                (name, value, tensor)
            )
    merged = 0
    for group in groups.values():
        if len(group) < 2:
            continue
        kept: dict[bytes, tuple[ir.Value, ir.TensorProtocol]] = {}
        for name, value, tensor in group:
            data = tensor_bytes(tensor)
            # distinct weights differ in a sample
            first, first_tensor = kept.setdefault(_sample(data), (value, tensor))
            if first is value or not np.array_equal(
                np.frombuffer(data, np.uint8),
                np.frombuffer(tensor_bytes(first_tensor), np.uint8),
            ):
                continue
            value.replace_all_uses_with(first)
            graph.initializers.pop(name)
            merged += 1
    return merged


def _sample(data: memoryview | bytes, count: int = 64, width: int = 8) -> bytes:
    """``count`` slices of ``width`` bytes spread over ``data``: equal for equal tensors, and
    in practice different for different weights, at a cost that does not grow with size."""
    view = memoryview(data).cast("B")
    if view.nbytes <= count * width:
        return bytes(view)
    step = view.nbytes // count
    return b"".join(bytes(view[i * step : i * step + width]) for i in range(count))
