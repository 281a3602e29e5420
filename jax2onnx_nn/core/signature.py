"""What a model takes and gives, read once from whatever form the model comes in.

A model reaches :func:`jax2onnx_nn.verify` and the runtimes as a ``ModelProto``, an
``onnx_ir.Model``, serialized bytes or a path. :func:`load_model` turns each into the bytes a
runtime loads and a :class:`ModelSignature`: the graph's inputs and outputs (name, element
type, shape) and the metadata the export recorded (``enable_double_precision``, the layout
options). Everything that needs the model's signature reads it here, so a flag recorded in a
file is seen as well as one in a loaded model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

ModelLike = onnx.ModelProto | ir.Model | bytes | str | os.PathLike

DOUBLE_PRECISION_KEY = "jax2onnx_nn.enable_double_precision"

# element types whose presence means the model was exported with double precision
_WIDE_TYPES = frozenset({"float64", "int64", "uint64", "complex128"})


@dataclass(frozen=True)
class TensorSignature:
    """One graph input or output: its name, numpy element type (None for a type numpy does
    not know, or a non-tensor) and shape (an int per static dim, the dim's name or None)."""

    name: str
    dtype: np.dtype | None
    shape: tuple[int | str | None, ...] | None


@dataclass(frozen=True)
class ModelSignature:
    """The graph's inputs (without initializers), outputs, and the model's metadata."""

    inputs: tuple[TensorSignature, ...]
    outputs: tuple[TensorSignature, ...]
    metadata: Mapping[str, str]

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    @property
    def enable_double_precision(self) -> bool:
        """As the export recorded it; for a model without that record (not exported here),
        whether any input or output is 64-bit."""
        recorded = self.metadata.get(DOUBLE_PRECISION_KEY)
        if recorded is not None:
            return recorded == "True"
        return any(
            t.dtype is not None and t.dtype.name in _WIDE_TYPES
            for t in (*self.inputs, *self.outputs)
        )


class LoadedModel:
    """A model as a runtime loads it (``data``) and its :class:`ModelSignature`, parsed from
    ``data`` when first asked for (a runtime that loads bytes needs no parse)."""

    def __init__(self, data: bytes, signature: ModelSignature | None = None) -> None:
        self.data = data
        self._signature = signature

    @property
    def signature(self) -> ModelSignature:
        if self._signature is None:
            self._signature = signature_of(onnx.ModelProto.FromString(self.data))
        return self._signature


def load_model(model: ModelLike | LoadedModel) -> LoadedModel:
    """The bytes and the signature of ``model`` (a ModelProto, an onnx_ir Model, bytes or a
    path); a file is read once, and parsed once if its signature is asked for.

    >>> load_model("model.onnx").signature.input_names  # doctest: +SKIP
    ['x']
    """
    if isinstance(model, LoadedModel):
        return model
    if isinstance(model, ir.Model):
        model = ir.serde.serialize_model(model)
    if isinstance(model, onnx.ModelProto):
        return LoadedModel(model.SerializeToString(), signature_of(model))
    return LoadedModel(model if isinstance(model, bytes) else Path(model).read_bytes())


def model_signature(model: ModelLike | LoadedModel) -> ModelSignature:
    """The :class:`ModelSignature` of ``model`` in any of its forms."""
    if isinstance(model, onnx.ModelProto):
        return signature_of(model)
    if isinstance(model, ir.Model):  # read as it is: serializing would copy every weight
        return _signature_of_ir(model)
    return load_model(model).signature


def signature_of(proto: onnx.ModelProto) -> ModelSignature:
    """The signature of a loaded model."""
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    return ModelSignature(
        inputs=tuple(_tensor(v) for v in graph.input if v.name not in initializers),
        outputs=tuple(_tensor(v) for v in graph.output),
        metadata={p.key: p.value for p in proto.metadata_props},
    )


def _signature_of_ir(model: ir.Model) -> ModelSignature:
    graph = model.graph
    return ModelSignature(
        inputs=tuple(_ir_tensor(v) for v in graph.inputs if v.name not in graph.initializers),
        outputs=tuple(_ir_tensor(v) for v in graph.outputs),
        metadata=dict(model.metadata_props),
    )


def _ir_tensor(value: ir.Value) -> TensorSignature:
    try:
        dtype: np.dtype | None = None if value.dtype is None else np.dtype(value.dtype.numpy())
    except (TypeError, ValueError):
        dtype = None
    shape = None
    if value.shape is not None:
        shape = tuple(d if isinstance(d, int) else d.value for d in value.shape)
    return TensorSignature(value.name or "", dtype, shape)


def _tensor(value: onnx.ValueInfoProto) -> TensorSignature:
    if not value.type.HasField("tensor_type"):
        return TensorSignature(value.name, None, None)
    tensor = value.type.tensor_type
    try:
        dtype: np.dtype | None = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    except (KeyError, TypeError, ValueError):
        dtype = None
    shape = None
    if tensor.HasField("shape"):
        shape = tuple(_dim(d) for d in tensor.shape.dim)
    return TensorSignature(value.name, dtype, shape)


def _dim(dim: Any) -> int | str | None:
    if dim.HasField("dim_value"):
        return int(dim.dim_value)
    return dim.dim_param or None
